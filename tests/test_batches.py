"""Tests for batches.py: augment_batch agrees with a per-image Python loop; Batches draws
every sample once per epoch, in an order fixed by (seed, epoch), sharded over ranks."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_datasets import write_folder

from training import batches, datasets
from training.datasets import load_dataset

# ------------------------------------------------------------- augmentation

def augment_loop(images, offsets, flips, pad=4):
    """The per-image reference: pad, slice, maybe flip."""
    out = []
    h, w = images.shape[2:]
    for img, (dy, dx), flip in zip(images, offsets.tolist(), flips.tolist()):
        crop = F.pad(img, (pad,) * 4)[:, dy:dy + h, dx:dx + w]
        out.append(torch.flip(crop, dims=[2]) if flip else crop)
    return torch.stack(out)


def test_augment_batch_equals_per_image_loop():
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (64, 3, 8, 12), dtype=torch.uint8, generator=g)  # H != W
    offsets = torch.randint(0, 9, (64, 2), generator=g)
    flips = torch.rand(64, generator=g) < 0.5
    out = batches.augment_batch(images, offsets=offsets, flips=flips)
    assert out.dtype == torch.uint8 and out.shape == images.shape
    assert torch.equal(out, augment_loop(images, offsets, flips))


def test_augment_batch_random_draws():
    # A 9x9 image whose pixels encode their position: pixel (4, 4) of a crop is
    # source pixel (dy, dx) with or without a flip, so the draws can be read back.
    n = 8100
    src = (1 + torch.arange(81)).view(1, 1, 9, 9).expand(n, 3, 9, 9).to(torch.uint8)
    out = batches.augment_batch(src, generator=torch.Generator().manual_seed(1))
    assert torch.equal(out, batches.augment_batch(src, generator=torch.Generator().manual_seed(1)))
    assert not torch.equal(out, batches.augment_batch(src, generator=torch.Generator().manual_seed(2)))
    assert set(out.unique().tolist()) <= set(range(82))  # only source pixels and the zero padding
    pos = out[:, 0, 4, 4].long() - 1
    offsets = torch.stack([pos // 9, pos % 9], 1)
    counts = torch.bincount(pos, minlength=81)
    assert counts.min() > 50 and counts.max() < 150  # all 81 offsets, ~uniform (100 each)
    flips = ~(out == augment_loop(src, offsets, torch.zeros(n, dtype=torch.bool))).flatten(1).all(1)
    assert torch.equal(out, augment_loop(src, offsets, flips))
    assert 0.45 < flips.float().mean() < 0.55


@pytest.mark.cuda
def test_augment_batch_on_gpu_matches_loop():
    g = torch.Generator(device="cuda").manual_seed(0)
    images = torch.randint(0, 256, (32, 3, 32, 32), dtype=torch.uint8, device="cuda", generator=g)
    offsets = torch.randint(0, 9, (32, 2), device="cuda", generator=g)
    flips = torch.rand(32, device="cuda", generator=g) < 0.5
    out = batches.augment_batch(images, offsets=offsets, flips=flips)
    assert torch.equal(out.cpu(), augment_loop(images.cpu(), offsets.cpu(), flips.cpu()))
    assert batches.augment_batch(images, generator=g).device == images.device


def test_normalize_matches_formula_and_keeps_memory_format():
    x = torch.randint(0, 256, (4, 3, 5, 6), dtype=torch.uint8)
    mean, std = datasets.CIFAR100_MEAN, datasets.CIFAR100_STD
    want = (x.float() / 255 - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    y = batches.normalize(x, mean, std)
    assert y.dtype == torch.float32 and torch.allclose(y, want, atol=1e-5)
    xc = x.contiguous(memory_format=torch.channels_last)
    yc = batches.normalize(xc, mean, std)
    assert yc.is_contiguous(memory_format=torch.channels_last) and torch.allclose(yc, want, atol=1e-5)


def drain(batches, seed=0, epoch=0):
    return [(x, y.tolist(), c.tolist()) for x, y, c in batches.epoch(seed, epoch)]


def test_batches_in_memory_order_sharding_and_resume():
    d = load_dataset("synthetic", None, synthetic=datasets.Synthetic(size=10, test_size=5, classes=2))
    ids = np.arange(10) * 10  # a label that names its sample
    spec = batches.Spec(batch_size=4, mean=d.mean, std=d.std)
    make = lambda **k: batches.Batches(d.train, labels=ids, clean=ids + 1, spec=spec,  # noqa: E731
                                        placement=batches.Placement("cpu", **k))
    one = drain(make())
    assert make().steps() == len(one) == 3  # 4 + 4 + 2
    assert sorted(sum([y for _, y, _ in one], [])) == ids.tolist()
    assert all(c == [v + 1 for v in y] for _, y, c in one)
    again, other = drain(make()), drain(make(), epoch=1)
    assert all(torch.equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(one, again))  # (seed, epoch) fixes it
    assert [y for _, y, _ in one] != [y for _, y, _ in other]
    # two ranks: same steps, disjoint shards of the same global batches; the last
    # batch (2 samples) cannot give both ranks 2, so it is dropped
    r0, r1 = drain(make(rank=0, world=2)), drain(make(rank=1, world=2))
    assert len(r0) == len(r1) == make(world=2).steps() == 2
    assert [sorted(a[1] + b[1]) for a, b in zip(r0, r1)] == [sorted(y) for _, y, _ in one[:2]]
    x = one[0][0]
    assert x.dtype == torch.float32 and x.shape == (4, 3, 32, 32)


def test_batches_eval_is_every_sample_in_order_unaugmented():
    d = load_dataset("synthetic", None, synthetic=datasets.Synthetic(size=10, test_size=7, classes=2))
    t = d.tests["test"]
    b = batches.Batches(t, labels=t.labels, clean=t.labels, spec=batches.Spec(3, d.mean, d.std, train=False),
                        placement=batches.Placement("cpu", memory_format=torch.channels_last))
    got = drain(b)
    assert b.steps() == len(got) == 3 and sum([y for _, y, _ in got], []) == t.labels.tolist()
    x = torch.cat([x for x, _, _ in got])
    assert got[0][0].is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(x, batches.normalize(t.images, d.mean, d.std), atol=1e-6)


def test_batches_from_files(tmp_path):
    write_folder(tmp_path)
    d = load_dataset("folder", tmp_path, image_size=72)
    ids = np.arange(6)
    train = batches.Batches(d.train, labels=ids, clean=ids, spec=batches.Spec(4, d.mean, d.std),
                            placement=batches.Placement("cpu"))
    got = drain(train)
    assert [len(y) for _, y, _ in got] == [4, 2] and sorted(sum([y for _, y, _ in got], [])) == ids.tolist()
    assert got[0][0].shape == (4, 3, 72, 72) and got[0][0].dtype == torch.float32
    test = batches.Batches(d.tests["test"], labels=ids, clean=ids, spec=batches.Spec(4, d.mean, d.std, train=False),
                           placement=batches.Placement("cpu"))
    assert sum([y for _, y, _ in drain(test)], []) == ids.tolist()
