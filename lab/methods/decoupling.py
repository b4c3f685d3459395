"""Decoupling (Malach and Shalev-Shwartz 2017, "when to update" from "how to update"): both networks update on the
samples they disagree on, and only on those, --mode decoupling.

decoupling -- the pair's CE on their disagreements
objective  -- decoupling as a mode's objective
"""
from lab.methods.coteaching import _per_sample, pair, pair_objective
from registry import Mode


def decoupling(logits_a, logits_b, labels):
    """Decoupling (Malach and Shalev-Shwartz 2017, "when to update" from "how to update"): both networks update on
    the samples they disagree on, and only on those.

      D = {i : argmax p_A(x_i) != argmax p_B(x_i)}
      L_A = mean_{i in D} CE(p_A(x_i), y_i),  L_B = mean_{i in D} CE(p_B(x_i), y_i)
    logits_*: (N, K) with gradient; labels: (N,) int64. taught[(0, 1)] and taught[(1, 0)] are both D. As the
    public PyTorch form (songheony/TAkS, methods/decouple.py: the criterion's mean over D), with D a 0/1 mask
    multiplied in, so nothing waits for the device.
    Departure, declared: where D is empty that code gives no loss and its loop skips the update; here both losses
    are 0, so each model's SGD step is its momentum and weight decay alone.
    """
    _, ce_a = _per_sample(logits_a, labels)
    _, ce_b = _per_sample(logits_b, labels)
    d = (logits_a.detach().argmax(-1) != logits_b.detach().argmax(-1)).float()  # (N,) D
    n = d.sum().clamp_min(1)  # |D|, on the device; an empty D gives zero losses
    return ((d * ce_a).sum() / n, (d * ce_b).sum() / n), {(0, 1): d, (1, 0): d}


def decoupling_objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """Decoupling as a training objective: coteaching_objective's arguments and result."""
    return pair_objective(z, y, *decoupling(*pair(method, z), y))



MODES = {"decoupling": Mode("Decoupling", decoupling_objective, pair=True)}
