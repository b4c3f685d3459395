"""The types every dataset is made of, and reading image files (paper appendix, "Datasets").

DataError    -- bad or missing data; its message is one line that says what to do
BadImages    -- a DataError for image files that cannot be read, all of them in .bad
TensorImages -- a dataset that lives in memory as uint8 (N, C, H, W): cifar10/100, (fashion)mnist, synthetic, small folders
FileImages   -- a dataset read from disk by DataLoader workers: food101, webvision, large folders
Data         -- train set, named test sets, number of classes, normalisation mean/std
take         -- the subset of a TensorImages / FileImages at some indices (validation split)
open_image   -- open one image file; a bad file becomes a DataError naming it
check_images -- decode every file of a list and raise BadImages listing each one that fails
"""
import os
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image

from training.errors import UserError

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class DataError(UserError):
    """Bad or missing data. str(error) is one line: what, where, what to do."""


class BadImages(DataError):
    """Image files that cannot be read: .bad is [(path, reason)] for every one found; str(error) is one line."""

    def __init__(self, bad):
        self.bad = list(bad)
        (path, why), n = self.bad[0], len(self.bad)
        super().__init__(f"cannot read image {path} ({why}); replace or delete the file" if n == 1 else
                         f"{n} images cannot be read, the first {path} ({why}); replace or delete them")


class TensorImages(NamedTuple):
    images: torch.Tensor  # uint8, (N, 3, H, W), contiguous
    labels: np.ndarray    # int64, (N,)


class FileImages(NamedTuple):
    paths: list[str]
    labels: np.ndarray    # int64, (N,)
    size: int             # training crop / test size in pixels
    kind: str             # "food101" | "webvision" | "folder": picks the transforms


class Data(NamedTuple):
    train: TensorImages | FileImages
    tests: dict[str, TensorImages | FileImages]  # {"test": ...}, webvision: {"webvision_val", "ilsvrc12_val"}
    num_classes: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


def first_line(err):
    """An exception's message cut to one line, for DataError messages."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


def label_array(values):
    return np.asarray(values, dtype=np.int64).reshape(-1)


def require_file(path, listed_in):
    """Fail now, with the path, rather than in a DataLoader worker at epoch 1."""
    if not os.path.isfile(path):
        raise DataError(f"image {path} not found, though {listed_in} lists it; "
                        f"check that the dataset is completely extracted under --data-dir")


def take(ds, idx):
    """The samples of a TensorImages or FileImages at indices idx (an int array)."""
    idx = np.asarray(idx, dtype=np.int64)
    if isinstance(ds, TensorImages):
        return TensorImages(ds.images[torch.from_numpy(idx)].contiguous(), ds.labels[idx])
    return ds._replace(paths=[ds.paths[i] for i in idx], labels=ds.labels[idx])


def open_image(path, use):
    """Open an image with PIL and return use(image); a bad file -> DataError naming it."""
    try:
        with Image.open(path) as im:
            return use(im)
    except (OSError, ValueError, Image.DecompressionBombError) as err:
        raise DataError(f"cannot read image {path} ({first_line(err)}); replace or delete the file") from err


def check_images(paths, workers=1):
    """Decode every image in full (a truncated JPEG fails only there), `workers` threads at a time;
    raise BadImages naming each file that cannot be read."""
    def reason(path):
        try:
            open_image(path, lambda im: im.load())
        except DataError as err:
            return first_line(err.__cause__)
        return None

    with ThreadPoolExecutor(max(1, workers)) as pool:
        bad = [(p, why) for p, why in zip(paths, pool.map(reason, paths)) if why is not None]
    if bad:
        raise BadImages(bad)


def to_rgb(im):
    im.load()  # decode now, while the file is open
    return im if im.mode == "RGB" else im.convert("RGB")
