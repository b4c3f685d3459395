"""The CMD method (paper §3): two models that each correct their own labels and distil their confident knowledge.

Method      -- the method's hyperparameters (mode, lc, eta, b, each label correction's constants)
MODES, LCS  -- the knowledge modes and the self label corrections
targets     -- q_tilde, one model's own target (label_correction.py)
self_loss   -- L_selfKD of Eqs. 5-6 for one model
EpochSums   -- the named sums mutual_step returns, added up over an epoch on the device
entropy_histogram -- counts of H(p) per model, for samples with clean and with noisy given labels
mutual_step -- one training step of A and B, in the order of §3

One step, for a batch x with given (possibly noisy) labels q:
  p_A, p_B        = the two models' predictions on x
  q~_A, q~_B      = each model's corrected target (LS, CP, Boot-soft, ProSelfLC, MyLC, ...)
  L_B2A, L_A2B    = Eqs. 3-4: H(q~_B, p_A) where H(p_B) < chi, and mirrored
  L_A, L_B        = Eqs. 5-6: L_A = L_selfKD(A) + L_B2A, L_B = L_selfKD(B) + L_A2B
  then one backward pass of L_A + L_B and one SGD step per model.
chi comes from Eq. 7 (schedule.py): Method.chi gives it at a point of training.
"""
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from label_correction import (boot_soft, confidence_penalty_loss, label_smoothing, mylc, one_hot, proselflc,
                              tfkd_reg_loss)
from losses import cmd_distill, kdcl_loss, log_probs, mkd_loss, soft_cross_entropy
from schedule import chi as chi_schedule

# (eta, b) of Eq. 7 per knowledge mode. The paper gives no exact values. Table 5 and Fig. 3 show that a
# larger eta and a smaller b do better, so CMD-S takes Table 5's best, eta = 4, and CMD-P lets chi fall
# (b = -5) from 1.85x to 0.15x that static value. all: eta = 1 is Table 5's "H(u)" row, which equals
# Table 1's "All" column. zero: eta = inf gives chi = 0. mkd and kdcl are the baselines of Table 4,
# which distil everything by their own losses and have no threshold.
MODES = {"zero": (math.inf, 0.0), "all": (1.0, 0.0), "static": (4.0, 0.0), "progressive": (4.0, -5.0),
         "mkd": (None, None), "kdcl": (None, None)}
LCS = ("ce", "ls", "cp", "bootsoft", "proselflc", "mylc", "tfkd")
ENTROPY_BINS = 40  # equal bins of H(p) over [0, ln K] for entropy_histogram


@dataclass(frozen=True)
class Method:
    """What the paper's method is made of; train.py builds one from its flags. Defaults: CMD-P + MyLC."""
    mode: str = "progressive"      # zero | all | static (CMD-S) | progressive (CMD-P) | mkd (Eq. 2) | kdcl
    lc: str = "mylc"               # self label correction: ce | ls | cp | bootsoft | proselflc | mylc | tfkd
    eta: float | None = 4.0        # η of Eq. 7: chi starts from H(u)/η; inf or < 0: zero knowledge, (0, 1]: all
    b: float | None = -5.0         # b of Eq. 7: 0 static, > 0 chi rises, < 0 chi falls over training
    ls_eps: float = 0.25           # ε of LS: q~ = (1 - ε) q + ε u
    cp_beta: float = 0.25          # β of CP: H(q, p) - β H(p)
    bootsoft_eps: float = 0.25     # ε of Boot-soft: q~ = (1 - ε) q + ε p
    proselflc_b: float = 6.0       # B of ProSelfLC: ε = s(t/Γ - transit, B) l(p)
    proselflc_transit: float = 0.3  # transit of ProSelfLC, as a fraction of Γ
    mylc_b1: float = 10.0          # b₁ of MyLC: ε = s(r - ρ, b₁) l(p), r from Eq. 8
    mylc_rho: float = 0.5          # ρ of MyLC (the paper: 0.5)
    tfkd_a: float = 0.99           # Tf-KD_reg: the hand-made teacher's probability on the label
    tfkd_t: float = 20.0           # Tf-KD_reg: temperature T
    tfkd_alpha: float = 0.1        # Tf-KD_reg: weight α of the KL term
    tfkd_multiplier: float = 100.0  # Tf-KD_reg: the authors' code's multiplier of the KL term
    mkd_eps: float = 0.5           # ε of Eq. 2 (0.5 is DML's CE + KL, halved)
    kdcl_t: float = 2.0            # KDCL: temperature T
    kdcl_lambda: float = 1.0       # KDCL: weight λ of the KL term

    def chi(self, t, total, num_classes):
        """Eq. 7 at t epochs (fractional) of Γ = total; None for mkd and kdcl, which have no threshold."""
        return None if self.eta is None else chi_schedule(t, total, num_classes, self.eta, self.b)


def targets(method, q, p, h, r, progress):
    """q~ of one model (appendix, "Label Correction"). q, p: (N, K); h: (N,) H(p); r: MyLC's r (Eq. 8).

    progress = t/Γ for ProSelfLC. CP and Tf-KD_reg are losses, not targets: their
    models distil the given label q.
    """
    if method.lc == "ls":
        return label_smoothing(q, method.ls_eps)
    if method.lc == "bootsoft":
        return boot_soft(q, p, method.bootsoft_eps)
    if method.lc == "proselflc":
        return proselflc(q, p, progress, method.proselflc_b, method.proselflc_transit, h=h)
    if method.lc == "mylc":
        return mylc(q, p, r, method.mylc_b1, method.mylc_rho, h=h)
    return q  # ce, cp, tfkd


def self_loss(method, logits, logp, q, q_tilde, y):
    """L_selfKD of Eqs. 5-6 for one model, a scalar: H(q~, p) averaged over the batch.

    CP and Tf-KD_reg are losses of their own rather than targets (label_correction.py).
    logits: (N, K); logp: (N, K) its float32 log_softmax; q: (N, K) given labels;
    q_tilde: (N, K) the model's own target; y: (N,) given labels as integers.
    """
    if method.lc == "cp":
        return confidence_penalty_loss(logits, q, method.cp_beta, logp=logp)
    if method.lc == "tfkd":
        return tfkd_reg_loss(logits, y, method.tfkd_a, method.tfkd_t, method.tfkd_alpha, method.tfkd_multiplier,
                             logp=logp)
    return soft_cross_entropy(q_tilde, logp).mean()


class EpochSums(NamedTuple):
    """Sums over the samples of an epoch; mutual_step returns them as one device tensor in this order."""
    samples: float       # training samples seen
    loss_a: float        # sum of L_A (Eq. 5) over samples
    loss_b: float        # sum of L_B (Eq. 6)
    selected_b2a: float  # samples where H(p_B) < chi: B's target taught A
    selected_a2b: float  # samples where H(p_A) < chi
    clean_b2a: float     # ... of those, the taught target's argmax is the clean label (precision)
    clean_a2b: float
    clean_label_b2a: float  # ... of those, the sample's given label is the clean one (recall)
    clean_label_a2b: float
    noisy: float         # samples whose given label is not the clean one
    memorized_a: float   # ... of those, A predicts the wrong given label
    memorized_b: float
    entropy_a: float     # sum of H(p_A), for MyLC's r (Eq. 8)
    entropy_b: float
    nonfinite: float     # > 0 if L_A + L_B was NaN or inf in some step


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


def mutual_step(nets, opts, x, y, y_clean, *, method, chi, progress, r, autocast, scaler):
    """One training step of the pair on the batch x, in the order of §3.

    nets, opts: [A, B] and their optimisers. x: (N, C, H, W). y: (N,) given labels;
    y_clean: (N,) clean labels (the given ones when unknown), used only for the sums.
    chi: Eq. 7's threshold now (None for mkd/kdcl); progress: t/Γ; r: [r_A, r_B],
    MyLC's confidences (0-dim device tensors). autocast: torch.autocast's arguments;
    scaler: a GradScaler (enabled for fp16 only).
    Returns (sums, hist): an EpochSums-ordered (15,) tensor and the (2, 2, ENTROPY_BINS)
    entropy_histogram of A and B. Nothing here waits for the device: chi and
    progress are Python floats, r and the sums stay on the device.
    """
    net_a, net_b = nets
    with torch.autocast(**autocast):
        z_a, z_b = net_a(x), net_b(x)                  # (N, K) logits
    logp_a, h_a = log_probs(z_a)                       # (N, K) float32 log p_A, (N,) H(p_A) without gradient
    logp_b, h_b = log_probs(z_b)
    p_a, p_b = logp_a.detach().exp(), logp_b.detach().exp()
    q = one_hot(y, z_a.shape[-1])                      # (N, K) given labels
    if method.mode in ("mkd", "kdcl"):  # the baselines: each model learns all of its peer's prediction
        loss_a, loss_b = (mkd_loss(z_a, z_b, q, method.mkd_eps) if method.mode == "mkd" else
                          kdcl_loss(z_a, z_b, y, method.kdcl_t, method.kdcl_lambda))
        q_a, q_b = p_a, p_b
        m_b2a = m_a2b = torch.ones_like(h_a)
    else:
        q_a = targets(method, q, p_a, h_a, r[0], progress)  # (N, K) q~_A, no gradient
        q_b = targets(method, q, p_b, h_b, r[1], progress)
        loss_b2a, loss_a2b, m_b2a, m_a2b = cmd_distill(logp_a, logp_b, q_a, q_b, h_a, h_b, chi)  # Eqs. 3-4
        loss_a = self_loss(method, z_a, logp_a, q, q_a, y) + loss_b2a                            # Eq. 5
        loss_b = self_loss(method, z_b, logp_b, q, q_b, y) + loss_a2b                            # Eq. 6
    for o in opts:
        o.zero_grad(set_to_none=True)
    scaler.scale(loss_a + loss_b).backward()
    for o in opts:
        scaler.step(o)
    scaler.update()

    with torch.no_grad():
        n = torch.ones_like(h_a).sum()  # N as a device scalar, without a host copy
        noisy = (y != y_clean).float()  # (N,)
        sums = EpochSums(
            samples=n, loss_a=loss_a.detach() * n, loss_b=loss_b.detach() * n,
            selected_b2a=m_b2a.sum(), selected_a2b=m_a2b.sum(),
            clean_b2a=(m_b2a * (q_b.argmax(-1) == y_clean)).sum(), clean_a2b=(m_a2b * (q_a.argmax(-1) == y_clean)).sum(),
            clean_label_b2a=(m_b2a * (1 - noisy)).sum(), clean_label_a2b=(m_a2b * (1 - noisy)).sum(),
            noisy=noisy.sum(), memorized_a=(noisy * (z_a.argmax(-1) == y)).sum(),
            memorized_b=(noisy * (z_b.argmax(-1) == y)).sum(),
            entropy_a=h_a.sum(), entropy_b=h_b.sum(), nonfinite=(~torch.isfinite(loss_a + loss_b)).float())
        return torch.stack(list(sums)), entropy_histogram(torch.stack([h_a, h_b]), noisy, z_a.shape[-1])
