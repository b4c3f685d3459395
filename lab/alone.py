"""The form every single-network method of the comparison shares: the networks of a run each trained alone by the
method's own loss, nothing taught, as --mode zero trains each by a paper correction (mutual.cmd_objective at χ = 0).

alone     -- the losses.Objective of M networks, each trained by its own loss on the given labels (or its rows)
warm      -- whether a step is in the run's warm-up of plain CE (--warmup), and so the rule a replayed step keys on
ce        -- the plain CE of a warm-up, as a paper correction's L_selfKD computes it (H(q, p) with q one-hot)
check_warmup -- what a warm-up must leave of the run
noise_of  -- (kind, rate) of a run's synthetic noise, which Forward's true T and CDR's default τ read
WARMUP    -- the --warmup setting of the methods that start with plain CE
"""
import torch

from label_correction import one_hot
from losses import Objective, log_probs, soft_cross_entropy
from registry import knob

WARMUP = dict(warmup=knob(0, "epochs of plain CE (the given labels) before the mode's own loss applies (dmi, "
                             "forward-anchor, trevision)", (lambda v: v >= 0, "at least 0")))


def alone(z, y, loss, rows=None):
    """The Objective of M networks each trained alone: losses[k] = loss(k, z[k], logp_k, q_k), q_k the given label as
    a one-hot row (N, K), or model k's row of rows (M, N, K) where the method relabels its samples; q~ is q_k, what a
    model teaches nobody here; every taught mask is 0. z: M x (N, K) logits; y: (N,) given labels.

    What --mode zero computes for a correction's own loss, to the bit: there each model's loss is its own plus its
    distillation term, which at χ = 0 is a zero that adds nothing to its value or gradient."""
    m, k = len(z), z[0].shape[-1]
    logp, h = zip(*(log_probs(z_k) for z_k in z))  # M x (N, K) float32 log p with gradient, M x (N,) H(p) without
    q = list(rows.unbind(0)) if rows is not None else [one_hot(y, k)] * m
    nothing = torch.zeros_like(h[0])
    return Objective([loss(j, z[j], logp[j], q[j]) for j in range(m)],
                     {(a, b): nothing for a in range(m) for b in range(m) if a != b}, q, list(h))


def warm(method, clock):
    """Whether clock is in the run's warm-up: its first --warmup epochs train by plain CE (ce)."""
    return clock.epoch < method.comparators.warmup


def ce(q, logp):
    """The plain CE of a warm-up, mean_n H(q_n, p_n): what a paper correction's L_selfKD is for CE."""
    return soft_cross_entropy(q, logp).mean()


def check_warmup(args):
    """A warm-up that fills the run leaves the method nothing to train: its line, or None."""
    if args.warmup >= args.epochs:
        return (f"--warmup {args.warmup} fills the run's --epochs {args.epochs}: --mode {args.mode} would never train; "
                f"give --warmup below --epochs")
    return None


def noise_of(m, mode):
    """(kind, rate) of a run's synthetic noise (mutual.Method.noise), which Forward's true T and CDR's default τ
    read; ValueError where the method does not know it."""
    if m.noise is None:
        raise ValueError(f"--mode {mode} reads the noise's kind and rate: give Method(noise=(kind, rate)), as train.py "
                         f"does for --noise sym/pair")
    return m.noise
