"""Datasets, read from the on-disk layouts they are distributed in (paper appendix, "Datasets").

DATASETS     -- the registry: train.py's --dataset names, each a Dataset (its reader, the torchvision class
                whose files download.py fetches and the form they are published in, its normalisation and flips,
                its defaults, its human labels); everything that lists the datasets or asks one of these
                questions reads it
load_dataset -- name -> Data: one path for every dataset, locate -> fetch if absent (located) -> read
Synthetic    -- the settings of the synthetic data set (synthetic.py), load_dataset's `synthetic`

CIFAR-10/100, Fashion-MNIST, MNIST, SVHN and Food-101 are read by torchvision's dataset classes and readers, and
downloaded into the folders they read by download.py. What is ours is a one-line DataError for each way the
files can be wrong, and Fashion-MNIST/MNIST in a flat folder (torchvision's class reads only its raw/ folder).
Each reader imports what it uses of torchvision, and a record names its class (`source`): torchvision imports
torch._dynamo, about 3 s of every start, which a run on synthetic data or another dataset never needs.

Labels returned here are the *given* labels: clean for cifar10/100, folder and
synthetic (train.py adds synthetic noise or, for CIFAR, the human labels of CIFAR-N:
noise.py), real-noisy for food101, webvision, clothing1m and animal10n. fashionmnist, mnist and svhn (not in the paper)
are clean, and take synthetic noise as cifar10/100 do.
The types they are made of (Data, TensorImages, DataError, ...) are images.py; how batches are
drawn and augmented is batches.py.
"""
import gzip
import os
import shutil
import tempfile
import zlib
from typing import Callable, NamedTuple

import numpy as np
import torch
from PIL import Image

from training import clothing1m, download, tiny, webvision
from training.cifar_n import CIFAR10N, CIFAR100N
from training.download import fetch  # `download` is also the readers' flag: download if absent
# Data, DataError, FileImages, ... are images.py's; train.py reaches them through this module too.
from training.images import (IMAGENET_MEAN, IMAGENET_STD, BadImages, Data, DataError, FileImages, TensorImages,
                             first_line, label_array, open_image, require_file, to_rgb)
from training.synthetic import SYNTHETIC_MEAN, SYNTHETIC_STD, Synthetic, make_synthetic

CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


class Dataset(NamedTuple):
    """One dataset, as train.py's --dataset names it.

    read       -- its reader below: (name, data_dir, image_size, download, mirror, synthetic) -> Data
    title      -- its name in messages
    arch       -- --arch's default on it (appendix C; the optimisation preset follows from it, presets.py)
    source     -- the name of the torchvision.datasets class (its `torchvision()`) whose files, published md5 sums
                  and URLs download.fetch reads, and whose folder layout the reader reads; None: not published for
                  download (its files are put in place)
    form       -- the form `source` publishes its files in, as download.py reads them: download.archive (one tar
                  archive), download.gz_files (one .gz per file), download.split_files (one plain file per split);
                  None: not fetched
    mean, std  -- the training images' per-channel statistics (None: the reader's own, ImageNet's)
    flip       -- the paper's augmentation mirrors its images; False: crops only, since a mirrored 2, 3, 4, 5, 6, 7
                  or 9 is no digit at all (clothes and CIFAR's objects are the same thing mirrored)
    real_noise -- its given labels are already noisy, so --noise defaults to none
    pretrained -- --pretrained's default: start from ImageNet weights where the arch has them (the paper's Food-101)
    elsewhere  -- where else its files can be had, for the message when none are found
    human      -- the human labels of its training set that --noise human reads (cifar_n.py), or None
    about      -- what --help says of it, after its title
    files      -- its images are read from their files as it trains (DataLoader workers), never held in memory
                  (a folder's are, when they are small: decided as it is read)
    tiny       -- a tiny copy of its files in their released layout (training/tiny.py: a Copy), which the tests read
                  it, download it and train on; None: nothing to copy (synthetic)
    """
    read: Callable
    title: str
    arch: str
    source: str | None = None
    mean: tuple | None = None
    std: tuple | None = None
    flip: bool = True
    real_noise: bool = False
    pretrained: bool = False
    elsewhere: str = ""
    form: Callable | None = None
    human: object = None  # cifar_n.HumanLabels
    about: str = ""
    files: bool = False
    tiny: object = None  # tiny.Copy

    def published(self):
        """What a download of it brings (download.Published, read off `source` by `form`), or None: not fetched."""
        return None if self.source is None or self.form is None else self.form(self.torchvision())

    def torchvision(self):
        """Its torchvision.datasets class, `source`; None where it has none."""
        from torchvision import datasets as tv  # here: the module's docstring says why
        return None if self.source is None else getattr(tv, self.source)


def from_files(noise, name):
    """The line that refuses a noise that depends on each sample's image (noise.NoiseKind.rows) on a dataset read from
    its files as it trains."""
    return (f"--noise {noise} draws each label from its image, and {name} is read from image files as it trains "
            f"(resized and cropped at random), so no one image stands for a sample; use a dataset held in memory as "
            f"one tensor of images (cifar100, for one) or another --noise")


def load_dataset(name, data_dir, image_size=None, download=True, synthetic=Synthetic(), mirror=None):
    """name -> Data, by its reader in DATASETS. data_dir is unused for "synthetic". Raises DataError on bad input.

    download: fetch a dataset with a source into data_dir when it is not there (download.py), from `mirror` (a
    URL that holds the published files) if given, else from their own sites.

    image_size: food101/webvision/folder crop size (default 224/299/224); the side
    of synthetic images (default 32); cifar10/100 accept only None or 32, fashionmnist/mnist
    only None or their files' side (28).
    synthetic: a Synthetic (sizes, classes, difficulty, shift, seed); only the synthetic generator
    reads it (synthetic.py).
    """
    if name not in DATASETS:
        raise DataError(f"unknown dataset '{name}'; choose from {', '.join(DATASETS)}")
    if data_dir is None and name != "synthetic":
        raise DataError(f"dataset '{name}' reads files, but no data directory was given; pass --data-dir")
    return DATASETS[name].read(name, None if data_dir is None else os.fspath(data_dir), image_size, download,
                               mirror, synthetic)


def located(name, present, where, data_dir, download, mirror, how):
    """Locate, then fetch if absent: return once present() holds, downloading DATASETS[name]'s published files
    into data_dir first if need be. Otherwise one DataError that says what is missing (where), why no download
    brought it, and how to put it there by hand."""
    if present():
        return
    d = DATASETS[name]
    how = how or f"put {d.title}'s files under --data-dir"
    if not download:
        raise DataError(f"{where} not found and download is off; {how}")
    if d.source is None or d.form is None:
        raise DataError(f"{where} not found, and {name} is not published for download; {how}")
    try:  # the class's files read off it in its record's form: a record naming the wrong form fails here
        fetch(d.published(), data_dir, mirror)
    except DataError as err:
        raise DataError(f"{where} not found, and downloading it failed: {err}; or {how}") from err
    if not present():
        raise DataError(f"{where} not found, not even after a download that reported no error; {how}")


def _synthetic(name, data_dir, image_size, download, mirror, synthetic):
    """The synthetic data set (synthetic.py), generated in memory from its settings."""
    try:
        train, test = make_synthetic(synthetic, image_size or 32)
    except ValueError as err:
        raise DataError(str(err)) from err
    return Data(TensorImages(*train), {"test": TensorImages(*test)}, synthetic.classes, SYNTHETIC_MEAN, SYNTHETIC_STD)


# ------------------------------------------------------------ CIFAR-10/100

CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"


def _cifar(name, data_dir, image_size, download, mirror, synthetic):
    """The official python pickles, read by torchvision's class: <data_dir>/cifar-100-python/{train,test,meta} or
    <data_dir>/cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}."""
    d = DATASETS[name]
    c = d.torchvision()
    if image_size not in (None, 32):
        raise DataError(f"{name} images are 32x32, got --image-size {image_size}; leave it unset")
    folder = os.path.join(data_dir, c.base_folder)
    inside = os.path.basename(os.path.normpath(data_dir))
    folders = {x.torchvision().base_folder: n for n, x in DATASETS.items() if x.read is _cifar}
    if not os.path.isdir(folder) and inside in folders:
        # --data-dir names the extracted folder instead of its parent: say so now, rather than
        # "not found", or a download of the archive into the dataset's own folder
        parent = os.path.dirname(os.path.normpath(data_dir)) or os.curdir
        other = folders[inside]
        raise DataError(f"--data-dir {data_dir} is the {inside}/ folder itself; pass the folder that holds it: "
                        f"--data-dir {parent}" if other == name else
                        f"--data-dir {data_dir} is {other}'s {inside}/ folder itself, and {name} needs "
                        f"{c.base_folder}/; pass the folder that holds {c.base_folder}/ (for --dataset {other}: "
                        f"--data-dir {parent})")
    located(name, lambda: os.path.isdir(folder), f"{name} folder {folder}", data_dir, download, mirror,
            f"put the extracted {c.base_folder}/ folder (from {c.filename}, {CIFAR_URL}) under --data-dir")
    # Each pickle is checked against its published md5 once, here, before anything unpickles it: that check is
    # what makes unpickling them safe, and a file that fails it is named. torchvision's class would hash every
    # file again for each split it reads; told they are checked, it reads them (and checks its 1.5 KB meta file,
    # once a split, before unpickling it).
    bad = _not_published(c, folder)
    if bad is not None:
        raise bad
    checked = type(c.__name__, (c,), dict(_check_integrity=lambda self: True))
    try:
        sets = [checked(data_dir, train=split) for split in (True, False)]
    except RuntimeError as err:  # the meta file missing or not the published one: named, hashing it once more
        raise _not_published(c, folder, [(c.meta["filename"], c.meta["md5"])]) or DataError(
            f"torchvision cannot read {folder} ({first_line(err)}); re-extract {c.filename}") from err
    # torchvision's data is (N, 32, 32, 3), a view of the files' rows (R plane, G, B, each 32x32): permute back
    # to that memory, (N, 3, 32, 32), without a copy.
    train, test = [TensorImages(torch.from_numpy(s.data).permute(0, 3, 1, 2).contiguous(), label_array(s.targets))
                   for s in sets]
    return Data(train, {"test": test}, len(sets[0].classes), d.mean, d.std)


def _not_published(c, folder, files=None):
    """The DataError for the first of the CIFAR files (default: the data files, train_list + test_list) missing or
    not the published one, each hashed once; None when every one is published."""
    from torchvision.datasets.utils import calculate_md5  # here: the module's docstring says why
    fix = f"re-extract {c.filename} (or delete {folder} and let it download again)"
    for file, md5 in c.train_list + c.test_list if files is None else files:
        path = os.path.join(folder, file)
        if not os.path.isfile(path):
            return DataError(f"CIFAR file {path} not found; {fix}")
        got = calculate_md5(path)
        if got != md5:
            return DataError(f"{path} is not the published file (md5 {got}, published {md5}), so it is not "
                             f"unpickled; {fix}")
    return None


# ------------------------------------------------------- Fashion-MNIST, MNIST

IDX_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
IDX_CLASSES = 10
IDX_TRAIN = 60000  # the training set size of every IDX dataset here

# Representation: the gray channel is repeated to three, uint8 (N, 3, 28, 28) contiguous, as
# every TensorImages is. Every model in models.py takes 3 channels (their first conv, and
# mlp's Linear(3 * side * side)), and batches.py normalises and augments 3-channel uint8
# batches channel by channel; three copies cost 141 MB for the training set (47 MB as one
# channel) and change nothing else. mean/std are the training set's, the same on each channel.


def _idx(name, data_dir, image_size, download, mirror, synthetic):
    """The four IDX files, each plain or gzipped, in <data_dir> itself (Debian's dataset-fashion-mnist installs
    them so) or in torchvision's <data_dir>/FashionMNIST/raw/ (<data_dir>/MNIST/raw/ for mnist), the first place
    that has all four, read by torchvision's readers. None there and download: fetch them into raw/ (download.py)."""
    d = DATASETS[name]
    places = (data_dir,) + ((os.path.join(data_dir, d.source, "raw"),) if d.source else ())
    names = ", ".join(n for pair in IDX_FILES.values() for n in pair)
    located(name, lambda: _find_idx(places) is not None,
            f"{d.title} files {names} (each plain or .gz) in {' or '.join(places)}", data_dir, download, mirror,
            d.elsewhere)
    # here, as each reader imports what it uses of torchvision: the module's docstring says why
    from torchvision.datasets.mnist import read_image_file, read_label_file
    files = _find_idx(places)
    splits = {}
    for split, (images_name, labels_name) in IDX_FILES.items():
        images_path, labels_path = files[images_name], files[labels_name]
        x, y = _read_idx(read_image_file, images_path), _read_idx(read_label_file, labels_path)  # (N, H, W), (M,)
        n, rows, cols = x.shape
        if split == "test" and (rows, cols) != splits["train"].images.shape[2:]:
            h, w = splits["train"].images.shape[2:]
            raise DataError(f"{images_path} holds {rows}x{cols} images, {files['train-images-idx3-ubyte']} "
                            f"{h}x{w}; put the four files of one copy of {d.title} together")
        if len(y) != n or n == 0:
            raise DataError(f"{labels_path} holds {len(y)} labels for the {n} images of {images_path}; "
                            f"put the four files of one copy of {d.title} together")
        if y.max() >= IDX_CLASSES:
            i = int(torch.argmax((y >= IDX_CLASSES).int()))
            raise DataError(f"{labels_path}: label {int(y[i])} at index {i} is outside 0..{IDX_CLASSES - 1}; "
                            f"replace the file with an intact copy of {d.title}'s")
        # One gray channel -> three identical ones (see the note above); np.repeat makes a new contiguous
        # array, and four times as fast as torch's repeat.
        splits[split] = TensorImages(torch.from_numpy(np.repeat(x.numpy()[:, None], 3, axis=1)), y.numpy())
    mean = float(splits["train"].images[:, 0].float().mean()) / 255
    idx = {n: x for n, x in DATASETS.items() if x.read is _idx}
    nearest = min(idx, key=lambda n: abs(mean - idx[n].mean[0]))
    if len(splits["train"].labels) == IDX_TRAIN and nearest != name:
        # The IDX datasets' files have the same names; their full training sets' mean pixel tells them apart.
        other = idx[nearest]
        raise DataError(f"the files in {os.path.dirname(files['train-images-idx3-ubyte'])} look like "
                        f"{other.title}'s (mean pixel {mean:.3f}; {other.title} {other.mean[0]}, "
                        f"{d.title} {d.mean[0]}): use --dataset {nearest}, or point --data-dir at {d.title}'s files")
    side = splits["train"].images.shape[2:]
    if image_size is not None and (image_size, image_size) != tuple(side):
        raise DataError(f"{name} images are {side[0]}x{side[1]}, got --image-size {image_size}; leave it unset")
    return Data(splits["train"], {"test": splits["test"]}, IDX_CLASSES, d.mean, d.std)


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


def _read_idx(read, path):
    """torchvision's read_image_file or read_label_file on one IDX file; a bad file is a DataError naming it.

    Those readers open plain files only, and torchvision's class inflates a .gz into raw/ only when it matches the
    published md5, downloading it otherwise. Debian's dataset-fashion-mnist installs recompressed .gz files (another
    md5) in a folder a user cannot write, so a .gz is inflated to a temporary file for the reader instead."""
    try:
        if not path.endswith(".gz"):
            return read(path)
        with gzip.open(path) as packed, tempfile.NamedTemporaryFile(prefix="idx-") as plain:
            shutil.copyfileobj(packed, plain, 1 << 20)
            plain.flush()
            return read(plain.name)
    except (OSError, EOFError, zlib.error, AssertionError, ValueError, TypeError, RuntimeError) as err:
        # a gzip stream cut short or no gzip at all, or torchvision's reader: a magic number of no IDX file (its
        # bare assert), a file shorter or longer than its header says (view), labels where images belong
        why = "its magic number is no IDX file's" if isinstance(err, AssertionError) else first_line(err)
        what = "labels" if read.__name__ == "read_label_file" else "images"
        raise DataError(f"{path} is not an intact IDX {what} file "
                        f"({why}); replace it with an intact copy (download it again)") from err


# ---------------------------------------------------------------------- SVHN

def _split_arrays(name, data_dir, image_size, download, mirror, synthetic):
    """One file per split in <data_dir>/<Class>/ (SVHN's train_32x32.mat and test_32x32.mat, where the download puts
    them), read by torchvision's class, which checks each against its published md5 before it reads it (through
    scipy, for SVHN's MATLAB files). Its images are (N, 3, H, W) uint8; mean and std are the training set's own."""
    d = DATASETS[name]
    c, published = d.torchvision(), d.published()
    folder = os.path.join(data_dir, published.folder)
    files = [os.path.join(folder, f) for f, _, _ in published.files]
    located(name, lambda: all(os.path.isfile(f) for f in files), f"{d.title} files {' and '.join(files)}", data_dir,
            download, mirror, d.elsewhere)
    splits = {}
    for split, path in zip(("train", "test"), files):
        try:
            s = c(folder, split=split)
        except RuntimeError as err:  # torchvision's "Dataset not found or corrupted": not the published md5
            raise DataError(f"{path} is not the published file (its md5 differs from torchvision's {c.__name__}), so "
                            f"it is not read; delete it and let it download again") from err
        except ImportError as err:  # torchvision imports scipy only to read these files
            raise DataError(f"torchvision's {c.__name__} reads {path} with scipy, which is not installed "
                            f"({first_line(err)}); pip install scipy") from err
        splits[split] = TensorImages(torch.from_numpy(np.ascontiguousarray(s.data)), label_array(s.labels))
    side = tuple(splits["train"].images.shape[2:])
    if image_size is not None and (image_size, image_size) != side:
        raise DataError(f"{name} images are {side[0]}x{side[1]}, got --image-size {image_size}; leave it unset")
    mean, std = _channel_stats(splits["train"].images)
    k = 1 + int(max(s.labels.max() for s in splits.values()))  # SVHN's 10 digits; its class names no number
    return Data(splits["train"], {"test": splits["test"]}, k, mean, std)


def _channel_stats(x):
    """Per-channel mean and std of uint8 images (N, 3, H, W), as fractions of 255: exact, from each channel's
    histogram (no float copy of the images)."""
    v = torch.arange(256, dtype=torch.float64) / 255
    stats = []
    for ch in range(x.shape[1]):
        h = torch.bincount(x[:, ch].reshape(-1), minlength=256).double()
        m = float((h * v).sum() / h.sum())
        stats.append((m, float(((h * (v - m) ** 2).sum() / h.sum()).sqrt())))
    return tuple(m for m, _ in stats), tuple(sd for _, sd in stats)


# ------------------------------------------------------------------- Food-101

def _food101(name, data_dir, image_size, download, mirror, synthetic):
    """torchvision's Food101 on <data_dir>/food-101/{meta/{train,test}.json, images/}."""
    from torchvision import datasets as tv  # here: the module's docstring says why
    root, size = os.path.join(data_dir, "food-101"), image_size or 224
    meta, images = os.path.join(root, "meta"), os.path.join(root, "images")
    located(name, lambda: os.path.isdir(meta) and os.path.isdir(images), f"Food-101 folders {meta} and {images}",
            data_dir, download, mirror, DATASETS[name].elsewhere)  # 5 GB
    splits = {}
    for split in ("train", "test"):
        path = os.path.join(meta, f"{split}.json")
        try:  # class index = sorted class names (torchvision's, and classes.txt's order)
            ds = tv.Food101(data_dir, split=split)
        except (OSError, ValueError, AttributeError, TypeError) as err:  # no file, no JSON, or not a dict of lists
            raise DataError(f"{path} is missing or not a dict of lists ({first_line(err)}); "
                            f"re-extract food-101.tar.gz") from err
        if split == "test" and ds.classes != splits["train"][0]:  # torchvision would number them differently
            raise DataError(f"{path} has other classes than meta/train.json; re-extract food-101.tar.gz")
        if not ds._image_files:
            raise DataError(f"{path} lists no images; re-extract food-101.tar.gz")
        require_file(ds._image_files[0], path)
        splits[split] = ds.classes, FileImages([os.fspath(p) for p in ds._image_files], label_array(ds._labels),
                                               size, "food101")
    return Data(splits["train"][1], {"test": splits["test"][1]}, len(splits["train"][0]), IMAGENET_MEAN, IMAGENET_STD)


# ----------------------------------------------------------------- Clothing1M

def _clothing1m(name, data_dir, image_size, download, mirror, synthetic):
    """Clothing1M (clothing1m.py) in its released layout, never downloaded: its files are put in place by hand."""
    files = [os.path.join(data_dir, f) for f in clothing1m.FILES]
    images = os.path.join(data_dir, "images")
    located(name, lambda: os.path.isdir(images) and all(os.path.isfile(f) for f in files),
            f"Clothing1M's {images}{os.sep} and key lists {', '.join(clothing1m.FILES)} in {data_dir}", data_dir,
            download, mirror, DATASETS[name].elsewhere)
    return clothing1m.load(data_dir, image_size or 224)


# -------------------------------------------------------------- ANIMAL-10N

def _animal10n(name, data_dir, image_size, download, mirror, synthetic):
    """ANIMAL-10N (Song et al. 2019, SELFIE) in its released layout: <data_dir>/training/ and <data_dir>/testing/,
    64x64 JPEGs named <label>_<id>.jpg. The label in a training file's name is the given label, noisy as the web
    search and the crowd that labelled it left it (about 8% wrong, by the authors' estimate); testing/ is the test
    set. Never downloaded: its authors give it on request. 55,000 small images: decoded once into memory."""
    layout = f"ANIMAL-10N's training{os.sep} and testing{os.sep} folders of <label>_<id>.jpg in {data_dir}"
    folders = [os.path.join(data_dir, s) for s in ("training", "testing")]
    located(name, lambda: all(os.path.isdir(f) for f in folders), layout, data_dir, download, mirror,
            DATASETS[name].elsewhere)
    splits = []
    for folder in folders:
        files = sorted(f for f in os.listdir(folder) if f.lower().endswith((".jpg", ".jpeg", ".png")))
        if not files:
            raise DataError(f"{folder} holds no images; expected {layout}")
        head = [f.split("_", 1)[0] for f in files]
        bad = next((f for f, h in zip(files, head) if not h.isdigit() or "_" not in f or
                    int(h) >= ANIMAL10N_CLASSES), None)
        if bad is not None:
            raise DataError(f"{os.path.join(folder, bad)}: not named <label>_<id>.jpg with a label in "
                            f"0..{ANIMAL10N_CLASSES - 1}, as ANIMAL-10N's files are; put back the released "
                            f"{os.path.basename(folder)}{os.sep} folder")
        splits.append(([os.path.join(folder, f) for f in files], label_array([int(h) for h in head])))
    train, test = in_memory_images(splits, image_size)
    return Data(train, {"test": test}, ANIMAL10N_CLASSES, IMAGENET_MEAN, IMAGENET_STD)


ANIMAL10N_CLASSES = 10  # cat, lynx, wolf, coyote, cheetah, jaguar, chimpanzee, orangutan, hamster, guinea pig


# -------------------------------------------------------------- image folder

def _webvision(name, data_dir, image_size, download, mirror, synthetic):
    """mini-WebVision (webvision.py), never downloaded: its files are put in place by hand."""
    return webvision.load(data_dir, image_size or 299)


def _folder(name, data_dir, image_size, download, mirror, synthetic, small=64):
    """torchvision ImageFolder layout <data_dir>/{train,test}/<class>/<image>.

    Folders of small images (<= 64 px, or image_size <= 64) are decoded once into
    memory and then trained like CIFAR; anything larger is read by DataLoader workers.
    """
    # here, as each reader imports what it uses of torchvision: the module's docstring says why
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset
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

    train, test = in_memory_images([(splits[s][1], splits[s][2]) for s in ("train", "test")], image_size)
    return Data(train, {"test": test}, k, IMAGENET_MEAN, IMAGENET_STD)


def in_memory_images(splits, image_size=None):
    """Small images decoded once into memory, RGB, resized to image_size x image_size if given: a TensorImages per
    (paths, labels) of splits. Every file that fails to decode is reported at once (BadImages)."""
    def decode(im):
        im = to_rgb(im)
        if image_size is not None and im.size != (image_size, image_size):
            im = im.resize((image_size, image_size), Image.BILINEAR)  # PIL antialiases when shrinking
        return np.asarray(im)  # (H, W, 3)

    images, bad = [], []
    for paths, _ in splits:  # decode everything, then report every file that failed at once
        images.append([])
        for p in paths:
            try:
                images[-1].append(open_image(p, decode))
            except DataError as err:
                bad.append((p, first_line(err.__cause__)))
    if bad:
        raise BadImages(bad)
    shapes = {}  # (H, W) -> the first file of that size
    for im, (paths, _) in zip(images, splits):
        for x, p in zip(im, paths):
            shapes.setdefault(x.shape[:2], p)
    if len(shapes) > 1:
        (s1, p1), (s2, p2) = list(shapes.items())[:2]
        raise DataError(f"images differ in size ({p1} is {s1[1]}x{s1[0]}, {p2} is {s2[1]}x{s2[0]}); pass "
                        f"--image-size N to resize them all to NxN")
    return [TensorImages(torch.from_numpy(np.stack(im)).permute(0, 3, 1, 2).contiguous(), labels)
            for im, (_, labels) in zip(images, splits)]


DATASETS = {
    "cifar100": Dataset(_cifar, "CIFAR-100", "resnet34", "CIFAR100", CIFAR100_MEAN, CIFAR100_STD,
                        form=download.archive, human=CIFAR100N, about="the paper's", tiny=tiny.Copy(tiny.write_cifar)),
    "cifar10": Dataset(_cifar, "CIFAR-10", "resnet34", "CIFAR10", CIFAR10_MEAN, CIFAR10_STD, form=download.archive,
                       human=CIFAR10N, tiny=tiny.Copy(tiny.write_cifar10)),
    "fashionmnist": Dataset(_idx, "Fashion-MNIST", "resnet18", "FashionMNIST", (0.2860,) * 3, (0.3530,) * 3,
                            elsewhere="on Debian/Ubuntu `apt-get install dataset-fashion-mnist` puts them in "
                                      "/usr/share/datasets/fashion-mnist/ (pass --data-dir "
                                      "/usr/share/datasets/fashion-mnist)",
                            form=download.gz_files, about="28x28 grayscale from IDX files (Debian: apt-get install "
                                                         "dataset-fashion-mnist, then --data-dir "
                                                         "/usr/share/datasets/fashion-mnist)",
                            tiny=tiny.Copy(lambda root: tiny.write_idx(root, seed=0))),
    "mnist": Dataset(_idx, "MNIST", "cnn", "MNIST", (0.1307,) * 3, (0.3081,) * 3, flip=False,
                     elsewhere="Debian/Ubuntu package only Fashion-MNIST (dataset-fashion-mnist), not MNIST: copy the "
                               "four files, or the MNIST/raw/ folder torchvision.datasets.MNIST(root, download=True) "
                               "makes, from a machine with internet into --data-dir",
                     form=download.gz_files, about="28x28 grayscale from IDX files",
                     tiny=tiny.Copy(lambda root: tiny.write_idx(root, seed=1))),
    "svhn": Dataset(_split_arrays, "SVHN", "resnet34", "SVHN", flip=False,
                    elsewhere="put train_32x32.mat and test_32x32.mat (http://ufldl.stanford.edu/housenumbers/) in "
                              "SVHN/ under --data-dir",
                    form=download.split_files, about="32x32 house numbers from its .mat files (needs scipy)",
                    tiny=tiny.Copy(tiny.write_svhn)),
    "food101": Dataset(_food101, "Food-101", "resnet50_imagenet", "Food101", real_noise=True, pretrained=True,
                       elsewhere="put the extracted food-101/ folder (food-101.tar.gz, "
                                 "https://data.vision.ee.ethz.ch/cvl/datasets_extra/food-101/) under --data-dir",
                       form=download.archive, about="the paper's", files=True,
                       tiny=tiny.Copy(tiny.write_food101, ("--image-size", "32"))),
    "webvision": Dataset(_webvision, "mini-WebVision", "inception_resnet_v2", real_noise=True, about="the paper's",
                         files=True, tiny=tiny.Copy(tiny.write_webvision, ("--image-size", "32"))),
    "clothing1m": Dataset(_clothing1m, "Clothing1M", "resnet50_imagenet", real_noise=True, pretrained=True,
                          elsewhere="Clothing1M is not downloadable: ask its authors for it (Xiao et al. 2015, "
                                    "https://github.com/Cysu/noisy_label) and put images/ and its key lists in "
                                    "--data-dir",
                          about="real-world noisy labels, tested on its clean test set", files=True,
                          tiny=tiny.Copy(tiny.write_clothing1m, ("--image-size", "32"))),
    "animal10n": Dataset(_animal10n, "ANIMAL-10N", "resnet18", real_noise=True,
                         elsewhere="ANIMAL-10N is not downloadable: ask its authors for it (Song et al. 2019, "
                                   "https://dm.kaist.ac.kr/datasets/animal-10n/) and put its training/ and testing/ "
                                   "folders in --data-dir",
                         about="real-world noisy labels, 64x64, held in memory", tiny=tiny.Copy(tiny.write_animal10n)),
    "folder": Dataset(_folder, "an image folder", "resnet18", about="any ImageFolder tree",
                      tiny=tiny.Copy(tiny.write_folder, ("--image-size", "16"))),
    "synthetic": Dataset(_synthetic, "synthetic", "cnn", about="generated in memory, for CPU runs"),
}
