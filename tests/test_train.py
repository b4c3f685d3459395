"""train.py end to end on CPU: every mode and lc, the files a run writes, resume, bad input, every dataset format."""
import contextlib
import importlib.metadata
import io
import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import train
from mutual import CMD_MODES, LCS, MODES, knobs_read
from noise import NOISE
from tools import perf
from training import config, runfiles
from training.datasets import DATASETS, load_dataset

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
TINY = ["--dataset", "synthetic", "--arch", "cnn", "--synthetic-size", "96", "--synthetic-test-size", "48",
        "--synthetic-classes", "4", "--batch-size", "32", "--device", "cpu", "--workers", "0"]
METRIC_KEYS = {"epoch", "lr", "chi", "seconds", "train_loss_a", "train_loss_b", "test_acc_a", "test_acc_b",
               "test_acc_mean", "test_acc_ens", "selected_b2a", "selected_a2b", "precision_b2a", "precision_a2b",
               "recall_b2a", "recall_a2b", "memorized_a", "memorized_b", "confidence_a", "confidence_b"}


def cli(*args, timeout=120):
    return subprocess.run([sys.executable, os.path.join(HERE, "train.py"), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=HERE)


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.mark.slow  # a process of its own: the second tier (python -m pytest -q -m slow lab tests)
def test_cli_run_writes_every_file_with_its_keys_and_imports_no_torchvision(tmp_path):
    # -X importtime: each module the run imports, one stderr line each. torchvision, 3 s of every start, is imported
    # only where a dataset or a net of its own is read or built (training/datasets.py)
    out = str(tmp_path / "run")
    res = subprocess.run([sys.executable, "-X", "importtime", os.path.join(HERE, "train.py"), *TINY, "--epochs", "2",
                          "--out", out], capture_output=True, text=True, timeout=120, cwd=HERE)
    assert res.returncode == 0, res.stderr[-3000:]
    imported = [ln.split("|")[-1].strip() for ln in res.stderr.splitlines() if ln.startswith("import time:")]
    assert "torch" in imported and not [m for m in imported if m.split(".")[0] == "torchvision"]
    assert "settings:" in res.stdout and res.stdout.count("\nepoch ") == 2
    config = json.load(open(os.path.join(out, "config.json")))
    assert config["mode"] == "progressive" and config["lc"] == "mylc" and config["eta"] == 4.0 and config["b"] == -5.0
    assert config["provenance"]["torchvision"] == importlib.metadata.version("torchvision")  # read, not imported
    noisy = np.load(os.path.join(out, "noisy_labels.npy"))
    assert noisy.shape == (96,) and noisy.dtype == np.int64
    rows = metrics(out)
    assert [r["epoch"] for r in rows] == [1, 2] and METRIC_KEYS <= set(rows[0])
    assert rows[1]["chi"] == pytest.approx(math.log(4) / 4 * 2 / (1 + math.exp(5 * 0.5)))  # Eq. 7 at t = Gamma
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert {"test_acc_a", "test_acc_b", "test_acc_mean", "seconds"} <= set(summary)
    assert summary["test_acc_mean"] == pytest.approx((summary["test_acc_a"] + summary["test_acc_b"]) / 2)
    ckpt = torch.load(os.path.join(out, "checkpoint.pt"), weights_only=True)
    assert ckpt["epoch"] == 2 and {"model_a", "model_b", "opt_a", "opt_b", "sched_a", "sched_b", "rng_cpu"} <= set(ckpt)
    check_entropy_hist(out, rows, noisy, config["synthetic_classes"])


def check_entropy_hist(out, rows, noisy_labels, k, clean_labels=None):
    """entropy_hist.npz: per epoch and model, every training sample once; the noisy split counts the noisy labels."""
    with np.load(os.path.join(out, "entropy_hist.npz")) as f:
        h = {key: f[key] for key in f.files}
    assert h["epoch"].tolist() == [r["epoch"] for r in rows]
    assert h["counts"].shape[:3] == (len(rows), 2, 2) and h["edges"][-1] == pytest.approx(math.log(k))
    per_model = h["counts"].sum(axis=(2, 3))  # (epochs, models)
    assert (per_model == np.array([[r["train_samples"]] * 2 for r in rows])).all()
    assert h["chi_end"].tolist() == pytest.approx([r["chi"] for r in rows])
    if clean_labels is not None and bool(h["known_clean"]):
        n_noisy = int((noisy_labels != clean_labels).sum())
        assert (h["counts"][:, :, 1].sum(-1) == n_noisy).all()  # drop_last-free tiny runs see every sample


def runnable(argv):
    """argv, with a warm-up epoch (and a second epoch to train after it) where train.py asks for one (a stage that
    estimates after a warm-up)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the notes resolve prints
            config.resolve(config.get_args(argv))
        return argv
    except config.UserError as e:
        if "--warmup" not in str(e):
            raise
        epochs = int(argv[len(argv) - 1 - argv[::-1].index("--epochs") + 1]) if "--epochs" in argv else 1
        return argv + ["--warmup", "1"] + ([] if epochs > 1 else ["--epochs", "2"])


@pytest.mark.parametrize("mode,lc", [(m, lc) for m in CMD_MODES for lc in LCS] + [(m, None) for m in MODES
                                                                                    if m not in CMD_MODES])
def test_every_mode_and_lc_trains(tmp_path, mode, lc):
    argv = runnable(TINY + ["--epochs", "1", "--mode", mode, "--out", str(tmp_path / "r")] + (["--lc", lc] if lc else []))
    summary = train.main(argv)
    row = metrics(str(tmp_path / "r"))[0]
    assert 0 <= summary["test_acc_mean"] <= 100
    assert math.isfinite(row["train_loss_a"]) and math.isfinite(row["train_loss_b"])
    assert 0 <= row["precision_b2a"] <= 1 if row["selected_b2a"] else row["precision_b2a"] is None
    if mode == "zero":  # eta = inf: no knowledge passes, and the two runs are independent
        assert row["selected_b2a"] == 0 and row["selected_a2b"] == 0 and row["chi"] == 0
    if mode == "all":  # eta = 1, b = 0: every sample passes
        assert row["selected_b2a"] == 1 and row["selected_a2b"] == 1


@pytest.mark.slow  # a process of its own: the second tier (python -m pytest -q -m slow lab tests)
@pytest.mark.parametrize("peers", [2, 3])
def test_torchrun_two_cpu_processes_with_gloo(tmp_path, peers):
    out = str(tmp_path / "ddp")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py",
           *TINY, "--epochs", "2", "--log-every", "1", "--peers", str(peers), "--out", out]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=HERE)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.count("\nepoch ") == 2  # only rank 0 prints and writes
    assert res.stdout.count(" img/s | loss A ") == 2 * 3  # the progress line too: 3 steps per epoch
    rows = metrics(out)
    assert [r["epoch"] for r in rows] == [1, 2]
    assert rows[0]["train_samples"] == 96  # shards of every batch, summed over both ranks
    assert json.load(open(os.path.join(out, "config.json")))["world_size"] == 2
    assert ("test_acc_c" in rows[0]) == (peers == 3) and os.path.exists(os.path.join(out, f"model_{'abc'[peers - 1]}.pt"))
    single = str(tmp_path / "single")
    train.main(TINY + ["--epochs", "1", "--out", single])
    assert np.array_equal(np.load(os.path.join(out, "noisy_labels.npy")), np.load(os.path.join(single, "noisy_labels.npy")))


@pytest.mark.slow  # a process of its own: the second tier (python -m pytest -q -m slow lab tests)
def test_one_process_torchrun_goes_through_ddp_and_equals_a_plain_run(tmp_path):
    out, plain = str(tmp_path / "ddp1"), str(tmp_path / "plain")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", "train.py",
           *TINY, "--epochs", "2", "--out", out]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=HERE)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "distributed: 1 process, gloo backend, DistributedDataParallel" in res.stdout  # the collectives ran
    train.main(TINY + ["--epochs", "2", "--out", plain])
    assert [dict(r, seconds=0) for r in metrics(out)] == [dict(r, seconds=0) for r in metrics(plain)]


def test_static_threshold_is_constant_and_selects_partially(tmp_path):
    out = str(tmp_path / "s")
    train.main(TINY + ["--epochs", "3", "--mode", "static", "--eta", "1.5", "--lc", "ce", "--out", out])
    rows = metrics(out)
    assert all(r["chi"] == pytest.approx(math.log(4) / 1.5) for r in rows)
    assert all(0 <= r["selected_b2a"] <= 1 for r in rows)


def test_zero_knowledge_models_train_as_if_alone(tmp_path):
    # With eta = inf model A's run must not depend on model B at all: pair it with a different B.
    common = TINY + ["--epochs", "2", "--mode", "zero", "--lc", "ce"]
    a1 = train.main(common + ["--arch", "cnn,cnn", "--out", str(tmp_path / "1")])
    a2 = train.main(common + ["--arch", "cnn,resnet18", "--out", str(tmp_path / "2")])
    assert a1["test_acc_a"] == a2["test_acc_a"]


@pytest.mark.slow  # a process of its own: the second tier (python -m pytest -q -m slow lab tests)
def test_resume_after_kill_matches_uninterrupted_run(tmp_path):
    flags = TINY + ["--synthetic-size", "512", "--epochs", "6", "--seed", "3"]
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    assert cli(*flags, "--out", full).returncode == 0
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "train.py"), *flags, "--out", part],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=HERE)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(os.path.join(part, "metrics.jsonl")) and len(metrics(part)) >= 2:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with open(os.path.join(part, "checkpoint.pt.tmp"), "wb") as f:  # a write the kill cut short
        f.write(b"half a checkpoint")
    res = cli(*flags, "--out", part, "--resume")
    assert res.returncode == 0, res.stderr
    assert metrics(part) == [dict(r, seconds=p["seconds"]) for r, p in zip(metrics(full), metrics(part))]
    with np.load(os.path.join(full, "entropy_hist.npz")) as f, np.load(os.path.join(part, "entropy_hist.npz")) as g:
        assert set(f.files) == set(g.files) and all(np.array_equal(f[k], g[k]) for k in f.files)
    a = torch.load(os.path.join(full, "checkpoint.pt"), weights_only=True)
    b = torch.load(os.path.join(part, "checkpoint.pt"), weights_only=True)
    for k in ("model_a", "model_b"):
        assert all(torch.equal(a[k][n], b[k][n]) for n in a[k])


BAD = {
    "unknown dataset": (["--dataset", "imagenet"], "invalid choice"),
    "unknown arch": (["--arch", "vgg16"], "unknown architecture"),
    "unknown mode": (["--mode", "some"], "invalid choice"),
    "rate above 1": (["--rate", "1.2"], "--rate must be in [0, 1)"),
    "rate of 1": (["--rate", "1"], "--rate must be in [0, 1)"),
    "eta zero": (["--mode", "static", "--eta", "0"], "--eta 0"),
    "missing data dir": (["--dataset", "folder", "--data-dir", "/nonexistent/cmd-data"], "/nonexistent/cmd-data"),
    "conflicting mode flags": (["--mode", "zero", "--eta", "3"], "sets eta itself"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, case):
    flags, message = BAD[case]
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        train.main(TINY + ["--epochs", "1", "--out", str(out)] + flags)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.startswith("train.py: error:")
    assert not out.exists()


def test_bad_input_on_the_command_line_has_no_traceback(tmp_path):
    res = cli(*TINY, "--rate", "-0.5", "--out", str(tmp_path / "x"))
    assert res.returncode == 2 and "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_existing_run_is_refused_and_kept(tmp_path, capsys):
    out = str(tmp_path / "r")
    train.main(TINY + ["--epochs", "1", "--out", out])
    before = open(os.path.join(out, "metrics.jsonl")).read()
    with pytest.raises(SystemExit):
        train.main(TINY + ["--epochs", "1", "--out", out])
    assert "already holds a run" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a different configuration may not resume this run
        train.main(TINY + ["--epochs", "1", "--out", out, "--resume", "--lr", "0.3"])
    assert "different settings (lr)" in capsys.readouterr().err
    with open(os.path.join(out, "checkpoint.pt"), "r+b") as f:
        f.truncate(100)
    with pytest.raises(SystemExit):
        train.main(TINY + ["--epochs", "1", "--out", out, "--resume"])
    assert "corrupt" in capsys.readouterr().err
    assert open(os.path.join(out, "metrics.jsonl")).read() == before


def test_a_run_directory_is_in_one_state_the_tools_and_train_py_share(tmp_path):
    """runfiles.state, the one answer to "what state is this run in": NEW until a run's first file, STARTED while
    it runs or once stopped, DIVERGED with diverged.json (tools.batched, studies.fmnist), FINISHED with summary.json,
    which train.py writes last; and train.py --resume of a FINISHED run has nothing to do."""
    out = str(tmp_path / "r")
    assert runfiles.state(out) == runfiles.NEW
    os.makedirs(out)
    assert runfiles.state(out) == runfiles.NEW
    runfiles.write_json(out, "config.json", {})
    assert runfiles.state(out) == runfiles.STARTED
    runfiles.write_json(out, "diverged.json", dict(error="loss became NaN/inf in epoch 1", epoch=1))
    assert runfiles.state(out) == runfiles.DIVERGED
    out = str(tmp_path / "trained")
    train.main(TINY + ["--epochs", "1", "--out", out])
    assert runfiles.state(out) == runfiles.FINISHED
    metrics = open(os.path.join(out, "metrics.jsonl")).read()
    assert train.main(TINY + ["--epochs", "1", "--out", out, "--resume"]) == runfiles.read_json(out, "summary.json")
    assert open(os.path.join(out, "metrics.jsonl")).read() == metrics
    os.remove(os.path.join(out, "summary.json"))  # as if stopped after its last checkpoint
    assert runfiles.state(out) == runfiles.STARTED


def test_checkpoint_loading_refuses_pickled_code(tmp_path, capsys):
    out = tmp_path / "r"
    out.mkdir()
    (out / "config.json").write_text("{}")
    torch.save({"config": {}, "payload": np.dtype("int64")}, str(out / "checkpoint.pt"))  # needs full unpickling
    with pytest.raises(SystemExit):
        train.main(TINY + ["--epochs", "1", "--out", str(out), "--resume"])
    assert "corrupt or not a CMD checkpoint" in capsys.readouterr().err


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, capsys):
    out = str(tmp_path / "r")
    with pytest.raises(SystemExit) as e:  # lr jumps to 1e33 after epoch 1
        train.main(TINY + ["--epochs", "3", "--lr", "0.01", "--milestones", "1", "--lr-decay", "1e35", "--out", out])
    assert e.value.code == 2 and "NaN" in capsys.readouterr().err
    assert torch.load(os.path.join(out, "checkpoint.pt"), weights_only=True)["epoch"] == 1
    assert len(metrics(out)) == 1


@pytest.mark.cuda
@pytest.mark.parametrize("mode,lc", perf.SYNC_CASES)
def test_training_step_is_sync_free_on_cuda(mode, lc):
    # 3 warm-up steps, then 2 under torch.cuda.set_sync_debug_mode("error"), which raises on any sync
    assert perf.sync_free_samples(mode, lc, torch.device("cuda"), batch_size=128) == 5 * 128


def fake_dataset(name, root):
    """A tiny copy of the dataset's real on-disk format (its record's, Dataset.tiny). Returns the flags to train on it."""
    import test_datasets
    return test_datasets.write_copy(name, root)


ON_DISK = [name for name, d in DATASETS.items() if name != "synthetic"]  # every dataset read from its files


def check_every_mode_trains_on(tmp_path, dataset, mode):
    """One epoch of mode on the dataset's tiny copy: its given labels, and synthetic noise on clean ones (its record's
    real_noise); every test set it has reported."""
    extra = fake_dataset(dataset, tmp_path / "data")
    out = str(tmp_path / "run")
    noise = [] if DATASETS[dataset].real_noise else ["--noise", "sym", "--rate", "0.4"]
    tau = ["--forget-rate", "0.2"] if "forget_rate" in knobs_read(mode, "ce") and not noise else []  # no noise rate
    # to default to
    summary = train.main(["--dataset", dataset, "--data-dir", str(tmp_path / "data"), "--arch", "cnn", "--epochs", "1",
                          "--batch-size", "4", "--device", "cpu", "--workers", "0", "--mode", mode, "--out", out]
                         + extra + noise + tau)
    assert 0 <= summary["test_acc_mean"] <= 100
    row = metrics(out)[0]
    tests = [k[:-len("_acc_mean")] for k in row if k.endswith("_acc_mean")]
    assert "test" in tests and all(f"{t}_acc_mean" in summary for t in tests)
    assert math.isfinite(row["train_loss_a"]) and row["train_samples"] > 0
    assert (row["precision_b2a"] is None) == (not noise or row["selected_b2a"] == 0)
    if not noise:  # already noisy: the given labels are the files', none added
        d = load_dataset(dataset, tmp_path / "data", image_size=None if "--image-size" not in extra else int(
            extra[extra.index("--image-size") + 1]), download=False)
        assert np.array_equal(np.load(os.path.join(out, "noisy_labels.npy")), d.train.labels)


@pytest.mark.filterwarnings("ignore:ILSVRC12")
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("dataset", ON_DISK)
@pytest.mark.parametrize("mode", MODES)
def test_every_mode_on_every_on_disk_dataset(tmp_path, dataset, mode):
    check_every_mode_trains_on(tmp_path, dataset, mode)


@pytest.mark.filterwarnings("ignore:ILSVRC12")
@pytest.mark.parametrize("kind", [k for k, x in NOISE.items() if x.rows is not None])
@pytest.mark.parametrize("dataset", [n for n, d in DATASETS.items() if d.files] + ["folder"])
def test_noise_that_depends_on_the_sample_is_refused_in_one_line_on_images_read_from_files(tmp_path, capsys, kind,
                                                                                            dataset):
    """A dataset read from its files (its record's files), or a folder of images too large to hold: one line, exit 2,
    nothing written."""
    extra = fake_dataset(dataset, tmp_path / "data")
    extra = ["--image-size", "128"] if dataset == "folder" else extra  # read from its files above 64 px
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        train.main(["--dataset", dataset, "--data-dir", str(tmp_path / "data"), "--arch", "cnn", "--epochs", "1",
                    "--device", "cpu", "--workers", "0", "--noise", kind, "--out", str(out)] + extra)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and f"--noise {kind} draws each label from its image" in err[0], err
    assert not out.exists()


# ---------------------------------------------------------------- cohorts (--peers N)

def test_a_cohort_of_three_trains_resumes_bit_for_bit_and_a_pair_refuses_its_run(tmp_path, monkeypatch, capsys):
    import shutil

    import evaluate
    from training import rundir
    flags = TINY + ["--epochs", "2", "--peers", "3", "--arch", "cnn,mlp,cnn", "--mode", "static", "--eta", "1.1"]
    out = str(tmp_path / "cohort")
    real_save = rundir.save_checkpoint

    def keep_epoch_1(out_, config, epoch, *args, **kwargs):
        real_save(out_, config, epoch, *args, **kwargs)
        if epoch == 1:
            shutil.copy(os.path.join(out_, "checkpoint.pt"), str(tmp_path / "epoch1.pt"))

    monkeypatch.setattr(rundir, "save_checkpoint", keep_epoch_1)
    summary = train.main(flags + ["--out", out])
    rows = metrics(out)
    pairs = [f"{j}2{k}" for j in "abc" for k in "abc" if j != k]
    for key in [f"{kind}_{p}" for p in pairs for kind in ("selected", "precision", "recall")] + \
               [f"{kind}_{x}" for x in "abc" for kind in ("train_loss", "memorized", "confidence", "test_acc")]:
        assert key in rows[-1], key
    assert 0 < rows[-1]["selected_a2c"] < 1 and rows[-1]["selected_a2c"] == rows[-1]["selected_a2b"]  # A teaches both
    assert summary["test_acc_mean"] == pytest.approx(sum(summary[f"test_acc_{x}"] for x in "abc") / 3)
    with np.load(os.path.join(out, "entropy_hist.npz")) as h:
        assert h["counts"].shape[:3] == (2, 3, 2) and (h["counts"].sum(axis=(2, 3)) == 96).all()
    weights = json.load(open(os.path.join(out, "weights.json")))
    assert [weights[f"model_{x}"]["arch"] for x in "abc"] == ["cnn", "mlp", "cnn"]
    acc = evaluate.main([out])  # the three final models on the run's test set: the run's own numbers
    assert all(acc[k] == pytest.approx(summary[k]) for k in summary if "_acc_" in k)
    capsys.readouterr()

    with pytest.raises(SystemExit) as e:  # a pair may not continue a cohort's run
        train.main(TINY + ["--epochs", "2", "--mode", "static", "--eta", "1.1", "--out", out, "--resume"])
    assert e.value.code == 2 and "different settings (arch, peers)" in capsys.readouterr().err

    shutil.copy(str(tmp_path / "epoch1.pt"), os.path.join(out, "checkpoint.pt"))  # as if it had stopped there
    os.remove(os.path.join(out, "summary.json"))
    train.main(flags + ["--out", out, "--resume"])
    assert metrics(out) == [dict(r, seconds=p["seconds"]) for r, p in zip(rows, metrics(out))]


@pytest.mark.parametrize("flags,message", [(["--peers", "1"], "--peers 1: must be between 2"),
                                           (["--peers", "3", "--arch", "cnn,mlp"], "one per model (--peers 3), got 2"),
                                           (["--arch", "cnn,mlp,cnn"], "one per model (--peers 2), got 3")])
def test_peers_and_arch_must_agree(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as e:
        train.main(TINY + ["--epochs", "1", "--out", str(tmp_path / "x")] + flags)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_a_resume_that_changes_the_arithmetic_says_so_and_records_it(tmp_path, capsys):
    out = str(tmp_path / "r")
    flags = TINY + ["--epochs", "2", "--out", out]
    train.main(flags)
    ckpt = torch.load(os.path.join(out, "checkpoint.pt"), weights_only=True)  # back to the end of epoch 1
    ckpt["epoch"] = 1
    torch.save(ckpt, os.path.join(out, "checkpoint.pt"))
    os.remove(os.path.join(out, "summary.json"))
    capsys.readouterr()
    train.main(flags + ["--resume", "--amp", "bf16"])  # may move to other arithmetic, but is told so
    err = capsys.readouterr().err
    assert "warning: resuming with amp bf16 (before: off)" in err and "will not equal an uninterrupted run" in err
    resumed = json.load(open(os.path.join(out, "config.json")))["resumed"]
    assert resumed[-1]["changed"] == {"amp": ["off", "bf16"]}
    train.main(flags + ["--resume"])  # finished: nothing changes, nothing to warn about
    assert "warning" not in capsys.readouterr().err


def test_a_run_prints_no_line_over_its_width_and_names_only_the_knobs_it_reads(tmp_path, capsys):
    """The settings a run prints are every resolved setting but the knobs its mode and label correction do not read
    (mutual.knobs_read), wrapped: no line of a run's output is longer than report.WIDTH (200) characters."""
    from training import report
    train.main(TINY + ["--epochs", "1", "--mode", "static", "--lc", "ls", "--out", str(tmp_path / "r")])
    out = capsys.readouterr().out.splitlines()
    assert out and max(len(line) for line in out) <= report.WIDTH
    first = next(i for i, line in enumerate(out) if line.startswith("settings: "))
    said = " ".join([out[first]] + [line for line in out[first + 1:] if line.startswith("  ")])
    assert "ls_eps=0.25" in said and "eta=4.0" in said and "resume=False" in said
    assert not [k for k in ("mylc_b1=", "cp_beta=", "proselflc_b=", "mkd_eps=", "bootsoft_eps=") if k in said], said
