"""CDR (Xia et al. 2021, the paper's Table 3): each network trained alone by CE, its gradients kept on its critical
parameters alone before each step, --mode cdr.

cdr_mask_ -- the rule on one model's gradients: the `keep` fraction with the largest |θ ⊙ ∂L/∂θ| keep theirs, scaled
optimiser -- SGD at the run's flags whose step applies the rule first (a step pre-hook), as their train_one_step
objective -- each network by plain CE (lab/alone.py)
"""
import torch

from lab.alone import alone, ce, noise_of
from registry import Mode, knob


@torch.no_grad()
def cdr_mask_(params, keep):
    """CDR (Xia et al. 2021, its algorithm), on one model's gradients after backward and before the optimiser's step:
    the critical parameters, the `keep` fraction with the largest |θ ⊙ ∂L/∂θ|, keep their gradient scaled by keep;
    the others lose it, so that their step is the weight decay alone (and SGD's momentum). keep = 1 − τ, τ the
    noise rate.

    As the authors' code (main.py, train_one_step): one threshold over every weight of dim 2 or 4 together, not
    per layer; biases and normalisation parameters keep their whole gradient; the critical gradients are multiplied
    by keep; a tie at the threshold counts as critical. params: the model's parameters. In place; nothing waits for
    the device.
    """
    weights = [p for p in params if p.grad is not None and p.dim() in (2, 4)]
    if not weights:
        return
    scores = [(p * p.grad).abs() for p in weights]
    flat = torch.cat([s.flatten() for s in scores])
    n_keep = max(1, int(keep * flat.numel()))
    threshold = flat.kthvalue(flat.numel() - n_keep + 1).values  # the n_keep-th largest: topk's last, by selection
    for p, s in zip(weights, scores):
        p.grad.mul_((s >= threshold).to(p.grad.dtype) * keep)



def keep_of(method):
    """1 − τ: the fraction of weights that keep their gradient, τ = --cdr-rate (by default the noise rate, as the
    authors' code sets it)."""
    rate = method.comparators.cdr_rate
    return 1 - (noise_of(method, "cdr")[1] if rate is None else rate)


def optimiser(params, args, method):
    """One model's SGD at the run's lr, momentum and weight decay, whose step first keeps the gradient of the model's
    critical parameters alone (cdr_mask_, a step pre-hook): CDR's rule between backward and the step, as their
    train_one_step, and what a resumed or replayed step runs alike."""
    params = list(params)
    opt = torch.optim.SGD(params, lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    keep = keep_of(method)
    opt.register_step_pre_hook(lambda o, a, kw: cdr_mask_(params, keep))
    return opt


def objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """Plain CE for each network alone: CDR's rule is its optimiser's (mutual.OBJECTIVES' signature)."""
    return alone(z, y, lambda k, logits, logp, q: ce(q, logp))


MODES = {"cdr": Mode("CDR", objective, optimiser=optimiser, unbatched="it acts on each model's gradients between "
                                                                     "backward and step", settings=dict(
    cdr_rate=knob(None, "CDR: τ, so that 1 - τ of the weights are critical (--mode cdr; default: --rate with a --noise "
                        "drawn at a rate, as the authors' code sets it; give it otherwise)",
                  (lambda v: 0 <= v < 1, "in [0, 1)"))))}
