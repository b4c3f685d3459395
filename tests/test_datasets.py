"""Tests for datasets.py and synthetic.py: each loader reads a tiny fake copy of its real
on-disk format, built in tmp_path, through load_dataset (the code users run)."""
import hashlib
import os
import pickle
import socket
import sys

import numpy as np
import pytest
import torch
from torchvision.datasets import utils as tvu

import train
from training import batches, datasets, images, tiny, webvision
from training.datasets import DataError, FileImages, Synthetic, TensorImages, load_dataset
from training.tiny import COLOURS, save_image, write_folder, write_food101, write_webvision  # noqa: F401 (other tests import them here)


def one_line(err):
    assert "\n" not in str(err.value)
    return str(err.value)


# ------------------------------------------------------------------ CIFAR-100

def publish(name, root):
    """Stand the CIFAR files under root in for the published ones: their md5 sums become torchvision's, which it
    checks before it unpickles a file (conftest puts the real sums back after the test)."""
    c = datasets.DATASETS[name].torchvision()
    md5 = lambda f: hashlib.md5((root / c.base_folder / f).read_bytes()).hexdigest()  # noqa: E731
    c.train_list = [[f, md5(f)] for f, _ in c.train_list]
    c.test_list = [[f, md5(f)] for f, _ in c.test_list]
    c.meta = {**c.meta, "md5": md5(c.meta["filename"])}


def write_cifar(root, n_train=20, n_test=10, seed=0):
    """tiny.write_cifar, its md5 sums standing in for the published ones (publish)."""
    sets = tiny.write_cifar(root, n_train, n_test, seed)
    publish("cifar100", root)
    return sets


def test_cifar100_reads_official_pickle_layout(tmp_path):
    sets = write_cifar(tmp_path)
    d = load_dataset("cifar100", tmp_path, download=False)
    assert d.num_classes == 100 and set(d.tests) == {"test"}
    for got, (x, y) in ((d.train, sets["train"]), (d.tests["test"], sets["test"])):
        assert got.images.dtype == torch.uint8 and got.images.shape == (len(y), 3, 32, 32)
        assert got.images.is_contiguous()
        assert got.labels.dtype == np.int64 and got.labels.tolist() == y
        # The 3072 vector is the R plane, then G, then B, each 32x32 row-major.
        n, c, r, col = 3, 2, 5, 17
        assert got.images[n, c, r, col].item() == x[n, c * 1024 + r * 32 + col]
        assert np.array_equal(got.images[:, 1].numpy(), x[:, 1024:2048].reshape(-1, 32, 32))


def test_cifar100_missing_folder(tmp_path):
    with pytest.raises(DataError) as err:
        load_dataset("cifar100", tmp_path, download=False)
    assert str(tmp_path / "cifar-100-python") in one_line(err)


def test_cifar_pickles_are_each_hashed_once_on_a_load(tmp_path, monkeypatch):
    # torchvision's class alone hashes every data file once per split it reads; the load checks each once
    write_cifar(tmp_path)
    hashed = []
    real = tvu.calculate_md5

    def counted(path, *a, **k):
        hashed.append(os.path.basename(path))
        return real(path, *a, **k)
    monkeypatch.setattr(tvu, "calculate_md5", counted)  # torchvision's, which datasets.py imports as it reads
    load_dataset("cifar100", tmp_path, download=False)
    assert sorted(hashed) == ["meta", "meta", "test", "train"]  # the 1.5 KB meta file once a split, by torchvision
    (tmp_path / "cifar-100-python" / "meta").write_bytes(b"other")  # a bad meta file is still named
    with pytest.raises(DataError) as err:
        load_dataset("cifar100", tmp_path, download=False)
    assert str(tmp_path / "cifar-100-python" / "meta") in one_line(err) and "not the published file" in one_line(err)


@pytest.mark.parametrize("content", [b"not a pickle", pickle.dumps({"data": np.zeros((4, 100), np.uint8),
                                                                     "fine_labels": [0] * 4}),
                                     pickle.dumps({"data": np.zeros((4, 3072), np.uint8)})])
def test_cifar100_malformed_pickle(tmp_path, content):
    write_cifar(tmp_path)
    (tmp_path / "cifar-100-python" / "train").write_bytes(content)
    with pytest.raises(DataError) as err:
        load_dataset("cifar100", tmp_path, download=False)
    assert str(tmp_path / "cifar-100-python" / "train") in one_line(err) and "not the published file" in one_line(err)


class RunsCode:
    """Pickles as a call of os.system: a data file that runs a shell command when unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"echo ran > {self.marker}",)


@pytest.mark.parametrize("protocol", [2, 5])  # the official files' protocol, and the newest
def test_cifar_pickles_are_read_without_running_code(tmp_path, protocol):
    armed = tmp_path / "armed"  # the same file does run its command under plain pickle
    pickle.loads(pickle.dumps({"data": RunsCode(armed)}, protocol=protocol))
    assert armed.exists()
    write_cifar(tmp_path)
    marker = tmp_path / "marker"
    (tmp_path / "cifar-100-python" / "train").write_bytes(
        pickle.dumps({"data": RunsCode(marker), "fine_labels": [0]}, protocol=protocol))
    with pytest.raises(DataError) as err:  # not the published file, so never unpickled
        load_dataset("cifar100", tmp_path, download=False)
    assert str(tmp_path / "cifar-100-python" / "train") in one_line(err) and "not unpickled" in one_line(err)
    assert not marker.exists()
    (tmp_path / "good").mkdir()
    write_cifar(tmp_path / "good")  # and the genuine article, numpy arrays at this protocol, still loads
    for split in ("train", "test", "meta"):
        path = tmp_path / "good" / "cifar-100-python" / split
        path.write_bytes(pickle.dumps(pickle.loads(path.read_bytes()), protocol=protocol))
    publish("cifar100", tmp_path / "good")
    assert len(load_dataset("cifar100", tmp_path / "good", download=False).train.labels) > 0


# ------------------------------------------------------------------- CIFAR-10

def write_cifar10(root, n_per_batch=8, n_test=10, seed=0):
    """tiny.write_cifar10, its md5 sums standing in for the published ones (publish)."""
    sets = tiny.write_cifar10(root, n_per_batch, n_test, seed)
    publish("cifar10", root)
    return sets



def test_cifar10_reads_the_five_batches_in_order(tmp_path):
    sets = write_cifar10(tmp_path)
    d = load_dataset("cifar10", tmp_path, download=False)
    assert d.num_classes == 10 and set(d.tests) == {"test"} and d.mean == datasets.CIFAR10_MEAN
    for got, (x, y) in ((d.train, sets["train"]), (d.tests["test"], sets["test"])):
        assert got.images.dtype == torch.uint8 and got.images.shape == (len(y), 3, 32, 32)
        assert got.labels.dtype == np.int64 and got.labels.tolist() == y
        assert np.array_equal(got.images.numpy().reshape(len(y), 3072), x)  # batches 1..5 in order, R G B planes


def test_cifar10_missing_folder(tmp_path):  # failed downloads: test_downloads.py, against a local server
    with pytest.raises(DataError) as err:
        load_dataset("cifar10", tmp_path, download=False)
    assert str(tmp_path / "cifar-10-batches-py") in one_line(err)


def test_cifar10_missing_batch_is_named(tmp_path):
    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_4").unlink()
    with pytest.raises(DataError) as err:
        load_dataset("cifar10", tmp_path, download=False)
    assert str(tmp_path / "cifar-10-batches-py" / "data_batch_4") in one_line(err)


# ---------------------------------------------------------------------- SVHN

def write_svhn(root, n_train=20, n_test=10, seed=0):
    """tiny.write_svhn; skipped where scipy, which writes and reads .mat files, is missing."""
    pytest.importorskip("scipy.io")  # torchvision's SVHN reads the files through scipy
    return tiny.write_svhn(root, n_train, n_test, seed)



def write_copy(name, root):
    """DATASETS[name]'s tiny copy (Dataset.tiny) under root, its sums standing in for the published ones where its
    reader checks them (CIFAR's pickles: publish; SVHN's files: publish_files); a copy whose writer needs a module
    that is not installed skips the test. Returns the flags train.py needs beside --data-dir to train on it."""
    d = datasets.DATASETS[name]
    assert d.tiny is not None, f"{name} has no tiny copy: give its record one (Dataset.tiny, training/tiny.py)"
    root.mkdir(parents=True, exist_ok=True)
    try:
        d.tiny.write(root)
    except ImportError as e:
        pytest.skip(f"{name}'s tiny copy needs {e.name}, which is not installed")
    if hasattr(d.torchvision(), "train_list"):
        publish(name, root)
    elif hasattr(d.torchvision(), "split_list"):
        publish_files(name, root)
    return list(d.tiny.flags)


def publish_files(name, root):
    """Stand the plain files of a dataset published one per split (SVHN) under root in for the published ones: their
    md5 sums become torchvision's (conftest puts the real sums back after the test)."""
    d = datasets.DATASETS[name]
    folder = root / d.published().folder
    c = d.torchvision()
    c.split_list = {s: [url, f, tvu.calculate_md5(str(folder / f)) if (folder / f).exists() else md5]
                    for s, (url, f, md5) in c.split_list.items()}


def test_svhn_reads_its_mat_files_through_torchvision(tmp_path):
    sets = write_svhn(tmp_path)
    publish_files("svhn", tmp_path)
    d = load_dataset("svhn", tmp_path, download=False)
    for got, (x, y) in ((d.train, sets["train"]), (d.tests["test"], sets["test"])):
        assert got.images.dtype == torch.uint8 and got.images.is_contiguous() and torch.equal(got.images,
                                                                                             torch.from_numpy(x))
        assert got.labels.dtype == np.int64 and got.labels.tolist() == y.tolist()  # 10 read as the digit 0
    x = sets["train"][0] / 255
    assert d.num_classes == 10 and np.allclose(d.mean, x.mean((0, 2, 3))) and np.allclose(d.std, x.std((0, 2, 3)))
    assert not datasets.DATASETS["svhn"].flip  # a mirrored digit is no digit


def test_svhn_file_that_is_not_the_published_one_is_not_read(tmp_path):
    write_svhn(tmp_path)
    publish_files("svhn", tmp_path)
    path = tmp_path / "SVHN" / "test_32x32.mat"
    path.write_bytes(path.read_bytes()[:-1] + b"x")
    with pytest.raises(DataError) as err:
        load_dataset("svhn", tmp_path, download=False)
    assert f"{path} is not the published file" in one_line(err)


def test_svhn_without_scipy_says_to_install_it(tmp_path, monkeypatch):
    write_svhn(tmp_path)
    publish_files("svhn", tmp_path)
    monkeypatch.setitem(sys.modules, "scipy.io", None)  # import scipy.io fails, as where scipy is not installed
    with pytest.raises(DataError) as err:
        load_dataset("svhn", tmp_path, download=False)
    assert "with scipy, which is not installed" in one_line(err) and "pip install scipy" in one_line(err)


def test_svhn_missing_without_download_says_where_its_files_go(tmp_path):
    with pytest.raises(DataError) as err:
        load_dataset("svhn", tmp_path, download=False)
    assert str(tmp_path / "SVHN" / "train_32x32.mat") in one_line(err) and "ufldl.stanford.edu" in one_line(err)


# ------------------------------------------------------------------- Food-101

def test_food101_layout_labels_and_transforms(tmp_path):
    root = write_food101(tmp_path)
    d = load_dataset("food101", tmp_path, download=False)
    assert d.num_classes == 3 and d.mean == datasets.IMAGENET_MEAN
    assert isinstance(d.train, FileImages) and d.train.size == 224 and d.train.kind == "food101"
    got = dict(zip(d.train.paths, d.train.labels.tolist()))
    assert got == {str(root / "images" / "waffles" / "3.jpg"): 2, str(root / "images" / "waffles" / "4.jpg"): 2,
                   str(root / "images" / "apple_pie" / "1.jpg"): 0,
                   str(root / "images" / "baby_back_ribs" / "2.jpg"): 1}
    assert d.tests["test"].labels.tolist() == [0, 1, 2]

    for train_mode in (True, False):
        ds = batches.IndexedFiles(d.train, batches.file_transforms("food101", 224, train_mode, d.mean, d.std))
        x, i = ds[1]
        assert len(ds) == 4 and i == 1 and x.shape == (3, 224, 224) and x.dtype == torch.float32
        # uniform image of colour (200, 30, 90): every pixel normalises to the same value
        want = (torch.tensor([200, 30, 90]) / 255 - torch.tensor(d.mean)) / torch.tensor(d.std)
        assert torch.allclose(x.mean((1, 2)), want, atol=0.05)


def test_food101_missing_without_download(tmp_path):
    with pytest.raises(DataError) as err:
        load_dataset("food101", tmp_path, download=False)
    assert str(tmp_path / "food-101") in one_line(err)


def test_indexed_files_names_a_corrupt_image(tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8 truncated")
    files = FileImages([str(bad)], np.zeros(1, np.int64), 32, "folder")
    ds = batches.IndexedFiles(files, batches.file_transforms("folder", 32, True, datasets.IMAGENET_MEAN, datasets.IMAGENET_STD))
    with pytest.raises(DataError) as err:
        ds[0]
    assert str(bad) in one_line(err)


# ------------------------------------------------------------- mini-WebVision

def test_webvision_mini_setting(tmp_path):
    write_webvision(tmp_path)
    with pytest.warns(UserWarning, match="lacks 48 of the 50"):
        d = load_dataset("webvision", tmp_path)
    assert d.num_classes == 50 and set(d.tests) == {"webvision_val", "ilsvrc12_val"}
    assert d.train.size == 299 and d.train.kind == "webvision"
    assert d.train.labels.tolist() == [0, 0, 49, 1]  # labels 50 and 99 dropped
    assert d.train.paths[2] == os.path.join(str(tmp_path), "google/q0050/00000001.jpg")
    wv = d.tests["webvision_val"]
    assert wv.labels.tolist() == [0, 49] and wv.paths[1] == str(tmp_path / "val_images_256" / "val000003.jpg")
    il = d.tests["ilsvrc12_val"]
    assert il.labels.tolist() == [3, 3, 7]  # the wnid's line in synsets.txt
    assert all(f"{os.sep}n00000003{os.sep}" in p for p in il.paths[:2])
    x, i = batches.IndexedFiles(il, batches.file_transforms("webvision", 64, False, d.mean, d.std))[2]
    assert x.shape == (3, 64, 64) and i == 2


def test_webvision_without_imagenet_warns(tmp_path):
    write_webvision(tmp_path, with_imagenet=False)
    with pytest.warns(UserWarning, match="ILSVRC12 val not found"):
        d = load_dataset("webvision", tmp_path, image_size=64)
    assert set(d.tests) == {"webvision_val"} and d.train.size == 64


def test_webvision_missing_info_points_to_download_page(tmp_path):
    with pytest.raises(DataError) as err:
        load_dataset("webvision", tmp_path)
    msg = one_line(err)
    assert str(tmp_path / "info") in msg and webvision.WEBVISION_URL in msg


# -------------------------------------------------------------- image folder

def test_folder_small_images_live_in_memory_as_rgb(tmp_path):
    write_folder(tmp_path)
    d = load_dataset("folder", tmp_path, image_size=16)
    assert isinstance(d.train, TensorImages) and d.train.images.shape == (6, 3, 16, 16)
    assert d.num_classes == 2 and d.train.labels.tolist() == [0, 0, 0, 1, 1, 1]
    x = d.tests["test"].images
    assert x.dtype == torch.uint8 and x.shape == (6, 3, 16, 16)
    gray = COLOURS[1][0]  # the grayscale image repeats its one value in R, G and B
    assert (x[3] == gray).all()
    for j in (4, 5):  # RGBA loses its alpha, RGB is kept
        assert torch.equal(x[j, :, 7, 7], torch.tensor(COLOURS[1], dtype=torch.uint8))


def test_folder_one_small_size_needs_no_image_size(tmp_path):
    write_folder(tmp_path, sizes=((12, 10),) * 3)
    d = load_dataset("folder", tmp_path)
    assert d.train.images.shape == (6, 3, 10, 12)


def test_folder_sizes_differ_without_image_size(tmp_path):
    write_folder(tmp_path)
    with pytest.raises(DataError, match="differ in size.*--image-size"):
        load_dataset("folder", tmp_path)


def test_folder_mismatched_classes(tmp_path):
    write_folder(tmp_path, test_classes=("cat", "cow"))
    with pytest.raises(DataError) as err:
        load_dataset("folder", tmp_path, image_size=16)
    assert str(tmp_path / "test") in one_line(err)


def test_folder_missing_split(tmp_path):
    save_image(str(tmp_path / "train" / "cat" / "0.png"))
    with pytest.raises(DataError) as err:
        load_dataset("folder", tmp_path, image_size=16)
    assert str(tmp_path / "test") in one_line(err)


def test_folder_large_images_are_read_from_disk(tmp_path):
    write_folder(tmp_path)
    d = load_dataset("folder", tmp_path, image_size=96)
    assert isinstance(d.train, FileImages) and d.train.size == 96 and d.train.kind == "folder"
    assert len(d.tests["test"].paths) == 6
    x, _ = batches.IndexedFiles(d.train, batches.file_transforms("folder", 96, True, d.mean, d.std))[1]
    assert x.shape == (3, 96, 96)


# ------------------------------------------------------------------ synthetic

def nearest_class_mean_accuracy(d):
    a = batches.normalize(d.train.images, d.mean, d.std).flatten(1)
    b = batches.normalize(d.tests["test"].images, d.mean, d.std).flatten(1)
    y = torch.from_numpy(d.train.labels)
    means = torch.stack([a[y == c].mean(0) for c in range(d.num_classes)])
    pred = torch.cdist(b, means).argmin(1).numpy()
    return (pred == d.tests["test"].labels).mean()


def test_synthetic_is_deterministic_and_balanced():
    d1, d2 = [load_dataset("synthetic", None, synthetic=Synthetic(seed=3)) for _ in range(2)]
    other = load_dataset("synthetic", None, synthetic=Synthetic(seed=4))
    assert torch.equal(d1.train.images, d2.train.images) and np.array_equal(d1.train.labels, d2.train.labels)
    assert torch.equal(d1.tests["test"].images, d2.tests["test"].images)
    assert not torch.equal(d1.train.images, other.train.images)
    assert not torch.equal(d1.train.images[:1000], d1.tests["test"].images)
    assert d1.train.images.shape == (2000, 3, 32, 32) and d1.train.images.dtype == torch.uint8
    assert d1.tests["test"].images.shape == (1000, 3, 32, 32)
    assert np.bincount(d1.train.labels).tolist() == [200] * 10 and d1.train.labels.dtype == np.int64
    # SYNTHETIC_MEAN/STD describe what the generator makes
    x = d1.train.images.float() / 255
    assert np.allclose(x.mean((0, 2, 3)), d1.mean, atol=0.02) and np.allclose(x.std((0, 2, 3)), d1.std, atol=0.02)


def test_synthetic_cifar100_sized():
    d = load_dataset("synthetic", None, synthetic=Synthetic(size=50000, classes=100, test_size=10000))
    assert d.train.images.shape == (50000, 3, 32, 32) and d.tests["test"].images.shape == (10000, 3, 32, 32)
    assert d.num_classes == 100 and np.bincount(d.train.labels, minlength=100).min() == 500


def test_synthetic_is_learnable_but_not_trivial():
    accs = [nearest_class_mean_accuracy(load_dataset("synthetic", None, synthetic=Synthetic(difficulty=diff)))
            for diff in (0.5, 2.0, 4.0)]
    assert 0.3 < accs[1] < 0.9  # default: chance is 0.1
    assert accs[0] > accs[1] + 0.05 and accs[1] > accs[2] + 0.05  # difficulty works


def test_synthetic_bad_sizes():
    with pytest.raises(DataError):
        load_dataset("synthetic", None, synthetic=Synthetic(size=5, classes=10))



def test_unknown_dataset():
    with pytest.raises(DataError, match="cifar100"):
        load_dataset("imagenet", "/nowhere")


def test_take_subsets_both_kinds():
    d = load_dataset("synthetic", None, synthetic=Synthetic(size=20, test_size=5, classes=2))
    idx = np.array([3, 0, 7])
    sub = images.take(d.train, idx)
    assert torch.equal(sub.images, d.train.images[idx]) and sub.labels.tolist() == d.train.labels[idx].tolist()
    files = FileImages([f"{i}.jpg" for i in range(10)], np.arange(10, dtype=np.int64), 32, "folder")
    sub = images.take(files, idx)
    assert sub.paths == ["3.jpg", "0.jpg", "7.jpg"] and sub.labels.tolist() == [3, 0, 7] and sub[2:] == (32, "folder")


# ------------------------------------------------------------- every dataset of the registry

@pytest.fixture
def closed_port():
    """A loopback port that refuses connections: bound, never listening."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@pytest.mark.parametrize("name", [n for n in datasets.DATASETS if n != "synthetic"])  # every one that reads files
def test_a_dataset_whose_files_are_not_there_is_one_line_that_says_where_and_writes_nothing(tmp_path, capsys,
                                                                                            closed_port, name):
    """The registry's datasets, each through train.py: missing files are one line that names where they were looked
    for, exit 2, and nothing under --data-dir or --out; a download (from a mirror that refuses) leaves nothing."""
    data = tmp_path / "data"
    with pytest.raises(SystemExit) as e:
        train.main(["--dataset", name, "--data-dir", str(data), "--data-mirror", f"http://127.0.0.1:{closed_port}/",
                    "--arch", "cnn", "--device", "cpu", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("train.py: error:"), err
    assert str(data) in err and "Traceback" not in err, err
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)


def test_idn_from_stored_uint8_files_is_the_authors_draw_on_the_same_pixels(tmp_path):
    """--noise idn on Fashion-MNIST's IDX files as stored (uint8, 0..255), through the reader and train.py's
    given_labels: the labels equal those of the authors' get_instance_noisy_label (its loop over samples in torch
    float32, transcribed) fed the stored pixels as their dataset_split passes them, as floats 0..255 (here each in
    the three identical channels the reader makes), the same flip rates and projections, then one uniform draw a
    sample, all from the run's seed. The pixels divided by 255 would change 7.6% of 2,000 samples' labels."""
    import torch.nn.functional as F

    from noise import truncated_normal
    from training import build, config
    n, k, seed = 2000, 10, 3
    stored = tiny.write_idx(str(tmp_path), n_train=n, n_test=8, seed=5)["train"]
    args = config.resolve(config.get_args(["--dataset", "fashionmnist", "--data-dir", str(tmp_path), "--arch", "mlp",
                                           "--noise", "idn", "--rate", "0.4", "--seed", str(seed), "--device", "cpu",
                                           "--out", str(tmp_path / "run")]))
    d, train_set, _, keep = build.load_data(args)
    got = build.given_labels(args, d, train_set, keep)
    x = torch.from_numpy(np.repeat(stored[0][:, None], 3, axis=1)[keep]).float()  # (n, 3, 28, 28), 0..255
    clean = stored[1][keep].astype(np.int64)
    rng = np.random.default_rng(seed)
    flip_rate = truncated_normal(rng, 0.4, 0.1, len(clean))
    W = torch.from_numpy(rng.standard_normal((k, x[0].numel(), k), dtype=np.float32))
    P = []
    for i, (x_i, y_i) in enumerate(zip(x, clean)):
        A = x_i.view(1, -1).mm(W[y_i]).squeeze(0)
        A[y_i] = -float("inf")
        A = flip_rate[i] * F.softmax(A, dim=0)
        A[y_i] += 1 - flip_rate[i]
        P.append(A)
    u = rng.random(len(clean))
    want = np.minimum((u[:, None] >= np.cumsum(torch.stack(P).double().numpy(), 1)).sum(1), k - 1)
    assert len(got) == n and 0.3 < (want != clean).mean() < 0.5
    assert np.array_equal(got, want)
