"""ELR (Liu et al. 2020, early-learning regularisation): each network trained alone by CE plus a term that pulls its
predictions toward the running mean of its own earlier ones, --mode elr.

elr_target -- each sample's running target t <- β t + (1 - β) p, renewed at the start of every epoch (ELR_TARGET)
elr_loss   -- CE + λ log(1 - <t, p>)
objective  -- each network by elr_loss with its samples' targets, the batch's rows (lab/alone.py)
"""
import math

import torch.nn.functional as F

from lab.alone import alone
from lab.stages import Stage, Stages
from registry import Mode, knob


def elr_target(target, probs, beta=0.7):
    """ELR's running target of one model (Liu et al. 2020, "temporal ensembling"): t <- beta t + (1 - beta) p^, p^ the
    model's predicted probabilities clamped to [1e-4, 1 - 1e-4] and renormalised, as their code (elr_loss's target
    update). target: (n, K) or None before the first (their zeros); probs: (n, K). Returns (n, K) float32.

    Their code updates each sample's row in the step that trains it, from that step's training-mode outputs; here
    every row is updated at the start of each epoch, from the model's predictions then (eval mode, no augmentation:
    a Stage, training/stages.py). The two differ by how far the model moves within an epoch."""
    p = probs.float().clamp(1e-4, 1.0 - 1e-4)
    p = p / p.sum(1, keepdim=True)
    return (1 - beta) * p if target is None else beta * target + (1 - beta) * p


def elr_loss(logits, labels, target, lam=3.0, logp=None):
    """ELR (Liu et al. 2020): CE(p, y) + lam mean_n log(1 - <t_n, p_n>), p clamped to [1e-4, 1 - 1e-4] as their code,
    t the sample's running target (elr_target), a constant. The regulariser's gradient pulls p toward t, the
    model's own early predictions, so that it does not fit a noisy label it had not learned early.
    logits: (N, K) with gradient; labels: (N,) int64; target: (N, K). Returns a scalar."""
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    p = logp.exp().clamp(1e-4, 1.0 - 1e-4)
    reg = (1 - (target.detach() * p).sum(1)).log().mean()
    return F.nll_loss(logp, labels) + lam * reg



def objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """ELR for each network alone, its samples' running targets the batch's rows (ELR_TARGET) (mutual.OBJECTIVES')."""
    lam = method.comparators.elr_lambda
    return alone(z, y, lambda k, logits, logp, q: elr_loss(logits, y, rows[k], lam, logp=logp))


ELR_TARGET = Stage(  # ELR's running target of each sample, renewed at the start of every epoch
    "target", start=lambda m, epochs: 0, every=True, rows=lambda target: target,
    update=lambda target, probs, m: elr_target(target, probs, m.comparators.elr_beta),
    line=lambda m, epoch, n, states: f"from epoch {epoch + 1}, ELR's target of each sample is the running mean of its "
                                     f"model's predictions, t <- {m.comparators.elr_beta:g} t + "
                                     f"{1 - m.comparators.elr_beta:g} p, renewed every epoch")
STAGES = Stages(ELR_TARGET)
MODES = {"elr": Mode("ELR", objective, between=STAGES, check=STAGES.check, unbatched="each run keeps its own targets",
                     settings=dict(
    elr_beta=knob(0.7, "ELR: β of the running target t <- β t + (1 - β) p (--mode elr; their CIFAR-10 config)",
                  (lambda v: 0 <= v < 1, "in [0, 1)")),
    elr_lambda=knob(3.0, "ELR: λ of its regulariser λ log(1 - <t, p>) (--mode elr; their CIFAR-10 config)",
                    (lambda v: 0 <= v < math.inf, "at least 0"))))}
