"""KDCL (Guo et al. 2020, the paper's Table 4): every network learns an ensemble teacher made of all the cohort's
logits, on the given labels, --mode kdcl.

kdcl_loss, kdcl_cohort_loss -- KDCL-MinLogit for a pair, and for M >= 2 students
objective                   -- kdcl_cohort_loss as a mode's objective (mutual.all_knowledge: every sample taught)
"""
import functools
import math

import torch
import torch.nn.functional as F

from losses import kl_divergence
from mutual import all_knowledge
from registry import Mode, knob, positive


def kdcl_loss(logits_a, logits_b, labels, T=2.0, lam=1.0):
    """KDCL (Guo et al. 2020), MinLogit ensemble teacher, for Table 4.

    Each student i minimises CE(z_i, y) + lam * T^2 * KL(p_t || softmax(z_i / T)).
    MinLogit teacher: z_t[c] = min_i (z_i[c] - z_i[y]), the per-class minimum of the
    students' logits after each is shifted so its given-label logit is 0;
    p_t = softmax(z_t / T) is a constant. We use MinLogit because it needs no
    held-out data (the Linear variant does) and T = 2, lam = 1 as defaults; no public
    KDCL code was found to compare with.
    logits_*: (N, K); labels: (N,) int64. Returns (loss_a, loss_b).
    """
    return tuple(kdcl_cohort_loss([logits_a, logits_b], labels, T, lam))


def kdcl_cohort_loss(logits, labels, T=2.0, lam=1.0):
    """KDCL for M >= 2 students (KDCL trains any number): the MinLogit teacher takes the minimum over all.

    logits: list of M (N, K). Returns a list of M scalars. M = 2 is kdcl_loss.
    """
    zs = [z.float() for z in logits]
    with torch.no_grad():
        y = labels[:, None]
        z_t = functools.reduce(torch.minimum, [z - z.gather(1, y) for z in zs])  # (N, K)
        logp_t = F.log_softmax(z_t / T, dim=-1)
    losses = []
    for z in zs:
        kl = kl_divergence(logp_t, F.log_softmax(z / T, dim=-1)).mean()  # logp_t: no gradient
        losses.append(F.cross_entropy(z, labels) + lam * T * T * kl)
    return losses



def objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """Table 4's KDCL-MinLogit: every model learns the ensemble teacher of all the cohort's logits, on the given
    labels (mutual.OBJECTIVES' signature; chi, r, clock, draws and rows unused)."""
    c = method.comparators
    return all_knowledge(z, kdcl_cohort_loss(z, y, c.kdcl_t, c.kdcl_lambda))


MODES = {"kdcl": Mode("KDCL", objective, settings=dict(
    kdcl_t=knob(2.0, "kdcl: temperature T", (positive, "a positive temperature")),
    kdcl_lambda=knob(1.0, "kdcl: weight λ of the KL term", (math.isfinite, "a finite number"))))}
