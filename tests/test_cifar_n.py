"""Human label noise (CIFAR-N, training/cifar_n.py:human_labels) on tiny copies of the real files: CIFAR pickles
from test_datasets.py and *_human.pt label files written as the authors wrote theirs, torch.save of a
dict of numpy arrays. Loading, every check against the dataset, refusing pickled code, train.py."""
import json
import os
import pickle
import re
import zipfile

import numpy as np
import pytest
import torch
from test_datasets import one_line, write_cifar, write_cifar10

import train
from tools import plot
from training import build, cifar_n, config, datasets, rundir
from training.errors import UserError
from training.datasets import DATASETS, DataError, load_dataset

# Noise rates of the fixture's label sets, so that each key gives different labels.
RATES = {"noisy_label": 0.4, "worse_label": 0.4, "aggre_label": 0.1, "random_label1": 0.2, "random_label2": 0.25,
         "random_label3": 0.3}


def human_file(path, clean, keys, k, seed=0, legacy=False, **replace):
    """A CIFAR-N file: clean_label and each key's labels, int64 arrays in the training set's order; CIFAR-100N
    also keeps its coarse labels as lists of ints, as fine2coarse.py in the authors' repository saves them."""
    rng = np.random.default_rng(seed)
    d = {"clean_label": np.array(clean, dtype=np.int64)}
    for key in keys:
        flip = rng.random(len(clean)) < RATES[key]
        d[key] = np.where(flip, (d["clean_label"] + rng.integers(1, k, len(clean))) % k, d["clean_label"])
    if "noisy_label" in keys:
        d["clean_coarse_label"] = [int(v) // 5 for v in d["clean_label"]]
        d["noisy_coarse_label"] = [int(v) // 5 for v in d["noisy_label"]]
    d.update(replace)
    torch.save(d, str(path), _use_new_zipfile_serialization=not legacy)
    return d


def cifar(tmp_path, dataset, **kw):
    """(data dir, training labels, the label file's dict) for a tiny CIFAR-10 or CIFAR-100 with its CIFAR-N file."""
    root = tmp_path / "data"
    root.mkdir()
    if dataset == "cifar10":
        clean = write_cifar10(root)["train"][1]
        d = human_file(root / "CIFAR-10_human.pt", clean, list(cifar_n.CIFAR10N_KEYS.values()), 10, **kw)
    else:
        clean = write_cifar(root, n_train=40)["train"][1]
        d = human_file(root / "CIFAR-100_human.pt", clean, ["noisy_label"], 100, **kw)
    return root, np.array(clean), d


def load(root, dataset, key=None, path=None):
    d, human = load_dataset(dataset, root, download=False), DATASETS[dataset].human
    path = path or root / human.file
    return cifar_n.human_labels(str(path), human, key, d.train.labels, d.num_classes)


@pytest.mark.parametrize("key", sorted(cifar_n.CIFAR10N_KEYS))
def test_each_cifar10n_key_gives_its_label_set(tmp_path, key):
    root, clean, d = cifar(tmp_path, "cifar10")
    got = load(root, "cifar10", key)
    assert got.dtype == np.int64 and np.array_equal(got, d[cifar_n.CIFAR10N_KEYS[key]])
    others = [k for k in cifar_n.CIFAR10N_KEYS.values() if k != cifar_n.CIFAR10N_KEYS[key]]
    assert all(not np.array_equal(got, d[k]) for k in others)  # the fixture's label sets all differ


def numpy1_names(path):
    """Rewrite a torch.save zip so that its arrays name numpy 1's numpy.core.multiarray, as the files
    released in 2021-22 do (numpy 2 writes numpy._core)."""
    with zipfile.ZipFile(path) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    pkl = next(n for n in entries if n.endswith("/data.pkl"))
    entries[pkl] = entries[pkl].replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
    assert b"cnumpy.core.multiarray\n_reconstruct\n" in entries[pkl]
    with zipfile.ZipFile(path, "w") as z:
        for n, data in entries.items():
            z.writestr(n, data)


@pytest.mark.parametrize("form", ["zip", "numpy1", "legacy"])
def test_cifar100n_in_every_torch_save_form(tmp_path, form):
    root, clean, d = cifar(tmp_path, "cifar100", legacy=form == "legacy")
    if form == "numpy1":
        numpy1_names(root / "CIFAR-100_human.pt")
    got = load(root, "cifar100")
    assert np.array_equal(got, d["noisy_label"]) and not np.array_equal(got, clean)
    raw = cifar_n.read_label_file(str(root / "CIFAR-100_human.pt"))
    assert set(raw) == {"clean_label", "noisy_label", "clean_coarse_label", "noisy_coarse_label"}
    assert raw["noisy_coarse_label"] == d["noisy_coarse_label"]


def test_clean_label_mismatch_is_refused(tmp_path):
    root, clean, d = cifar(tmp_path, "cifar100")
    wrong = d["clean_label"].copy()
    wrong[7] = (wrong[7] + 1) % 100
    human_file(root / "CIFAR-100_human.pt", clean, ["noisy_label"], 100, clean_label=wrong)
    with pytest.raises(DataError) as err:
        load(root, "cifar100")
    assert "clean_label differs from the training labels at 1 of 40 images: not the CIFAR-100N file" in one_line(err)


def test_shuffled_file_is_refused(tmp_path):
    root, clean, d = cifar(tmp_path, "cifar10")
    perm = np.random.default_rng(1).permutation(len(clean))
    assert not np.array_equal(clean[perm], clean)
    human_file(root / "CIFAR-10_human.pt", clean, [], 10, **{k: v[perm] for k, v in d.items()})
    with pytest.raises(DataError) as err:
        load(root, "cifar10", "worst")
    assert "is shuffled" in one_line(err)


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100"])
def test_file_for_the_other_dataset_is_refused(tmp_path, dataset):
    root, clean, _ = cifar(tmp_path, dataset)
    other = "cifar100" if dataset == "cifar10" else "cifar10"
    keys = ["noisy_label"] if other == "cifar100" else list(cifar_n.CIFAR10N_KEYS.values())
    wrong = human_file(tmp_path / "other.pt", clean, keys, 10)  # labels in range, only the keys tell
    with pytest.raises(DataError) as err:
        load(root, dataset, "worst" if dataset == "cifar10" else None, path=tmp_path / "other.pt")
    assert f"is the {DATASETS[other].human.name} file ({DATASETS[other].human.file}" in one_line(err)
    assert np.array_equal(wrong["clean_label"], clean)  # so only the keys gave it away


def test_labels_outside_the_classes_are_refused(tmp_path):
    root, clean, d = cifar(tmp_path, "cifar10")
    worse = d["worse_label"].copy()
    worse[3] = 57  # a CIFAR-100 class
    human_file(root / "CIFAR-10_human.pt", clean, [], 10, **dict(d, worse_label=worse))
    with pytest.raises(DataError) as err:
        load(root, "cifar10", "worst")
    assert "'worse_label' has labels outside 0..9" in one_line(err)


def test_truncated_files_are_refused(tmp_path):
    root, clean, d = cifar(tmp_path, "cifar100")
    path = root / "CIFAR-100_human.pt"
    human_file(path, clean, [], 100, **{k: v[:30] for k, v in d.items()})  # labels of 30 images, not 40
    with pytest.raises(DataError) as err:
        load(root, "cifar100")
    assert "'clean_label' holds 30 labels but the training set has 40" in one_line(err)
    human_file(path, clean, ["noisy_label"], 100)
    data = path.read_bytes()
    for cut in (len(data) // 2, 40):  # a download cut short, in the zip and in the pickle's first bytes
        path.write_bytes(data[:cut])
        with pytest.raises(DataError) as err:
            load(root, "cifar100")
        assert "is truncated or not a torch.save file" in one_line(err)


def test_missing_file_says_where_to_get_it(tmp_path):
    root, _, _ = cifar(tmp_path, "cifar100")
    (root / "CIFAR-100_human.pt").unlink()
    with pytest.raises(DataError) as err:
        load(root, "cifar100")
    msg = one_line(err)
    assert cifar_n.CIFAR_N_URL in msg and str(root / "CIFAR-100_human.pt") in msg and "--noise-file" in msg


class RunsCode:
    """Pickles as a call of os.system: a label file that runs a shell command when unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"echo ran > {self.marker}",)


@pytest.mark.parametrize("legacy", [False, True])
def test_pickle_that_runs_code_is_refused_and_not_run(tmp_path, legacy):
    root, clean, d = cifar(tmp_path, "cifar100")
    armed = tmp_path / "armed"  # the same kind of file does run its command under a full unpickler
    human_file(tmp_path / "armed.pt", clean, [], 100, noisy_label=RunsCode(armed), legacy=legacy)
    torch.load(str(tmp_path / "armed.pt"), weights_only=False)
    assert armed.exists()

    marker = tmp_path / "marker"
    human_file(root / "CIFAR-100_human.pt", clean, [], 100, noisy_label=RunsCode(marker), legacy=legacy)
    with pytest.raises(DataError) as err:
        load(root, "cifar100")
    assert re.search(r"refused, nothing in it was run: it needs (posix|os|nt)\.system", one_line(err))
    assert not marker.exists()


def test_file_holding_tensors_is_refused(tmp_path):
    root, clean, d = cifar(tmp_path, "cifar100")
    path = root / "CIFAR-100_human.pt"
    human_file(path, clean, [], 100, **dict(d, noisy_label=torch.from_numpy(d["noisy_label"])))
    with pytest.raises(DataError) as err:
        load(root, "cifar100")
    assert "it needs torch._utils._rebuild_tensor" in one_line(err)

    class Storages(pickle.Pickler):  # a reference to a storage record, with no global before it
        def persistent_id(self, obj):
            return ("storage", "0") if obj is d["noisy_label"] else None
    with open(path, "wb") as f:  # the legacy layout: magic number, protocol, system info, the object
        for header in (cifar_n.TORCH_MAGIC, 1001, {}):
            pickle.dump(header, f, protocol=2)
        Storages(f, protocol=2).dump(d)
    with pytest.raises(DataError) as err:
        load(root, "cifar100")
    assert "it holds torch tensors" in one_line(err)


# ---------------------------------------------------------------- train.py

def run_args(root, dataset, *flags):
    return ["--dataset", dataset, "--data-dir", str(root), "--noise", "human", "--arch", "cnn", "--epochs", "1",
            "--batch-size", "8", "--device", "cpu", "--workers", "0", *flags]


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100"])
def test_one_epoch_with_human_labels(tmp_path, capsys, dataset):
    root, clean, d = cifar(tmp_path, dataset)
    out = tmp_path / "run"
    summary = train.main(run_args(root, dataset, "--out", str(out)))
    assert 0 <= summary["test_acc_mean"] <= 100
    want = d["worse_label"] if dataset == "cifar10" else d["noisy_label"]
    assert np.array_equal(np.load(out / "noisy_labels.npy"), want)
    printed = re.search(r"realised noise (\d\.\d{3})", capsys.readouterr().out).group(1)
    assert printed == f"{np.mean(want != clean):.3f}"
    with open(out / "metrics.jsonl") as f:
        row = json.loads(f.readline())
    assert row["memorized_a"] is not None and row["recall_b2a"] is not None  # the clean labels are known
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["noise_file"] == str(root / DATASETS[dataset].human.file) and cfg["rate"] is None
    assert cfg["noise_key"] == ("worst" if dataset == "cifar10" else None)
    assert plot.describe(cfg)["noise"] == ("human label noise (worst)" if dataset == "cifar10" else
                                           "human label noise")  # no rate to print


def test_subset_and_val_split_keep_each_image_with_its_human_label(tmp_path):
    root, clean, d = cifar(tmp_path, "cifar10")
    args = config.resolve(config.get_args(run_args(root, "cifar10", "--noise-key", "aggre", "--subset", "30",
                                                   "--val-split", "0.2")))
    fresh = rundir.Run(str(tmp_path / "unused"), {}, resume=False, writes=False)  # a new run: the labels are drawn
    setup = build.Setup(0, 1, 0, torch.device("cpu"), "off", "off", {})
    data, tr, tests, noisy = build.data_and_labels(args, fresh, setup)
    full = data.train.images.reshape(len(clean), -1)
    # the fixture's images are random, so each identifies its index in the training set
    index = {bytes(full[i].numpy()): i for i in range(len(clean))}
    kept = np.array([index[bytes(x.numpy())] for x in tr.images.reshape(len(tr.labels), -1)])
    held = np.array([index[bytes(x.numpy())] for x in tests["val"].images.reshape(len(tests["val"].labels), -1)])
    assert len(kept) == 24 and len(held) == 6 and not set(kept) & set(held)
    assert not np.array_equal(kept, np.arange(24))  # the subset is not a prefix: alignment matters
    assert np.array_equal(noisy, d["aggre_label"][kept]) and np.array_equal(tr.labels, clean[kept])
    assert np.array_equal(tests["val"].labels, clean[held])  # the validation split keeps clean labels


@pytest.mark.parametrize("flags,message", [
    (["--dataset", "synthetic", "--noise", "human"], "--noise human reads the CIFAR-N labels of cifar100 or cifar10"),
    (["--dataset", "cifar100", "--noise", "human", "--rate", "0.4"], "--rate 0.4 given with --noise human"),
    (["--dataset", "cifar100", "--noise", "human", "--noise-key", "aggre"], "CIFAR-100N has one: drop --noise-key"),
    (["--dataset", "cifar10", "--noise", "sym", "--noise-key", "worst"], "go with --noise human"),
    (["--dataset", "cifar100", "--noise-file", "x.pt"], "go with --noise human"),
    (["--dataset", "cifar10", "--noise", "human", "--noise-key", "worse"], "invalid choice"),
])
def test_bad_flags_are_one_line_and_write_nothing(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as e:
        train.main(flags + ["--out", str(tmp_path / "out"), "--data-dir", str(tmp_path / "nowhere")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and message in err and len(err.splitlines()) == 1 and err.startswith("train.py: error:")
    assert not (tmp_path / "out").exists()


def test_bad_label_file_stops_the_run_before_it_writes(tmp_path, capsys):
    root, clean, d = cifar(tmp_path, "cifar10")
    human_file(root / "CIFAR-10_human.pt", clean, [], 10, **{k: v[::-1] for k, v in d.items()})  # reversed
    with pytest.raises(SystemExit) as e:
        train.main(run_args(root, "cifar10", "--out", str(tmp_path / "out")))
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and ("is shuffled" in err or "differs" in err)
    assert not (tmp_path / "out").exists()


def test_run_name_and_defaults():
    args = config.resolve(config.get_args(["--dataset", "cifar10", "--noise", "human", "--data-dir", "/d"]))
    assert args.noise_key == "worst" and args.noise_file == os.path.join("/d", "CIFAR-10_human.pt")
    assert args.arch == "resnet34,resnet34" and args.epochs == 100  # CIFAR-100's settings (appendix C)
    assert os.path.basename(args.out) == "cifar10-human-worst-progressive-mylc-resnet34-s0"
    args = config.resolve(config.get_args(["--noise", "human", "--noise-file", "/x/labels.pt"]))
    assert args.noise_file == "/x/labels.pt" and args.noise_key is None
    assert os.path.basename(args.out) == "cifar100-human-progressive-mylc-resnet34-s0"


def test_the_dataset_record_says_which_human_labels_it_has(monkeypatch, capsys):
    """config reads the record's human labels, never the dataset's name: without them --noise human is refused, and
    with CIFAR-10N's its label sets and their default follow."""
    monkeypatch.setitem(datasets.DATASETS, "cifar10", DATASETS["cifar10"]._replace(human=None))
    monkeypatch.setitem(datasets.DATASETS, "cifar100", DATASETS["cifar100"]._replace(human=cifar_n.CIFAR10N))
    with pytest.raises(UserError, match="--noise human reads the CIFAR-N labels of cifar100, not cifar10"):
        config.resolve(config.get_args(["--dataset", "cifar10", "--noise", "human"]))
    args = config.resolve(config.get_args(["--dataset", "cifar100", "--noise", "human", "--data-dir", "/d"]))
    assert args.noise_key == "worst" and args.noise_file == os.path.join("/d", "CIFAR-10_human.pt")
    noise_file = next(a for a in config.parser()._actions if "--noise-file" in a.option_strings)
    assert "<data-dir>/CIFAR-10_human.pt for cifar100" in noise_file.help  # the help is the records' too
