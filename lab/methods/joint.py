"""Joint optimisation (Tanaka et al. 2018, the paper's Table 3), its two steps: each network trained alone by the CE
with its samples' current labels, a prior term and an entropy term, relabelling each sample from part of the run on to
the mean of its last predictions (--mode joint); then new networks trained by plain CE on those labels, each on its
counterpart's (--mode joint2 --labels-from DIR).

joint_loss    -- L = L_c + α L_p + β L_e with each sample's current (soft) label
joint_history -- its labels: the last `window` epochs' predictions, whose mean each sample is relabelled to
joint_begin   -- the epoch the relabelled labels start
HISTORY       -- the stage that keeps the history (lab/stages.py); labels.npz keeps its last labels (Stages.finish)
load_labels   -- the labels a finished step 1 ended with, checked, which step 2 trains on (FromLabels)
objective, second_step -- each network by joint_loss on its labels, or by CE on step 1's (lab/alone.py)
"""
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

from lab.alone import alone, ce
from lab.stages import LABELS, Stage, Stages
from mutual import NAMES
from registry import Mode, knob
from training.rundir import RunError
from training.runfiles import read_json

JOINT_WINDOW = 10  # the epochs of predictions whose mean a sample's label becomes (their code: "the past 10 epochs")



def joint_loss(logits, q, alpha=1.0, beta=0.5, logp=None):
    """Joint optimisation's first step (Tanaka et al. 2018: L = L_c + α L_p + β L_e), as their code computes it
    (first_step_train.py, TrainChain):

      L_c = −mean_n Σ_j q_nj log s_nj     the CE with the sample's current label q_n (the paper's KL(q_n ‖ s_n)
                                           up to a constant; soft, the labels their code runs)
      L_p = −Σ_j p_j log s̄_j              s̄ the batch's mean prediction, p the uniform prior of their code
      L_e = −mean_n Σ_j s_nj log s_nj     the predictions' entropy, with gradient through both factors

    α = 1.0 and β = 0.5 are their code's defaults (their README: α 1.2, β 0.8 for symmetric 70%; α 0.8, β 0.4 for
    asymmetric 40%). q starts as the one-hot given label; from an epoch on, each sample's label is the mean of the
    model's last predictions (joint_history). No epsilon, as theirs: a batch's mean prediction is positive.
    logits: (N, K) with gradient; q: (N, K) the labels, constant. Returns a scalar.
    """
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    s = logp.exp()
    l_c = -(q.detach() * logp).sum(-1).mean()
    l_p = -torch.log(s.mean(0)).mean()  # −Σ_j (1/K) log s̄_j
    l_e = -(s * logp).sum(-1).mean()
    return l_c + alpha * l_p + beta * l_e


def joint_history(history, probs, window=JOINT_WINDOW):
    """Joint optimisation's label update (their TrainData.label_update): a model's predictions on the training set,
    probs (N, K), join the last ones kept, history (W, N, K) or None; at most `window` are kept, the oldest dropped.
    Each sample's label is then history.mean(0). Returns the new history."""
    probs = probs[None]
    return probs if history is None else torch.cat([history[max(0, len(history) - window + 1):], probs.to(history)])


def joint_begin(m, epochs):
    """The epoch from whose start Joint optimisation's models train on their relabelled labels: the --joint-begin
    fraction of the run's epochs (their code: epoch 70 of 200), at least 1."""
    return max(1, round(m.comparators.joint_begin * epochs))



def objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """Joint optimisation's first step for each network alone, on its samples' current labels: the given ones, or its
    rows once relabelled (HISTORY) (mutual.OBJECTIVES' signature)."""
    c = method.comparators
    return alone(z, y, lambda k, logits, logp, q: joint_loss(logits, q, c.joint_alpha, c.joint_beta, logp=logp), rows)


def second_step(z, y, method, chi, r, clock, draws=None, rows=None):
    """Joint optimisation's second step: each network, new, trained by CE on its counterpart's labels from the first
    step, its rows (FromLabels) (mutual.OBJECTIVES' signature)."""
    return alone(z, y, lambda k, logits, logp, q: ce(q, logp), rows)


HISTORY = Stage(  # Joint optimisation's labels: each sample's label the mean of the model's last predictions
    "history", start=lambda m, epochs: max(1, joint_begin(m, epochs) - JOINT_WINDOW + 1), every=True,
    update=lambda history, probs, m: joint_history(history, probs), rows=lambda history: history.mean(0),
    rows_from=joint_begin, keep=True,
    line=lambda m, epoch, n, states: f"from epoch {epoch + 1}, each sample's label is each model's mean prediction "
                                     f"over its last {JOINT_WINDOW} epochs ({len(states[0])} so far), renewed "
                                     f"every epoch")

LABEL_SUM_TOLERANCE = 1e-4  # how far from 1 a loaded label's sum may be (float32 means of softmax rows: within 1e-6)
SAME_DATA = ("dataset", "image_size", "subset", "subset_seed", "val_split", "noise", "rate", "noise_key",
             "synthetic_size", "synthetic_test_size", "synthetic_classes", "synthetic_shift", "synthetic_difficulty")


def load_labels(src, noisy, m, num_classes, config):
    """--labels-from src: the labels src's first step ended with (labels.npz: Stages.finish), as float32 rows (m, n,
    K), read without pickles; RunError (one line) unless src is a run's folder that holds them, made with this run's
    data settings (SAME_DATA, of config) and given labels noisy (n,), with m models."""
    path = os.path.join(src, LABELS)
    if os.path.isfile(src):
        raise RunError(f"--labels-from {src} is a file: give the folder of the --mode joint run that wrote it")
    if not os.path.isfile(path):
        raise RunError(f"--labels-from {src} holds no {LABELS}: give the folder of a finished --mode joint run")
    try:
        theirs = read_json(src, "config.json")
    except (OSError, ValueError):
        theirs = {}  # its labels and given labels are still checked below
    differ = [k for k in SAME_DATA if k in theirs and theirs[k] != config.get(k)]
    if differ:
        raise RunError(f"--labels-from {src} was trained on other data: its --{differ[0].replace('_', '-')} was "
                       f"{theirs[differ[0]]}, this run's is {config.get(differ[0])}; give the data and noise flags "
                       f"as it had them")
    try:
        with np.load(path, allow_pickle=False) as f:
            rows = [f[k] for k in NAMES[:m]]
        given = np.load(os.path.join(src, "noisy_labels.npy"), allow_pickle=False)
    except (OSError, ValueError, KeyError) as e:
        raise RunError(f"--labels-from {src}: {path} or its noisy_labels.npy cannot be read with {m} models' labels "
                       f"({type(e).__name__}); give the folder of a finished --mode joint run of {m} "
                       f"models") from None
    if not np.array_equal(given, noisy):
        raise RunError(f"--labels-from {src} trained on other given labels than this run's (its dataset, --subset, "
                       f"--val-split, --noise, --rate or --seed differ); give them as that run did")
    if any(r.shape != (len(noisy), num_classes) or not np.all(np.isfinite(r)) for r in rows):
        raise RunError(f"--labels-from {src}: {path} does not hold {m} finite ({len(noisy)}, {num_classes}) arrays; "
                       f"give the folder of a finished --mode joint run")
    for k, r in zip(NAMES, rows):  # each sample's label a distribution: non-negative, summing to 1
        bad = np.flatnonzero((r.min(1) < 0) | (np.abs(r.sum(1, dtype=np.float64) - 1) > LABEL_SUM_TOLERANCE))
        if len(bad):
            raise RunError(f"--labels-from {src}: model {k.upper()}'s label of sample {bad[0]} is not a distribution "
                           f"(it sums to {r[bad[0]].sum(dtype=np.float64):.3f}, its least entry is "
                           f"{r[bad[0]].min():.3g}; {len(bad)} such samples): give the folder of a finished --mode joint "
                           f"run, whose labels are its models' mean predictions")
    return torch.as_tensor(np.stack(rows), dtype=torch.float32)


class FromLabels:
    """Joint's second step between epochs (registry.Mode.between): before anything is written, the labels
    --labels-from's run ended with (load_labels), which the batches carry, each model its counterpart's; nothing
    after. (A sweep's second step names a folder its first step has yet to fill: they are read then, not before.)"""

    def start(self, models, method, run, args, setup, given, k):
        rows = load_labels(args.labels_from, given, len(models.nets), k, setup.config).to(setup.device)
        return models, method, rows

    def advance(self, loop, epoch, setup, args, k):
        return loop

    def finish(self, loop, out):
        pass

    def check(self, args, method):
        if args.labels_from is None:
            return "--mode joint2 trains on the labels a finished --mode joint run ended with: give --labels-from DIR"
        return None


SECOND = FromLabels()
MODES = {
    "joint": Mode("Joint optimisation (step 1)", objective, between=Stages(HISTORY), settings=dict(
        joint_alpha=knob(1.0, "Joint optimisation: α of its prior term L_p (--mode joint; the authors' value)",
                         (lambda v: 0 <= v < math.inf, "at least 0")),
        joint_beta=knob(0.5, "Joint optimisation: β of its entropy term L_e (--mode joint; the authors' value)",
                        (lambda v: 0 <= v < math.inf, "at least 0")),
        joint_begin=knob(0.35, "Joint optimisation: the fraction of --epochs after which each sample's label is the "
                               "mean of the model's last 10 epochs of predictions (--mode joint; the authors': epoch 70 "
                               "of 200)", (lambda v: 0 < v <= 1, "in (0, 1]"))),
                   check=lambda a, m: Stages(HISTORY).check(a, m), unbatched="each run relabels its own samples"),
    "joint2": Mode("Joint optimisation (step 2)", second_step, between=SECOND, check=SECOND.check, settings=dict(
        labels_from=knob(None, "--mode joint2: train each model from scratch on the labels a finished --mode joint run "
                               "in DIR ended with, each model on its counterpart's (A on DIR's A): Joint "
                               "optimisation's second step. The given labels are DIR's, so give the data and noise "
                               "flags as it had them", kind=str)),
                    unbatched="its labels are each run's first step's"),
}
