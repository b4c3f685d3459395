"""Clothing1M (training/clothing1m.py) on tiny copies in its released layout, written here: images/<d>/<dd>/*.jpg
under the root and beside them the key lists and label files, noisy_label_kv.txt, clean_label_kv.txt,
noisy_train_key_list.txt, clean_val_key_list.txt, clean_test_key_list.txt (and clean_train_key_list.txt and
category_names_eng.txt, as released). The given labels are the noisy ones, the test set is the clean test list;
each way the files can be wrong is one line, exit 2, nothing written; train.py trains one epoch on it."""
import json
import os

import numpy as np
import pytest

import train
from training import batches, datasets
from training.datasets import DataError, load_dataset
from training.tiny import write_clothing1m

@pytest.mark.parametrize("names", [True, False])  # category_names_eng.txt or not: 14 classes either way
def test_clothing1m_reads_its_released_layout(tmp_path, names):
    sets = write_clothing1m(tmp_path, names=names)
    d = load_dataset("clothing1m", tmp_path, download=False)
    assert d.num_classes == 14 and d.mean == datasets.IMAGENET_MEAN and list(d.tests) == ["test", "clean_val"]
    for got, (keys, labels) in ((d.train, sets["train"]), (d.tests["test"], sets["test"]),
                                (d.tests["clean_val"], sets["clean_val"])):
        assert got.paths == [os.path.join(str(tmp_path), k) for k in keys] and got.labels.tolist() == labels
        assert got.labels.dtype == np.int64 and got.size == 224
    x, i = batches.IndexedFiles(d.train, batches.file_transforms(d.train.kind, 64, True, d.mean, d.std))[3]
    assert x.shape == (3, 64, 64) and i == 3
    assert load_dataset("clothing1m", tmp_path, image_size=64, download=False).tests["test"].size == 64


def test_clothing1m_is_real_noise_read_from_files_put_in_place():
    d = datasets.DATASETS["clothing1m"]
    assert d.real_noise and d.published() is None and d.pretrained and d.arch == "resnet50_imagenet"


def edit(path, change):
    lines = path.read_text().splitlines()
    path.write_text("\n".join(change(lines)) + "\n")


BAD = {  # how the copy is broken -> what the one line must say
    "no test list": (lambda r: (r / "clean_test_key_list.txt").unlink(),
                     ["clean_test_key_list.txt", "not published for download", "github.com/Cysu/noisy_label"]),
    "no images": (lambda r: os.rename(r / "images", r / "imgs"), ["images/", "not published for download"]),
    "a line without its label": (lambda r: edit(r / "noisy_label_kv.txt", lambda ls: ls[:2] + [ls[2].split()[0]]
                                                + ls[3:]),
                                 ["noisy_label_kv.txt line 3: expected 'images/....jpg LABEL'"]),
    "a label past the 14 classes": (lambda r: edit(r / "clean_label_kv.txt", lambda ls: [ls[0].split()[0] + " 14"]
                                                   + ls[1:]),
                                    ["clean_label_kv.txt line 1: label 14 is outside 0..13"]),
    "a key with no label": (lambda r: edit(r / "clean_test_key_list.txt", lambda ls: ls + ["images/9/99/1.jpg"]),
                            ["clean_test_key_list.txt line 9: key images/9/99/1.jpg has no label in "
                             "clean_label_kv.txt"]),
    "a key outside the root": (lambda r: edit(r / "noisy_label_kv.txt", lambda ls: ls + ["../secret.jpg 3"]),
                               ["key '../secret.jpg' is not a path under the dataset's folder"]),
    "a missing image": (lambda r: (r / "images" / "0" / "00" / "1000.jpg").unlink(),
                        ["1000.jpg not found, though", "noisy_train_key_list.txt lists it"]),
}


@pytest.mark.parametrize("case", BAD)
def test_a_broken_copy_is_one_line_and_writes_nothing(tmp_path, capsys, case):
    root = tmp_path / "clothing1m"
    write_clothing1m(root)
    BAD[case][0](root)
    before = sorted(p for p in tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as e:
        train.main(["--dataset", "clothing1m", "--data-dir", str(root), "--arch", "cnn", "--device", "cpu",
                    "--image-size", "32", "--epochs", "1", "--workers", "0", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("train.py: error:"), err
    assert all(s in err for s in BAD[case][1]), err
    assert sorted(p for p in tmp_path.rglob("*")) == before  # nothing written, no run folder


def test_clothing1m_without_download_says_where_to_get_it(tmp_path):
    with pytest.raises(DataError, match="download is off; Clothing1M is not downloadable: ask its authors"):
        load_dataset("clothing1m", tmp_path, download=False)


def test_clothing1m_trains_one_epoch_on_its_noisy_labels(tmp_path, capsys):
    sets = write_clothing1m(tmp_path / "clothing1m")
    out = tmp_path / "run"
    summary = train.main(["--dataset", "clothing1m", "--data-dir", str(tmp_path / "clothing1m"), "--arch", "cnn",
                          "--image-size", "32", "--epochs", "1", "--batch-size", "8", "--device", "cpu",
                          "--workers", "0", "--out", str(out)])
    assert 0 <= summary["test_acc_mean"] <= 100 and 0 <= summary["clean_val_acc_mean"] <= 100
    assert np.load(out / "noisy_labels.npy").tolist() == sets["train"][1]  # the given labels, no noise added
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["noise"] == "none" and cfg["rate"] == 0.0
    with open(out / "metrics.jsonl") as f:
        row = json.loads(f.readline())
    # the clean labels of the training set are unknown: its diagnostics say so, as for Food-101 and WebVision
    assert row["noise_rate"] is None and row["precision_b2a"] is None and row["memorized_a"] is None
    assert row["train_samples"] == 20 and "clean_val_acc_mean" in row
    assert "data: clothing1m train 20 (14 classes" in capsys.readouterr().out
