"""Co-teaching (Han et al. 2018) and Co-teaching+ (Yu et al. 2019), the paper's Table 3: two networks, each learning the
small-loss samples of its peer, --mode coteach and --mode coteach+; and what the small-loss methods share (JoCoR's
file reads them).

remember_rate      -- R(t) = 1 - min(t/T_k tau, tau): the fraction of a mini-batch each method keeps
coteach_plus_early -- the `step < 5000` rule of Co-teaching+'s code, for a batch the two networks agree on
small_loss         -- (N,) 0/1 mask of the n_keep samples of smallest loss, without a host sync
coteaching         -- each network's small-loss samples teach its peer
coteaching_plus    -- the same exchange among the samples the two disagree on
keep_rule          -- R(t) at a point of training, and coteach_plus_rule Co-teaching+'s with its disagreement rule
                      and step rule (rules over time, not schedules: that word is χ's, schedule.py)
pair, pair_objective -- the pair's logits, and the Objective of a pair's losses and taught masks
R_T                -- the settings of R(t), τ and T_k, that every small-loss method reads

Each method function takes the two networks' logits on one mini-batch, (N, K) each, and the given labels (N,), and
returns ((loss_a, loss_b), taught): loss_a is a scalar that trains only network A, loss_b only B, and taught maps each
ordered pair (j, k) to the (N,) float 0/1 mask of the samples on which j's selection taught k, for mutual_step's
diagnostics (mutual.sum_names). What they teach is the given label itself.

The small-loss methods are pair-only (the papers define them for two networks) and train on the given labels with
τ = the noise rate (the authors' code). Losses are float32 also under autocast. None of them waits for the device:
masks are multiplied in, never used to index; a selection's size is a host number (R(t) N, from the batch's shape) or
stays on the device (Co-teaching+'s disagreement set). Under torchrun each rank selects within its own shard of the
batch, as each of the authors' runs selected within its own batch: the selection of a 128-sample batch on 4 ranks is
four selections of 32, not one of 128. Where the authors' code departs from their papers (docs/training.md,
"Comparators"), we follow the papers except where noted in a function's docstring.
"""
from typing import NamedTuple

import torch
import torch.nn.functional as F

from label_correction import one_hot
from losses import Objective, log_probs
from registry import Mode, knob

# Co-teaching+'s code updates both networks on the whole batch with plain CE when they agree on every
# sample and step < 5000 (coteach_plus_early).
COTEACH_PLUS_STEPS = 5000



def remember_rate(epoch, forget_rate, num_gradual):
    """R(t) = 1 - min(t/T_k tau, tau) (Co-teaching's Algorithm 1; JoCoR's R(t); Co-teaching+'s lambda(e)).

    epoch: t, the 0-based epoch index, stepped once an epoch: Algorithm 1 updates R(T) at the end of epoch T,
    so the first epoch keeps the whole batch and R reaches 1 - tau after T_k epochs. forget_rate: tau in [0, 1);
    num_gradual: T_k >= 1. Returns a host float. (The authors' code tabulates it per epoch as
    linspace(0, tau, T_k) indexed from their first training epoch, 1: tau/(T_k - 1) steps, tau at epoch T_k - 1.)
    """
    return 1 - min(epoch / num_gradual * forget_rate, forget_rate)


def coteach_plus_early(epoch, i):
    """The `step < 5000` of Co-teaching+'s code: True while a batch without disagreement still trains.

    The authors' code passes step = epoch * i, the product of the epoch number (their training epochs count
    from 1) and the batch index i (from 0), not a count of steps: every epoch's first batch is "early", and
    on MNIST (468 batches) whole epochs are up to the 10th. epoch: our 0-based epoch index. See coteaching_plus
    for what the rule does; we keep it exactly, product included, because the paper does not describe a batch
    without disagreement at all, so the code is the only specification.
    """
    return (epoch + 1) * i < COTEACH_PLUS_STEPS


def small_loss(loss, n_keep):
    """(N,) float 0/1: 1 on the n_keep samples of smallest loss. loss: (N,) without gradient; n_keep: a host int
    in [0, N]. torch.topk's indices scattered into zeros: no host sync."""
    idx = loss.topk(n_keep, largest=False).indices
    return torch.zeros_like(loss).scatter_(0, idx, 1.0)


def _per_sample(logits, labels):
    """log p (N, K) in float32 with gradient, and the per-sample cross-entropy -log p_y (N,)."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return logp, F.nll_loss(logp, labels, reduction="none")


def coteaching(logits_a, logits_b, labels, keep):
    """Co-teaching (Han et al. 2018, Algorithm 1): each network keeps its R(t) fraction of small-loss samples
    and its peer learns them.

      D_A = argmin_{D': |D'| >= R(t)|D|} l(A, D'),  D_B likewise    ("Obtain D_f = argmin ...")
      L_A = mean_{i in D_B} CE(p_A(x_i), y_i),  L_B = mean_{i in D_A} CE(p_B(x_i), y_i)
                                                                    ("Update w_f = w_f - eta grad l(f, D_g)")
    logits_*: (N, K) with gradient; labels: (N,) int64 given labels; keep: R(t), a host float.
    The selection is |D| = max(1, int(R(t) N)) samples, N from the batch's shape (the code's
    num_remember = int(remember_rate * N); at least 1 so that a batch of one never divides by zero), by each
    network's own per-sample CE, which the selection treats as a constant. L_A carries gradient into A only.
    taught[(0, 1)] is D_A (A's small-loss set teaches B), taught[(1, 0)] is D_B.

    Departure, declared (docs/training.md, "Comparators"): where int(R(t) N) = 0 (e.g. N = 2 with tau > 0.5),
    Co-teaching+'s loss_coteaching falls back to the whole batch; we keep max(1, .) = 1 sample. With tau <= 0.5
    and batches of at least 2 samples (Batches' floor), int(R(t) N) >= 1 and the two agree.
    Departure of the authors' code (loss.py, loss_coteaching): it divides the already averaged CE by
    num_remember once more, a constant factor that their Adam largely absorbs; under this harness's SGD it
    would cut the learning rate R(t) N-fold, so we follow the paper's mean.
    """
    n = labels.shape[0]
    n_keep = max(1, int(keep * n))
    _, ce_a = _per_sample(logits_a, labels)
    _, ce_b = _per_sample(logits_b, labels)
    sel_a, sel_b = small_loss(ce_a.detach(), n_keep), small_loss(ce_b.detach(), n_keep)  # D_A, D_B
    loss_a = (sel_b * ce_a).sum() / n_keep  # B's small-loss samples teach A
    loss_b = (sel_a * ce_b).sum() / n_keep
    return (loss_a, loss_b), {(0, 1): sel_a, (1, 0): sel_b}


def coteaching_plus(logits_a, logits_b, labels, keep, disagree, early):
    """Co-teaching+ (Yu et al. 2019, Algorithm 1): Co-teaching among the samples the two networks disagree on.

      D' = {i : argmax p_A(x_i) != argmax p_B(x_i)}                 ("Select prediction disagreement D'")
      D'_A = argmin_{D'': |D''| >= lambda(e)|D'|} l(A, D''), D'_B likewise
      L_A = mean_{i in D'_B} CE(p_A(x_i), y_i),  L_B = mean_{i in D'_A} CE(p_B(x_i), y_i)
    logits_*: (N, K) with gradient; labels: (N,) int64; keep: lambda(e) = R(t), a host float.
    disagree: False in the initial epochs, which the authors' code trains by plain Co-teaching (their
    init_epoch: 0 for MNIST, the closest of their datasets to ours and our default, 20 for CIFAR-10, 5 for
    CIFAR-100; their training epochs count from 1, so init_epoch 5 means 4 epochs of Co-teaching):
    then this is coteaching(). early: coteach_plus_early(epoch, i), used only when D' is empty.

    The size of D' depends on the data, so the selection stays on the device: each network's CE is +inf
    outside D', the samples are ranked by it, and those of rank < floor(lambda(e) |D'|) are kept, computed
    in float64 as the code's int(remember_rate * len) is. As in the authors' code, a non-empty D' too small
    for one sample at that rate (floor = 0) is kept whole.

    An empty D' (the networks agree on every sample) is not in the paper. The authors' code
    (loss.py, loss_coteaching_plus) then trains both networks on the whole batch with plain CE if step < 5000,
    and not at all (a zero loss) otherwise; `step < 5000` has no effect when D' is not empty. We follow it:
    early=True gives L_A = mean_i CE(p_A(x_i), y_i) and all-ones taught masks, early=False zero losses and
    empty masks.

    Departure of the authors' code that we do not follow: after the initial epochs it computes every CE on
    softmax(logits), the probabilities, as if they were logits (a loss that hardly varies, bounded near
    ln K); the paper's CE is on the networks' logits, as here. Like their Co-teaching it also divides the
    mean by num_remember once more (see coteaching).
    """
    if not disagree:
        return coteaching(logits_a, logits_b, labels, keep)
    n = labels.shape[0]
    _, ce_a = _per_sample(logits_a, labels)
    _, ce_b = _per_sample(logits_b, labels)
    d = logits_a.detach().argmax(-1) != logits_b.detach().argmax(-1)  # (N,) bool: D'
    n_d = d.sum()                                                      # |D'|, a device scalar
    n_keep = torch.floor(n_d.double() * keep)                          # lambda(e) |D'|, on the device
    n_keep = torch.where(n_keep == 0, n_d.double(), n_keep)            # too small for one: all of D'
    inf = torch.full_like(ce_a, float("inf"))

    def select(ce):  # (N,) 0/1: the n_keep smallest CE within D', by rank
        rank = torch.where(d, ce.detach(), inf).argsort().argsort()
        return (d & (rank < n_keep)).to(ce.dtype)

    sel_a, sel_b = select(ce_a), select(ce_b)                          # D'_A, D'_B
    none = n_d == 0                                                    # no disagreement: the code's step rule
    fallback = torch.full_like(ce_a, float(early))                     # all samples (early) or none
    sel_a, sel_b = torch.where(none, fallback, sel_a), torch.where(none, fallback, sel_b)
    count = torch.where(none, torch.full_like(n_keep, n if early else 1), n_keep).float()  # the mean's, >= 1
    loss_a = (sel_b * ce_a).sum() / count                              # B's small-loss disagreements teach A
    loss_b = (sel_a * ce_b).sum() / count
    return (loss_a, loss_b), {(0, 1): sel_a, (1, 0): sel_b}


class KeepRule(NamedTuple):
    keep: float     # R(t), the fraction of a batch kept
    disagree: bool  # Co-teaching+ is past its initial epochs: it keeps only its disagreements
    early: bool     # Co-teaching+'s step rule for a batch without disagreement (coteach_plus_early)


def keep_rule(method, clock):
    """R(t) of the small-loss methods at clock (mutual.Clock), stepped once an epoch as the authors' code does, from
    method.comparators' τ and T_k: a host float, what a replayed step is recorded for (registry.Mode.rule)."""
    c = method.comparators
    return remember_rate(clock.epoch, c.forget_rate, c.num_gradual)


def coteach_plus_rule(method, clock):
    """What Co-teaching+ keeps at clock: R(t), whether it is past its initial epochs (--coteach-plus-init), its step
    rule (coteach_plus_early): a KeepRule, what its replayed step is recorded for."""
    return KeepRule(keep_rule(method, clock), clock.epoch >= method.comparators.coteach_plus_init,
                    coteach_plus_early(clock.epoch, clock.batch))


def pair(method, z):
    """The pair's logits (z_A, z_B); ValueError where the run trains more models than the mode's pair."""
    if len(z) != 2:
        raise ValueError(f"mode {method.mode} trains a pair, not {len(z)} models")
    return z


def pair_objective(z, y, losses, taught):
    """The Objective of a pair's losses and taught masks; its q_tilde is the given label, what these methods teach,
    so a selection's precision is its label precision."""
    h = [log_probs(z_k)[1] for z_k in z]  # (N,) H(p) of each network, for the diagnostics
    return Objective(list(losses), taught, [one_hot(y, z[0].shape[-1])] * 2, h)


def coteaching_objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """Co-teaching as a training objective (mutual.OBJECTIVES' signature): z, the pair's logits, (N, K) each; y: (N,)
    given labels; clock: a mutual.Clock. chi, r, draws and rows are unused. Returns a losses.Objective."""
    return pair_objective(z, y, *coteaching(*pair(method, z), y, keep_rule(method, clock)))


def coteaching_plus_objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """Co-teaching+ as a training objective: coteaching_objective's arguments and result."""
    keep, disagree, early = coteach_plus_rule(method, clock)
    return pair_objective(z, y, *coteaching_plus(*pair(method, z), y, keep, disagree, early))



# What a replayed step takes from the host at each point of training is each mode's `rule`.
R_T = dict(forget_rate=knob(None, "τ, the forget rate in R(t) = 1 - min(t/T_k τ, τ) of coteach, coteach+, jocor "
                                  "(default: --rate with a --noise drawn at a rate, as the authors' code sets it; give "
                                  "it otherwise)", (lambda v: 0 <= v < 1, "in [0, 1)")),
           num_gradual=knob(10, "T_k, the epochs over which R(t) falls from 1 to 1 - τ (coteach, coteach+, jocor)",
                            (lambda v: v >= 1, "at least 1")))
MODES = {
    "coteach": Mode("Co-teaching", coteaching_objective, pair=True, rule=keep_rule, aliases=("co-teaching",),
                    settings=R_T),
    "coteach+": Mode("Co-teaching+", coteaching_plus_objective, pair=True, rule=coteach_plus_rule,
                     aliases=("co-teaching+",), settings={**R_T, **dict(
        coteach_plus_init=knob(0, "coteach+: epochs of plain Co-teaching before the disagreement rule (the authors' "
                                  "code: 0 on MNIST; 4 on CIFAR-100 and 19 on CIFAR-10, their init_epoch 5 and 20 with "
                                  "epochs counted from 1)", (lambda v: v >= 0, "at least 0")))}),
}
