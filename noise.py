"""Synthetic label noise (paper §4.1, "Label noise generation").

NOISE             -- the registry: train.py's --noise names, each a NoiseKind (its transition matrix, the rates
                     it takes, the name plots show); everything that lists the kinds reads it
transition_matrix -- T[c, c'] = P(noisy label c' | clean label c) for a kind of NOISE that has a matrix
add_noise         -- draw each sample's noisy label from its row of T, reproducibly

Symmetric noise changes a label "uniformly to one of the other classes with a
probability of noise rate r": a flipped label is always a different class, so the
realised noise rate is r, not r (K - 1)/K as in code that draws from all K
classes. Pair-flip noise moves a label to its adjacent class
c + 1 mod K (Han et al. 2018, Co-teaching).

Human noise (CIFAR-N's labels) is read from files, not generated: training/cifar_n.py.
"""
from typing import Callable, NamedTuple

import numpy as np


def symmetric(rate, k):
    """sym: 1 - r on the diagonal, r/(K - 1) everywhere else: a flipped label is any other class."""
    t = np.full((k, k), rate / (k - 1))
    np.fill_diagonal(t, 1 - rate)
    return t


def pair_flip(rate, k):
    """pair: 1 - r on the diagonal, r at (c, (c + 1) mod K)."""
    t = (1 - rate) * np.eye(k)
    t[np.arange(k), (np.arange(k) + 1) % k] += rate  # += keeps K = 2 right: (c+1) mod 2 is the other class
    return t


class NoiseKind(NamedTuple):
    """One kind of label noise, as train.py's --noise names it.

    title      -- its name in plots and tables ("symmetric noise")
    matrix     -- (rate, K) -> the K x K transition matrix at a rate in (0, max_rate); None: the labels come from
                  files, not from a matrix (human: CIFAR-N, training/cifar_n.py)
    takes_rate -- the rate is the user's (--rate, default 0.4), not fixed (none) or the files' (human)
    max_rate   -- the rates it takes are [0, max_rate); why_max says why, where max_rate < 1
    min_classes -- the fewest classes K its matrix is defined for (a flipped label needs another class)
    """
    title: str
    matrix: Callable | None
    takes_rate: bool = True
    max_rate: float = 1.0
    why_max: str = ""
    min_classes: int = 2


NOISE = {
    "none": NoiseKind("no", lambda rate, k: np.eye(k), takes_rate=False, min_classes=1),
    "sym": NoiseKind("symmetric", symmetric),
    "pair": NoiseKind("pair-flip", pair_flip, max_rate=0.5, why_max="at 0.5 or more the flipped class is the majority "
                      "label of its class, so nothing tells the true one apart"),
    "human": NoiseKind("human", None, takes_rate=False),
}
def transition_matrix(kind, rate, num_classes):
    """The K x K noise transition matrix of NOISE[kind]; every row sums to 1. none, or r = 0: the identity.
    Raises ValueError for a kind without a matrix, r outside [0, 1), or fewer classes than its min_classes.
    """
    if kind not in NOISE or NOISE[kind].matrix is None:
        drawn = [k for k, n in NOISE.items() if n.matrix is not None]
        raise ValueError(f"unknown noise kind '{kind}'; choose from {', '.join(drawn)}")
    if not 0 <= rate < 1:
        raise ValueError(f"noise rate must be in [0, 1), got {rate}")
    k = num_classes
    if kind == "none" or rate == 0:
        return np.eye(k)
    if k < NOISE[kind].min_classes:
        raise ValueError(f"{kind} noise needs at least {NOISE[kind].min_classes} classes, got {k}")
    return NOISE[kind].matrix(rate, k)


def add_noise(labels, kind, rate, num_classes, seed):
    """Noisy labels: label n is drawn from row labels[n] of transition_matrix(kind, rate, K).

    labels: (N,) integer array-like of clean labels in [0, K). seed: int for
    numpy.random.default_rng, whose PCG64 stream is the same on every machine.
    Returns a new (N,) int64 numpy array; the input is never changed.
    """
    y = np.array(labels, dtype=np.int64)  # a copy
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got [{y.min()}, {y.max()}]")
    t = transition_matrix(kind, rate, num_classes)
    if kind == "none" or rate == 0:
        return y
    u = np.random.default_rng(seed).random(len(y))  # one uniform draw per sample
    cdf = np.cumsum(t, axis=1)[y]  # (N, K)
    noisy = (u[:, None] >= cdf).sum(axis=1)  # the first class whose cdf exceeds u
    return np.minimum(noisy, num_classes - 1).astype(np.int64)  # guard cdf[-1] < 1 by rounding
