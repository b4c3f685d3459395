"""Tests for --dataset fashionmnist and mnist (datasets.py's IDX loader around torchvision's readers, batches.py's
crop-only augmentation) and the CIFAR --data-dir hint. The IDX files are written here with struct and
gzip, byte by byte from the format's description, not with the loader's code; train.py and
evaluate.py then run on them as users run them."""
import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from test_datasets import write_cifar, write_cifar10

import evaluate
import train
from training import batches, datasets
from training.datasets import DataError, load_dataset
from training.tiny import idx, write_idx  # noqa: F401 (other tests import write_idx here)

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
RUN = ["--arch", "mlp", "--epochs", "1", "--batch-size", "8", "--device", "cpu", "--workers", "0"]


def one_line(err):
    assert "\n" not in str(err.value)
    return str(err.value)


def check(d, sets, side=28):
    for got, (x, y) in ((d.train, sets["train"]), (d.tests["test"], sets["test"])):
        assert got.images.dtype == torch.uint8 and got.images.shape == (len(y), 3, side, side)
        assert got.images.is_contiguous()
        for ch in range(3):  # the gray channel, three times
            assert np.array_equal(got.images[:, ch].numpy(), x)
        assert got.labels.dtype == np.int64 and got.labels.tolist() == y.tolist()


# ------------------------------------------------------------------ the files, where they may be

@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("name,layout", [("fashionmnist", ""), ("fashionmnist", "FashionMNIST/raw"),
                                         ("mnist", ""), ("mnist", "MNIST/raw")])
def test_reads_the_four_files_plain_or_gzipped_in_both_layouts(tmp_path, gz, name, layout):
    sets = write_idx(tmp_path / layout, gz=gz)
    d = load_dataset(name, tmp_path, download=False)
    check(d, sets)
    assert d.num_classes == 10 and set(d.tests) == {"test"}
    mean, std = {"fashionmnist": (0.2860, 0.3530), "mnist": (0.1307, 0.3081)}[name]
    assert d.mean == (mean,) * 3 and d.std == (std,) * 3


def test_data_dir_comes_first_a_plain_file_before_its_gz_and_any_side_is_read(tmp_path):
    write_idx(tmp_path / "FashionMNIST" / "raw", seed=1)  # both places: --data-dir itself wins
    sets = write_idx(tmp_path, gz=True, seed=2)
    check(load_dataset("fashionmnist", tmp_path, download=False), sets)
    plain = write_idx(tmp_path, gz=False, seed=3)  # now beside the .gz files, as torchvision's raw/ has both
    check(load_dataset("fashionmnist", tmp_path, download=False), plain)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()  # one of them .gz only: mixed is fine
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx(2049, plain["test"][1])))
    check(load_dataset("fashionmnist", tmp_path, download=False), plain)

    small = tmp_path / "small"  # not 28x28: any side, as long as train and test agree
    sets = write_idx(small, side=12)
    check(load_dataset("mnist", small, download=False), sets, side=12)
    check(load_dataset("mnist", small, download=False, image_size=12), sets, side=12)
    with pytest.raises(DataError) as err:
        load_dataset("mnist", small, download=False, image_size=32)
    assert "12x12" in one_line(err) and "--image-size" in one_line(err)


def test_not_found_names_the_files_the_places_and_the_debian_package(tmp_path):
    with pytest.raises(DataError) as err:
        load_dataset("fashionmnist", tmp_path, download=False)
    msg = one_line(err)
    assert all(n in msg for n in NAMES) and "download is off" in msg
    assert str(tmp_path) in msg and str(tmp_path / "FashionMNIST" / "raw") in msg
    assert "apt-get install dataset-fashion-mnist" in msg and "--data-dir /usr/share/datasets/fashion-mnist" in msg

    write_idx(tmp_path / "MNIST" / "raw")
    (tmp_path / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz").unlink()  # three of four is not the dataset
    with pytest.raises(DataError) as err:
        load_dataset("mnist", tmp_path, download=False)
    msg = one_line(err)
    assert all(n in msg for n in NAMES) and str(tmp_path / "MNIST" / "raw") in msg
    assert "only Fashion-MNIST" in msg and "MNIST/raw/" in msg


# downloads, those that work and those that fail: test_downloads.py, against a local server


# ------------------------------------------------------------------ bad files: one line naming the file

IMAGES, LABELS = "not an intact IDX images file", "not an intact IDX labels file"  # torchvision's readers refuse it
BAD = {  # what to do to which file -> words the message must have
    "truncated": ("train-images-idx3-ubyte", lambda p: p.write_bytes(p.read_bytes()[:-100]), IMAGES),
    "truncated_gzip": ("t10k-images-idx3-ubyte.gz", lambda p: p.write_bytes(p.read_bytes()[:-30]), IMAGES),
    "header_only": ("train-labels-idx1-ubyte", lambda p: p.write_bytes(p.read_bytes()[:6]), LABELS),
    "too_long": ("train-images-idx3-ubyte", lambda p: p.write_bytes(p.read_bytes() + b"\0"), IMAGES),
    "wrong_magic": ("train-images-idx3-ubyte", lambda p: p.write_bytes(b"\x12\x34\x56\x78" + p.read_bytes()[4:]),
                    "its magic number is no IDX file's"),
    "labels_as_images": ("train-images-idx3-ubyte",
                         lambda p: p.write_bytes(idx(2049, np.zeros(20, np.uint8))), "3 dimension instead of 1"),
    "gzip_without_gz": ("train-labels-idx1-ubyte", lambda p: p.write_bytes(gzip.compress(p.read_bytes())), LABELS),
    "not_gzip": ("t10k-labels-idx1-ubyte.gz", lambda p: p.write_bytes(b"no gzip here"), LABELS),
    "label_count": ("train-labels-idx1-ubyte", lambda p: p.write_bytes(idx(2049, np.zeros(19, np.uint8))),
                    "19 labels for the 20 images"),
    "label_range": ("t10k-labels-idx1-ubyte.gz",
                    lambda p: p.write_bytes(gzip.compress(idx(2049, np.array([1, 2, 3, 10, 0, 0, 0, 0], np.uint8)))),
                    "label 10 at index 3 is outside 0..9"),
    "test_side": ("t10k-images-idx3-ubyte.gz",
                  lambda p: p.write_bytes(gzip.compress(idx(2051, np.zeros((8, 32, 32), np.uint8)))), "32x32"),
    "no_images": ("train-images-idx3-ubyte", lambda p: p.write_bytes(idx(2051, np.zeros((0, 28, 28), np.uint8))),
                  IMAGES),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_file_is_one_line_that_names_it(tmp_path, case):
    name, spoil, words = BAD[case]
    write_idx(tmp_path, gz=False)
    for n in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):  # test files gzipped, training files plain
        p = tmp_path / n
        (tmp_path / (n + ".gz")).write_bytes(gzip.compress(p.read_bytes()))
        p.unlink()
    spoil(tmp_path / name)
    with pytest.raises(DataError) as err:
        load_dataset("fashionmnist", tmp_path, download=False)
    msg = one_line(err)
    assert str(tmp_path / name) in msg and words in msg, msg


# ------------------------------------------------------------------ the CIFAR --data-dir hint

def test_cifar_data_dir_at_the_extracted_folder_says_pass_its_parent(tmp_path, monkeypatch):
    def no_download(*args, **kwargs):
        raise AssertionError("no download into the dataset's own folder")
    monkeypatch.setattr(datasets, "fetch", no_download)
    write_cifar(tmp_path)
    for given in (str(tmp_path / "cifar-100-python"), str(tmp_path / "cifar-100-python") + os.sep):
        with pytest.raises(DataError) as err:
            load_dataset("cifar100", given, download=True)
        assert "folder itself" in one_line(err) and one_line(err).endswith(f"--data-dir {tmp_path}")
    assert len(load_dataset("cifar100", tmp_path, download=False).train.labels) == 20  # the parent works

    write_cifar10(tmp_path)
    with pytest.raises(DataError) as err:
        load_dataset("cifar10", tmp_path / "cifar-10-batches-py", download=True)
    assert one_line(err).endswith(f"pass the folder that holds it: --data-dir {tmp_path}")
    with pytest.raises(DataError) as err:  # the other CIFAR's folder
        load_dataset("cifar100", tmp_path / "cifar-10-batches-py", download=True)
    assert "cifar10's cifar-10-batches-py/" in one_line(err) and "cifar-100-python/" in one_line(err)


# ------------------------------------------------------------------ augmentation: mnist never flips

def ramp(n, side):
    """Every row rises left to right (10, 18, ..., 226), never 0: a crop keeps the rise, a flip reverses it."""
    return np.broadcast_to((10 + 8 * np.arange(side)).astype(np.uint8), (n, side, side)).copy()


def flipped(x, d):
    """Per image of a normalised batch: was it mirrored? Read off the pixels of its middle row (not padding)."""
    v = torch.round((x[:, 0, x.shape[2] // 2] * d.std[0] + d.mean[0]) * 255)
    steps = [torch.diff(row[row > 0]) for row in v]
    assert all(len(s) >= 20 and ((s > 0).all() or (s < 0).all()) for s in steps)  # a shifted or mirrored ramp
    return torch.tensor([bool((s < 0).all()) for s in steps])


@pytest.mark.parametrize("name", ["fashionmnist", "mnist"])
def test_batches_flip_fashionmnist_but_crop_only_mnist(tmp_path, name):
    write_idx(tmp_path, images=ramp)
    d = load_dataset(name, tmp_path, download=False)
    b = batches.Batches(d.train, labels=d.train.labels, clean=d.train.labels,
                        spec=batches.Spec(8, d.mean, d.std, flip=datasets.DATASETS[name].flip),
                        placement=batches.Placement("cpu"))
    flips = torch.cat([flipped(x, d) for e in range(10) for x, _, _ in b.epoch(0, e)])  # 200 augmented images
    assert len(flips) == 200
    if name == "mnist":
        assert not flips.any()
    else:  # the check above can see a flip: about half of them are
        assert 0.3 < flips.float().mean() < 0.7


def test_flip_off_draws_the_same_crops_and_flip_on_is_unchanged():
    images = torch.randint(0, 256, (16, 3, 28, 28), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)  # the draws, in augment_batch's order: offsets, then flips
    offsets, flips = torch.randint(0, 9, (16, 2), generator=g), torch.randint(0, 2, (16,), generator=g).bool()
    on = batches.augment_batch(images, generator=torch.Generator().manual_seed(1))
    assert torch.equal(on, batches.augment_batch(images, offsets=offsets, flips=flips))  # as before flip existed
    off = batches.augment_batch(images, generator=torch.Generator().manual_seed(1), flip=False)
    assert torch.equal(off, batches.augment_batch(images, offsets=offsets, flips=torch.zeros(16, dtype=torch.bool)))


@pytest.mark.parametrize("name", ["mnist", "fashionmnist"])
def test_train_py_never_flips_mnist(tmp_path, monkeypatch, name):
    """Through train.main: every augmented image it trains on is inspected (train.py passes
    batches.Spec(flip=datasets.DATASETS[args.dataset].flip)); fashionmnist shows that a flip would be seen."""
    write_idx(tmp_path / "data", images=ramp)
    seen = []
    real = batches.augment_batch

    def spy(images, *args, **kwargs):
        out = real(images, *args, **kwargs)
        seen.append(out.clone())
        return out
    monkeypatch.setattr(batches, "augment_batch", spy)
    train.main(["--dataset", name, "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "run"),
                "--arch", "mlp", "--epochs", "2", "--batch-size", "8", "--device", "cpu", "--workers", "0"])
    x = torch.cat(seen)
    assert len(x) == 40  # 2 epochs of 20
    rows = [r[r > 0].long() for r in x[:, 0, 14]]  # uint8 before normalising: the ramp, without the 0 padding
    mirrored = [bool((torch.diff(r) < 0).all()) for r in rows]
    assert all(len(r) >= 20 and (torch.diff(r) != 0).all() for r in rows)
    if name == "mnist":
        assert not any(mirrored), f"{sum(mirrored)} of 40 digits mirrored: train.py must pass Spec(flip=False)"
    else:
        assert any(mirrored)


# ------------------------------------------------------------------ train.py and evaluate.py, as users run them

def cli(*args, script="train.py", timeout=120):
    return subprocess.run([sys.executable, os.path.join(HERE, script), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=HERE)


def test_train_py_trains_fashionmnist_and_evaluate_reproduces_it(tmp_path, capsys):
    write_idx(tmp_path / "data" / "FashionMNIST" / "raw")
    out = str(tmp_path / "run")
    res = cli("--dataset", "fashionmnist", "--data-dir", str(tmp_path / "data"), *RUN, "--out", out)
    assert res.returncode == 0, res.stderr
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    assert [r["epoch"] for r in rows] == [1] and rows[0]["train_samples"] == 20
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert json.load(open(os.path.join(out, "weights.json")))["input_size"] == [3, 28, 28]
    acc = evaluate.main([out])  # the final models on the 8 test images: the run's own numbers
    assert all(acc[k] == pytest.approx(summary[k]) for k in acc)
    assert "test (8 images)" in capsys.readouterr().out


def test_train_py_bad_file_is_one_error_line_and_writes_nothing(tmp_path):
    write_idx(tmp_path / "data")
    p = tmp_path / "data" / "train-images-idx3-ubyte.gz"
    p.write_bytes(p.read_bytes()[:200])  # a download cut short
    out = tmp_path / "run"
    res = cli("--dataset", "fashionmnist", "--data-dir", str(tmp_path / "data"), *RUN, "--out", str(out))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("train.py: error:") and str(p) in lines[0], res.stderr
    assert not out.exists()


@pytest.mark.parametrize("flags,train_samples", [(["--val-split", "0.1"], 18), (["--subset", "16"], 16),
                                                  (["--noise", "pair", "--rate", "0.3"], 20)])
def test_train_py_options_on_mnist(tmp_path, flags, train_samples):
    sets = write_idx(tmp_path / "data")
    out = str(tmp_path / "run")
    summary = train.main(["--dataset", "mnist", "--data-dir", str(tmp_path / "data"), *RUN, "--out", out, *flags])
    with open(os.path.join(out, "metrics.jsonl")) as f:
        row = json.loads(f.readline())
    assert row["train_samples"] == train_samples and 0 <= summary["test_acc_mean"] <= 100
    if "--val-split" in flags:
        assert "val_acc_mean" in summary
    if "pair" in flags:  # pair noise: a label, if changed, becomes the next class
        clean, noisy = sets["train"][1].astype(np.int64), np.load(os.path.join(out, "noisy_labels.npy"))
        changed = noisy != clean
        assert changed.any() and (noisy[changed] == (clean[changed] + 1) % 10).all()


@pytest.mark.parametrize("value,right,wrong", [(73, "fashionmnist", "mnist"), (33, "mnist", "fashionmnist")])
def test_the_full_training_set_of_one_dataset_is_refused_as_the_other(tmp_path, value, right, wrong):
    # The two datasets' files have the same names. 60,000 images of a constant gray: 73/255 = 0.286 is
    # Fashion-MNIST's mean pixel, 33/255 = 0.129 MNIST's. Plain files: fast to write and read.
    write_idx(str(tmp_path), n_train=60000, gz=False, images=lambda n, side: np.full((n, side, side), value, np.uint8))
    assert len(load_dataset(right, str(tmp_path), download=False).train.labels) == 60000
    with pytest.raises(DataError) as e:
        load_dataset(wrong, str(tmp_path), download=False)
    assert f"use --dataset {right}" in one_line(e)
