"""Batches on the device and the paper's augmentation (appendix, "Data Augmentation").

augment_batch   -- the CIFAR augmentation (pad 4, random crop, flip) for a whole batch on its device;
                   crop-only with flip=False (mnist: its datasets.DATASETS record says flip=False)
normalize       -- uint8 (N, 3, H, W) -> float (x/255 - mean)/std
file_transforms -- the paper's crops for Food-101 and WebVision, as torchvision transforms
IndexedFiles    -- Dataset over FileImages that returns (image, index); labels stay with the caller
worker_message  -- the one-line message of a DataError raised in a DataLoader worker
Spec            -- how Batches makes its batches: size, normalisation, shuffling and augmentation
Placement       -- where Batches puts them: device, DDP rank and world, loader workers, memory format
Batches         -- an epoch's (x, y, y_clean) batches on the device, sharded over DDP ranks (and each model's
                   per-sample rows, where a run has them: Batches.rows); in_order, the same set as a test set's

Datasets that fit in memory (TensorImages) live on the device as one uint8 tensor
and are augmented there: one gather per batch, no workers, no per-image Python.
Datasets read from disk (FileImages) go through DataLoader workers.
"""
from typing import NamedTuple

import copy

import numpy as np
import torch
import torch.nn.functional as F

from training.datasets import DataError, TensorImages, open_image, to_rgb


def augment_batch(images, pad=4, generator=None, offsets=None, flips=None, flip=True):
    """The paper's CIFAR augmentation (He et al. 2016), for a whole batch at once.

    Zero-pad `pad` px on every side, crop HxW at an offset drawn uniformly from
    the (2 pad + 1)^2 choices, flip left-right with p = 0.5, all per sample. The
    paper names only pad-and-crop; the flip is the rest of He et al.'s recipe.
    images: uint8 (N, C, H, W) on any device; randomness comes from `generator`
    (on that device) or the global RNG. offsets (N, 2) [dy, dx] in [0, 2 pad] and
    flips (N,) bool replace the random draws (for tests). flip=False: crop only,
    no flip drawn or made (digits: datasets.DATASETS[...].flip); the offsets are drawn as with it.
    One gather, no host sync. Returns a contiguous uint8 (N, C, H, W).
    """
    n, c, h, w = images.shape
    dev = images.device
    if offsets is None:
        offsets = torch.randint(0, 2 * pad + 1, (n, 2), device=dev, generator=generator)
    if flips is None and flip:
        flips = torch.randint(0, 2, (n,), device=dev, generator=generator).bool()
    padded = F.pad(images, (pad, pad, pad, pad))
    rows = offsets[:, :1] + torch.arange(h, device=dev)  # (N, H)
    cols = (torch.where(flips[:, None], torch.arange(w - 1, -1, -1, device=dev), torch.arange(w, device=dev))
            if flip else torch.arange(w, device=dev).expand(n, w))
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


def file_transforms(kind, size, train, mean, std):
    """PIL image -> normalised float (3, size, size), per the paper's appendix.

    food101, folder: train Resize(256) + RandomCrop(224) + flip, test Resize(256) + CenterCrop(224).
      The paper says only "randomly cropped with a size of 224x224"; Food-101 images vary
      up to 512 px, so the shorter side is resized first. Resize and flip are departures.
    webvision: Resize((320, 320)), then RandomCrop(299) + flip or CenterCrop(299), as in the
      paper ("resize to 320x320 ... randomly cropped with a size of 299x299"); the flip is ours.
    Other sizes keep the ratios 256/224 and 320/299.
    """
    import torchvision.transforms as T  # here: datasets.py says why
    if kind == "webvision":
        resize = T.Resize((round(size * 320 / 299),) * 2)
    elif kind in ("food101", "folder"):
        resize = T.Resize(round(size * 256 / 224))
    else:
        raise ValueError(f"unknown file dataset kind '{kind}'; choose from food101, webvision, folder")
    crop = [T.RandomCrop(size), T.RandomHorizontalFlip()] if train else [T.CenterCrop(size)]
    return T.Compose([T.Lambda(to_rgb), resize, *crop, T.ToTensor(), T.Normalize(mean, std)])


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
        return self.transform(open_image(self.paths[i], to_rgb)), i


def worker_message(err):
    """The one-line message of a DataError. Raised in a DataLoader worker, it arrives with the worker's
    traceback in its message, whose last line is "datasets.DataError: <the original message>"."""
    lines = str(err).strip().splitlines()
    last = lines[-1] if lines else ""
    head = f"{DataError.__module__}.{DataError.__qualname__}: "
    return last[len(head):] if last.startswith(head) else last


class Spec(NamedTuple):
    """How Batches makes the batches of one set (see Batches for what train, augment and flip do)."""
    batch_size: int       # samples per step, all ranks together
    mean: tuple           # per-channel normalisation: (x/255 - mean)/std
    std: tuple
    train: bool = True    # shuffle and augment; False: every sample once, in order
    augment: bool = True  # with train: augment (False: the images as they are tested)
    flip: bool = True     # False: TensorImages' augmentation is crop-only (digits)


class Placement(NamedTuple):
    """Where Batches puts the batches, and who reads them."""
    device: torch.device  # where x, y and y_clean live (a str such as "cpu" works too)
    rank: int = 0         # this process's DDP rank ...
    world: int = 1        # ... among `world`: it takes every world-th sample of each batch
    workers: int = 0      # DataLoader processes that read FileImages (0: this process)
    memory_format: torch.memory_format = torch.contiguous_format  # x's (torch.channels_last on CUDA)


class Batches:
    """The batches of one epoch: (x, y, y_clean), x normalised float (B, 3, H, W) on placement.device.

    labels (given, maybe noisy) and clean are int arrays aligned with ds; spec (Spec) says how
    batches are made, placement (Placement) where they go.
    An epoch's order and augmentation depend only on (seed, epoch), so a resumed
    run sees the same batches. Each global batch of batch_size samples is split
    over the `world` ranks (rank takes every world-th sample), so all ranks run
    the same number of steps. TensorImages live on the device and are augmented
    there (augment_batch); FileImages are read by `workers` DataLoader processes
    through file_transforms. train=False: no shuffling, no augmentation, every
    sample once. train=True drops only a last batch too small to give each rank
    2 samples (BatchNorm needs 2). augment=False trains on the images as they are
    tested (files: resize and centre crop). flip=False makes the augmentation of
    TensorImages crop-only (digits: datasets.DATASETS[...].flip); files always flip.
    rows: None, or per-sample rows of each model (M, n, K) on the device, which a run sets where its label
    correction's stage makes them (registry.Stage.rows) or --labels-from gives them: each batch then carries its
    rows (M, B, K) fourth.
    """

    def __init__(self, ds, *, labels, clean, spec, placement, rows=None):
        self.ds, self.spec, self.placement = ds, spec, placement
        self.batch_size, self.mean, self.std = spec.batch_size, spec.mean, spec.std
        self.augment, self.flip = spec.train and spec.augment, spec.flip
        self.device, self.rank, self.world = torch.device(placement.device), placement.rank, placement.world
        self.workers, self.memory_format, self.train = placement.workers, placement.memory_format, spec.train
        self.labels = torch.as_tensor(np.asarray(labels, dtype=np.int64), device=self.device)
        self.clean = torch.as_tensor(np.asarray(clean, dtype=np.int64), device=self.device)
        self.images = ds.images.to(self.device) if isinstance(ds, TensorImages) else None
        self.rows = rows

    def in_order(self, batch_size=500):
        """These batches as a test set's (build.eval_batches): every sample once, in order, without augmentation,
        batch_size a batch, without rows; the same images, not copied."""
        other = copy.copy(self)
        other.spec = self.spec._replace(batch_size=batch_size, train=False)
        other.batch_size, other.augment, other.train, other.rows = batch_size, False, False, None
        return other

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
            if self.augment:
                x = augment_batch(x, generator=g, flip=self.flip)
            yield self._to_device(x), self.labels[idx], self.clean[idx], *self._rows(idx)

    def _rows(self, idx):
        return () if self.rows is None else (self.rows[:, idx],)

    def _from_files(self, shards, seed):
        transform = file_transforms(kind=self.ds.kind, size=self.ds.size, train=self.augment, mean=self.mean,
                                    std=self.std)
        files = IndexedFiles(self.ds, transform)
        loader = torch.utils.data.DataLoader(files, batch_sampler=[s.tolist() for s in shards],
                                             num_workers=self.workers, pin_memory=self.device.type == "cuda",
                                             generator=torch.Generator().manual_seed(seed))
        try:
            for x, idx in loader:
                idx = idx.to(self.device, non_blocking=True)
                yield self._to_device(x), self.labels[idx], self.clean[idx], *self._rows(idx)
        except DataError as err:  # e.g. a corrupt image: one line that names the file, from any worker
            raise DataError(worker_message(err)) from None

    def _to_device(self, x):
        x = x.to(self.device, non_blocking=True)
        if x.dtype == torch.uint8:
            x = normalize(x, self.mean, self.std)
        return x.contiguous(memory_format=self.memory_format)
