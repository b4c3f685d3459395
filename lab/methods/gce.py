"""GCE (Zhang and Sabuncu 2018, the paper's Table 3): each network trained alone by the L_q loss, --mode gce.

gce_loss  -- L_q = (1 - p_y^q)/q, the negative Box-Cox transform of p_y
objective -- each network by gce_loss (lab/alone.py)
"""
import torch
import torch.nn.functional as F

from lab.alone import alone
from registry import Mode, knob


def gce_loss(logits, labels, gce_q=0.7, logp=None):
    """GCE (Zhang and Sabuncu 2018): mean_n L_q, L_q = (1 - p_y^q) / q, the negative Box-Cox transform of p_y.

    q = gce_q in (0, 1] (default 0.7, the value of the GCE paper's experiments), not the label q of the rest
    of this file. q -> 0 is CE, -log p_y; q = 1 is MAE up to a factor, 1 - p_y = |e_y - p|_1 / 2. Plain L_q,
    not the truncated variant. p_y^q is computed as exp(q log p_y), and 1 - exp(.) as -expm1(.), from float32
    log-probabilities: exact for small q, finite where p_y underflows. logits: (N, K) with gradient; labels:
    (N,) int64 given labels. logp: optional log_softmax(logits) in float32 that the caller already has
    (losses.log_probs). Returns a scalar. Models trained with GCE distil q to their peer (see the module docstring).
    """
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    logp_y = logp.gather(1, labels[:, None])[:, 0]  # (N,) log p_y
    return (-torch.expm1(gce_q * logp_y) / gce_q).mean()



def objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """GCE for each network alone at q = --gce-q (mutual.OBJECTIVES' signature; chi, r, draws and rows unused)."""
    return alone(z, y, lambda k, logits, logp, q: gce_loss(logits, y, method.comparators.gce_q, logp=logp))


MODES = {"gce": Mode("GCE", objective, settings=dict(
    gce_q=knob(0.7, "GCE q in L_q = (1 - p_y^q)/q (q -> 0: CE, q = 1: MAE); --mode gce", (lambda v: 0 < v <= 1,
                                                                                            "in (0, 1]"))))}
