"""DMI (Xu et al. 2019, the paper's Table 3): each network trained alone by L_DMI after a warm-up of plain CE, --mode dmi.

dmi_loss  -- −log(|det(Yᵀ P)| + 0.001), the determinant-based mutual information of the batch
objective -- each network by CE in the warm-up (--warmup), then by dmi_loss (lab/alone.py)
"""
import torch
import torch.nn.functional as F

from lab.alone import WARMUP, alone, ce, check_warmup, warm
from registry import Mode


def dmi_loss(logits, labels, logp=None):
    """L_DMI (Xu et al. 2019: L_DMI = −log |det(U)|, U the empirical joint distribution of prediction and label
    over the batch), as the authors' code computes it:

      M = Yᵀ P (K, K),  M[i, j] = Σ_n [ỹ_n = i] p_n(j)       = N Uᵀ, not divided by N
      L = −log(|det M| + 0.001)

    The 0.001 inside the log is theirs: it keeps a singular M (a class absent from the batch) finite, at
    −ln 0.001 = 6.91, with a gradient near 0. |det| is the same for M and U up to the factor N^K, a constant. The
    authors ran K = 10 with batches of 256; at K = 100 a batch of 128 misses a class most of the time, and the
    determinant of a 100 x 100 matrix of sums underflows or overflows in float32: docs/training.md says what that
    means for Table 3's CIFAR-100 row. They train with CE first and then with L_DMI at a small lr (Method.warmup).
    logits: (N, K) with gradient; labels: (N,) int64. Returns a scalar, for the batch (not a mean over samples).
    """
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    m = F.one_hot(labels, logp.shape[-1]).float().T @ logp.exp()  # (K, K)
    return -torch.log(torch.linalg.det(m).abs() + 0.001)



def objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """DMI for each network alone, after --warmup epochs of CE (mutual.OBJECTIVES' signature)."""
    on = not warm(method, clock)
    return alone(z, y, lambda k, logits, logp, q: dmi_loss(logits, y, logp=logp) if on else ce(q, logp))


MODES = {"dmi": Mode("DMI", objective, settings=WARMUP, rule=warm, check=lambda a, m: check_warmup(a))}
