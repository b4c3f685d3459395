"""Synthetic label noise (paper §4.1, "Label noise generation").

NOISE             -- the registry: train.py's --noise names, each a NoiseKind (its transition matrix, or its rows
                     per sample, the rates it takes, the name plots show); everything that lists the kinds reads it
max_rate, check_rate -- the rates a kind takes with K classes: below (K - 1)/K, and its own bound (pair: 0.5)
transition_matrix -- T[c, c'] = P(noisy label c' | clean label c) for a kind of NOISE that has a matrix
instance_rows     -- idn: Xia et al. 2020's instance-dependent noise, each sample's row P(ỹ | x, y) from its image
add_noise         -- draw each sample's noisy label from its row of T (or its own row), reproducibly; or flip exactly
                     r of each class (exact=True: exactly_flipped)

Symmetric noise changes a label "uniformly to one of the other classes with a
probability of noise rate r": a flipped label is always a different class, so the
realised noise rate is r, not r (K - 1)/K as in code that draws from all K
classes. Pair-flip noise moves a label to its adjacent class
c + 1 mod K (Han et al. 2018, Co-teaching).

Instance-dependent noise (idn) flips a sample more or less likely, and to a class that depends on its image: the
same labels with other images give other flips.

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


def instance_rows(images, labels, rate, k, rng, std=0.1):
    """idn: the instance-dependent noise of Xia et al. 2020 (NeurIPS, "Part-dependent label noise"), as their public
    code draws it (tools.py, get_instance_noisy_label; the form CDR's experiments use):

      q_n ~ N(r, std²) truncated to [0, 1]      each sample's flip rate, std = 0.1 (their norm_std): truncated_normal
      W_c ~ N(0, 1)^(D x K)                      one projection per clean class
      a_n = x_n W_{y_n}, a_n[y_n] = −inf         x_n the image's stored pixels as floats, 0..255, flattened
      P(ỹ | x_n, y_n) = q_n softmax(a_n), + 1 − q_n on y_n

    so a sample keeps its label with probability 1 − q_n, and a flip goes where its own image points; the realised
    rate is about r (a little above it for small r, by the truncation at 0). Their dataset_split passes the stored
    uint8 images as torch.from_numpy(train_images).float(), 0..255, not divided by 255: so here. At that scale a_n's
    spread is the image's norm, thousands, and the softmax is one-hot: each sample's flip goes to the one class its
    image points to most (at [0, 1] it would still spread a little: docs/training.md). images: uint8 (N, C, H, W) (numpy or
    tensor); labels: (N,) int64 clean; rng: a numpy Generator, from which q, then W are drawn (their code draws from
    numpy's global state, q through scipy.stats.truncnorm; here the run's seed, and numpy alone). Returns (N, K)
    float64 rows summing to 1 (flip_rows).
    """
    x = np.asarray(images.numpy() if hasattr(images, "numpy") else images).reshape(len(labels), -1)
    q = truncated_normal(rng, rate, std, len(labels))
    w = rng.standard_normal((k, x.shape[1], k), dtype=np.float32)
    return flip_rows(x, labels, q, w)


def truncated_normal(rng, mean, std, n, low=0.0, high=1.0):
    """n draws of N(mean, std²) truncated to [low, high]: each drawn again from rng until it falls inside. The
    distribution of scipy.stats.truncnorm, which their code draws from, with numpy alone."""
    q = rng.normal(mean, std, n)
    out = (q < low) | (q > high)
    while out.any():
        q[out] = rng.normal(mean, std, int(out.sum()))
        out = (q < low) | (q > high)
    return q


def flip_rows(x, labels, q, w):
    """instance_rows' rows from its draws: x (N, D) uint8 images, flattened; labels (N,); q (N,) the flip rates; w
    (K, D, K) the projections. Row n: q_n softmax(x_n W_{y_n}) over the other classes, 1 − q_n on y_n, x_n the stored
    pixels 0..255 as float32 (their code's scale)."""
    k = w.shape[-1]
    a = np.empty((len(labels), k), dtype=np.float64)
    for c in np.unique(labels):  # one product per clean class: (n_c, D) (D, K)
        at = labels == c
        a[at] = x[at].astype(np.float32) @ w[c]
    n = np.arange(len(labels))
    a[n, labels] = -np.inf
    p = np.exp(a - a.max(1, keepdims=True))
    rows = q[:, None] * p / p.sum(1, keepdims=True)
    rows[n, labels] += 1 - q
    return rows


class NoiseKind(NamedTuple):
    """One kind of label noise, as train.py's --noise names it.

    title      -- its name in plots and tables ("symmetric noise")
    matrix     -- (rate, K) -> the K x K transition matrix at a rate max_rate() takes; None: the labels come from
                  files, not from a matrix (human: CIFAR-N, training/cifar_n.py)
    takes_rate -- the rate is the user's (--rate, default 0.4), not fixed (none) or the files' (human)
    max_rate   -- the rates it takes are [0, max_rate), and below (K - 1)/K (max_rate()); why_max says why, where
                  max_rate < 1
    min_classes -- the fewest classes K its matrix is defined for (a flipped label needs another class)
    rows       -- (images (N, C, H, W) uint8, labels (N,), rate, K, rng) -> (N, K): each sample's own row of
                  P(noisy label | its image, clean label), for a kind that depends on the sample (matrix None);
                  rng a numpy Generator of the run's seed. None: the kind is a matrix, or files
    """
    title: str
    matrix: Callable | None
    takes_rate: bool = True
    max_rate: float = 1.0
    why_max: str = ""
    min_classes: int = 2
    rows: Callable | None = None


NOISE = {
    "none": NoiseKind("no", lambda rate, k: np.eye(k), takes_rate=False, min_classes=1),
    "sym": NoiseKind("symmetric", symmetric),
    "pair": NoiseKind("pair-flip", pair_flip, max_rate=0.5, why_max="at 0.5 or more the flipped class is the majority "
                      "label of its class, so nothing tells the true one apart"),
    "idn": NoiseKind("instance-dependent", None, rows=instance_rows),
    "human": NoiseKind("human", None, takes_rate=False),
}
def max_rate(kind, num_classes):
    """The rates NOISE[kind] takes with K classes are [0, max_rate): its own bound (NoiseKind.max_rate: pair's 0.5),
    and for every kind (K - 1)/K, where a flipped label is as likely as the true one to be any given class, so that
    the given labels no longer tell the true class apart (symmetric noise there is uniform; above it, each wrong
    class is likelier than the true one)."""
    return min(NOISE[kind].max_rate, (num_classes - 1) / num_classes) if num_classes > 1 else NOISE[kind].max_rate


def check_rate(kind, rate, num_classes):
    """ValueError, one line, where rate is not one NOISE[kind] takes with K classes (max_rate)."""
    if not 0 <= rate < 1:
        raise ValueError(f"noise rate must be in [0, 1), got {rate}")
    bound = max_rate(kind, num_classes)
    if rate >= bound and kind != "none":
        why = NOISE[kind].why_max if bound == NOISE[kind].max_rate else (
            f"at (K - 1)/K = {bound:g} or more the true class is no likelier than any other to be the given label, "
            f"so the labels no longer tell it apart")
        raise ValueError(f"{why}; use a rate below {bound:g}")


def transition_matrix(kind, rate, num_classes):
    """The K x K noise transition matrix of NOISE[kind]; every row sums to 1. none, or r = 0: the identity.
    Raises ValueError for a kind without a matrix, a rate it does not take with K classes (check_rate), or fewer
    classes than its min_classes.
    """
    if kind not in NOISE or NOISE[kind].matrix is None:
        drawn = [k for k, n in NOISE.items() if n.matrix is not None]
        what = "has no transition matrix: each sample has its own row" if kind in NOISE and NOISE[kind].rows else \
            "is unknown"
        raise ValueError(f"noise kind '{kind}' {what}; the kinds with a matrix: {', '.join(drawn)}")
    k = num_classes
    if kind == "none" or rate == 0:
        check_rate(kind, rate, k)
        return np.eye(k)
    if k < NOISE[kind].min_classes:
        raise ValueError(f"{kind} noise needs at least {NOISE[kind].min_classes} classes, got {k}")
    check_rate(kind, rate, k)
    return NOISE[kind].matrix(rate, k)


def add_noise(labels, kind, rate, num_classes, seed, inputs=None, exact=False):
    """Noisy labels: label n is drawn from row labels[n] of transition_matrix(kind, rate, K), or, for a kind that
    depends on the sample (NoiseKind.rows), from its own row, made from inputs[n]. Each sample on its own: a
    class's realised rate varies around r (train.py's way, and the paper's code's).

    labels: (N,) integer array-like of clean labels in [0, K). seed: int for
    numpy.random.default_rng, whose PCG64 stream is the same on every machine. inputs: the N images, uint8
    (N, C, H, W), for a kind with rows. exact: flip exactly round((1 - T[c, c]) n_c) of the n_c samples of each
    class c instead (r of each class, for sym and pair), chosen at random, each to a class drawn from its row's
    other entries (exactly_flipped). Returns a new (N,) int64 numpy array; the input is never changed.
    """
    y = np.array(labels, dtype=np.int64)  # a copy
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got [{y.min()}, {y.max()}]")
    x = NOISE.get(kind)
    if exact:
        if x is not None and x.rows is not None:
            raise ValueError(f"{kind} noise flips each sample at its own rate: there is no exact count per class")
        return exactly_flipped(y, transition_matrix(kind, rate, num_classes), seed)
    if x is not None and x.rows is not None:
        if not 0 <= rate < 1 or num_classes < x.min_classes:
            raise ValueError(f"{kind} noise takes a rate in [0, 1) and at least {x.min_classes} classes")
        check_rate(kind, rate, num_classes)
        if inputs is None or len(inputs) != len(y):
            raise ValueError(f"{kind} noise draws each label from its sample's input: give the {len(y)} inputs")
        if rate == 0:
            return y
        rng = np.random.default_rng(seed)
        cdf = np.cumsum(x.rows(inputs, y, rate, num_classes, rng), axis=1)  # (N, K) each sample's own row
        u = rng.random(len(y))  # then one uniform draw per sample
    else:
        t = transition_matrix(kind, rate, num_classes)
        if kind == "none" or rate == 0:
            return y
        u = np.random.default_rng(seed).random(len(y))  # one uniform draw per sample
        cdf = np.cumsum(t, axis=1)[y]  # (N, K)
    noisy = (u[:, None] >= cdf).sum(axis=1)  # the first class whose cdf exceeds u
    return np.minimum(noisy, num_classes - 1).astype(np.int64)  # guard cdf[-1] < 1 by rounding


def exactly_flipped(y, t, seed):
    """add_noise(..., exact=True): of the n_c samples of each class c, exactly round((1 - T[c, c]) n_c), drawn at
    random, take a class drawn from T[c]'s other entries (renormalised); the others keep their label."""
    rng = np.random.default_rng(seed)
    noisy = y.copy()
    for c in range(len(t)):
        at = np.flatnonzero(y == c)
        flips = int(round((1 - t[c, c]) * len(at)))
        if flips == 0:
            continue
        off = np.array(t[c], dtype=np.float64)
        off[c] = 0
        noisy[rng.choice(at, flips, replace=False)] = rng.choice(len(t), flips, p=off / off.sum())
    return noisy
