"""lab/confident.py: confident learning through cleanlab, as a row of the comparison."""
import json
import os

import numpy as np
import pytest
from cleanlab.filter import find_label_issues

import train
from lab import confident
from training import build, config

TINY = ["--dataset", "synthetic", "--arch", "cnn", "--synthetic-size", "96", "--synthetic-test-size", "48",
        "--synthetic-classes", "4", "--batch-size", "16", "--device", "cpu", "--workers", "0", "--val-split", "0.25",
        "--epochs", "2"]


def rows(out):
    return [dict(json.loads(line), seconds=0) for line in open(os.path.join(out, "metrics.jsonl"))]


def test_folds_are_stratified_by_the_given_labels_and_seeded():
    given = np.random.default_rng(0).integers(0, 5, 203)
    fold = confident.folds(given, 5, seed=3)
    assert sorted(np.unique(fold)) == list(range(5))
    for c in range(5):
        counts = np.bincount(fold[given == c], minlength=5)
        assert counts.max() - counts.min() <= 1  # each class dealt evenly
    assert np.array_equal(fold, confident.folds(given, 5, seed=3))
    assert not np.array_equal(fold, confident.folds(given, 5, seed=4))


def test_out_of_fold_probabilities_cleanlabs_flags_and_the_run_on_the_rest(tmp_path, capsys):
    """Each fold trains on the others' samples, to the epoch its validation accuracy is best (the chosen run's
    epochs are the search's, bit for bit); each kept sample's probability is from the fold that held it out;
    find_label_issues on those flags the samples the last run leaves out; confident.json counts them against the
    clean labels. The same command again trains nothing anew."""
    out = str(tmp_path / "cl")
    argv = ["--folds", "3", "--fold-epochs", "4"] + TINY + ["--out", out]
    summary = confident.main(argv)
    args, _ = config.settings(TINY + ["--out", out])
    d, images, _, keep = build.load_data(args)
    given = build.given_labels(args, d, images, keep)
    fold = confident.folds(given, 3, args.seed)
    oof = np.zeros((len(keep), 4), np.float32)
    report = json.load(open(os.path.join(out, "confident.json")))
    for i in range(3):
        where = os.path.join(out, "folds", str(i))
        assert np.array_equal(np.load(os.path.join(where, "search", "train_indices.npy")), keep[fold != i])
        search = rows(os.path.join(where, "search"))
        best = max(search, key=lambda r: r["val_acc_mean"])["epoch"]
        assert report["chosen_epochs"][i] == best and len(search) == 4
        assert rows(os.path.join(where, "chosen")) == search[:best]
        z = np.load(os.path.join(where, "probs.npz"))
        assert np.array_equal(~z["trained"], fold == i)
        oof[fold == i] = z["probs"].mean(0)[fold == i]
    flagged = find_label_issues(given, oof)
    assert 0 < flagged.sum() < len(keep)
    assert np.array_equal(np.load(os.path.join(out, "train_indices.npy")), keep[~flagged])
    assert np.array_equal(np.load(os.path.join(out, "noisy_labels.npy")), given[~flagged])
    wrong = given != images.labels
    assert report["flagged"] == flagged.sum() and report["wrong"] == wrong.sum()
    assert report["precision"] == pytest.approx((flagged & wrong).sum() / flagged.sum())
    assert report["recall"] == pytest.approx((flagged & wrong).sum() / wrong.sum())
    assert summary["test_acc_mean"] == json.load(open(os.path.join(out, "summary.json")))["test_acc_mean"]
    # another method on the kept samples, with the data and noise flags confident.json names: cleanlab's labels
    other = str(tmp_path / "cmd")
    train.main(report["labels_from"].split() + ["--train-indices", os.path.join(out, "kept_indices.npy"), "--arch",
                                                "cnn", "--epochs", "1", "--device", "cpu", "--out", other])
    assert np.array_equal(np.load(os.path.join(other, "noisy_labels.npy")), given[~flagged])
    assert "--val-split 0.25" in report["labels_from"] and "--seed 0" in report["labels_from"]
    first = rows(out)
    stamps = {p: os.path.getmtime(p) for p in (os.path.join(out, "metrics.jsonl"),
                                               os.path.join(out, "folds", "0", "search", "metrics.jsonl"),
                                               os.path.join(out, "folds", "0", "probs.npz"))}
    capsys.readouterr()
    assert confident.main(argv + ["--resume"]) == summary  # a sweep adds --resume
    assert "nothing to do" in capsys.readouterr().out and rows(out) == first
    assert all(os.path.getmtime(p) == t for p, t in stamps.items())  # nor evaluates, nor flags anew
    assert json.load(open(os.path.join(out, "confident.json"))) == report


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    cases = [(["--folds", "3"] + TINY[:-4] + TINY[-2:], "needs --val-split"),
             (["--folds", "1"] + TINY, "at least 2 folds"),
             (["--folds", "30"] + TINY, "fewer than the folds"),
             (["--filter-by", "none"] + TINY, "invalid choice"),
             (TINY + ["--rate", "2"], "--rate")]
    for i, (argv, words) in enumerate(cases):
        out = tmp_path / str(i)
        with pytest.raises(SystemExit) as e:
            confident.main(argv + ["--out", str(out)])
        err = capsys.readouterr().err
        assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and words in err, err
        assert not out.exists()


def test_every_confident_command_shown_in_the_docs_is_accepted():
    from test_faults import readme_and_docs, shown_commands
    lines = [c for text in readme_and_docs().values() for c in shown_commands(text, "lab/confident.py")]
    assert len(lines) >= 2
    for line in lines:
        args, rest, flags = confident.get_args(line.split()[2:])
        assert flags.val_split > 0 and flags.mode == "zero" and flags.lc == "ce"


def test_a_sweep_starts_a_confident_row_as_its_own_process(tmp_path):
    """tools.sweep runs a row whose flags name --entry lab/confident.py by that script (train.py's flags beside its
    own), and a second start resumes: the run finishes once."""
    from tools import paper_tables, sweep
    d = str(tmp_path / "cl-pbnr-s0")
    key = ["--entry", paper_tables.CONFIDENT, "--folds", "2", "--fold-epochs", "1"] + TINY
    job = dict(name="cl-pbnr-s0", dir=d, key=key, argv=key + ["--out", d], after=None, col="x")
    assert sweep.run_jobs([job], jobs=1) == {}
    assert json.load(open(os.path.join(d, "confident.json")))["folds"] == 2
    assert len(rows(d)) == 2 and len(rows(os.path.join(d, "folds", "1", "search"))) == 1
    stamp = os.path.getmtime(os.path.join(d, "summary.json"))
    assert sweep.run_jobs([job], jobs=1) == {} and os.path.getmtime(os.path.join(d, "summary.json")) == stamp


def test_a_run_stopped_between_its_folds_continues_to_what_an_unstopped_one_ends_with(tmp_path, monkeypatch):
    """Stopped after the first fold's probabilities (the process killed): the same command again keeps that fold's
    runs and trains the rest, to the flags, confident.json and metrics of a run never stopped."""
    def argv(out):
        return ["--folds", "2", "--fold-epochs", "2"] + TINY + ["--out", str(tmp_path / out)]
    whole = confident.main(argv("whole"))
    evaluated = confident.evaluate.main

    def stop_at_the_second(a):
        if "/folds/1/" in a[0].replace(os.sep, "/") + "/":
            raise MemoryError("killed")
        return evaluated(a)
    monkeypatch.setattr(confident.evaluate, "main", stop_at_the_second)
    with pytest.raises(MemoryError):
        confident.main(argv("stopped"))
    stamp = os.path.getmtime(tmp_path / "stopped" / "folds" / "0" / "search" / "summary.json")
    monkeypatch.setattr(confident.evaluate, "main", evaluated)
    assert confident.main(argv("stopped"))["test_acc_mean"] == whole["test_acc_mean"]
    assert os.path.getmtime(tmp_path / "stopped" / "folds" / "0" / "search" / "summary.json") == stamp
    got, want = (json.load(open(tmp_path / d / "confident.json")) for d in ("stopped", "whole"))
    assert got == want and rows(tmp_path / "stopped") == rows(tmp_path / "whole")


def test_a_folder_of_another_run_is_refused_in_one_line_before_anything_is_written(tmp_path, capsys):
    """--out holding this tool's run of other --folds, --fold-epochs or --filter-by, or a train.py run, is refused
    before any fold trains; a kept_indices.npy that the folds' kept probabilities do not give again is refused
    before it is written over."""
    out, plain = str(tmp_path / "cl"), str(tmp_path / "plain")
    argv = ["--folds", "2", "--fold-epochs", "1"] + TINY + ["--out", out]
    confident.main(argv)
    train.main(TINY + ["--out", plain])

    def files():
        return {os.path.join(d, n): os.path.getmtime(os.path.join(d, n)) for d, _, ns in os.walk(tmp_path) for n in ns}

    def refused(a, words):
        capsys.readouterr()
        with pytest.raises(SystemExit) as e:
            confident.main(a)
        err = capsys.readouterr().err
        assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and words in err, err
    before = files()
    refused(["--folds", "3"] + argv[2:], "with --folds 2 --fold-epochs 1 --filter-by prune_by_noise_rate; give the same")
    refused(["--filter-by", "prune_by_class"] + argv, "with --folds 2")
    refused(argv[:-1] + [plain], "not lab/confident.py's")
    assert files() == before
    kept = np.load(os.path.join(out, "kept_indices.npy"))
    np.save(os.path.join(out, "kept_indices.npy"), kept[1:])
    before = files()
    refused(argv, "names other samples than find_label_issues flags now")
    assert files() == before
    np.save(os.path.join(out, "kept_indices.npy"), kept)
    assert confident.main(argv)["test_acc_mean"] == json.load(open(os.path.join(out, "summary.json")))["test_acc_mean"]
