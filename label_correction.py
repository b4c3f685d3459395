"""Self label correction: how each model builds its own target (appendix "Label Correction", "MyLC").

Every method here builds q_tilde = (1 - eps) q + eps p_tilde, a constant target
(no gradient) whose rows sum to 1, or is a loss of its own (CP):

one_hot                 -- q, the given (possibly noisy) label; CE is q_tilde = q
label_smoothing         -- LS (Szegedy et al. 2016): p_tilde = u, fixed eps
boot_soft               -- Boot-soft (Reed et al. 2015): p_tilde = p, fixed eps
confidence_penalty_loss -- CP (Pereyra et al. 2017): H(q, p) - beta H(p), a loss
proselflc               -- ProSelfLC (Wang et al. 2021): eps = s(t/Gamma - transit, b) * l(p)
model_confidence        -- Eq. 8: r = 1 - sum_i H(p_i) / (n H(u)), from the predictions
confidence_from_sum     -- Eq. 8 from each model's sum_i H(p_i) over an epoch: MyLC's r for the next epoch
mylc                    -- MyLC (appendix B): eps = s(r - rho, b1) * l(p)

LABEL_CORRECTIONS -- the registry: train.py's --lc names, each a registry.Correction (its target or its own loss,
                     the name plots show); mutual.targets and mutual.self_loss read it, and so does everything that
                     lists the corrections (the flags, their checks, the plots, the tests). The methods CMD is
                     compared with are not corrections but modes of their own, in the lab (lab/methods/)

l(p) = 1 - H(p)/H(u) is ProSelfLC's example trust; MyLC's l(p) is not defined in
the appendix; we read it as the same trust (docs/paper-notes.md, "MyLC").

What CMD distils for a loss-type method: CP has no target of the form (1 - eps) q + eps p_tilde,
so a model trained with it passes its peer the given label q (docs/paper-notes.md, "CP").
Selection still applies: the peer learns q only where this model is confident.
"""
import math

import torch
import torch.nn.functional as F

from losses import entropy
from registry import Correction
from schedule import logistic


def one_hot(labels, num_classes):
    """q: (N,) int64 labels -> (N, K) float32 one-hot rows."""
    return F.one_hot(labels, num_classes).float()


def label_smoothing(q, eps=0.25):
    """LS: q_tilde = (1 - eps) q + eps u, u = 1/K. q: (N, K) -> (N, K)."""
    return (1 - eps) * q + eps / q.shape[-1]


def boot_soft(q, p, eps=0.25):
    """Boot-soft: q_tilde = (1 - eps) q + eps p, p detached. q, p: (N, K) -> (N, K)."""
    return (1 - eps) * q + eps * p.detach()


def confidence_penalty_loss(logits, q, beta=0.25, logp=None):
    """CP: mean_n [H(q, p) - beta H(p)]. A loss, not a target.

    logits: (N, K) with gradient; q: (N, K) constant target. Gradient flows through
    both terms, so confident (low-entropy) predictions are penalised.
    logp: optional log_softmax(logits) in float32 that the caller already has
    (losses.log_probs), so the training step computes it once.
    Models trained with CP distil q to their peer (see the module docstring).
    """
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    cross_entropy = -(q.detach() * logp).sum(-1)  # (N,) H(q, p)
    h = entropy(logp.exp(), logp)                 # (N,) H(p), with gradient
    return (cross_entropy - beta * h).mean()


@torch.no_grad()
def proselflc(q, p, progress, b=6.0, transit=0.3, h=None):
    """ProSelfLC: q_tilde = (1 - eps) q + eps p, eps = s(progress - transit, b) * (1 - H(p)/H(u)).

    q, p: (N, K); p is the model's own prediction on the same batch (no gradient,
    as in the authors' code). progress = t/Gamma in [0, 1], t fractional.
    h: optional (N,) precomputed H(p), to avoid computing it twice.
    b=6 and transit=0.3 are what train.py runs (mutual.Method: one recorded setting of the authors' code,
    docs/paper-notes.md); ProSelfLC's paper uses transit 0.5.
    Returns q_tilde (N, K), rows summing to 1.
    """
    h = entropy(p) if h is None else h  # (N,)
    eps = logistic(progress - transit, b) * (1 - h / math.log(p.shape[-1]))[:, None]  # (N, 1): s(.) l(p)
    return (1 - eps) * q + eps * p


@torch.no_grad()
def model_confidence(p):
    """Eq. 8: r = 1 - sum_i H(p_i) / (n H(u)) over the n predictions p (n, K). Returns a 0-dim tensor.

    The training loop never holds all n predictions at once: it adds up H(p_i)
    during an epoch and calls confidence_from_sum, the same formula, for the next
    epoch's r.
    """
    return confidence_from_sum([entropy(p).sum()], p.shape[0], p.shape[-1])[0]


def confidence_from_sum(entropy_sums, n, num_classes):
    """MyLC's r of each model for the next epoch: Eq. 8, r = 1 - sum_i H(p_i) / (n H(u)), H(u) = ln K.

    entropy_sums: one sum_i H(p_i) per model, added up over the epoch's n training predictions (the
    training-mode forward passes that trained it); floats, or tensors, then each r is a tensor on the
    same device and nothing waits for it. Returns a list of r, one per model. The paper's "all samples" is
    read as the previous epoch's training samples; in the first epoch r = 0 (docs/paper-notes.md, "MyLC").
    """
    return [1 - entropy_sum / (n * math.log(num_classes)) for entropy_sum in entropy_sums]


@torch.no_grad()
def mylc(q, p, r, b1=10.0, rho=0.5, h=None):
    """MyLC: q_tilde = (1 - eps) q + eps p, eps = s(r - rho, b1) * (1 - H(p)/H(u)).

    q, p: (N, K); p is the model's own prediction, no gradient. r: the model's confidence (Eq. 8,
    confidence_from_sum), a float or a 0-dim tensor on p's device (so no host sync). rho = 0.5 as in the
    paper; b1 = 10, the slope train.py runs (the paper does not give it). h: optional (N,) precomputed H(p).
    Returns q_tilde (N, K), rows summing to 1.
    """
    h = entropy(p) if h is None else h  # (N,)
    eps = logistic(torch.as_tensor(r, device=p.device) - rho, b1) * (1 - h / math.log(p.shape[-1]))[:, None]
    return (1 - eps) * q + eps * p  # eps: (N, 1), s(r - rho, b1) l(p)


# ---------------------------------------------------------------- the registry

LABEL_CORRECTIONS = {
    "ce": Correction("CE"),
    "ls": Correction("LS", target=lambda q, p, h, r, progress, m: label_smoothing(q, m.ls_eps), knobs=("ls_eps",)),
    "cp": Correction("CP", loss=lambda logits, logp, q, y, m, clock: confidence_penalty_loss(logits, q, m.cp_beta,
                                                                                         logp=logp),
                     knobs=("cp_beta",)),
    "bootsoft": Correction("Boot-soft", target=lambda q, p, h, r, progress, m: boot_soft(q, p, m.bootsoft_eps),
                           knobs=("bootsoft_eps",)),
    "proselflc": Correction("ProSelfLC", target=lambda q, p, h, r, progress, m: proselflc(
        q, p, progress, m.proselflc_b, m.proselflc_transit, h=h), knobs=("proselflc_b", "proselflc_transit")),
    "mylc": Correction("MyLC", target=lambda q, p, h, r, progress, m: mylc(q, p, r, m.mylc_b1, m.mylc_rho, h=h),
                       knobs=("mylc_b1", "mylc_rho")),
}
