"""CIFAR-N's human labels (Wei et al. 2022), read from the authors' files and checked against CIFAR.

HumanLabels       -- one CIFAR-N label file: its name, its label sets (--noise-key) and their default
CIFAR100N, CIFAR10N -- the two files; a dataset record names the one its training set has (datasets.DATASETS'
                     human), and config, --help and human_labels read it there
human_labels      -- the human labels of a CIFAR training set, read safely and checked against it
read_label_file   -- the dict in a CIFAR-N file, unpickled with only the numpy globals it needs

Human noise is the re-annotation of the CIFAR training sets by Amazon Mechanical
Turk workers (Wei et al. 2022, "Learning with Noisy Labels Revisited: A Study
Using Real-World Human Annotations"): one file per dataset holds the clean and
the human labels of the 50 000 training images, in the order of the training set.
Its errors follow what people confuse, not a transition matrix.
"""
import os
import zipfile
from typing import NamedTuple

import numpy as np

from training.images import DataError
from training.safe_pickle import Refused, load

CIFAR_N_URL = "https://github.com/UCSC-REAL/cifar-10-100n"


class HumanLabels(NamedTuple):
    """One CIFAR-N label file: clean_label and the human label sets of one CIFAR training set."""
    name: str             # the set's name, CIFAR-10N
    file: str             # the authors' file name, in their folder data/
    keys: dict            # --noise-key -> its label set's key in the file; {None: key}: one set, no --noise-key
    default: str | None   # --noise-key's default


# --noise-key -> the key in CIFAR-10_human.pt; "worse_label" is the authors' spelling of worst.
CIFAR10N_KEYS = {"aggre": "aggre_label", "random1": "random_label1", "random2": "random_label2",
                 "random3": "random_label3", "worst": "worse_label"}
CIFAR100N = HumanLabels("CIFAR-100N", "CIFAR-100_human.pt", {None: "noisy_label"}, None)
CIFAR10N = HumanLabels("CIFAR-10N", "CIFAR-10_human.pt", CIFAR10N_KEYS, "worst")
RELEASES = (CIFAR100N, CIFAR10N)  # every file of CIFAR-N, so that one for the other training set is named

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


def human_labels(path, human, key, clean, num_classes):
    """The human labels of CIFAR-N for a training set, checked against its clean labels.

    path: the CIFAR-N file; human: the HumanLabels its dataset record names; key: one of human.keys (None for
    CIFAR-100N's one label set). clean: (N,) int64, the training labels read from the CIFAR pickles, in the training
    set's order. Returns (N,) int64, aligned with `clean`. Raises DataError (one line) when the file is missing,
    needs more than numpy arrays to load, is truncated, belongs to the other training set, or is shuffled.
    """
    name = human.file
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
    want = ("clean_label", *human.keys.values())
    if not set(want) <= set(d):
        other = next((o for o in RELEASES if o != human and {"clean_label", *o.keys.values()} <= set(d)), None)
        if other is not None:
            raise DataError(f"{path} is the {other.name} file ({other.file}: keys clean_label, "
                            f"{', '.join(other.keys.values())}), but this training set needs {human.name}'s {name}; "
                            f"{get}")
        missing = ", ".join(k for k in want if k not in d)
        raise DataError(f"{path} lacks {missing} (it holds {', '.join(map(str, d))}); {get}")
    labels = {}
    for k in ("clean_label", human.keys[key]):
        y = np.asarray(d[k])
        if y.ndim != 1 or y.dtype.kind not in "iu":
            raise DataError(f"{path}: '{k}' is {y.dtype} {y.shape}, not a vector of integer labels; {get}")
        if len(y) != len(clean):
            raise DataError(f"{path}: '{k}' holds {len(y)} labels but the training set has {len(clean)}: "
                            f"a truncated file or one for another training set; {get}")
        if len(y) and not 0 <= y.min() <= y.max() < num_classes:
            raise DataError(f"{path}: '{k}' has labels outside 0..{num_classes - 1}: a file for another dataset "
                            f"(this one has {num_classes} classes); {get}")
        labels[k] = y.astype(np.int64)
    c = labels.pop("clean_label")
    if not np.array_equal(c, clean):
        if np.array_equal(np.sort(c), np.sort(clean)):
            raise DataError(f"{path} is shuffled: its clean_label holds the training labels in another order, so "
                            f"its human labels would go to the wrong images; {get}")
        raise DataError(f"{path}: clean_label differs from the training labels at {int((c != clean).sum())} of "
                        f"{len(c)} images: not the {human.name} file of this training set; {get}")
    return labels.popitem()[1]
