"""Datasets, read from the on-disk layouts they are distributed in (paper appendix, "Datasets").

DATASETS     -- the names load_dataset accepts
load_dataset -- name -> Data (mini-WebVision's loader is webvision.py)
Synthetic    -- the settings of the synthetic data set (synthetic.py), load_dataset's `synthetic`
CIFAR        -- where CIFAR-10 and CIFAR-100 live on disk (python pickles)
IDX          -- where Fashion-MNIST and MNIST live on disk (IDX files, plain or gzipped; read by idx.py)
NO_FLIP      -- the datasets whose paper augmentation is crop-only (batches.Spec(flip=False))

Labels returned here are the *given* labels: clean for cifar10/100, folder and
synthetic (train.py adds synthetic noise or, for CIFAR, the human labels of CIFAR-N:
noise.py), real-noisy for food101 and webvision. fashionmnist and mnist (not in the paper)
are clean, and take synthetic noise as cifar10/100 do.
The types they are made of (Data, TensorImages, DataError, ...) are images.py; how batches are
drawn and augmented is batches.py.
"""
import json
import os
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image
from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

from training import safe_pickle, webvision
from training.download import fetch
from training.idx import IDX, read_idx_dataset
# Data, DataError, FileImages, ... are images.py's; train.py reaches them through this module too.
from training.images import (IMAGENET_MEAN, IMAGENET_STD, BadImages, Data, DataError, FileImages, TensorImages,
                             first_line, label_array, open_image, require_file, to_rgb)
from training.synthetic import SYNTHETIC_MEAN, SYNTHETIC_STD, Synthetic, make_synthetic

# Datasets whose paper augmentation is crop-only: a mirrored 2, 3, 4, 5, 6, 7 or 9 is no digit
# at all, so a flip would teach shapes no test image has. Clothes (fashionmnist) and CIFAR's
# objects are the same thing mirrored, and flip. train.py passes batches.Spec(flip=...) from it.
NO_FLIP = ("mnist",)

DATASETS = ("cifar100", "cifar10", "fashionmnist", "mnist", "food101", "webvision", "folder", "synthetic")
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def load_dataset(name, data_dir, image_size=None, download=True, synthetic=Synthetic(), mirror=None):
    """name -> Data. data_dir is unused for "synthetic". Raises DataError on bad input.

    download: fetch cifar100/cifar10/fashionmnist/mnist/food101 into data_dir when they are not there
    (download.py), from `mirror` (a URL that holds the published files) if given, else from their own sites.

    image_size: food101/webvision/folder crop size (default 224/299/224); the side
    of synthetic images (default 32); cifar10/100 accept only None or 32, fashionmnist/mnist
    only None or their files' side (28).
    synthetic: a Synthetic (sizes, classes, difficulty, shift, seed); only the synthetic generator
    reads it (synthetic.py).
    """
    if name not in DATASETS:
        raise DataError(f"unknown dataset '{name}'; choose from {', '.join(DATASETS)}")
    if name == "synthetic":
        try:
            train, test = make_synthetic(synthetic, image_size or 32)
        except ValueError as err:
            raise DataError(str(err)) from err
        return Data(TensorImages(*train), {"test": TensorImages(*test)}, synthetic.classes,
                    SYNTHETIC_MEAN, SYNTHETIC_STD)
    if data_dir is None:
        raise DataError(f"dataset '{name}' reads files, but no data directory was given; pass --data-dir")
    data_dir = os.fspath(data_dir)
    if name in CIFAR:
        return _cifar(name, data_dir, image_size, download, mirror)
    if name in IDX:
        return read_idx_dataset(name, data_dir, image_size, download, mirror)
    if name == "food101":
        return _food101(data_dir, image_size or 224, download, mirror)
    if name == "webvision":
        return webvision.load(data_dir, image_size or 299)
    return _folder(data_dir, image_size)


# ------------------------------------------------------------ CIFAR-10/100

class Cifar(NamedTuple):
    """Where a CIFAR lives under data_dir, as its python archive extracts, and which keys its pickles use."""
    folder: str
    train: tuple[str, ...]  # the training pickles, in the order of the training set (and of CIFAR-N's labels)
    test: str
    meta: str
    names: str              # key of the class names in `meta`
    labels: str             # key of the labels in each data pickle
    archive: str            # what download.py fetches and extracts
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


CIFAR = {
    "cifar100": Cifar("cifar-100-python", ("train",), "test", "meta", "fine_label_names", "fine_labels",
                      "cifar-100-python.tar.gz", CIFAR100_MEAN, CIFAR100_STD),
    "cifar10": Cifar("cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)), "test_batch",
                     "batches.meta", "label_names", "labels", "cifar-10-python.tar.gz",
                     CIFAR10_MEAN, CIFAR10_STD),
}


def _cifar(name, data_dir, image_size, download, mirror):
    """The official python pickles: <data_dir>/cifar-100-python/{train,test,meta} or
    <data_dir>/cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}."""
    c = CIFAR[name]
    if image_size not in (None, 32):
        raise DataError(f"{name} images are 32x32, got --image-size {image_size}; leave it unset")
    folder = os.path.join(data_dir, c.folder)
    inside = os.path.basename(os.path.normpath(data_dir))
    if not os.path.isdir(folder) and inside in {x.folder for x in CIFAR.values()}:
        # --data-dir names the extracted folder instead of its parent: say so now, rather than
        # "not found", or a download of the archive into the dataset's own folder
        parent = os.path.dirname(os.path.normpath(data_dir)) or os.curdir
        other = next(n for n, x in CIFAR.items() if x.folder == inside)
        raise DataError(f"--data-dir {data_dir} is the {inside}/ folder itself; pass the folder that holds it: "
                        f"--data-dir {parent}" if other == name else
                        f"--data-dir {data_dir} is {other}'s {inside}/ folder itself, and {name} needs {c.folder}/; "
                        f"pass the folder that holds {c.folder}/ (for --dataset {other}: --data-dir {parent})")
    if not os.path.isdir(folder):
        how = (f"put the extracted {c.folder}/ folder (from {c.archive}, "
               "https://www.cs.toronto.edu/~kriz/cifar.html) under --data-dir")
        if not download:
            raise DataError(f"{name} folder {folder} not found and download is off; {how}")
        try:
            fetch(name, data_dir, mirror)
        except DataError as err:
            raise DataError(f"{name} folder {folder} not found, and downloading it failed: {err}; or {how}") from err
    # We unpickle the files ourselves (encoding="latin1" as torchvision, but through safe_pickle)
    # instead of using torchvision's CIFAR classes: they check md5 sums on
    # every load, so this code path could not be tested on tiny pickles.
    names = _unpickle(os.path.join(folder, c.meta), {c.names: list}, c.archive)[c.names]
    k = len(names)
    splits = {}
    for split, files in (("train", c.train), ("test", (c.test,))):
        xs, ys = [], []
        for path in (os.path.join(folder, f) for f in files):
            d = _unpickle(path, {"data": np.ndarray, c.labels: list}, c.archive)
            x, y = d["data"], label_array(d[c.labels])
            if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != 3072 or len(y) != len(x):
                raise DataError(f"{path}: expected 'data' uint8 (N, 3072) and N '{c.labels}', got "
                                f"{x.dtype} {x.shape} and {len(y)} labels; re-extract {c.archive}")
            if len(y) and not 0 <= y.min() <= y.max() < k:
                raise DataError(f"{path}: {c.labels} outside 0..{k - 1}; re-extract {c.archive}")
            xs.append(x)
            ys.append(y)
        # Each row is the R plane, then G, then B, each 32x32 row-major.
        x = np.concatenate(xs)
        splits[split] = TensorImages(torch.from_numpy(x.reshape(-1, 3, 32, 32)), np.concatenate(ys))
    return Data(splits["train"], {"test": splits["test"]}, k, c.mean, c.std)


def _unpickle(path, keys, archive):
    """Load one CIFAR pickle and check it is a dict holding `keys` of the given types."""
    if not os.path.isfile(path):
        raise DataError(f"CIFAR file {path} not found; re-extract {archive} under --data-dir")
    try:
        with open(path, "rb") as f:
            d = safe_pickle.load(f)  # numpy arrays, lists and strings only: nothing in the file is called
    except Exception as err:
        raise DataError(f"{path} is not a readable CIFAR pickle ({first_line(err)}); "
                        f"re-extract {archive}") from err
    for key, kind in keys.items():
        if not isinstance(d, dict) or not isinstance(d.get(key), kind):
            raise DataError(f"{path}: expected a dict with '{key}' ({kind.__name__}); re-extract {archive}")
    return d


# ------------------------------------------------------------------- Food-101

def _food101(data_dir, size, download, mirror):
    """torchvision's layout <data_dir>/food-101/{meta/{train,test}.json, images/}."""
    root = os.path.join(data_dir, "food-101")
    meta, images = os.path.join(root, "meta"), os.path.join(root, "images")
    if not (os.path.isdir(meta) and os.path.isdir(images)):
        how = ("put the extracted food-101/ folder (food-101.tar.gz, "
               "https://data.vision.ee.ethz.ch/cvl/datasets_extra/food-101/) under --data-dir")
        if not download:
            raise DataError(f"Food-101 folders {meta} and {images} not found and download is off; {how}")
        try:  # 5 GB
            fetch("food101", data_dir, mirror)
        except DataError as err:
            raise DataError(f"Food-101 not found at {root}, and downloading it failed: {err}; or {how}") from err
    splits, classes = {}, None
    for split in ("train", "test"):
        path = os.path.join(meta, f"{split}.json")
        try:
            with open(path) as f:
                index = json.load(f)  # class name -> ["class_name/image_id", ...]
            assert isinstance(index, dict) and all(isinstance(v, list) for v in index.values())
        except (OSError, ValueError, AssertionError) as err:
            raise DataError(f"{path} is missing or not a dict of lists ({first_line(err)}); "
                            f"re-extract food-101.tar.gz") from err
        # Class index = sorted class names, as in torchvision's Food101 (and classes.txt).
        classes = classes or sorted(index)
        if sorted(index) != classes:
            raise DataError(f"{path} has other classes than meta/train.json; re-extract food-101.tar.gz")
        idx = {c: i for i, c in enumerate(classes)}
        paths = [os.path.join(images, *f"{rel}.jpg".split("/")) for c in index for rel in index[c]]
        labels = label_array([idx[c] for c in index for _ in index[c]])
        if not paths:
            raise DataError(f"{path} lists no images; re-extract food-101.tar.gz")
        require_file(paths[0], path)
        splits[split] = FileImages(paths, labels, size, "food101")
    return Data(splits["train"], {"test": splits["test"]}, len(classes), IMAGENET_MEAN, IMAGENET_STD)


# -------------------------------------------------------------- image folder

def _folder(data_dir, image_size, small=64):
    """torchvision ImageFolder layout <data_dir>/{train,test}/<class>/<image>.

    Folders of small images (<= 64 px, or image_size <= 64) are decoded once into
    memory and then trained like CIFAR; anything larger is read by DataLoader workers.
    """
    layout = "expected <data-dir>/train/<class>/*.png and <data-dir>/test/<class>/*.png (ImageFolder layout)"
    splits = {}
    for split in ("train", "test"):
        root = os.path.join(data_dir, split)
        try:
            classes, class_to_idx = find_classes(root)
            samples = make_dataset(root, class_to_idx, extensions=IMG_EXTENSIONS)
        except (OSError, ValueError) as err:  # no folder, no class folders, or an empty class
            raise DataError(f"no images at {root} ({first_line(err)}); {layout}") from err
        if split == "test" and classes != splits["train"][0]:
            diff = sorted(set(classes) ^ set(splits["train"][0]))
            raise DataError(f"{root} has other classes than {data_dir}/train (e.g. '{diff[0]}'); "
                            f"give test/ the same class folders as train/")
        splits[split] = (classes, [p for p, _ in samples], label_array([c for _, c in samples]))
    k = len(splits["train"][0])
    if image_size is not None:
        in_memory = image_size <= small
    else:  # read image headers until one is large; all of them only if all are small
        sizes, bad = {}, []  # (w, h) -> the folder it was first seen in; unreadable files
        for split, path in ((s, p) for s in ("train", "test") for p in splits[s][1]):
            try:
                wh = open_image(path, lambda im: im.size)
            except DataError as err:
                bad.append((path, first_line(err.__cause__)))
                continue
            sizes.setdefault(wh, os.path.join(data_dir, split))
            if max(wh) > small:
                break
        if bad:  # every unreadable file among the headers read (all of them, when the images are small)
            raise BadImages(bad)
        in_memory = max(max(wh) for wh in sizes) <= small
        if in_memory and len(sizes) > 1:
            (w1, h1), (w2, h2) = list(sizes)[:2]
            raise DataError(f"images in {' and '.join(sorted(set(sizes.values())))} differ in size "
                            f"(e.g. {w1}x{h1} and {w2}x{h2}); pass --image-size N to resize them all to NxN")
    if not in_memory:
        train, test = [FileImages(splits[s][1], splits[s][2], image_size or 224, "folder") for s in ("train", "test")]
        return Data(train, {"test": test}, k, IMAGENET_MEAN, IMAGENET_STD)

    def decode(im):
        im = to_rgb(im)
        if image_size is not None and im.size != (image_size, image_size):
            im = im.resize((image_size, image_size), Image.BILINEAR)  # PIL antialiases when shrinking
        return np.asarray(im)  # (H, W, 3)

    images, bad = {}, []
    for split in ("train", "test"):  # decode everything, then report every file that failed at once
        images[split] = []
        for p in splits[split][1]:
            try:
                images[split].append(open_image(p, decode))
            except DataError as err:
                bad.append((p, first_line(err.__cause__)))
    if bad:
        raise BadImages(bad)
    train, test = [TensorImages(torch.from_numpy(np.stack(images[s])).permute(0, 3, 1, 2).contiguous(), splits[s][2])
                   for s in ("train", "test")]
    return Data(train, {"test": test}, k, IMAGENET_MEAN, IMAGENET_STD)


