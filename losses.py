"""Knowledge selection and distillation losses (paper §2 Eqs. 1-2, §3.1 Eqs. 3-6).

entropy            -- H(p) = -sum_k p_k ln p_k, the confidence measure of §3.1
log_probs          -- log p and H(p) from logits, computed once and shared
soft_cross_entropy -- H(q, p) per sample, for soft targets q
kl_divergence      -- KL(p || q) per sample, for Eqs. 1-2 (and the comparison's KDCL and JoCoR, lab/)
cmd_distill        -- Eqs. 3-4, the form that trains: from log-probabilities and entropies
                      the training step (mutual.py) has already computed
cmd_loss           -- Eqs. 3-4 from logits: the same function, to copy into your own loop;
                      it calls nothing of this repository
t2s_kd_loss        -- Eq. 1: teacher-to-student KD
mkd_loss           -- Eq. 2: Deep Mutual Learning (Zhang et al. 2018), all knowledge, KL form
dml_loss           -- Eq. 2 for a cohort of M >= 2 models (DML's own form)
Objective          -- what a training mode's objective returns (mutual.OBJECTIVES)

The appendix's own code (CMDWithLoss) is transcribed in appendix_code.py, as a
test oracle.

Targets q are constants: every loss here detaches them, and detaches whatever
comes from the peer, so a distillation term only ever trains the student side.
All entropies and log-probabilities are in nats and computed in float32, also
under bf16/fp16 autocast.
"""
from typing import NamedTuple

import torch
import torch.nn.functional as F


def entropy(p, logp=None):
    """H(p) = -sum_k p_k ln p_k per row (natural log): the confidence measure of §3.1.

    p: (N, K) probabilities -> (N,). logp: optional log p (N, K), when the caller has log_softmax's (exact
    where p underflows to 0: 0 * finite = 0). Without it, xlogy(0, 0) = 0, so a one-hot row gives exactly 0,
    never NaN. Carries gradient if p (and logp) do.
    """
    if logp is None:
        return -torch.special.xlogy(p, p).sum(-1)
    return -(p * logp).sum(-1)


def log_probs(logits):
    """log p = log_softmax(logits) in float32, and H(p) without gradient.

    logits: (N, K). Returns logp (N, K), carrying gradient, and h (N,), detached.
    Paper code uses log(p + 1e-6); log_softmax is exact and stable.
    """
    logp = F.log_softmax(logits.float(), dim=-1)
    with torch.no_grad():
        h = entropy(logp.exp(), logp)  # (N,)
    return logp, h


def soft_cross_entropy(q, logp):
    """H(q, p) = -sum_k q_k log p_k per row. q: (N, K) constant target; logp: (N, K) -> (N,)."""
    return -(q.detach() * logp).sum(-1)


def cmd_distill(logp_a, logp_b, q_a, q_b, h_a, h_b, chi, draws=None):
    """Eqs. 3-4 from quantities the training step has already computed.

    L_B2A = H(q_B, p_A) where H(p_B) < chi, else 0;  L_A2B = H(q_A, p_B) where H(p_A) < chi, else 0.
    logp_*: (N, K) log-probabilities; q_*: (N, K) corrected targets; h_*: (N,) entropies;
    chi: float (or 0-dim tensor), or a pair (chi_A, chi_B), each model's own: B teaches A where H(p_B) < chi_B.
    Selection is strict (<), as in the appendix code.
    Each sum is divided by N, the batch size, not by the number selected (as the
    appendix code does; Eqs. 3-4 alone do not say). Gradient flows only into logp_a through L_B2A and only
    into logp_b through L_A2B: q_* and h_* are treated as constants.
    Returns (loss_b2a, loss_a2b, m_b2a, m_a2b); m_* are the (N,) float 0/1 masks of
    the samples whose knowledge passed chi, for diagnostics.
    draws: None, or (2, N) uniform draws for the shuffled-selection control (--select shuffled): each
    direction then teaches on as many samples as passed chi, at the positions shuffled_like takes from
    draws[0] (B to A) and draws[1] (A to B), with the same targets.
    No host sync: the masks are multiplied in, never used to index.
    """
    chi_a, chi_b = chi if isinstance(chi, tuple) else (chi, chi)
    m_b2a = (h_b.detach() < chi_b).to(logp_a.dtype)  # (N,): B is confident -> teaches A
    m_a2b = (h_a.detach() < chi_a).to(logp_b.dtype)  # (N,): A is confident -> teaches B
    if draws is not None:  # the control: the same counts, at random positions
        m_b2a, m_a2b = shuffled_like(m_b2a, draws[0]), shuffled_like(m_a2b, draws[1])
    loss_b2a = (m_b2a * soft_cross_entropy(q_b, logp_a)).mean()
    loss_a2b = (m_a2b * soft_cross_entropy(q_a, logp_b)).mean()
    return loss_b2a, loss_a2b, m_b2a, m_a2b


def shuffled_like(mask, draws):
    """A 0/1 mask with as many ones as mask, at the n positions of the n smallest draws: uniformly random
    positions for uniform draws, whatever mask's own positions were. mask, draws: (N,). The count stays on
    the device (ranks < n), so nothing waits for it."""
    ranks = draws.argsort().argsort()  # (N,): each position's rank among the draws
    return (ranks < mask.sum()).to(mask.dtype)


def peer_mean(own, peer, mask):
    """The normalised control of Eqs. 5-6 (--peer-weight mean): a taught sample's loss is the mean of its own
    term and its peer's, an untaught one's is its own; the batch's mean. own, peer: (N,) H(q~_A, p_A) and
    H(q~_B, p_A); mask: (N,) 0/1, where B teaches A. Distilling then moves a sample's target, never its
    weight: with equal targets (CE) this is exactly own.mean(), in value and in gradient."""
    return torch.where(mask > 0, (own + peer) / 2, own).mean()


def cmd_loss(logits_a, logits_b, q_a, q_b, chi):
    """Eqs. 3-4. L_B2A = H(q_B, p_A) where H(p_B) < chi, else 0 (and A2B alike).

    logits_*: (N, K). q_*: the targets, treated as constants: (N, K) corrected
    (soft) targets, or (N,) integer class labels, which mean one-hot rows; any
    other shape raises ValueError rather than broadcast (N,) against (N, K).
    chi: float, from schedule.chi (Eq. 7). Selection is strict (<).
    Each sum is divided by N, the batch size, as in the paper's appendix code.
    Returns (loss_b2a, loss_a2b), two scalars; loss_b2a trains only A, loss_a2b only B.
    No host sync: masks are multiplied in, so it also runs on `meta` tensors.
    Calls nothing else of this repository, so it copies alone (it is cmd_distill from logits).
    """
    n, k = logits_a.shape
    q = []
    for name, q_k in (("q_a", q_a), ("q_b", q_b)):
        if q_k.shape == (n,) and not q_k.is_floating_point() and not q_k.is_complex() and q_k.dtype != torch.bool:
            q_k = F.one_hot(q_k.long(), k).to(torch.float32)  # integer labels: one-hot rows
        elif q_k.shape != (n, k) or not q_k.is_floating_point():
            raise ValueError(f"{name} must be (N,) integer class labels or (N, K) float targets for logits of "
                             f"shape (N, K) = {tuple(logits_a.shape)}; got {q_k.dtype} {tuple(q_k.shape)}")
        q.append(q_k.detach())
    logp_a = F.log_softmax(logits_a.float(), dim=-1)  # (N, K); paper code: log(p + 1e-6)
    logp_b = F.log_softmax(logits_b.float(), dim=-1)
    with torch.no_grad():  # H(p) decides who teaches; a constant
        h_a = -(logp_a.exp() * logp_a).sum(-1)  # (N,)
        h_b = -(logp_b.exp() * logp_b).sum(-1)
    loss_b2a = ((h_b < chi).to(logp_a.dtype) * -(q[1] * logp_a).sum(-1)).mean()  # B is confident -> teaches A
    loss_a2b = ((h_a < chi).to(logp_b.dtype) * -(q[0] * logp_b).sum(-1)).mean()  # A is confident -> teaches B
    return loss_b2a, loss_a2b


def kl_divergence(logp_p, logp_q):
    """KL(p || q) = sum_k p_k (log p_k - log q_k) per row. logp_*: (N, K) log-probabilities -> (N,).

    Gradient flows into both sides (JoCoR's joint loss needs that, lab/methods/jocor.py); a teacher passes its
    log-probabilities detached.
    """
    return (logp_p.exp() * (logp_p - logp_q)).sum(-1)


def t2s_kd_loss(logits_student, logits_teacher, q, eps):
    """Eq. 1. L = (1 - eps) H(q, p_s) + eps KL(p_t || p_s).

    logits_*: (N, K); q: (N, K) target (one-hot in the paper). The teacher is detached.
    KL is summed over classes and averaged over the batch. Returns a scalar.
    The temperature of Hinton et al. is 1 here, as in Eq. 1.
    """
    logp_s = F.log_softmax(logits_student.float(), dim=-1)
    logp_t = F.log_softmax(logits_teacher.float(), dim=-1)
    return ((1 - eps) * soft_cross_entropy(q, logp_s) + eps * kl_divergence(logp_t.detach(), logp_s)).mean()


def mkd_loss(logits_a, logits_b, q, eps=0.5):
    """Eq. 2, Deep Mutual Learning: L_A = (1 - eps) H(q, p_A) + eps KL(p_B || p_A); L_B mirrored.

    The peer's distribution is a constant. KL is summed over classes and averaged
    over the batch: averaging it over classes too, as some public ports do, makes
    the mimicry term K times too weak. eps = 0.5 is DML's CE + KL, halved.
    Returns (loss_a, loss_b); loss_a trains only A.
    """
    return tuple(dml_loss([logits_a, logits_b], q, eps))


def dml_loss(logits, q, eps=0.5):
    """Eq. 2 for a cohort of M >= 2 models, as Deep Mutual Learning defines it for more than two:
    L_k = (1 - eps) H(q, p_k) + eps * mean over peers j of KL(p_j || p_k), the mean of Eq. 1 over peers.

    logits: list of M (N, K). Returns a list of M scalars; L_k trains only model k. M = 2 is mkd_loss.
    """
    m = len(logits)
    return [sum(t2s_kd_loss(logits[k], logits[j], q, eps) for j in range(m) if j != k) / (m - 1) for k in range(m)]


class Objective(NamedTuple):
    """What a training mode's objective (mutual.OBJECTIVES) returns for M models on one batch of N samples."""
    losses: list   # M scalars: losses[k] trains model k only (L_A and L_B of Eqs. 5-6 for CMD)
    taught: dict   # (j, k) -> (N,) float 0/1: the samples on which model j taught model k
    q_tilde: list  # M x (N, K): what each model teaches (its corrected target, or what its mode's selection teaches)
    h: list        # M x (N,): H(p) of each model, without gradient
