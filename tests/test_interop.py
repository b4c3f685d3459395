"""Runs that work with the field's tools: train.py --train-indices (train on given samples, their labels drawn over
all), and evaluate.py --probs (each model's probabilities on a run's training set, held-out samples marked)."""
import json
import os

import numpy as np
import pytest
import torch

import evaluate
import train
from training import build, config

TINY = ["--dataset", "synthetic", "--arch", "cnn", "--synthetic-size", "96", "--synthetic-test-size", "48",
        "--synthetic-classes", "4", "--batch-size", "16", "--device", "cpu", "--workers", "0", "--val-split", "0.25",
        "--epochs", "2"]


def kept(flags):
    """load_data's kept training samples (dataset indices) and their given labels, as train.py draws them."""
    args, _ = config.settings(flags)
    d, images, _, keep = build.load_data(args)
    return keep, build.given_labels(args, d, images, keep), d, images


def metrics(out):
    return [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]


def refused(capsys, argv, main=train.main):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_train_indices_trains_on_those_samples_with_the_labels_drawn_over_all(tmp_path, capsys):
    """A run on every other kept sample trains on exactly them (train_indices.npy, 36 samples an epoch), with the
    labels the full run gives them: noise is drawn over every kept sample first. Naming every kept sample is the
    plain run, bit for bit."""
    keep, given, _, _ = kept(TINY)
    assert len(keep) == 72 and len(np.unique(given)) == 4
    np.save(tmp_path / "half.npy", keep[1::2][::-1])  # any order: the run trains in the dataset's
    np.save(tmp_path / "all.npy", keep)
    capsys.readouterr()
    train.main(TINY + ["--out", str(tmp_path / "half"), "--train-indices", str(tmp_path / "half.npy")])
    assert " train 36 (4 classes" in capsys.readouterr().out
    assert np.array_equal(np.load(tmp_path / "half" / "train_indices.npy"), keep[1::2])
    assert np.array_equal(np.load(tmp_path / "half" / "noisy_labels.npy"), given[1::2])
    train.main(TINY + ["--out", str(tmp_path / "plain")])
    train.main(TINY + ["--out", str(tmp_path / "all"), "--train-indices", str(tmp_path / "all.npy")])
    assert np.array_equal(np.load(tmp_path / "plain" / "noisy_labels.npy"), given)
    same = [dict(r, seconds=0) for r in metrics(tmp_path / "plain")]
    assert [dict(r, seconds=0) for r in metrics(tmp_path / "all")] == same
    assert [dict(r, seconds=0) for r in metrics(tmp_path / "half")] != same
    assert not os.path.exists(tmp_path / "plain" / "train_indices.npy")


def test_train_indices_bad_files_are_one_line_and_nothing_is_written(tmp_path, capsys):
    keep, _, _, _ = kept(TINY)
    val = np.setdiff1d(np.arange(96), keep)  # the validation split's samples: held out of training
    bad = {"missing.npy": None, "pickled.npy": np.array([{"a": 1}], dtype=object), "floats.npy": keep[:4] + 0.5,
           "matrix.npy": keep[:4].reshape(2, 2), "empty.npy": keep[:0], "twice.npy": np.r_[keep[:3], keep[:1]],
           "range.npy": np.r_[keep[:3], 96], "negative.npy": np.r_[keep[:3], -1], "val.npy": np.r_[keep[:3], val[0]]}
    words = {"missing.npy": "does not exist", "pickled.npy": "not a .npy array", "floats.npy": "not indices",
             "matrix.npy": "not indices", "empty.npy": "not indices", "twice.npy": "2 times",
             "range.npy": "not among", "negative.npy": "not among", "val.npy": "not among the 72"}
    for name, a in bad.items():
        if a is not None:
            np.save(tmp_path / name, a, allow_pickle=True)
        out = tmp_path / f"run-{name}"
        err = refused(capsys, TINY + ["--out", str(out), "--train-indices", str(tmp_path / name)])
        assert words[name] in err and "--train-indices" in err, err
        assert not os.path.exists(out)
    with open(tmp_path / "text.npy", "w") as f:
        f.write("1 2 3\n")
    assert "not a .npy array" in refused(capsys, TINY + ["--out", str(tmp_path / "t"), "--train-indices",
                                                         str(tmp_path / "text.npy")])
    open(tmp_path / "nothing.npy", "w").close()  # an empty file
    assert "not a .npy array" in refused(capsys, TINY + ["--out", str(tmp_path / "t"), "--train-indices",
                                                         str(tmp_path / "nothing.npy")])
    np.savez(tmp_path / "two.npz", keep[:4], keep[4:8])
    assert "an .npz" in refused(capsys, TINY + ["--out", str(tmp_path / "t"), "--train-indices",
                                                str(tmp_path / "two.npz")])
    assert not os.path.exists(tmp_path / "t")


def test_a_resume_with_other_train_indices_is_refused(tmp_path, capsys):
    keep, _, _, _ = kept(TINY)
    np.save(tmp_path / "i.npy", keep[:40])
    out = str(tmp_path / "run")
    train.main(TINY + ["--epochs", "1", "--out", out, "--train-indices", str(tmp_path / "i.npy")])
    os.remove(os.path.join(out, "summary.json"))  # as if stopped after its epoch
    np.save(tmp_path / "i.npy", keep[1:41])
    err = refused(capsys, TINY + ["--epochs", "1", "--out", out, "--train-indices", str(tmp_path / "i.npy"),
                                  "--resume"])
    assert "names other samples" in err
    np.save(tmp_path / "i.npy", keep[:40])
    train.main(TINY + ["--epochs", "1", "--out", out, "--train-indices", str(tmp_path / "i.npy"), "--resume"])


def test_evaluate_probs_are_each_models_softmax_on_every_kept_sample(tmp_path):
    """evaluate.py --probs on a run of a third of the kept samples: a row per kept sample (dataset index, the given
    label the run drew, the clean one, whether it trained), and each model's eval-mode softmax on the image, computed
    here from the weights and the pixels on their own."""
    keep, given, d, images = kept(TINY)
    np.save(tmp_path / "i.npy", keep[::3])
    out = str(tmp_path / "run")
    train.main(TINY + ["--out", out, "--train-indices", str(tmp_path / "i.npy")])
    evaluate.main([out, "--probs", str(tmp_path / "p.npz"), "--device", "cpu"])
    z = np.load(tmp_path / "p.npz", allow_pickle=False)
    assert np.array_equal(z["index"], keep) and np.array_equal(z["given"], given)
    assert np.array_equal(z["clean"], images.labels) and np.array_equal(z["trained"], np.isin(keep, keep[::3]))
    x = (images.images.float() / 255 - torch.tensor(d.mean)[:, None, None]) / torch.tensor(d.std)[:, None, None]
    assert z["probs"].shape == (2, 72, 4) and z["probs"].dtype == np.float32
    for k, name in enumerate("ab"):
        net, _ = evaluate.load_model(os.path.join(out, f"model_{name}.pt"), "cnn", 4, torch.device("cpu"))
        with torch.no_grad():
            want = torch.softmax(net(x), -1).numpy()
        assert np.allclose(z["probs"][k], want, atol=1e-5)
    assert not np.allclose(z["probs"][0], z["probs"][1], atol=1e-3)


def test_evaluate_probs_refusals(tmp_path, capsys):
    err = refused(capsys, ["--weights", "a.pt", "--arch", "cnn", "--probs", str(tmp_path / "p.npz")], evaluate.main)
    assert "--probs needs a run directory" in err
    out = str(tmp_path / "run")
    train.main(TINY + ["--epochs", "1", "--out", out])
    err = refused(capsys, [out, "--probs", str(tmp_path / "no" / "p.npz")], evaluate.main)
    assert "its folder does not exist" in err
    np.save(os.path.join(out, "noisy_labels.npy"), np.zeros(72, np.int64))  # not the labels these data give
    err = refused(capsys, [out, "--probs", str(tmp_path / "p.npz"), "--device", "cpu"], evaluate.main)
    assert "not its noisy_labels.npy" in err and not os.path.exists(tmp_path / "p.npz")
