"""Forward correction (Patrini et al. 2017, the paper's Table 3): each network trained alone by the CE of its
T-corrected predictions, with the true T of synthetic noise (--mode forward) or, after a warm-up of plain CE, the
estimate T̂ from the anchor points of its own predictions (--mode forward-anchor).

forward_loss      -- the CE of p T, T row-stochastic
true_transition   -- the true T of synthetic noise
anchor_transition -- Patrini et al.'s estimate T̂ from the anchor points of a model's predictions
estimate_stage    -- the stage that makes each model's T̂ once the warm-up ends (lab/stages.py); T-revision's too
check_transition  -- what a run of Forward or T-revision lacks: the true T, or a warm-up to estimate T̂ after
objective, anchored_objective -- each network by forward_loss with the true T, or with its T̂ (lab/alone.py)

T is row-stochastic throughout: T[i, j] = P(ỹ = j | y = i), noise.transition_matrix's convention, so that the
noisy-label posterior Tᵀp of a sample is the row p T.
"""
import functools

import numpy as np
import torch
import torch.nn.functional as F

from lab.alone import WARMUP, alone, ce, check_warmup, noise_of, warm
from lab.stages import Stage, Stages
from noise import NOISE, transition_matrix
from registry import Mode, knob


def forward_loss(logits, labels, t, logp=None):
    """Forward correction (Patrini et al. 2017: the forward-corrected loss ℓ→(h(x), ỹ) = ℓ(Tᵀ h(x), ỹ)) with ℓ the
    CE:

      L = mean_n −log (p_n T)_{ỹ_n}

    t: (K, K) row-stochastic T, T[i, j] = P(ỹ = j | y = i), a constant: the true one where the noise is synthetic
    (noise.transition_matrix), else the estimate anchor_transition gives. p is clamped to [1e-7, 1 − 1e-7] before the
    product, as in their code (loss.py, robust('forward')). logits: (N, K) with gradient; labels: (N,) int64.
    Returns a scalar.
    """
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    p = logp.exp().clamp(min=1e-7, max=1 - 1e-7)
    return -torch.log((p @ t.to(p)).gather(1, labels[:, None])[:, 0]).mean()


@functools.cache
def true_transition(kind, rate, num_classes, device):
    """The transition matrix of synthetic noise (noise.transition_matrix) as a float32 tensor on device, made once
    per run: the true T that Forward trains with where the noise is synthetic."""
    return torch.as_tensor(transition_matrix(kind, rate, num_classes), dtype=torch.float32, device=device)


def anchor_transition(probs, percentile=100.0):
    """Patrini et al.'s estimate T̂ from anchor points: row i is the predicted distribution of the anchor of class i,
    x̄_i = argmax_x p(ỹ = i | x) over the training set; rows normalised to sum to 1.

    probs: (N, K) a model's predicted probabilities of the given labels on the training set (numpy or tensor).
    percentile < 100: take the largest p(ỹ = i | x) strictly below the column's percentile instead of its maximum,
    their robust variant (97 for MNIST and CIFAR-10); 100, the maximum, is their code's and T-revision's setting for
    CIFAR-100. (Their code zeroes the top of a column of the shared array, which changes the columns later rows
    read; here each column is a copy.) Returns a (K, K) float64 numpy array.
    """
    probs = np.asarray(probs.detach().cpu() if torch.is_tensor(probs) else probs, dtype=np.float64)
    k = probs.shape[1]
    t = np.empty((k, k))
    for i in range(k):
        col = probs[:, i].copy()
        if percentile < 100:
            col[col >= np.percentile(col, percentile, method="higher")] = 0.0
        t[i] = probs[np.argmax(col)]
    return t / t.sum(1, keepdims=True)



def estimate_stage(title):
    """The stage of Forward (T̂) and T-revision: once the warm-up ends, each model's estimate T̂ from its predictions on
    the training set (anchor_transition), which its loss reads as Method.state["estimate"] from then on."""
    return Stage("estimate", start=lambda m, epochs: m.comparators.warmup, line=lambda m, epoch, n, states: (
        f"after {m.comparators.warmup} warm-up epoch{'s' if m.comparators.warmup > 1 else ''} of CE, {title} trains "
        f"with each model's estimate from its predictions on the {n} training samples"),
                 update=lambda state, probs, m: torch.as_tensor(anchor_transition(
                     probs, m.comparators.anchor_percentile), dtype=torch.float32))


def check_transition(args, estimates):
    """What a run of Forward or T-revision lacks, in a line, or None: the true T of synthetic noise, or a warm-up to
    estimate T̂ after (estimates)."""
    if not estimates:
        if NOISE[args.noise].matrix is not None and NOISE[args.noise].takes_rate:
            return None
        with_t = " or ".join(k for k, x in NOISE.items() if x.matrix is not None and x.takes_rate)
        return (f"--mode {args.mode} trains with the noise's true T, which only noise of a matrix has (--noise "
                f"{with_t}); for --noise {args.noise}, estimate it: --mode forward-anchor --warmup W")
    if args.warmup < 1:
        return (f"--mode {args.mode} estimates T̂ from the models once their warm-up ends: give --warmup W (W >= 1 "
                f"epochs of CE)")
    return check_warmup(args)


def objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """Forward with the noise's true T, each network alone (mutual.OBJECTIVES' signature)."""
    t = true_transition(*noise_of(method, "forward"), z[0].shape[-1], z[0].device)
    return alone(z, y, lambda k, logits, logp, q: forward_loss(logits, y, t, logp=logp))


def anchored_objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """Forward with each model's own T̂, after --warmup epochs of CE, each network alone (mutual.OBJECTIVES')."""
    on = not warm(method, clock)
    return alone(z, y, lambda k, logits, logp, q: forward_loss(logits, y, method.state["estimate"][k], logp=logp)
                 if on else ce(q, logp))


ANCHORS = dict(anchor_percentile=knob(100.0, "Forward (T̂), T-revision: each class's anchor is its most confident sample "
                                             "below this percentile (100: the most confident, the authors' CIFAR-100 "
                                             "setting; 97: their CIFAR-10 one)", (lambda v: 0 < v <= 100, "in (0, 100]")))
ESTIMATE = Stages(estimate_stage("Forward (T̂)"))
MODES = {
    "forward": Mode("Forward (true T)", objective, check=lambda a, m: check_transition(a, False),
                    unbatched="its T depends on each run's noise rate"),
    "forward-anchor": Mode("Forward (T̂)", anchored_objective, settings={**WARMUP, **ANCHORS}, rule=warm,
                           between=ESTIMATE, check=lambda a, m: check_transition(a, True) or ESTIMATE.check(a, m),
                           unbatched="its T̂ is each run's estimate"),
}
