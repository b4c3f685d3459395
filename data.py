"""Datasets and augmentation (paper appendix, "Datasets and Data Augmentation").

DATASETS        -- the names load_dataset accepts
DataError       -- bad or missing data; its message is one line that says what to do
TensorImages    -- a dataset that lives in memory as uint8 (N, 3, H, W): cifar100, synthetic, small folders
FileImages      -- a dataset read from disk by DataLoader workers: food101, webvision, large folders
Data            -- train set, named test sets, number of classes, normalisation mean/std
load_dataset    -- name -> Data, from the on-disk layout each dataset is distributed in
augment_batch   -- the CIFAR augmentation (pad 4, random crop, flip) for a whole batch on its device
normalize       -- uint8 (N, 3, H, W) -> float (x/255 - mean)/std
file_transforms -- the paper's crops for Food-101 and WebVision, as torchvision transforms
IndexedFiles    -- Dataset over FileImages that returns (image, index); labels stay with the caller
take            -- the subset of a TensorImages / FileImages at some indices (validation split)
Batches         -- an epoch's (x, y, y_clean) batches on the device, sharded over DDP ranks

Labels returned here are the *given* labels: clean for cifar100, folder and
synthetic (train.py adds synthetic noise), real-noisy for food101 and webvision.
"""
import json
import os
import pickle
import warnings
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
import torchvision.transforms as T
from PIL import Image
from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

DATASETS = ("cifar100", "food101", "webvision", "folder", "synthetic")
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# The synthetic generator is built to have pixel mean ~128 and std ~57 in every channel.
SYNTHETIC_MEAN, SYNTHETIC_STD = (0.5, 0.5, 0.5), (0.225, 0.225, 0.225)
WEBVISION_URL = "https://data.vision.ee.ethz.ch/cvl/webvision/download.html"


class DataError(ValueError):
    """Bad or missing data. str(error) is one line: what, where, what to do."""


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


def _first_line(err):
    """An exception's message cut to one line, for DataError messages."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


def _labels(values):
    return np.asarray(values, dtype=np.int64).reshape(-1)


def _require_file(path, listed_in):
    """Fail now, with the path, rather than in a DataLoader worker at epoch 1."""
    if not os.path.isfile(path):
        raise DataError(f"image {path} not found, though {listed_in} lists it; "
                        f"check that the dataset is completely extracted under --data-dir")


def load_dataset(name, data_dir, image_size=None, seed=0, download=True, synthetic_size=2000,
                 synthetic_classes=10, synthetic_test_size=1000, synthetic_difficulty=2.0):
    """name -> Data. data_dir is unused for "synthetic". Raises DataError on bad input.

    image_size: food101/webvision/folder crop size (default 224/299/224); the side
    of synthetic images (default 32); cifar100 accepts only None or 32.
    seed and synthetic_*: only the synthetic generator reads them (see _synthetic).
    """
    if name not in DATASETS:
        raise DataError(f"unknown dataset '{name}'; choose from {', '.join(DATASETS)}")
    if name == "synthetic":
        return _synthetic(synthetic_size, synthetic_test_size, synthetic_classes,
                          synthetic_difficulty, seed, image_size or 32)
    if data_dir is None:
        raise DataError(f"dataset '{name}' reads files, but no data directory was given; pass --data-dir")
    data_dir = os.fspath(data_dir)
    if name == "cifar100":
        return _cifar100(data_dir, image_size, download)
    if name == "food101":
        return _food101(data_dir, image_size or 224, download)
    if name == "webvision":
        return _webvision(data_dir, image_size or 299)
    return _folder(data_dir, image_size)


# ------------------------------------------------------------------ CIFAR-100

def _cifar100(data_dir, image_size, download):
    """The official python pickles in <data_dir>/cifar-100-python/{train,test,meta}."""
    if image_size not in (None, 32):
        raise DataError(f"cifar100 images are 32x32, got --image-size {image_size}; leave it unset")
    folder = os.path.join(data_dir, "cifar-100-python")
    if not os.path.isdir(folder):
        how = ("put the extracted cifar-100-python/ folder (from cifar-100-python.tar.gz, "
               "https://www.cs.toronto.edu/~kriz/cifar.html) under --data-dir")
        if not download:
            raise DataError(f"CIFAR-100 folder {folder} not found and download is off; {how}")
        try:
            for train in (True, False):
                torchvision.datasets.CIFAR100(data_dir, train=train, download=True)
        except Exception as err:
            raise DataError(f"CIFAR-100 folder {folder} not found and the download failed "
                            f"({_first_line(err)}); {how}") from err
    # We unpickle the files ourselves (as torchvision does, encoding="latin1")
    # instead of using torchvision's CIFAR100 class: that class checks md5 sums on
    # every load, so this code path could not be tested on tiny pickles.
    names = _unpickle(os.path.join(folder, "meta"), {"fine_label_names": list})["fine_label_names"]
    k = len(names)
    tests = {}
    for split in ("train", "test"):
        path = os.path.join(folder, split)
        d = _unpickle(path, {"data": np.ndarray, "fine_labels": list})
        x, y = d["data"], _labels(d["fine_labels"])
        if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != 3072 or len(y) != len(x):
            raise DataError(f"{path}: expected 'data' uint8 (N, 3072) and N 'fine_labels', got "
                            f"{x.dtype} {x.shape} and {len(y)} labels; re-extract cifar-100-python.tar.gz")
        if len(y) and not 0 <= y.min() <= y.max() < k:
            raise DataError(f"{path}: fine_labels outside 0..{k - 1}; re-extract cifar-100-python.tar.gz")
        # Each row is the R plane, then G, then B, each 32x32 row-major.
        tests[split] = TensorImages(torch.from_numpy(x.reshape(-1, 3, 32, 32).copy()), y)
    train = tests.pop("train")
    return Data(train, tests, k, CIFAR100_MEAN, CIFAR100_STD)


def _unpickle(path, keys):
    """Load one CIFAR pickle and check it is a dict holding `keys` of the given types."""
    if not os.path.isfile(path):
        raise DataError(f"CIFAR-100 file {path} not found; re-extract cifar-100-python.tar.gz under --data-dir")
    try:
        with open(path, "rb") as f:
            d = pickle.load(f, encoding="latin1")
    except Exception as err:
        raise DataError(f"{path} is not a readable CIFAR pickle ({_first_line(err)}); "
                        f"re-extract cifar-100-python.tar.gz") from err
    for key, kind in keys.items():
        if not isinstance(d, dict) or not isinstance(d.get(key), kind):
            raise DataError(f"{path}: expected a dict with '{key}' ({kind.__name__}); "
                            f"re-extract cifar-100-python.tar.gz")
    return d


# ------------------------------------------------------------------- Food-101

def _food101(data_dir, size, download):
    """torchvision's layout <data_dir>/food-101/{meta/{train,test}.json, images/}."""
    root = os.path.join(data_dir, "food-101")
    meta, images = os.path.join(root, "meta"), os.path.join(root, "images")
    if not (os.path.isdir(meta) and os.path.isdir(images)):
        how = ("put the extracted food-101/ folder (food-101.tar.gz, "
               "https://data.vision.ee.ethz.ch/cvl/datasets_extra/food-101/) under --data-dir")
        if not download:
            raise DataError(f"Food-101 folders {meta} and {images} not found and download is off; {how}")
        try:  # torchvision's downloader (5 GB, md5-checked)
            torchvision.datasets.Food101(data_dir, split="train", download=True)
        except Exception as err:
            raise DataError(f"Food-101 not found at {root} and the download failed "
                            f"({_first_line(err)}); {how}") from err
    splits, classes = {}, None
    for split in ("train", "test"):
        path = os.path.join(meta, f"{split}.json")
        try:
            with open(path) as f:
                index = json.load(f)  # class name -> ["class_name/image_id", ...]
            assert isinstance(index, dict) and all(isinstance(v, list) for v in index.values())
        except (OSError, ValueError, AssertionError) as err:
            raise DataError(f"{path} is missing or not a dict of lists ({_first_line(err)}); "
                            f"re-extract food-101.tar.gz") from err
        # Class index = sorted class names, as in torchvision's Food101 (and classes.txt).
        classes = classes or sorted(index)
        if sorted(index) != classes:
            raise DataError(f"{path} has other classes than meta/train.json; re-extract food-101.tar.gz")
        idx = {c: i for i, c in enumerate(classes)}
        paths = [os.path.join(images, *f"{rel}.jpg".split("/")) for c in index for rel in index[c]]
        labels = _labels([idx[c] for c in index for _ in index[c]])
        if not paths:
            raise DataError(f"{path} lists no images; re-extract food-101.tar.gz")
        _require_file(paths[0], path)
        splits[split] = FileImages(paths, labels, size, "food101")
    return Data(splits["train"], {"test": splits["test"]}, len(classes), IMAGENET_MEAN, IMAGENET_STD)


# ------------------------------------------------------------- mini-WebVision

def _webvision(data_dir, size, num_classes=50):
    """The "mini" setting of Jiang et al. 2018: the first 50 classes of the Google subset.

    Tests: WebVision's own validation images, and ILSVRC12 val for the same 50
    synsets if <data_dir>/imagenet/val/<wnid>/ exists (the paper's test set).
    """
    info = os.path.join(data_dir, "info")
    layout = (f"expected under {data_dir}: info/{{train_filelist_google,val_filelist,synsets}}.txt, google/, "
              f"val_images_256/ (and imagenet/val/<wnid>/ for ILSVRC12 val); download from {WEBVISION_URL}")
    wnids = [line.split()[0] for line in _read_lines(os.path.join(info, "synsets.txt"), layout) if line.strip()]
    if len(wnids) < num_classes:
        raise DataError(f"{info}/synsets.txt lists {len(wnids)} synsets, expected 1000 "
                        f"(at least {num_classes}); {layout}")
    train = _filelist(os.path.join(info, "train_filelist_google.txt"), data_dir, num_classes, size, layout)
    tests = {"webvision_val": _filelist(os.path.join(info, "val_filelist.txt"),
                                        os.path.join(data_dir, "val_images_256"), num_classes, size, layout)}
    val = os.path.join(data_dir, "imagenet", "val")
    if not os.path.isdir(val):
        warnings.warn(f"ILSVRC12 val not found at {val}, so only webvision_val is evaluated; the paper "
                      f"tests on it: put the images in class folders there, imagenet/val/<wnid>/*.JPEG "
                      f"(as ImageNet's valprep.sh makes)")
        return Data(train, tests, num_classes, IMAGENET_MEAN, IMAGENET_STD)
    # label = the wnid's line in synsets.txt, not its rank among the folders present
    present = {w: i for i, w in enumerate(wnids[:num_classes]) if os.path.isdir(os.path.join(val, w))}
    try:
        samples = make_dataset(val, present, extensions=IMG_EXTENSIONS)
    except (OSError, ValueError) as err:  # no class folder present, or an empty one
        raise DataError(f"no ILSVRC12 val images for the first {num_classes} synsets of info/synsets.txt at {val} "
                        f"({_first_line(err)}); expected imagenet/val/<wnid>/*.JPEG (ImageNet's valprep.sh)") from err
    if len(present) < num_classes:
        warnings.warn(f"ILSVRC12 val at {val} lacks {num_classes - len(present)} of the {num_classes} "
                      f"class folders; ilsvrc12_val covers only the others")
    tests["ilsvrc12_val"] = FileImages([p for p, _ in samples], _labels([y for _, y in samples]), size, "webvision")
    return Data(train, tests, num_classes, IMAGENET_MEAN, IMAGENET_STD)


def _read_lines(path, layout):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except OSError as err:
        raise DataError(f"WebVision file {path} not readable ({_first_line(err)}); {layout}") from err


def _filelist(path, image_dir, num_classes, size, layout):
    """Lines "relative/path.jpg label" -> FileImages of the lines with label < num_classes."""
    paths, labels = [], []
    for n, line in enumerate(_read_lines(path, layout), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not parts[1].isdigit():
            raise DataError(f"{path} line {n}: expected 'path label', got '{line.strip()}'; {layout}")
        if int(parts[1]) < num_classes:
            paths.append(os.path.join(image_dir, parts[0]))
            labels.append(int(parts[1]))
    if not paths:
        raise DataError(f"{path} lists no images of classes 0..{num_classes - 1}; {layout}")
    _require_file(paths[0], path)
    return FileImages(paths, _labels(labels), size, "webvision")


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
            raise DataError(f"no images at {root} ({_first_line(err)}); {layout}") from err
        if split == "test" and classes != splits["train"][0]:
            diff = sorted(set(classes) ^ set(splits["train"][0]))
            raise DataError(f"{root} has other classes than {data_dir}/train (e.g. '{diff[0]}'); "
                            f"give test/ the same class folders as train/")
        splits[split] = (classes, [p for p, _ in samples], _labels([c for _, c in samples]))
    k = len(splits["train"][0])
    if image_size is not None:
        in_memory = image_size <= small
    else:  # read image headers until one is large; all of them only if all are small
        sizes = {}  # (w, h) -> the folder it was first seen in
        for split, path in ((s, p) for s in ("train", "test") for p in splits[s][1]):
            wh = _open(path, lambda im: im.size)
            sizes.setdefault(wh, os.path.join(data_dir, split))
            if max(wh) > small:
                break
        in_memory = max(max(wh) for wh in sizes) <= small
        if in_memory and len(sizes) > 1:
            (w1, h1), (w2, h2) = list(sizes)[:2]
            raise DataError(f"images in {' and '.join(sorted(set(sizes.values())))} differ in size "
                            f"(e.g. {w1}x{h1} and {w2}x{h2}); pass --image-size N to resize them all to NxN")
    if not in_memory:
        train, test = [FileImages(splits[s][1], splits[s][2], image_size or 224, "folder") for s in ("train", "test")]
        return Data(train, {"test": test}, k, IMAGENET_MEAN, IMAGENET_STD)

    def decode(im):
        im = _to_rgb(im)
        if image_size is not None and im.size != (image_size, image_size):
            im = im.resize((image_size, image_size), Image.BILINEAR)  # PIL antialiases when shrinking
        return np.asarray(im)  # (H, W, 3)

    train, test = [TensorImages(torch.from_numpy(np.stack([_open(p, decode) for p in splits[s][1]]))
                                .permute(0, 3, 1, 2).contiguous(), splits[s][2]) for s in ("train", "test")]
    return Data(train, {"test": test}, k, IMAGENET_MEAN, IMAGENET_STD)


# ------------------------------------------------------------------ synthetic

def _synthetic(n_train, n_test, k, difficulty, seed, size, shift=4, band=4, n_freq=4, chunk=8192):
    """Learnable class-dependent images, generated in memory from `seed`; not in the paper.

    Each class owns n_freq of the ~40 plane waves with at most `band` cycles per
    image, each with its own colour and phase. A sample is its class's waves,
    shifted by up to `shift` px, times a contrast in [0.7, 1.3], plus Gaussian
    "clutter": random complex amplitudes on *all* the low-frequency waves. The
    clutter lives in the same band as the signal, so no filter removes it;
    `difficulty` is its pixel std over the signal's (0: no clutter). The default
    2.0 keeps a small CNN clearly below 100% after 10 epochs on 2,000 clean
    images, so label noise has room to hurt. Brightness jitter sits in the DC term.
    Built in the Fourier domain: a shift is a phase, and one irfft2 per chunk makes
    CIFAR-100-sized data (50k + 10k images) in about 3 s on 2 CPU cores.
    """
    if min(n_train, n_test) < 1 or k < 2 or n_train < k or difficulty < 0 or size < 8:
        raise DataError(f"synthetic data needs >= 2 classes, >= 1 train image per class, >= 1 test image, "
                        f"difficulty >= 0 and image size >= 8; got {n_train} train, {n_test} test, {k} classes, "
                        f"difficulty {difficulty}, size {size}")
    band = min(band, size // 2 - 1)  # below the Nyquist frequency
    r_class, r_train, r_test = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3)]
    fy = np.fft.fftfreq(size, 1 / size)[:, None]  # (size, 1) cycles per image
    fx = np.fft.rfftfreq(size, 1 / size)[None]    # (1, size//2 + 1)
    low = (np.abs(fy) <= band) & (fx <= band) & ((fx > 0) | (fy > 0))  # one of each conjugate pair, no DC
    iy, ix = np.nonzero(low)
    n_waves = len(iy)
    picks = np.argsort(r_class.random((k, n_waves)), axis=1)[:, :n_freq]  # (k, n_freq)
    waves = np.zeros((k, 3, n_waves), np.complex64)
    waves[np.arange(k)[:, None, None], np.arange(3)[None, :, None], picks[:, None]] = (
        r_class.standard_normal((k, 3, n_freq)) * np.exp(2j * np.pi * r_class.random((k, 1, n_freq))))
    # Each wave adds 2|a|^2 to a pixel's variance: E = 2 n_freq for a class's waves.
    unit = 1 / np.sqrt(2 * n_freq * (1 + difficulty ** 2))
    sets = []
    for rng, n in ((r_train, n_train), (r_test, n_test)):
        y = rng.permutation(np.arange(n) % k)  # balanced classes
        dy, dx = rng.integers(-shift, shift + 1, (2, n, 1))
        contrast = rng.uniform(0.7, 1.3, (n, 1))
        bright = rng.normal(0, 0.2, n)
        clutter = rng.standard_normal((n, 3, n_waves, 2), dtype=np.float32) * float(np.sqrt(n_freq / n_waves / 2))
        phase = torch.from_numpy(-2 * np.pi * (fy[iy, 0] * dy + fx[0, ix] * dx) / size)  # (n, n_waves)
        amp = torch.polar(torch.from_numpy(contrast * unit).expand_as(phase), phase).to(torch.complex64)
        spec_low = torch.from_numpy(waves)[y] * amp[:, None] + torch.view_as_complex(
            torch.from_numpy(clutter)) * float(difficulty * unit)  # (n, 3, n_waves)
        # Pixel = 128.5 + 57 * (waves + bright); the 0.5 makes the uint8 cast round.
        dc = torch.from_numpy(128.5 + 57 * bright).to(torch.complex64)
        # irfft2 doubles a wave with fx > 0 (its conjugate is implied) but takes
        # only the real part of one with fx = 0, so those get twice the gain.
        gain = torch.from_numpy(np.where(ix == 0, 2 * 57, 57)).to(torch.complex64)
        spec = torch.zeros((min(n, chunk), 3, size, size // 2 + 1), dtype=torch.complex64)
        images = torch.empty((n, 3, size, size), dtype=torch.uint8)
        for s in range(0, n, chunk):
            m = len(spec_low[s:s + chunk])
            spec[:m, :, iy, ix] = spec_low[s:s + chunk] * gain
            spec[:m, :, 0, 0] = dc[s:s + chunk, None]
            images[s:s + m] = torch.fft.irfft2(spec[:m], s=(size, size), norm="forward").clamp_(0, 255)
        sets.append(TensorImages(images, y.astype(np.int64)))
    return Data(sets[0], {"test": sets[1]}, k, SYNTHETIC_MEAN, SYNTHETIC_STD)


# ------------------------------------------------------------- augmentation

def augment_batch(images, pad=4, generator=None, offsets=None, flips=None):
    """The paper's CIFAR augmentation (He et al. 2016), for a whole batch at once.

    Zero-pad `pad` px on every side, crop HxW at an offset drawn uniformly from
    the (2 pad + 1)^2 choices, flip left-right with p = 0.5, all per sample. The
    paper names only pad-and-crop; the flip is the rest of He et al.'s recipe.
    images: uint8 (N, C, H, W) on any device; randomness comes from `generator`
    (on that device) or the global RNG. offsets (N, 2) [dy, dx] in [0, 2 pad] and
    flips (N,) bool replace the random draws (for tests). One gather, no host sync.
    Returns a contiguous uint8 (N, C, H, W).
    """
    n, c, h, w = images.shape
    dev = images.device
    if offsets is None:
        offsets = torch.randint(0, 2 * pad + 1, (n, 2), device=dev, generator=generator)
    if flips is None:
        flips = torch.randint(0, 2, (n,), device=dev, generator=generator).bool()
    padded = F.pad(images, (pad, pad, pad, pad))
    rows = offsets[:, :1] + torch.arange(h, device=dev)  # (N, H)
    cols = torch.where(flips[:, None], torch.arange(w - 1, -1, -1, device=dev), torch.arange(w, device=dev))
    cols = offsets[:, 1:] + cols  # (N, W); a flip reads the columns right to left
    return padded[torch.arange(n, device=dev)[:, None, None, None], torch.arange(c, device=dev)[None, :, None, None],
                  rows[:, None, :, None], cols[:, None, None, :]]


def normalize(x, mean, std):
    """uint8 (N, C, H, W) -> float32 (x/255 - mean)/std, in x's memory format.

    Works channel by channel with Python scalars: a mean tensor built from the
    tuples would be a host-to-device copy, which waits for the GPU, every batch.
    """
    y = x.to(torch.float32, copy=True)  # keeps channels_last if x has it
    for ch, (m, s) in enumerate(zip(mean, std)):
        y[:, ch].mul_(1 / (255 * s)).sub_(m / s)
    return y


def _to_rgb(im):
    im.load()  # decode now, while the file is open
    return im if im.mode == "RGB" else im.convert("RGB")


def file_transforms(kind, size, train, mean, std):
    """PIL image -> normalised float (3, size, size), per the paper's appendix.

    food101, folder: train Resize(256) + RandomCrop(224) + flip, test Resize(256) + CenterCrop(224).
      The paper says only "randomly cropped with a size of 224x224"; Food-101 images vary
      up to 512 px, so the shorter side is resized first. Resize and flip are departures.
    webvision: Resize((320, 320)), then RandomCrop(299) + flip or CenterCrop(299), as in the
      paper ("resize to 320x320 ... randomly cropped with a size of 299x299"); the flip is ours.
    Other sizes keep the ratios 256/224 and 320/299.
    """
    if kind == "webvision":
        resize = T.Resize((round(size * 320 / 299),) * 2)
    elif kind in ("food101", "folder"):
        resize = T.Resize(round(size * 256 / 224))
    else:
        raise ValueError(f"unknown file dataset kind '{kind}'; choose from food101, webvision, folder")
    crop = [T.RandomCrop(size), T.RandomHorizontalFlip()] if train else [T.CenterCrop(size)]
    return T.Compose([T.Lambda(_to_rgb), resize, *crop, T.ToTensor(), T.Normalize(mean, std)])


def _open(path, use):
    """Open an image with PIL and return use(image); a bad file -> DataError naming it."""
    try:
        with Image.open(path) as im:
            return use(im)
    except (OSError, ValueError, Image.DecompressionBombError) as err:
        raise DataError(f"cannot read image {path} ({_first_line(err)}); replace or delete the file") from err


class IndexedFiles(torch.utils.data.Dataset):
    """FileImages + transform. item i -> (transform(RGB image), i).

    Returns the index, not the label: train.py holds the (noisy) labels and
    looks them up by index, so noise is added in one visible place.
    """

    def __init__(self, files, transform):
        self.paths, self.transform = files.paths, transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return self.transform(_open(self.paths[i], _to_rgb)), i


# ------------------------------------------------------------------ batches

def take(ds, idx):
    """The samples of a TensorImages or FileImages at indices idx (an int array)."""
    idx = np.asarray(idx, dtype=np.int64)
    if isinstance(ds, TensorImages):
        return TensorImages(ds.images[torch.from_numpy(idx)].contiguous(), ds.labels[idx])
    return ds._replace(paths=[ds.paths[i] for i in idx], labels=ds.labels[idx])


class Batches:
    """The batches of one epoch: (x, y, y_clean), x normalised float (B, 3, H, W) on `device`.

    labels (given, maybe noisy) and clean are int arrays aligned with ds.
    An epoch's order and augmentation depend only on (seed, epoch), so a resumed
    run sees the same batches. Each global batch of batch_size samples is split
    over the `world` ranks (rank takes every world-th sample), so all ranks run
    the same number of steps. TensorImages live on the device and are augmented
    there (augment_batch); FileImages are read by `workers` DataLoader processes
    through file_transforms. train=False: no shuffling, no augmentation, every
    sample once. train=True drops only a last batch too small to give each rank
    2 samples (BatchNorm needs 2).
    """

    def __init__(self, ds, labels, clean, batch_size, mean, std, device, rank=0, world=1, workers=0,
                 memory_format=torch.contiguous_format, train=True):
        self.ds, self.batch_size, self.mean, self.std = ds, batch_size, mean, std
        self.device, self.rank, self.world, self.workers = torch.device(device), rank, world, workers
        self.memory_format, self.train = memory_format, train
        self.labels = torch.as_tensor(np.asarray(labels, dtype=np.int64), device=self.device)
        self.clean = torch.as_tensor(np.asarray(clean, dtype=np.int64), device=self.device)
        self.images = ds.images.to(self.device) if isinstance(ds, TensorImages) else None

    def steps(self):
        n, b = len(self.labels), self.batch_size
        return n // b + (n % b >= (2 * self.world if self.train else 1))

    def epoch(self, seed, epoch):
        n, b = len(self.labels), self.batch_size
        seeds = np.random.SeedSequence([seed, epoch, self.rank]).generate_state(2)
        # the order is the same on every rank; the augmentation differs
        order = np.random.default_rng([seed, epoch]).permutation(n) if self.train else np.arange(n)
        shards = [order[s:s + b][self.rank::self.world] for s in range(0, self.steps() * b, b)]
        if not shards:
            return
        if self.images is None:
            yield from self._from_files(shards, int(seeds[0]))
            return
        g = torch.Generator(self.device).manual_seed(int(seeds[1]))
        flat = torch.from_numpy(np.concatenate(shards)).to(self.device)  # one copy per epoch
        start = 0
        for shard in shards:
            idx = flat[start:start + len(shard)]
            start += len(shard)
            x = self.images[idx]
            if self.train:
                x = augment_batch(x, generator=g)
            yield self._to_device(x), self.labels[idx], self.clean[idx]

    def _from_files(self, shards, seed):
        files = IndexedFiles(self.ds, file_transforms(self.ds.kind, self.ds.size, self.train, self.mean, self.std))
        loader = torch.utils.data.DataLoader(files, batch_sampler=[s.tolist() for s in shards],
                                             num_workers=self.workers, pin_memory=self.device.type == "cuda",
                                             generator=torch.Generator().manual_seed(seed))
        for x, idx in loader:
            idx = idx.to(self.device, non_blocking=True)
            yield self._to_device(x), self.labels[idx], self.clean[idx]

    def _to_device(self, x):
        x = x.to(self.device, non_blocking=True)
        if x.dtype == torch.uint8:
            x = normalize(x, self.mean, self.std)
        return x.contiguous(memory_format=self.memory_format)
