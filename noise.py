"""Label noise: synthetic (paper §4.1, "Label noise generation") and human (CIFAR-N, beyond the paper).

transition_matrix -- T[c, c'] = P(noisy label c' | clean label c) for "sym", "pair", "none"
add_noise         -- draw each sample's noisy label from its row of T, reproducibly
HUMAN_FILES, CIFAR10N_KEYS -- the CIFAR-N label files and the label sets of CIFAR-10N
human_labels      -- the human labels of a CIFAR training set, read safely and checked against it
read_label_file   -- the dict in a CIFAR-N file, unpickled with only the numpy globals it needs

Symmetric noise changes a label "uniformly to one of the other classes with a
probability of noise rate r": a flipped label is always a different class, so the
realised noise rate is r, not r (K - 1)/K as in code that draws from all K
classes. Pair-flip noise moves a label to its adjacent class
c + 1 mod K (Han et al. 2018, Co-teaching).

Human noise is the re-annotation of the CIFAR training sets by Amazon Mechanical
Turk workers (Wei et al. 2022, "Learning with Noisy Labels Revisited: A Study
Using Real-World Human Annotations"): one file per dataset holds the clean and
the human labels of the 50 000 training images, in the order of the training set.
Its errors follow what people confuse, not a transition matrix.
"""
import os
import zipfile

import numpy as np

from datasets import CIFAR, DataError
from safe_pickle import Refused, load

NOISE_KINDS = ("none", "sym", "pair")


def transition_matrix(kind, rate, num_classes):
    """The K x K noise transition matrix; every row sums to 1.

    sym:  1 - r on the diagonal, r/(K - 1) everywhere else.
    pair: 1 - r on the diagonal, r at (c, (c + 1) mod K).
    none, or r = 0: the identity.
    Raises ValueError for an unknown kind or r outside [0, 1).
    """
    if kind not in NOISE_KINDS:
        raise ValueError(f"unknown noise kind '{kind}'; choose from {', '.join(NOISE_KINDS)}")
    if not 0 <= rate < 1:
        raise ValueError(f"noise rate must be in [0, 1), got {rate}")
    k = num_classes
    if kind == "none" or rate == 0:
        return np.eye(k)
    if k < 2:
        raise ValueError(f"{kind} noise needs at least 2 classes, got {k}")
    if kind == "sym":
        t = np.full((k, k), rate / (k - 1))
        np.fill_diagonal(t, 1 - rate)
        return t
    t = (1 - rate) * np.eye(k)
    t[np.arange(k), (np.arange(k) + 1) % k] += rate  # += keeps K = 2 right: (c+1) mod 2 is the other class
    return t


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


# ---------------------------------------------------------------- human noise (CIFAR-N)

CIFAR_N_URL = "https://github.com/UCSC-REAL/cifar-10-100n"
HUMAN_FILES = {"cifar100": "CIFAR-100_human.pt", "cifar10": "CIFAR-10_human.pt"}
# --noise-key -> the key in CIFAR-10_human.pt; "worse_label" is the authors' spelling of worst.
CIFAR10N_KEYS = {"aggre": "aggre_label", "random1": "random_label1", "random2": "random_label2",
                 "random3": "random_label3", "worst": "worse_label"}
HUMAN_KEYS = {"cifar100": ("clean_label", "noisy_label"), "cifar10": ("clean_label", *CIFAR10N_KEYS.values())}

TORCH_MAGIC = 0x1950a86a20f9469cfc6c  # torch.serialization.MAGIC_NUMBER: the legacy (pre-zip) format


def read_label_file(path):
    """The object torch.save wrote to `path` (zip format, or the legacy one), via safe_pickle.load.

    Like torch.load(weights_only=True) with only those numpy globals allowed (nothing else can be
    imported or called), and the same on every torch and numpy version. Raises Refused for anything
    else the file needs, and zipfile.BadZipFile, EOFError, pickle.UnpicklingError or ValueError for a
    damaged file.
    """
    with open(path, "rb") as f:
        if f.read(4) != b"PK\x03\x04":  # legacy torch.save: magic number, protocol, system info, the object
            f.seek(0)
            magic = load(f)
            if not (isinstance(magic, int) and magic == TORCH_MAGIC):
                raise ValueError("not a torch.save file")
            load(f), load(f)
            return load(f)
    with zipfile.ZipFile(path) as z:  # torch >= 1.6: <archive>/data.pkl beside the tensor storages
        pkl = [n for n in z.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkl) != 1:
            raise ValueError("a zip file without torch.save's <archive>/data.pkl")
        with z.open(pkl[0]) as f:
            return load(f)


def human_labels(path, dataset, key, clean, num_classes):
    """The human labels of CIFAR-N for `dataset`'s training set, checked against its clean labels.

    path: the CIFAR-N file; key: a CIFAR10N_KEYS name for cifar10, None for cifar100 (one label set).
    clean: (N,) int64, the training labels read from the CIFAR pickles, in the training set's order.
    Returns (N,) int64, aligned with `clean`. Raises DataError (one line) when the file is missing,
    needs more than numpy arrays to load, is truncated, belongs to the other dataset, or is shuffled.
    """
    name, folder = HUMAN_FILES[dataset], CIFAR[dataset].folder
    get = f"download {name} from {CIFAR_N_URL} (folder data/) and put it at {path}, or pass --noise-file PATH"
    if not os.path.isfile(path):
        raise DataError(f"CIFAR-N label file {path} not found; {get}")
    try:
        d = read_label_file(path)
    except Refused as err:
        raise DataError(f"{path} refused, nothing in it was run: {err}; {get}") from err
    except Exception as err:  # a zip or pickle cut short, or another kind of file
        why = f"{type(err).__name__}: {str(err).splitlines()[0]}" if str(err).strip() else type(err).__name__
        raise DataError(f"{path} is truncated or not a torch.save file ({why}); {get}") from err
    if not isinstance(d, dict):
        raise DataError(f"{path} holds a {type(d).__name__}, not CIFAR-N's dict of label arrays; {get}")
    want = HUMAN_KEYS[dataset]
    other = next(o for o in HUMAN_KEYS if o != dataset)
    if not set(want) <= set(d):
        if set(HUMAN_KEYS[other]) <= set(d):
            raise DataError(f"{path} is the {other} file ({HUMAN_FILES[other]}: keys {', '.join(HUMAN_KEYS[other])}), "
                            f"but --dataset {dataset} needs {name}; {get}")
        missing = ", ".join(k for k in want if k not in d)
        raise DataError(f"{path} lacks {missing} (it holds {', '.join(map(str, d))}); {get}")
    labels = {}
    for k in ("clean_label", CIFAR10N_KEYS[key] if dataset == "cifar10" else "noisy_label"):
        y = np.asarray(d[k])
        if y.ndim != 1 or y.dtype.kind not in "iu":
            raise DataError(f"{path}: '{k}' is {y.dtype} {y.shape}, not a vector of integer labels; {get}")
        if len(y) != len(clean):
            raise DataError(f"{path}: '{k}' holds {len(y)} labels but the {dataset} training set has {len(clean)}: "
                            f"a truncated file or one for another training set; {get}")
        if len(y) and not 0 <= y.min() <= y.max() < num_classes:
            raise DataError(f"{path}: '{k}' has labels outside 0..{num_classes - 1}: a file for another dataset "
                            f"({dataset} has {num_classes} classes); {get}")
        labels[k] = y.astype(np.int64)
    c = labels.pop("clean_label")
    if not np.array_equal(c, clean):
        if np.array_equal(np.sort(c), np.sort(clean)):
            raise DataError(f"{path} is shuffled: its clean_label holds the training labels of {folder} in another "
                            f"order, so its human labels would go to the wrong images; {get}")
        raise DataError(f"{path}: clean_label differs from the training labels of {folder} at "
                        f"{int((c != clean).sum())} of {len(c)} images: not the CIFAR-N file of this training set; "
                        f"{get}")
    return labels.popitem()[1]
