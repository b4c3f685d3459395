"""Clothing1M (Xiao et al. 2015, "Learning from Massive Noisy Labeled Data for Image Classification"), read from the
layout its authors release: a million clothing images from shopping websites in 14 classes, labelled by the words
around them (about 38% of those labels are wrong, by the authors' estimate), and a smaller set labelled by hand.

load  -- Data: the noisy training set with its given labels, tested on the clean test set; the clean validation
         set as a second test set, "clean_val"
FILES -- the key lists and label files the layout holds, beside images/

datasets.load_dataset("clothing1m", ...) calls load once datasets.located has found FILES; its errors are
images.DataError, one line each. The layout: <data_dir>/images/<0..9>/<00..99>/<id>.jpg, and in <data_dir> itself
noisy_label_kv.txt and clean_label_kv.txt (a key and its label a line: "images/0/00/xxx.jpg 3"),
noisy_train_key_list.txt, clean_val_key_list.txt and clean_test_key_list.txt (a key a line), and optionally
category_names_eng.txt (a class name a line, in label order). A key is the image's path under <data_dir>.

The labels trained on are the noisy ones, the given labels; nothing adds noise, so precision, recall and
memorisation are unknown, as for Food-101 and WebVision. Some training images also have a clean label; those are
not used here (clean_train_key_list.txt, the hand-labelled training set, is not read either).
"""
import os

from training.images import IMAGENET_MEAN, IMAGENET_STD, Data, DataError, FileImages, label_array, require_file

FILES = ("noisy_label_kv.txt", "clean_label_kv.txt", "noisy_train_key_list.txt", "clean_val_key_list.txt",
         "clean_test_key_list.txt")
NAMES = "category_names_eng.txt"
CLASSES = 14  # without category_names_eng.txt


def load(data_dir, size):
    """The noisy training set (noisy_train_key_list.txt with noisy_label_kv.txt's labels), the clean test set
    ("test": clean_test_key_list.txt with clean_label_kv.txt's) and the clean validation set ("clean_val"). size: the
    training crop and test size. The images are read by DataLoader workers, transformed as an image folder's
    (resize, crop, flip: batches.file_transforms)."""
    names = os.path.join(data_dir, NAMES)
    k = len([n for n in _lines(names) if n.strip()]) if os.path.isfile(names) else CLASSES
    noisy, clean = (_labels(os.path.join(data_dir, f), k) for f in ("noisy_label_kv.txt", "clean_label_kv.txt"))
    train = _split(data_dir, "noisy_train_key_list.txt", noisy, "noisy_label_kv.txt", size)
    tests = {"test": _split(data_dir, "clean_test_key_list.txt", clean, "clean_label_kv.txt", size),
             "clean_val": _split(data_dir, "clean_val_key_list.txt", clean, "clean_label_kv.txt", size)}
    return Data(train, tests, k, IMAGENET_MEAN, IMAGENET_STD)


def _lines(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"Clothing1M file {path} cannot be read ({type(err).__name__}: {err}); replace it with "
                        f"the released one") from err


def _key(path, n, key):
    """A key is a path under the dataset's folder; one that would leave it is refused."""
    parts = key.replace("\\", "/").split("/")
    if os.path.isabs(key) or ".." in parts:
        raise DataError(f"{path} line {n}: key '{key}' is not a path under the dataset's folder (images/...); "
                        f"replace the file with the released one")
    return key


def _labels(path, k):
    """{key: label} of a *_label_kv.txt: lines "key label", label in 0..k-1."""
    out = {}
    for n, line in enumerate(_lines(path), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not parts[1].isdigit():
            raise DataError(f"{path} line {n}: expected 'images/....jpg LABEL', got '{line.strip()[:80]}'; "
                            f"replace the file with the released one")
        if int(parts[1]) >= k:
            raise DataError(f"{path} line {n}: label {parts[1]} is outside 0..{k - 1} (Clothing1M has {k} classes"
                            f"{', as ' + NAMES + ' lists' if k != CLASSES else ''}); replace the file with the "
                            f"released one")
        out[_key(path, n, parts[0])] = int(parts[1])
    return out


def _split(data_dir, list_name, labels, labels_name, size):
    """FileImages of the keys a *_key_list.txt lists, each labelled by `labels` (the *_label_kv.txt's)."""
    path = os.path.join(data_dir, list_name)
    keys = [(n, line.strip()) for n, line in enumerate(_lines(path), 1) if line.strip()]
    if not keys:
        raise DataError(f"{path} lists no images; replace it with the released one")
    unlabelled = [(n, key) for n, key in keys if key not in labels]
    if unlabelled:
        (n, key), more = unlabelled[0], len(unlabelled) - 1
        raise DataError(f"{path} line {n}: key {key} has no label in {labels_name}"
                        f"{f' (and {more} more keys)' if more else ''}; put the released {list_name} and "
                        f"{labels_name} together")
    paths = [os.path.join(data_dir, key) for _, key in keys]  # each key checked by _labels
    require_file(paths[0], path)
    # "folder": the transforms of an image folder (resize 256, random 224 crop, flip), the usual ones for Clothing1M
    return FileImages(paths, label_array([labels[key] for _, key in keys]), size, "folder")
