"""Fashion-MNIST and MNIST, read from their IDX files (datasets.load_dataset's "fashionmnist" and "mnist").

IDX              -- where each lives on disk, and its training set's statistics
read_idx_dataset -- the four files, plain or gzipped, in --data-dir or torchvision's raw/ folder -> Data
"""
import gzip
import os
import struct
import zlib
from typing import NamedTuple

import numpy as np
import torch

from training.download import fetch
from training.images import Data, DataError, TensorImages, first_line

# Both are four IDX files (http://yann.lecun.com/exdb/mnist/): big-endian int32 magic, then
# one int32 per dimension, then the uint8 values row-major. We parse them ourselves, for the
# same reason as the CIFAR pickles: torchvision's classes check md5 sums and want their own
# folder layout, so a copy installed elsewhere (Debian's dataset-fashion-mnist) or a tiny
# test copy could not be read through them.
#
# Representation: the gray channel is repeated to three, uint8 (N, 3, 28, 28) contiguous, as
# every TensorImages is. Every model in models.py takes 3 channels (their first conv, and
# mlp's Linear(3 * side * side)), and batches.py normalises and augments 3-channel uint8
# batches channel by channel; three copies cost 141 MB for the training set (47 MB as one
# channel) and change nothing else. mean/std are the training set's, the same on each channel.

class Idx(NamedTuple):
    """Where torchvision downloads an IDX dataset under data_dir, and its training set's statistics."""
    torchvision: str  # the torchvision.datasets class, and its folder: <data_dir>/<torchvision>/raw/
    title: str        # the name in messages
    mean: float       # of the training images' pixels, in [0, 1]
    std: float
    elsewhere: str    # where else the files can be had, for the message when none are found


IDX = {
    "fashionmnist": Idx("FashionMNIST", "Fashion-MNIST", 0.2860, 0.3530,
                        "on Debian/Ubuntu `apt-get install dataset-fashion-mnist` puts them in "
                        "/usr/share/datasets/fashion-mnist/ (pass --data-dir /usr/share/datasets/fashion-mnist)"),
    "mnist": Idx("MNIST", "MNIST", 0.1307, 0.3081,
                 "Debian/Ubuntu package only Fashion-MNIST (dataset-fashion-mnist), not MNIST: copy the four "
                 "files, or the MNIST/raw/ folder torchvision.datasets.MNIST(root, download=True) makes, from a "
                 "machine with internet into --data-dir"),
}
IDX_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
IDX_IMAGES, IDX_LABELS = 0x00000803, 0x00000801  # magic numbers: unsigned byte data, 3 and 1 dimensions
IDX_CLASSES = 10
IDX_TRAIN = 60000  # both datasets' training set size


def read_idx_dataset(name, data_dir, image_size, download, mirror=None):
    """The four IDX files, each plain or gzipped, in <data_dir> itself or in torchvision's
    <data_dir>/FashionMNIST/raw/ (<data_dir>/MNIST/raw/ for mnist), the first place that has all four.
    None there and download: fetch the four gzipped files into the raw/ folder (download.py), from `mirror` if given."""
    c = IDX[name]
    raw = os.path.join(data_dir, c.torchvision, "raw")
    files = _find_idx((data_dir, raw))
    if files is None:
        failed = " and download is off"
        if download:
            try:  # md5-checked, into `raw`, gzipped
                fetch(name, data_dir, mirror)
                files = _find_idx((data_dir, raw))
                failed = ", not even after a download that reported no error"
            except DataError as err:
                failed = f", and downloading them failed: {err}"
        if files is None:
            names = ", ".join(n for pair in IDX_FILES.values() for n in pair)
            raise DataError(f"{c.title} files {names} (each plain or .gz) not found in {data_dir} or {raw}{failed}; "
                            f"{c.elsewhere}")
    splits = {}
    for split, (images_name, labels_name) in IDX_FILES.items():
        images_path, labels_path = files[images_name], files[labels_name]
        (n, rows, cols), pixels = _read_idx(images_path, IDX_IMAGES)
        (m,), labels = _read_idx(labels_path, IDX_LABELS)
        if split == "test" and (rows, cols) != splits["train"].images.shape[2:]:
            h, w = splits["train"].images.shape[2:]
            raise DataError(f"{images_path} holds {rows}x{cols} images, {files['train-images-idx3-ubyte']} "
                            f"{h}x{w}; put the four files of one copy of {c.title} together")
        if m != n:
            raise DataError(f"{labels_path} holds {m} labels for the {n} images of {images_path}; "
                            f"put the four files of one copy of {c.title} together")
        if labels.max() >= IDX_CLASSES:
            i = int(np.argmax(labels >= IDX_CLASSES))
            raise DataError(f"{labels_path}: label {labels[i]} at index {i} is outside 0..{IDX_CLASSES - 1}; "
                            f"replace the file with an intact copy of {c.title}'s")
        # One gray channel -> three identical ones (see the note above); np.repeat makes a
        # new contiguous, writable array, so torch shares it without a warning.
        x = np.repeat(pixels.reshape(n, 1, rows, cols), 3, axis=1)
        splits[split] = TensorImages(torch.from_numpy(x), labels.astype(np.int64))
    mean = float(splits["train"].images[:, 0].float().mean()) / 255
    other = next(o for o in IDX if o != name)
    if len(splits["train"].labels) == IDX_TRAIN and abs(mean - IDX[other].mean) < abs(mean - c.mean):
        # The two datasets' files have the same names; their full training sets' mean pixel tells them apart.
        raise DataError(f"the files in {os.path.dirname(files['train-images-idx3-ubyte'])} look like "
                        f"{IDX[other].title}'s (mean pixel {mean:.3f}; {IDX[other].title} {IDX[other].mean}, "
                        f"{c.title} {c.mean}): use --dataset {other}, or point --data-dir at {c.title}'s files")
    side = splits["train"].images.shape[2:]
    if image_size is not None and (image_size, image_size) != tuple(side):
        raise DataError(f"{name} images are {side[0]}x{side[1]}, got --image-size {image_size}; leave it unset")
    return Data(splits["train"], {"test": splits["test"]}, IDX_CLASSES, (c.mean,) * 3, (c.std,) * 3)


def _find_idx(places):
    """{file name: path} for the first place that holds all four IDX files, or None. A plain file
    wins over its .gz: torchvision's raw/ keeps both, and the plain one reads without inflating."""
    for place in places:
        found = {}
        for name in (n for pair in IDX_FILES.values() for n in pair):
            found[name] = next((p for p in (os.path.join(place, name), os.path.join(place, name + ".gz"))
                                if os.path.isfile(p)), None)
        if all(found.values()):
            return found
    return None


def _read_idx(path, magic):
    """One IDX file of unsigned bytes -> (its dimensions, its values as a flat uint8 array).
    Anything but the header and exactly the values it announces is a DataError naming the file."""
    what = "images" if magic == IDX_IMAGES else "labels"
    fix = "replace it with an intact copy (download it again)"
    try:
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
            data = f.read()
    except EOFError as err:  # the gzip stream stops before its end marker: a download cut short
        raise DataError(f"{path} is cut short ({first_line(err)}); {fix}") from err
    except (OSError, zlib.error) as err:  # not gzip data at all, a corrupt stream, or unreadable
        raise DataError(f"{path} cannot be read ({first_line(err)}); {fix}") from err
    ndim = 3 if magic == IDX_IMAGES else 1
    head = 4 * (1 + ndim)
    got = struct.unpack(">i", data[:4])[0] if len(data) >= 4 else None
    if got != magic:
        if data[:2] == b"\x1f\x8b":  # gzip's own magic: a gzipped file without its .gz
            why = f"it is gzipped: name it {os.path.basename(path)}.gz"
        elif got in (IDX_IMAGES, IDX_LABELS):
            why = f"it is an IDX {'labels' if what == 'images' else 'images'} file; check the file names"
        else:
            why = fix
        shown = "none (the file is shorter than 4 bytes)" if got is None else f"0x{got & 0xFFFFFFFF:08x}"
        raise DataError(f"{path} is not an IDX {what} file: magic number {shown}, expected 0x{magic:08x}; {why}")
    if len(data) < head:
        raise DataError(f"{path} is cut short: {len(data)} bytes, less than its {head}-byte header; {fix}")
    dims = struct.unpack(f">{ndim}i", data[4:head])
    if min(dims) < 1:
        raise DataError(f"{path}: its header gives the sizes {' x '.join(map(str, dims))}, which holds no {what}; "
                        f"{fix}")
    need = int(np.prod(dims, dtype=np.int64))
    if len(data) - head != need:
        short = len(data) - head < need
        raise DataError(f"{path} is {'cut short' if short else 'longer than its header says'}: "
                        f"{len(data) - head} bytes after the header, its sizes {' x '.join(map(str, dims))} "
                        f"make {need}; {fix}")
    return dims, np.frombuffer(data, np.uint8, offset=head)
