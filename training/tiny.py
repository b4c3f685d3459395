"""Tiny copies of each dataset's files in the layout and format its release has, each where its reader reads them
with --data-dir root: what the tests read every reader, download and training run on (a Dataset record names its
own: datasets.Dataset.tiny), so that a new dataset brings its copy with its record and no test lists it.

Copy          -- a dataset's writer, and the flags train.py needs beside --data-dir to train on the copy on a CPU
write_*       -- the writers, each from the format's description, not from its reader's code: pickles for CIFAR,
                 IDX bytes for Fashion-MNIST and MNIST, .mat for SVHN, JSON lists and JPEGs for Food-101, file lists
                 for mini-WebVision and Clothing1M, named JPEGs for ANIMAL-10N, class folders for an image folder

The copies are random pixels and labels, a few dozen images each. Their md5 sums are not the published ones: the
readers that check a file against its published sum before unpickling it (CIFAR's, SVHN's) refuse them, as they
should; the tests stand the copies' sums in for the published ones. root: a pathlib.Path.
"""
import gzip
import json
import os
import pickle
import struct
from typing import Callable, NamedTuple

import numpy as np
from PIL import Image


class Copy(NamedTuple):
    """A dataset's tiny copy: write(root) writes it and returns what it wrote (the images and labels of each split, as
    the writer says); flags, what train.py needs beside --data-dir to train on it at a CPU's size."""
    write: Callable
    flags: tuple = ()


def save_image(path, size=(20, 16), colour=(200, 30, 90), mode="RGB"):
    """A uniform image, so its colour survives resizing and cropping."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    c = {"L": colour[0], "RGBA": (*colour, 128)}.get(mode, colour)
    Image.new(mode, size, c).save(path)


COLOURS = [(10, 20, 30), (240, 120, 60)]


# ------------------------------------------------------------------ CIFAR

def write_cifar(root, n_train=20, n_test=10, seed=0):
    """cifar-100-python/ as cifar-100-python.tar.gz extracts: train, test, meta. Protocol 2, the protocol of the
    released Python 2 pickles. Their md5 sums are not the published ones, which the reader checks."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    sets = {}
    for split, n in (("train", n_train), ("test", n_test)):
        x = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        y = [int(v) for v in rng.integers(0, 100, n)]
        entry = {"data": x, "fine_labels": y, "coarse_labels": [v // 5 for v in y],
                 "filenames": [f"img_{i}.png" for i in range(n)], "batch_label": f"{split} batch"}
        (folder / split).write_bytes(pickle.dumps(entry, protocol=2))
        sets[split] = (x, y)
    meta = {"fine_label_names": [f"c{i}" for i in range(100)],
            "coarse_label_names": [f"s{i}" for i in range(20)]}
    (folder / "meta").write_bytes(pickle.dumps(meta, protocol=2))
    return sets


def write_cifar10(root, n_per_batch=8, n_test=10, seed=0):
    """cifar-10-batches-py/ as cifar-10-python.tar.gz extracts: five training batches, a test batch, meta.
    Protocol 2, the protocol of the released Python 2 pickles. Their md5 sums are not the published ones."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    sets = {"train": ([], []), "test": ([], [])}
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        n = n_test if name == "test_batch" else n_per_batch
        x = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        y = [int(v) for v in rng.integers(0, 10, n)]
        entry = {"batch_label": f"{name} of 5", "labels": y, "data": x,
                 "filenames": [f"{name}_{i}.png" for i in range(n)]}
        (folder / name).write_bytes(pickle.dumps(entry, protocol=2))
        xs, ys = sets["test" if name == "test_batch" else "train"]
        xs.append(x)
        ys += y
    meta = {"label_names": [f"c{i}" for i in range(10)], "num_cases_per_batch": n_per_batch, "num_vis": 3072}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    return {split: (np.concatenate(xs), ys) for split, (xs, ys) in sets.items()}


# ------------------------------------------------------------------ IDX (Fashion-MNIST, MNIST)

def idx(magic, array):
    """An IDX file: big-endian int32 magic, one big-endian int32 per dimension, then the uint8 values row-major."""
    return struct.pack(">i", magic) + b"".join(struct.pack(">i", d) for d in array.shape) + array.tobytes()


def write_idx(folder, n_train=20, n_test=8, side=28, gz=True, seed=0, images=None):
    """The four files in `folder` (made if needed), gzipped or not: {"train": (x, y), "test": (x, y)},
    x uint8 (N, side, side), y uint8 (N,). images: a function (n, side) -> x instead of random pixels."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    sets = {}
    for split, prefix, n in (("train", "train", n_train), ("test", "t10k", n_test)):
        x = rng.integers(0, 256, (n, side, side), dtype=np.uint8) if images is None else images(n, side)
        y = rng.integers(0, 10, n, dtype=np.uint8)
        for name, data in ((f"{prefix}-images-idx3-ubyte", idx(2051, x)),
                           (f"{prefix}-labels-idx1-ubyte", idx(2049, y))):
            path = os.path.join(folder, name + (".gz" if gz else ""))
            with open(path, "wb") as f:
                f.write(gzip.compress(data) if gz else data)
        sets[split] = (x, y)
    return sets


# ------------------------------------------------------------------ SVHN

def write_svhn(root, n_train=20, n_test=10, seed=0):
    """SVHN/{train,test}_32x32.mat as the published files hold them: X (32, 32, 3, N) uint8 and y (N, 1), 10 for the
    digit 0. Returns {split: (images (N, 3, 32, 32), digits)}. Their md5 sums are not published: publish_files."""
    import scipy.io as sio  # as torchvision's SVHN reads them: only this dataset needs scipy
    rng = np.random.default_rng(seed)
    folder = root / "SVHN"
    folder.mkdir(parents=True)
    sets = {}
    for split, n in (("train", n_train), ("test", n_test)):
        x = rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
        digit = np.arange(n) % 10
        sio.savemat(str(folder / f"{split}_32x32.mat"),
                    {"X": x.transpose(2, 3, 1, 0), "y": np.where(digit == 0, 10, digit)[:, None].astype(np.uint8)})
        sets[split] = (x, digit)
    return sets


# ------------------------------------------------------------------ files: Food-101, WebVision, Clothing1M, ANIMAL-10N, folders

def write_food101(tmp_path):
    root = tmp_path / "food-101"
    classes = ["apple_pie", "baby_back_ribs", "waffles"]
    # json key order differs from sorted order: the class index must still be sorted.
    train = {"waffles": ["waffles/3", "waffles/4"], "apple_pie": ["apple_pie/1"],
             "baby_back_ribs": ["baby_back_ribs/2"]}
    test = {c: [f"{c}/{10 + i}"] for i, c in enumerate(classes)}
    for i, rel in enumerate(sum([*train.values(), *test.values()], [])):
        save_image(str(root / "images" / f"{rel}.jpg"), size=(30 + 7 * i, 40 - 3 * i))
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "train.json").write_text(json.dumps(train))
    (root / "meta" / "test.json").write_text(json.dumps(test))
    (root / "meta" / "classes.txt").write_text("\n".join(classes) + "\n")
    return root


def write_webvision(root, with_imagenet=True):
    wnids = [f"n{i:08d}" for i in range(60)]
    (root / "info").mkdir(parents=True)
    (root / "info" / "synsets.txt").write_text("".join(f"{w} class {i}, thing\n" for i, w in enumerate(wnids)))
    train = [("google/q0001/00000001.jpg", 0), ("google/q0001/00000002.jpg", 0), ("google/q0050/00000001.jpg", 49),
             ("google/q0051/00000001.jpg", 50), ("google/q0100/00000001.jpg", 99), ("google/q0002/00000001.jpg", 1)]
    val = [("val000001.jpg", 0), ("val000002.jpg", 77), ("val000003.jpg", 49)]
    (root / "info" / "train_filelist_google.txt").write_text("".join(f"{p} {y}\n" for p, y in train))
    (root / "info" / "val_filelist.txt").write_text("".join(f"{p} {y}\n" for p, y in val))
    for p, _ in train:
        save_image(str(root / p))
    for p, _ in val:
        save_image(str(root / "val_images_256" / p))
    if with_imagenet:  # class folders for classes 3 and 7 only, plus one outside the 50
        for wnid, n in ((wnids[3], 2), (wnids[7], 1), (wnids[55], 1)):
            for j in range(n):
                save_image(str(root / "imagenet" / "val" / wnid / f"ILSVRC2012_val_{j:08d}.JPEG"))
    return wnids


CATEGORIES = ["T-Shirt", "Shirt", "Knitwear", "Chiffon", "Sweater", "Hoodie", "Windbreaker", "Jacket", "Down Coat",
              "Suit", "Shawl", "Dress", "Vest", "Underwear"]  # category_names_eng.txt, in label order


def write_clothing1m(root, n_train=20, n_val=6, n_test=8, names=True, seed=0):
    """A tiny Clothing1M in its released layout under root. Returns {"train": (keys, noisy labels), "test": (keys,
    clean labels), "clean_val": (keys, clean labels)}. Some training images also have a clean label (as some of the
    real ones do), and the label files hold keys no list names (the clean training set's)."""
    rng = np.random.default_rng(seed)
    n = n_train + n_val + n_test + 3
    keys = [f"images/{i % 10}/{i % 7:02d}/{1000 + i}.jpg" for i in range(n)]
    for key in keys:
        os.makedirs(root / os.path.dirname(key), exist_ok=True)
        Image.new("RGB", (40, 30), tuple(int(v) for v in rng.integers(0, 256, 3))).save(root / key)
    train, val = keys[:n_train], keys[n_train:n_train + n_val]
    test, clean_train = keys[n_train + n_val:n_train + n_val + n_test], keys[-3:]
    noisy = {k: int(rng.integers(0, 14)) for k in train + clean_train}
    clean = {k: int(rng.integers(0, 14)) for k in val + test + clean_train + train[:4]}
    (root / "noisy_label_kv.txt").write_text("".join(f"{k} {y}\n" for k, y in noisy.items()))
    (root / "clean_label_kv.txt").write_text("".join(f"{k} {y}\n" for k, y in clean.items()))
    for name, listed in (("noisy_train", train), ("clean_val", val), ("clean_test", test),
                         ("clean_train", clean_train)):
        (root / f"{name}_key_list.txt").write_text("".join(f"{k}\n" for k in listed))
    if names:
        (root / "category_names_eng.txt").write_text("".join(f"{c}\n" for c in CATEGORIES))
    return {"train": (train, [noisy[k] for k in train]), "test": (test, [clean[k] for k in test]),
            "clean_val": (val, [clean[k] for k in val])}


def write_animal10n(root, n_train=20, n_test=10, seed=0):
    """root/training and root/testing as the release unpacks them. Returns {"train": (images (N, 3, 64, 64), labels),
    "test": ...}, in the files' sorted order."""
    rng = np.random.default_rng(seed)
    sets = {}
    for split, folder, n in (("train", "training", n_train), ("test", "testing", n_test)):
        (root / folder).mkdir(parents=True)
        labels = rng.integers(0, 10, n)
        colours = rng.integers(0, 256, (n, 3))
        for i, (y, c) in enumerate(zip(labels, colours)):
            Image.new("RGB", (64, 64), tuple(int(v) for v in c)).save(root / folder / f"{y}_{i:05d}.jpg", quality=95)
        order = sorted(range(n), key=lambda i: f"{labels[i]}_{i:05d}.jpg")
        sets[split] = (colours[order], labels[order])
    return sets


def write_folder(root, sizes=((20, 20), (24, 18), (16, 16)), classes=("cat", "dog"), test_classes=None):
    """Class i has colour COLOURS[i]; images are grayscale, RGBA and RGB."""
    for split, names in (("train", classes), ("test", test_classes or classes)):
        for i, name in enumerate(names):
            for j, (size, mode) in enumerate(zip(sizes, ("L", "RGBA", "RGB"))):
                save_image(str(root / split / name / f"{j}.png"), size, COLOURS[i], mode)

