"""APL (Ma et al. 2020, the paper's Table 3): each network trained alone by α NCE + β RCE, the active-passive pair of
their CIFAR runs, --mode apl.

apl_loss  -- α NCE + β RCE
objective -- each network by apl_loss (lab/alone.py)
"""
import math

import torch
import torch.nn.functional as F

from lab.alone import alone
from registry import Mode, knob

RCE_LOG_ZERO = math.log(1e-4)  # A, RCE's log 0: the authors' code clamps the one-hot label at 1e-4 (the SCE paper: −4)



def apl_loss(logits, labels, alpha=10.0, beta=0.1, logp=None):
    """APL with NCE and RCE (Ma et al. 2020: their normalised CE, the reverse CE of Wang et al. 2019's SCE, and
    APL = α L_active + β L_passive):

      NCE = −log p_y / (−Σ_k log p_k)           the CE normalised over every label (the denominator carries gradient)
      RCE = −Σ_k p_k log q_k,  log 0 := A       the reverse CE; q the one-hot label: RCE = −A Σ_{k≠y} p_k
      L   = mean_n [α NCE + β RCE]

    α = 10, β = 0.1: the authors' CIFAR-100 configuration (configs/cifar100/sym/nce+rce.yaml); NCE+RCE is the pair
    their paper recommends. A = ln 1e-4 = −9.21 and p clamped to [1e-7, 1] as in their code (the SCE paper's A is
    −4). Their gradient-norm clipping at 5 is a training setting, not the loss: not applied here.
    logits: (N, K) with gradient; labels: (N,) int64 given labels. Returns a scalar.
    """
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    nce = logp.gather(1, labels[:, None])[:, 0] / logp.sum(-1)  # (N,) (−log p_y) / (−Σ log p_k)
    p = logp.exp().clamp(min=1e-7, max=1.0)
    log_q = torch.full_like(p, RCE_LOG_ZERO).scatter(1, labels[:, None], 0.0)  # (N, K) log of the clamped one-hot
    rce = -(p * log_q).sum(-1)  # (N,)
    return (alpha * nce + beta * rce).mean()



def objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """APL for each network alone (mutual.OBJECTIVES' signature; chi, r, draws and rows unused)."""
    c = method.comparators
    return alone(z, y, lambda k, logits, logp, q: apl_loss(logits, y, c.apl_alpha, c.apl_beta, logp=logp))


MODES = {"apl": Mode("APL (NCE+RCE)", objective, settings=dict(
    apl_alpha=knob(10.0, "APL: α of its active loss, NCE (--mode apl; the authors' CIFAR-100 value)",
                   (lambda v: 0 <= v < math.inf, "at least 0")),
    apl_beta=knob(0.1, "APL: β of its passive loss, RCE (--mode apl; the authors' CIFAR-100 value)",
                  (lambda v: 0 <= v < math.inf, "at least 0"))))}
