"""The knowledge-selection threshold chi (paper §3.2, Eq. 7).

logistic -- s(x, b) = 1 / (1 + exp(-x*b)), the paper's logistic function
chi      -- Eq. 7: chi = H(u)/eta * 2*s(t/Gamma - 0.5, b)

Beyond the paper, how to choose eta (docs/copy.md, "Choosing η"):
noise_entropy -- H_nu, the mean entropy of the rows of the noise's transition matrix at rate nu: sym, pair, idn
                 (ENTROPY), or row_entropy of any T
eta_bound     -- the eta below which chi starts above H_nu
eta_start     -- the eta the copy guide starts with: chi starts a third above H_nu

These functions are pure: the caller passes t (in epochs from 0, fractional allowed),
Gamma, eta and b (chi's default eta and b are train.py's CMD-P). Python floats in,
Python float out, so computing chi inside a training step never touches the GPU.
"""
import math

import torch


def logistic(x, b):
    """s(x, b) = 1 / (1 + exp(-x*b)), used by Eq. 7, ProSelfLC and MyLC (Eq. 8).

    x: float or tensor. b: float (the slope; b = 0 gives 0.5 everywhere).
    Floats return a float, computed without overflow for any x*b.
    Tensors return torch.sigmoid(x*b), which carries gradient if x does.
    """
    if isinstance(x, torch.Tensor):
        return torch.sigmoid(x * b)
    z = x * b
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)  # exp(-z) would overflow for very negative z
    return e / (1.0 + e)


def chi(t, total, num_classes, eta=4.0, b=-5.0):
    """Eq. 7: chi = H(u)/eta * 2*s(t/Gamma - 0.5, b), with H(u) = ln K.

    The typeset Eq. 7 lost its 0.5 ("2s(t/Gamma - , b)"); the CMD-S paragraph,
    2s(t/Gamma - 0.5, 0) = 1, shows the intended form.

    t:     training progress in epochs, from 0; may be fractional (iteration / iters per epoch).
    total: Gamma, the total number of epochs.
    eta:   scales the starting point. b: the slope in time.
      The defaults are train.py's CMD-P (mutual.THRESHOLDS), the project's choice: the
      paper gives neither for Tables 1-4. eta = 4 is the best row of its Table 5; b < 0
      as its Fig. 3 prefers (accuracy rises as b falls), -5 taking chi from 1.85x to
      0.15x of ln K/eta over training.
      b = 0            -> static chi = ln K / eta at every t (CMD-S)
      b > 0 / b < 0    -> chi rises / falls with t (CMD-P)
      0 < eta <= 1     -> chi >= ln K at b = 0: all knowledge (conventional MKD)
      eta = inf or < 0 -> chi <= 0: zero knowledge (entropies are >= 0)
      eta = 0          -> undefined; raises ValueError
    Returns a Python float.
    """
    if eta == 0:
        raise ValueError("eta = 0 makes chi = H(u)/eta undefined; use eta = inf "
                         "(or any eta < 0) for zero knowledge, 0 < eta <= 1 for all knowledge")
    if total <= 0:
        raise ValueError(f"total epochs must be positive, got {total}")
    if math.isinf(eta):
        return 0.0  # H(u)/inf; avoids inf*0 when 2s(...) underflows
    return math.log(num_classes) / eta * 2.0 * logistic(t / total - 0.5, b)


# ---------------------------------------------------------------- choosing eta (beyond the paper: docs/copy.md)

def binary_entropy(q):
    """-(1 - q) ln(1 - q) - q ln q (0 ln 0 = 0): a row that keeps the label with 1 - q and puts q on one other class."""
    return -sum(v * math.log(v) for v in (q, 1 - q) if v > 0)


def symmetric_entropy(rate, num_classes):
    """Symmetric noise's rows: 1 - nu on the label, nu / (K - 1) on each other class."""
    return binary_entropy(rate) + rate * math.log(num_classes - 1)


def pair_entropy(rate, num_classes):
    """Pair noise's rows: 1 - nu on the label, nu on the next class, whatever K."""
    return binary_entropy(rate)


IDN_STD = 0.1  # the spread of idn's per-sample flip rates (noise.py:instance_rows' std, Xia et al.'s norm_std)


def idn_entropy(rate, num_classes):
    """idn's rows (noise.py:instance_rows): a sample's flip rate q ~ N(nu, IDN_STD^2) truncated to [0, 1], all of it on
    the one class its image points to (the softmax is one-hot at the stored pixels' scale), so a row's entropy is
    binary_entropy(q); its mean over q, by quadrature on 20,001 points."""
    qs = [i / 20000 for i in range(20001)]
    w = [math.exp(-0.5 * ((q - rate) / IDN_STD) ** 2) for q in qs]
    return sum(wi * binary_entropy(q) for wi, q in zip(w, qs)) / sum(w)


def row_entropy(t):
    """The mean entropy of the rows of any transition matrix T (K x K, rows P(given label | clean class), a nested list
    or a tensor): H_nu of a noise this file has no formula for, e.g. human noise's T estimated from its labels."""
    t = torch.as_tensor(t, dtype=torch.float64)
    return float(-torch.special.xlogy(t, t).sum(1).mean())


ENTROPY = {"sym": symmetric_entropy, "pair": pair_entropy, "idn": idn_entropy}  # train.py's --noise kinds


def noise_entropy(rate, num_classes, kind="sym"):
    """H_nu: the mean entropy of the rows of the noise's transition matrix at rate nu, about what a network that has
    learned the noisy labels, and not memorised them, predicts with (docs/copy.md). sym: -(1 - nu) ln(1 - nu) - nu
    ln(nu / (K - 1)); pair: -(1 - nu) ln(1 - nu) - nu ln nu; idn: idn_entropy. Another kind: row_entropy of its T."""
    if kind not in ENTROPY:
        raise ValueError(f"no formula for {kind!r} noise here ({', '.join(ENTROPY)}): estimate its transition matrix T "
                         f"from the labels and take row_entropy(T)")
    return ENTROPY[kind](rate, num_classes)


def eta_bound(num_classes, rate, b, kind="sym"):
    """The eta below which chi of Eq. 7 starts above H_nu: chi(0) = 2 s(-0.5, b) ln K / eta > H_nu, 1.85 ln K / H_nu
    at CMD-P's b = -5 (2.7 at K = 10 and symmetric nu = 0.4, 6.3 at pair 0.4). Above it, CMD teaches little before the
    networks memorise."""
    return 2 * logistic(-0.5, b) * math.log(num_classes) / noise_entropy(rate, num_classes, kind)


def eta_start(num_classes, rate, b, kind="sym"):
    """The eta to start with: 3/4 of eta_bound, rounded down to a half, so that chi starts a third above H_nu (2 at K =
    10 and nu = 0.4, 2.5 at K = 100). Why a third: in the project's eta study the networks' mean entropy in epochs
    2-10 was 1.051-1.274 H_nu, and only a chi above it teaches in those epochs (eta = 2, chi(0) = 1.37 H_nu, taught
    0.69-0.83 of the samples an epoch; eta = 2.5, 1.10 H_nu, 0.09-0.32); its clean validation split chose eta = 2
    over 4. Measured at K = 10, nu = 0.4 and b = -5 alone (docs/copy.md): a start, to tune on clean validation
    data."""
    return math.floor(2 * 0.75 * eta_bound(num_classes, rate, b, kind)) / 2
