"""Tf-KD_reg (Yuan et al. 2020, the paper's Table 4): self-KD from a hand-made teacher, each network trained alone by its
loss, --mode tfkd.

tfkd_reg_loss -- the authors' code variant: CE plus a KL term towards a teacher that puts a on the label
objective     -- each network by tfkd_reg_loss (lab/alone.py)
"""
import math

import torch
import torch.nn.functional as F

from lab.alone import alone
from registry import Mode, knob, positive, unit


def tfkd_reg_loss(logits, labels, a=0.99, T=20.0, alpha=0.1, multiplier=100.0, logp=None):
    """Tf-KD_reg (Yuan et al. 2020), as the authors' public code computes it.

    Teacher: a on the given label, (1 - a)/(K - 1) elsewhere; its target is
    softmax(teacher / T) of these *probabilities* (nearly uniform for K = 100), and
    the student's logits are not divided by T (authors' code; the paper's formula
    differs, see their issues #3, #19, #24).
    L = (1 - alpha) CE(logits, y) + alpha * multiplier * KL(target || p) / (N K):
    the code's nn.KLDivLoss() averages over all N*K elements, hence the multiplier.
    Defaults are the authors' CIFAR-100 ResNet18 setting (T 20, alpha 0.1,
    multiplier 100); for ShuffleNetV2 they use T 10, alpha 0.95, multiplier 1.
    logits: (N, K) with gradient; labels: (N,) int64. Returns a scalar.
    logp: optional log_softmax(logits) in float32 that the caller already has (losses.log_probs):
    then the logits are cast to float32 once per step, so under autocast the gradient into bf16/fp16
    logits is rounded once, not once per term.
    """
    k = logits.shape[-1]
    teacher = torch.full_like(logits, (1 - a) / (k - 1), dtype=torch.float32)
    teacher.scatter_(1, labels[:, None], a)
    target = F.softmax(teacher / T, dim=-1)
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    kl = F.kl_div(logp, target, reduction="sum") / logp.numel()  # mean over N*K, as nn.KLDivLoss()
    return (1 - alpha) * F.nll_loss(logp, labels) + alpha * multiplier * kl  # nll of log_softmax = cross-entropy



def objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """Tf-KD_reg for each network alone (mutual.OBJECTIVES' signature; chi, r, draws and rows unused)."""
    c = method.comparators
    return alone(z, y, lambda k, logits, logp, q: tfkd_reg_loss(logits, y, c.tfkd_a, c.tfkd_t, c.tfkd_alpha,
                                                                c.tfkd_multiplier, logp=logp))


MODES = {"tfkd": Mode("Tf-KD_reg", objective, settings=dict(
    tfkd_a=knob(0.99, "Tf-KD_reg: the hand-made teacher's probability a on the label", (lambda v: 0 < v < 1,
                                                                                        "in (0, 1)")),
    tfkd_t=knob(20.0, "Tf-KD_reg: temperature T", (positive, "a positive temperature")),
    tfkd_alpha=knob(0.1, "Tf-KD_reg: weight α of the KL term", (unit, "in [0, 1]")),
    tfkd_multiplier=knob(100.0, "Tf-KD_reg: the authors' code's multiplier of the KL term",
                         (math.isfinite, "a finite number"))))}
