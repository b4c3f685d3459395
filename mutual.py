"""The CMD method (paper §3): two models that each correct their own labels and distil their confident knowledge.

One step, for a batch x with given (possibly noisy) labels q:
  p_A, p_B        = the two models' predictions on x
  q~_A, q~_B      = each model's corrected target (LS, CP, Boot-soft, ProSelfLC, MyLC, ...)
  L_B2A, L_A2B    = Eqs. 3-4: H(q~_B, p_A) where H(p_B) < chi, and mirrored
  L_A, L_B        = Eqs. 5-6: L_A = L_selfKD(A) + L_B2A, L_B = L_selfKD(B) + L_A2B
  then one backward pass of L_A + L_B and one SGD step per model.
chi comes from Eq. 7 (schedule.py) at the step's Clock: Method.chi_at. Zero knowledge (chi = 0) and all
knowledge (chi >= ln K) are the same objective.

cmd_objective    -- the step's losses in the order above, for the modes zero, all, static, progressive
targets          -- q~, one model's own target (label_correction.py)
self_loss        -- L_selfKD of Eqs. 5-6 for one model
cohort_objective, peer_mean_objective -- beyond the pair: Eqs. 3-6 for a cohort of M > 2 models (--peers);
                    the controls --select shuffled (cohort_objective) and --peer-weight mean
mkd_objective    -- Eq. 2 for the pair or a cohort: Deep Mutual Learning, the all-knowledge baseline of Table 4
mutual_step      -- one training step: forward, the run's objective (objective_for), backward, the sums
step_losses      -- the step from the logits on: the objective, the total loss, the sums (tools/batched.py vmaps it)
Clock            -- where training is: the epoch, the batch, the batches per epoch, Γ, the seed
step_sums, sum_names, entropy_histogram -- what a step counts for the epoch's diagnostics
shuffle_draws    -- the random draws of the shuffled-selection control
Method           -- the paper's hyperparameters (and the controls'): the one source of their defaults and flags
Comparators      -- the settings the modes declare (registry.Mode.settings): MKD's ε, and those of the modes registered
                    beyond the paper
knobs_read       -- the fields of Method and Comparators a run of a mode and a label correction reads
MODES, register  -- the registry of training modes: each a registry.Mode (its objective, Eq. 7's (eta, b) for the
                    knowledge modes, the name plots show): the paper's four and MKD, and those another program
                    registers (python lab/train.py: the methods CMD is compared with); THRESHOLDS, CMD_MODES, ALIASES
                    read it
LCS              -- the label corrections' names (label_correction.LABEL_CORRECTIONS is their registry)
OBJECTIVES, objective_for -- every objective, and the one a run trains by

Every objective is a pure function of tensors with one signature, objective(z, y, method, chi, r, clock,
draws, rows), and returns a losses.Objective; chi and r may be 0-dim tensors, so torch.func.vmap batches an
objective over runs that differ in them (tools/batched.py).
"""
import functools
import itertools
import math
from dataclasses import dataclass, field, make_dataclass
from typing import NamedTuple

import torch

import schedule
from label_correction import LABEL_CORRECTIONS, one_hot
from losses import Objective, cmd_distill, dml_loss, log_probs, peer_mean, soft_cross_entropy
from registry import Mode, knob, unit


def cmd_objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """§3 for models A and B on one batch: Eqs. 3-6.

    z: the two models' (N, K) logits, z[0] of A and z[1] of B; y: (N,) given labels; chi: Eq. 7 now, each
    model's (Method.chis_at: a pair of floats, or a (2,) tensor), or one float or 0-dim tensor for both; r:
    MyLC's confidence of A and of B (Eq. 8), 0-dim tensors; clock: a Clock (ProSelfLC's t/Γ). draws and rows are
    unused (one signature for every objective). Returns Objective([L_A, L_B], taught, [q~_A, q~_B], [H(p_A),
    H(p_B)]), taught[1, 0] the samples where B taught A (Eq. 3), taught[0, 1] mirrored.
    """
    (logp_a, h_a), (logp_b, h_b) = log_probs(z[0]), log_probs(z[1])  # (N, K) float32 log p, (N,) H(p) without grad
    q = one_hot(y, z[0].shape[-1])                                     # (N, K) the given labels
    q_a = targets(method, q, logp_a.detach().exp(), h_a, r[0], clock)  # q~_A, no gradient
    q_b = targets(method, q, logp_b.detach().exp(), h_b, r[1], clock)  # q~_B
    chi = per_model(chi, 2)
    loss_b2a, loss_a2b, b_taught_a, a_taught_b = cmd_distill(logp_a, logp_b, q_a, q_b, h_a, h_b, (chi[0], chi[1]))
    loss_a = self_loss(method, z[0], logp_a, q, q_a, y, clock) + loss_b2a  # Eq. 5: L_A = L_selfKD(A) + L_B2A
    loss_b = self_loss(method, z[1], logp_b, q, q_b, y, clock) + loss_a2b  # Eq. 6: L_B = L_selfKD(B) + L_A2B
    return Objective([loss_a, loss_b], {(1, 0): b_taught_a, (0, 1): a_taught_b}, [q_a, q_b], [h_a, h_b])


def targets(method, q, p, h, r, clock):
    """q~ of one model (appendix, "Label Correction"): its label correction's (label_correction.LABEL_CORRECTIONS).
    q, p: (N, K); h: (N,) H(p); r: MyLC's r (Eq. 8); clock: a Clock (ProSelfLC's t/Γ). A correction that is a loss
    (CP) has no target: its model distils the given label q.
    """
    target = LABEL_CORRECTIONS[method.lc].target
    return q if target is None else target(q, p, h, r, clock.progress, method)


def self_loss(method, logits, logp, q, q_tilde, y, clock):
    """L_selfKD of Eqs. 5-6 for one model, a scalar: H(q~, p) averaged over the batch, or the label correction's
    own loss (CP). logits: (N, K); logp: (N, K) its float32 log_softmax; q: (N, K) given labels; q_tilde: (N, K) the
    model's own target; y: (N,) given labels as integers; clock: a Clock.
    """
    loss = LABEL_CORRECTIONS[method.lc].loss
    if loss is None:
        return soft_cross_entropy(q_tilde, logp).mean()
    return loss(logits, logp, q, y, method, clock)


# ---------------------------------------------------------------- beyond the pair: a cohort, the two controls

def own_targets(z, y, method, r, clock):
    """What each of M models computes of its own before any distillation, as cmd_objective does for A and B:
    log p (M x (N, K), float32, with gradient), H(p) (M x (N,), without), the given labels q (N, K) and q~ (M x
    (N, K), without gradient)."""
    logp, h = zip(*(log_probs(z_k) for z_k in z))
    q = one_hot(y, z[0].shape[-1])
    q_tilde = [targets(method, q, logp_k.detach().exp(), h_k, r_k, clock) for logp_k, h_k, r_k in zip(logp, h, r)]
    return list(logp), list(h), q, q_tilde


def cohort_objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """Beyond the paper: a cohort of M >= 2 models (--peers), as Deep Mutual Learning trains cohorts: Eqs. 3-4
    for every pair, L_k = L_selfKD(k) + 1/(M-1) sum_{j != k} [H(p_j) < chi] H(q~_j, p_k) (Eqs. 5-6 at M = 2).
    With draws (shuffle_draws', (pairs, 2, N)), the shuffled-selection control (--select shuffled): each pair's
    count of confident samples at random positions (losses.cmd_distill). Arguments, result: cmd_objective's."""
    m = len(z)
    logp, h, q, q_tilde = own_targets(z, y, method, r, clock)
    chi = per_model(chi, m)
    taught, distilled = {}, [[] for _ in range(m)]   # taught[j, k]: (N,) 0/1 where j taught k; distilled[k]: L_j2k
    for i, (a, b) in enumerate(itertools.combinations(range(m), 2)):
        loss_b2a, loss_a2b, taught[b, a], taught[a, b] = cmd_distill(
            logp[a], logp[b], q_tilde[a], q_tilde[b], h[a], h[b], (chi[a], chi[b]), None if draws is None else draws[i])
        distilled[a].append(loss_b2a)
        distilled[b].append(loss_a2b)
    losses = [self_loss(method, z[k], logp[k], q, q_tilde[k], y, clock) + mean(distilled[k]) for k in range(m)]
    return Objective(losses, taught, q_tilde, h)


def peer_mean_objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """The control of Eqs. 5-6 (--peer-weight mean), for a pair and targets q~ only: where B teaches A (Eq. 3),
    L_A's term is the mean of H(q~_A, p_A) and H(q~_B, p_A), not their sum, so distilling moves a sample's
    target, never its weight (losses.peer_mean); B mirrored. With draws (--select shuffled too), the taught
    samples are shuffled as in cohort_objective. Arguments, result: cmd_objective's."""
    logp, h, _, q_tilde = own_targets(z, y, method, r, clock)
    chi = per_model(chi, 2)
    _, _, b_taught_a, a_taught_b = cmd_distill(*logp, *q_tilde, *h, (chi[0], chi[1]), None if draws is None else draws[0])
    taught = {(1, 0): b_taught_a, (0, 1): a_taught_b}
    losses = [peer_mean(soft_cross_entropy(q_tilde[k], logp[k]), soft_cross_entropy(q_tilde[1 - k], logp[k]),
                        taught[1 - k, k]) for k in range(2)]
    return Objective(losses, taught, q_tilde, h)


def all_knowledge(z, losses):
    """The Objective of an all-knowledge baseline: every model taught every sample by every peer, q_tilde its
    predictions, h their entropies."""
    m = len(z)
    logp, h = zip(*(log_probs(z_k) for z_k in z))     # M x (N, K) float32 log p, M x (N,) H(p) without gradient
    taught = {(j, k): torch.ones_like(h[0]) for j in range(m) for k in range(m) if j != k}
    return Objective(losses, taught, [logp_k.detach().exp() for logp_k in logp], list(h))


def mkd_objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """Table 4's MKD: every model learns all of its peers' predictions by Deep Mutual Learning's loss (Eq. 2), on the
    given labels. chi, r, clock, draws and rows are unused (one signature for every objective)."""
    return all_knowledge(z, dml_loss(z, one_hot(y, z[0].shape[-1]), method.comparators.mkd_eps))


def per_model(chi, m):
    """chi of each of m models: as given where it is one per model (a tuple, or a tensor of m), else the one value
    for all of them (a float, or a 0-dim tensor)."""
    return chi if isinstance(chi, tuple) or (torch.is_tensor(chi) and chi.dim() > 0) else (chi,) * m


def mean(values):
    """The mean of a list of tensors; exactly the one tensor when there is one (a pair's single peer)."""
    return sum(values[1:], values[0]) / len(values)


def shuffle_draws(seed, epoch, batch, m, n, device):
    """The uniform draws of the shuffled-selection control (--select shuffled) for one batch: (pairs, 2, n), a
    (2, n) for each pair of m models, from a generator seeded by (seed, epoch, batch) alone, so that the
    positions depend on nothing the models compute. Drawn on the device; nothing is read back."""
    g = torch.Generator(device=device)
    g.manual_seed(((seed * 1_000_003 + epoch) * 1_000_003 + batch) % 2 ** 63)
    return torch.rand(m * (m - 1) // 2, 2, n, generator=g, device=device)


# ---------------------------------------------------------------- the step

class Clock(NamedTuple):
    """Where training is, for everything that moves with time: Eq. 7's chi, ProSelfLC's t/Γ, and beyond them."""
    epoch: int    # 0-based
    batch: int    # the batch's index within the epoch
    batches: int  # batches per epoch
    epochs: int   # Γ
    seed: int     # the run's --seed

    @property
    def t(self):
        """Training progress in epochs, fractional: Eq. 7's and ProSelfLC's t."""
        return self.epoch + self.batch / self.batches

    @property
    def progress(self):
        """t/Γ."""
        return self.t / self.epochs

    @property
    def percent(self):
        """⌊100 t/Γ⌋ from whole step counts, ⌊100 step / steps⌋: an int, exact at every step of any run (MentorNet's
        curriculum counts so)."""
        return 100 * (self.epoch * self.batches + self.batch) // (self.epochs * self.batches)


class Precision(NamedTuple):
    """How a step computes: torch.autocast's arguments and a GradScaler (enabled for fp16 only)."""
    autocast: dict
    scaler: torch.amp.GradScaler


def mutual_step(nets, opts, batch, method, chi, r, clock, precision):
    """One training step of A and B (nets[0], nets[1]; or of a cohort): forward, the run's objective, backward.

    nets, opts: the models and their optimisers. batch: (x, y, y_clean, *rows) as Batches gives it, y the given
    labels and y_clean the clean ones (the given ones when unknown), used only for the sums; rows: the per-sample rows
    a mode beyond the paper keeps, where it keeps any, passed on to its objective. chi: Eq. 7 now, each
    model's; r: MyLC's confidence of each model (0-dim device tensors); clock: a Clock; precision: a Precision.
    Returns (sums, hist): a tensor of the sums named by sum_names(len(nets)), and the (M, 2, ENTROPY_BINS)
    entropy_histogram of the M models. Nothing here waits for the device unless the GradScaler is
    on (--amp fp16): its step then reads back whether each model's gradients are finite, a wait per model.
    """
    x, y, y_clean, *rows = batch
    with torch.autocast(**precision.autocast):
        z = [net(x) for net in nets]                  # M x (N, K) logits: z[0] of A, z[1] of B
    draws = (shuffle_draws(clock.seed, clock.epoch, clock.batch, len(nets), len(y), y.device)
             if method.select == "shuffled" else None)
    total, sums, h = step_losses(z, y, y_clean, method, chi, r, clock, draws, rows)
    for o in opts:
        o.zero_grad(set_to_none=True)
    precision.scaler.scale(total).backward()
    for o in opts:
        precision.scaler.step(o)
    precision.scaler.update()
    with torch.no_grad():
        return sums, entropy_histogram(h, (y != y_clean).float(), z[0].shape[-1])


def step_losses(z, y, y_clean, method, chi, r, clock, draws=None, rows=()):
    """The step from the logits on: the run's objective, L_A + L_B and the step's sums. z: M x (N, K) logits; the
    rest as mutual_step's. Returns (total, sums, h): the loss to backpropagate, the sums (step_sums) and each model's
    H(p), (M, N). A pure function of tensors: tools/batched.py vmaps it over runs."""
    out = objective_for(method, len(z))(z, y, method, chi, r, clock, draws, *rows)
    total = sum(out.losses[1:], out.losses[0])        # L_A + L_B
    with torch.no_grad():
        return total, step_sums(z, y, y_clean, total, out), torch.stack(out.h)


def step_sums(z, y, y_clean, total, out):
    """The step's sums, in sum_names' order, as one tensor. z: M x (N, K) logits; y, y_clean: (N,) given and
    clean labels; total: the summed loss; out: the objective's Objective. A pure function of tensors (it
    vmaps over runs)."""
    n = torch.ones_like(out.h[0]).sum()  # N as a device scalar, without a host copy
    noisy = (y != y_clean).float()  # (N,)
    sums = dict(samples=n, noisy=noisy.sum(), nonfinite=(~torch.isfinite(total)).float())
    for k, model in enumerate(NAMES[:len(z)]):
        sums[f"loss_{model}"] = out.losses[k].detach() * n
        sums[f"memorized_{model}"] = (noisy * (z[k].argmax(-1) == y)).sum()
        sums[f"entropy_{model}"] = out.h[k].sum()
    for (j, k), mask in out.taught.items():
        pair = f"{NAMES[j]}2{NAMES[k]}"
        sums[f"selected_{pair}"] = mask.sum()
        sums[f"clean_{pair}"] = (mask * (out.q_tilde[j].argmax(-1) == y_clean)).sum()
        sums[f"clean_label_{pair}"] = (mask * (1 - noisy)).sum()
    return torch.stack([sums[name] for name in sum_names(len(z))])


NAMES = "abcdefghijklmnopqrstuvwxyz"  # model A is "a", B is "b", and so on for a cohort
ENTROPY_BINS = 40  # equal bins of H(p) over [0, ln K] for entropy_histogram


@functools.cache  # called every step
def sum_names(m):
    """The names of what mutual_step adds up over an epoch for m models, in the order of its sums tensor.

    samples          training samples seen
    noisy            ... of those, samples whose given label is not the clean one
    nonfinite        > 0 if the loss was NaN or inf in some step
    loss_x           sum of model x's loss (L_A of Eq. 5 for x = a) over samples
    memorized_x      noisy-labelled samples that model x predicts as their wrong given label
    entropy_x        sum of H(p_x), for MyLC's r (Eq. 8)
    selected_j2k     samples where j taught k (Objective.taught): H(p_j) < chi, Eq. 3 (selected_b2a: B taught A)
    clean_j2k        ... of those, the taught target's argmax is the clean label (precision)
    clean_label_j2k  ... of those, the sample's given label is the clean one (recall)
    """
    models = NAMES[:m]
    pairs = [f"{j}2{k}" for j in models for k in models if j != k]
    return tuple(["samples", "noisy", "nonfinite"] + [f"{s}_{x}" for x in models for s in ("loss", "memorized", "entropy")]
                 + [f"{s}_{pair}" for pair in pairs for s in ("selected", "clean", "clean_label")])


def entropy_histogram(h, noisy, num_classes, bins=ENTROPY_BINS):
    """Counts of H(p) in `bins` equal bins over [0, ln K], per model and per kind of given label.

    h: (M, N) entropies of M models; noisy: (N,) 1 where the given label is wrong.
    Returns (M, 2, bins) float counts: [:, 0] clean given labels, [:, 1] noisy ones.
    index_add_ into a fixed-size tensor: no host sync (torch.bincount would need one).
    """
    m = h.shape[0]
    idx = (h / math.log(num_classes) * bins).long().clamp_(0, bins - 1)  # (M, N)
    idx = idx + bins * noisy.long() + 2 * bins * torch.arange(m, device=h.device)[:, None]
    out = torch.zeros(m * 2 * bins, device=h.device)
    return out.index_add_(0, idx.flatten(), torch.ones_like(h).flatten()).view(m, 2, bins)


# ---------------------------------------------------------------- the registry of modes, and the flags of the method

# (eta, b) of Eq. 7 per knowledge mode. The paper gives no exact values. Table 5 and Fig. 3 show that a
# larger eta and a smaller b do better, so CMD-S takes Table 5's best, eta = 4, and CMD-P lets chi fall
# (b = -5) from 1.85x to 0.15x that static value. all: eta = 1 is Table 5's "H(u)" row, which equals
# Table 1's "All" column. zero: eta = inf gives chi = 0. The four are the pair of Eqs. 3-6 and differ only in chi.
# The controls of the selection (--select, --peer-weight) change what the modes that teach read: zero knowledge
# teaches nothing, and all knowledge teaches every sample, so that shuffling where it teaches changes nothing.
# MKD is Eq. 2, the paper's all-knowledge baseline of Table 4, in its KL form. The methods CMD is compared with are
# modes of the lab (lab/methods/), which python lab/train.py registers here (register).
CONTROLS = ("select", "peer_weight")
MODES = {
    "zero": Mode("Zero knowledge", cmd_objective, (math.inf, 0.0)),
    "all": Mode("All knowledge", cmd_objective, (1.0, 0.0), knobs=("peer_weight",)),
    "static": Mode("CMD-S", cmd_objective, (4.0, 0.0), tunable=True, aliases=("cmd-s",), knobs=CONTROLS),
    "progressive": Mode("CMD-P", cmd_objective, (4.0, -5.0), tunable=True, aliases=("cmd-p",), knobs=CONTROLS),
    "mkd": Mode("MKD (Eq. 2)", mkd_objective, settings=dict(
        mkd_eps=knob(0.5, "mkd: ε in Eq. 2 (0.5 = DML's CE + KL, halved)", (unit, "in [0, 1]")))),
}
THRESHOLDS = {m: x.thresholds for m, x in MODES.items() if x.thresholds is not None}
CMD_MODES = tuple(THRESHOLDS)  # the modes of Eqs. 3-7, where --select and --peer-weight apply
ALIASES = {a: m for m, x in MODES.items() for a in x.aliases}  # the papers' names of the modes
LCS = tuple(LABEL_CORRECTIONS)  # train.py's --lc: label_correction.LABEL_CORRECTIONS
SELECTS, PEER_WEIGHTS = ("confident", "shuffled"), ("sum", "mean")


def knobs_read(mode, lc):
    """The names of the fields of Method and Comparators that a run of this mode and label correction reads: the
    mode and lc themselves, η and b where the mode's are tunable, the mode's knobs and settings and, where it has a
    threshold (it trains on q~), its label correction's (registry.Mode, registry.Correction)."""
    x, c = MODES[mode], LABEL_CORRECTIONS[lc]
    controls = () if c.loss is None else ("peer_weight",)  # a mean of two cross-entropies with targets: q~ only
    return {"mode", "lc", *(("eta", "b") if x.tunable else ()), *(c.knobs if x.thresholds is not None else ()),
            *(k for k in (*x.knobs, *x.settings) if k not in controls)}


def comparators():
    """The Comparators class of the modes registered now (mutual.Comparators): one field for each setting an entry of
    MODES declares, the first entry to declare a name giving its default and help."""
    return _comparators(tuple(MODES))


@functools.cache
def _comparators(modes):
    declared = {}
    for entry in (MODES[m] for m in modes):
        for name, f in entry.settings.items():
            declared.setdefault(name, f)
    kind = lambda f: f.metadata.get("kind") or (float if f.default is None else type(f.default))  # noqa: E731
    cls = make_dataclass("Comparators", [(name, kind(f), f) for name, f in declared.items()], frozen=True)
    cls.__module__ = __name__
    cls.__doc__ = ("The settings the modes declare (registry.Mode.settings), held by Method.comparators: MKD's, and "
                   "those of the modes registered beyond the paper; each field is also train.py's flag of the same "
                   "name, with its default and help.")
    return cls


def __getattr__(name):  # mutual.Comparators: the class of the modes registered now
    if name == "Comparators":
        return comparators()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(modes):
    """Add modes beyond the paper's to MODES (the lab's methods, lab/__init__.py: python lab/train.py), each a
    registry.Mode that trains on the given labels, whose settings become fields of Comparators and train.py's flags.
    The reference registers none."""
    knowledge = [m for m, x in modes.items() if x.thresholds is not None]
    if knowledge:
        raise ValueError(f"a registered mode trains on the given labels (thresholds None): {', '.join(knowledge)}")
    MODES.update(modes)
    ALIASES.update({a: m for m, x in modes.items() for a in x.aliases})


@dataclass(frozen=True)
class Method:
    """What the paper's method is made of, and the two controls of its selection; train.py builds one from its
    flags. Defaults: CMD-P + MyLC. Each field down to mylc_rho is also train.py's flag of the same name (--ls-eps for
    ls_eps), with this default and help.
    """
    mode: str = knob("progressive", "knowledge selection: zero (η=inf), all (η=1), static = CMD-S (η=4, b=0), "
                                    "progressive = CMD-P (η=4, b=-5); mkd = Eq. 2 on the given labels (Table 4). The "
                                    "papers' names " + ", ".join(ALIASES) + " are accepted, in any case (python "
                                    "lab/train.py adds the methods CMD is compared with)")
    lc: str = knob("mylc", "self label correction q~ of each model")
    eta: float | None = knob(THRESHOLDS["progressive"][0], "η in Eq. 7, χ = H(u)/η 2s(t/Γ - 0.5, b); inf or < 0: zero "
                                                       "knowledge, (0, 1] with b = 0: all")
    b: float | None = knob(THRESHOLDS["progressive"][1], "b in Eq. 7: 0 static χ, > 0 χ rises, < 0 χ falls",
                           (math.isfinite, "a finite number"))
    select: str = knob("confident", "which samples each model teaches its peer: confident = where H(p_j) < χ "
                                    "(Eqs. 3-4); shuffled = as many in each batch, drawn at random (a control "
                                    "that keeps the count, the targets and χ, and drops the choice)",
                       choices=SELECTS)
    peer_weight: str = knob("sum", "sum: L_A = L_selfKD(A) + L_B2A (Eqs. 5-6); mean: a taught sample's loss is "
                                   "the mean of its own and its peer's term, so distilling changes its target, "
                                   "never its weight (a control; pairs, and targets q~ only)",
                            choices=PEER_WEIGHTS)
    ls_eps: float = knob(0.25, "LS ε in q~ = (1 - ε) q + ε u", (unit, "in [0, 1]"))
    cp_beta: float = knob(0.25, "CP β in H(q, p) - β H(p)", (lambda v: 0 <= v < math.inf, "at least 0"))
    bootsoft_eps: float = knob(0.25, "Boot-soft ε in q~ = (1 - ε) q + ε p", (unit, "in [0, 1]"))
    proselflc_b: float = knob(6.0, "ProSelfLC slope B of ε = s(t/Γ - transit, B) l(p)", (math.isfinite, "a finite number"))
    proselflc_transit: float = knob(0.3, "ProSelfLC transit point, a fraction of Γ", (math.isfinite, "a finite number"))
    mylc_b1: float = knob(10.0, "MyLC b₁ in ε = s(r - ρ, b₁) l(p), r from Eq. 8", (math.isfinite, "a finite number"))
    mylc_rho: float = knob(0.5, "MyLC ρ in ε = s(r - ρ, b₁) l(p) (the paper: 0.5)", (math.isfinite, "a finite number"))
    # ---- what the modes' own settings, and the modes beyond the paper, read (none is a flag of its own)
    comparators: object = field(default_factory=lambda: comparators()())  # Comparators: the modes' settings
    noise: tuple | None = None  # (kind, rate) of synthetic noise, or None: --noise and --rate set it
    state: dict | None = None  # what a mode has made between epochs (registry.Mode.between), which a checkpoint keeps

    def chi_at(self, t, total, num_classes):
        """χ, Eq. 7 (schedule.chi), at t epochs (fractional) of Γ = total with this method's η and b; None for a
        mode without a threshold."""
        return None if self.eta is None else schedule.chi(t, total, num_classes, self.eta, self.b)

    def chis_at(self, t, total, num_classes, m):
        """The step's thresholds: χ of each of the m models at t epochs, a tuple (None without a threshold). The one
        place they are computed: train.py and tools.batched call it each step, and graph.Replayed and the
        objectives pass them on as they are, down to cmd_distill. Today one η and b serve every model (chi_at); a
        knob that gives each model its own changes this method alone."""
        chi = self.chi_at(t, total, num_classes)
        return None if chi is None else (chi,) * m


# Every objective beyond a mode's own, all with cmd_objective's signature: objective_for picks a run's, the one
# thing mutual_step dispatches on.
OBJECTIVES = {**{m: x.objective for m, x in MODES.items()}, "cohort": cohort_objective, "shuffled": cohort_objective,
              "peer-mean": peer_mean_objective}


def objective_for(method, m):
    """The objective a run of m models trains by: its mode's (MODES), or for CMD's modes the generalisation of the
    pair's cmd_objective that the run asks for (--peer-weight mean, --select shuffled, --peers > 2)."""
    if method.mode in CMD_MODES and method.peer_weight == "mean":
        return OBJECTIVES["peer-mean"]
    if method.mode in CMD_MODES and (method.select == "shuffled" or m > 2):
        return OBJECTIVES["shuffled" if method.select == "shuffled" else "cohort"]
    return MODES[method.mode].objective
