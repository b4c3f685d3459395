"""Failures are one line and lose nothing; a run can be watched, resumed, evaluated and cited.

Bad values, --out and --resume mistakes, unreadable images on every data path, Ctrl-C, the total
time across resumes, a finished run resumed, epoch numbers, milestones and --epochs, WebVision's
layouts, failed sweep cells, the progress line, provenance, final weights and evaluate.py, TensorBoard.
"""
import importlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from test_datasets import save_image, write_folder, write_webvision
from test_train import HERE, TINY, cli, metrics

import evaluate
import models
import train
from training import config, datasets, errors, presets, rundir
from training.progress import Display, Progress

RUN = TINY + ["--epochs", "1"]


def one_error_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("train.py: error: ") and "Traceback" not in err
    return lines[0]


def refused(capsys, argv):
    """train.main(argv) must exit 2 with one line on stderr; returns that line."""
    with pytest.raises(SystemExit) as e:
        train.main(argv)
    assert e.value.code == 2
    return one_error_line(capsys.readouterr().err)


def snapshot(out):
    return {name: open(os.path.join(out, name), "rb").read() for name in sorted(os.listdir(out))}


# ---------------------------------------------------------------- 1, 10, 11: values checked before any write

@pytest.mark.parametrize("flags,message", [
    (["--lr", "-1"], "--lr -1.0: must be a positive number"), (["--momentum", "-1"], "--momentum -1.0"),
    (["--weight-decay", "-1"], "--weight-decay -1.0"), (["--lr-decay", "0"], "--lr-decay 0.0"),
    (["--lr-decay", "-0.1"], "--lr-decay -0.1"), (["--subset", "0"], "--subset 0"),
    (["--workers", "-1"], "--workers -1"), (["--log-every", "-1"], "--log-every -1"),
    (["--lr", "nan"], "--lr nan"), (["--milestones", "0,3"], "--milestones 0,3"),
    (["--arch", "cnn,cnn,cnn"], "1 architecture or one per model (--peers 2), got 3"),
    (["--arch", "cnn,vgg"], "unknown architecture 'vgg'"),
    (["--milestones", "2,2"], "--milestones 2,2: give them in increasing order"),
    (["--noise", "pair", "--rate", "0.5"], "--noise pair --rate 0.5: at 0.5 or more"),
    (["--synthetic-classes", "10", "--noise", "sym", "--rate", "0.95"], "--noise sym --rate 0.95 on synthetic (10 "
                                                                         "classes): at (K - 1)/K = 0.9 or more"),
    (["--synthetic-classes", "10", "--noise", "idn", "--rate", "0.95"], "--noise idn --rate 0.95 on synthetic (10 "
                                                                         "classes): at (K - 1)/K = 0.9 or more"),
    (["--synthetic-shift", "-1"], "--synthetic-shift -1: must be at least 0 pixels"),
    (["--pretrained"], "--pretrained loads ImageNet weights into resnet50_imagenet only"),
    (["--subset", "1"], "1 training sample after --subset and --val-split"),
    (["--val-split", "0.999"], "0 training samples after --subset and --val-split"),
    (["--arch", "inception_resnet_v2", "--batch-size", "4"], "--arch inception_resnet_v2 cannot take 32x32 images"),
    (["--lr", "1e300"], "--lr 1e+300: must be a positive number that float32 holds"),
    (["--weight-decay", "1e300"], "--weight-decay 1e+300: must be at least 0, and a number float32 holds"),
])
def test_a_bad_value_is_one_line_and_writes_nothing(tmp_path, capsys, flags, message):
    out = tmp_path / "run"
    assert message in refused(capsys, RUN + ["--out", str(out)] + flags)
    assert not out.exists()


def test_a_negative_lr_on_the_command_line_then_the_corrected_run(tmp_path):
    out = str(tmp_path / "run")
    res = cli(*RUN, "--lr", "-1", "--out", out)
    assert res.returncode == 2 and "--lr -1.0" in one_error_line(res.stderr)
    assert not os.path.exists(out)
    train.main(RUN + ["--lr", "0.01", "--out", out])  # the corrected re-run is not refused
    assert len(metrics(out)) == 1


# ---------------------------------------------------------------- 2: unreadable images

def truncated_jpeg(path, size=(80, 80)):
    save_image(str(path), size=size)  # a JPEG, by its name
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])  # the header survives: it fails only when decoded


def large_folder(root):
    """A folder of images above 64 px: read from disk by the DataLoader path, as Food-101 and WebVision."""
    write_folder(root, sizes=((80, 80), (96, 72), (72, 90)))
    return ["--dataset", "folder", "--data-dir", str(root), "--image-size", "72", "--arch", "cnn",
            "--batch-size", "4", "--device", "cpu", "--noise", "none"]


@pytest.mark.slow  # a process of its own: the second tier (python -m pytest -q -m slow lab tests)
def test_a_corrupt_jpeg_in_a_worker_is_one_line_and_the_run_resumes(tmp_path, capsys):
    flags = large_folder(tmp_path / "data") + ["--epochs", "1", "--workers", "1"]
    bad = tmp_path / "data" / "train" / "dog" / "9.jpg"
    truncated_jpeg(bad)
    out = str(tmp_path / "run")
    res = cli(*flags, "--out", out)
    line = one_error_line(res.stderr)
    assert res.returncode == 2 and str(bad) in line and "--resume" in line
    bad.unlink()  # the user deletes the file, as the line says, and resumes (workers may change on resume)
    train.main(flags[:-1] + ["0", "--out", out, "--resume"])
    assert "starting it again from epoch 1" in capsys.readouterr().err and len(metrics(out)) == 1


def test_an_image_that_goes_bad_mid_run_keeps_the_checkpoint_and_resumes(tmp_path, capsys, monkeypatch):
    flags = large_folder(tmp_path / "data") + ["--epochs", "2", "--workers", "0"]
    victim = tmp_path / "data" / "train" / "cat" / "1.png"
    good = victim.read_bytes()
    full = train.main(flags + ["--out", str(tmp_path / "full")])
    save = rundir.save_checkpoint

    def save_then_break_an_image(*args, **kwargs):  # after epoch 1 is safely on disk, the file goes bad
        save(*args, **kwargs)
        victim.write_bytes(good[:40])
    monkeypatch.setattr(rundir, "save_checkpoint", save_then_break_an_image)
    out = str(tmp_path / "run")
    line = refused(capsys, flags + ["--out", out])
    assert str(victim) in line and "epoch 2/2" in line and "checkpoint.pt holds epoch 1" in line
    assert torch.load(os.path.join(out, "checkpoint.pt"), weights_only=True)["epoch"] == 1
    assert len(metrics(out)) == 1
    monkeypatch.setattr(rundir, "save_checkpoint", save)
    victim.write_bytes(good)
    resumed = train.main(flags + ["--out", out, "--resume"])
    assert metrics(out) == [dict(r, seconds=p["seconds"]) for r, p in
                            zip(metrics(str(tmp_path / "full")), metrics(out))]
    assert {k: v for k, v in resumed.items() if k != "seconds"} == {k: v for k, v in full.items() if k != "seconds"}


def test_check_images_lists_every_bad_file_before_anything_is_written(tmp_path, capsys):
    flags = large_folder(tmp_path / "data") + ["--epochs", "1", "--workers", "2", "--check-images"]
    bad = [tmp_path / "data" / "train" / "cat" / "7.jpg", tmp_path / "data" / "test" / "dog" / "8.png"]
    truncated_jpeg(bad[0])
    bad[1].write_bytes(b"not an image")
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        train.main(flags + ["--out", str(out)])
    assert e.value.code == 2 and not out.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(str(p) in line for p, line in zip(bad, err))
    assert err[2].startswith("train.py: error: 2 images cannot be read")


def test_a_folder_of_small_images_names_every_bad_file_at_once(tmp_path, capsys):
    write_folder(tmp_path / "data")
    bad = [tmp_path / "data" / "train" / "cat" / "5.png", tmp_path / "data" / "test" / "cat" / "6.png"]
    for p in bad:
        p.write_bytes(b"\x89PNG broken")
    with pytest.raises(datasets.BadImages) as e:
        datasets.load_dataset("folder", tmp_path / "data", image_size=16)
    assert [p for p, _ in e.value.bad] == [str(p) for p in bad] and "\n" not in str(e.value)


# ---------------------------------------------------------------- 3, 4, 9: --out and --resume

def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    assert "is a file" in refused(capsys, RUN + ["--out", str(f)])
    assert "is a file" in refused(capsys, RUN + ["--out", str(f / "run")])
    assert f.read_text() == "mine"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("finished") / "run")
    summary = train.main(TINY + ["--epochs", "2", "--out", out])
    return out, summary


def test_resume_without_noisy_labels_is_refused(finished_run, tmp_path, capsys):
    out = str(tmp_path / "copy")
    shutil.copytree(finished_run[0], out)
    os.remove(os.path.join(out, "summary.json"))  # unfinished, so that --resume must read the labels
    os.remove(os.path.join(out, "noisy_labels.npy"))
    before = snapshot(out)
    assert "noisy_labels.npy" in refused(capsys, TINY + ["--epochs", "2", "--out", out, "--resume"])
    np.save(os.path.join(out, "noisy_labels.npy"), np.zeros(5, np.int64))  # and one of another run
    assert "not the 96 integer labels" in refused(capsys, TINY + ["--epochs", "2", "--out", out, "--resume"])
    os.remove(os.path.join(out, "noisy_labels.npy"))
    assert snapshot(out) == before


def test_resume_of_finished_epochs_whose_checkpoint_is_gone_is_refused(finished_run, tmp_path, capsys):
    out = str(tmp_path / "copy")
    shutil.copytree(finished_run[0], out)
    os.remove(os.path.join(out, "checkpoint.pt"))
    before = snapshot(out)
    line = refused(capsys, TINY + ["--epochs", "2", "--out", out, "--resume"])
    assert "checkpoint.pt is missing, but summary.json and metrics.jsonl record finished epochs" in line
    os.remove(os.path.join(out, "summary.json"))  # stopped after epoch 1, say: the metrics alone say so
    assert "but metrics.jsonl record" in refused(capsys, TINY + ["--epochs", "2", "--out", out, "--resume"])
    assert snapshot(out) == {k: v for k, v in before.items() if k != "summary.json"}


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_an_out_the_system_will_not_create_is_one_line_before_the_data_is_read(capsys, monkeypatch):
    # /proc passes the permission check (for root in particular), then refuses the mkdir: that is tried first
    def too_late(*args, **kwargs):
        raise AssertionError("the data was read before --out was checked")
    monkeypatch.setattr(train.datasets, "load_dataset", too_late)
    assert "--out /proc/cmd-run cannot be created" in refused(capsys, RUN + ["--out", "/proc/cmd-run"])


def test_the_out_check_leaves_nothing_behind(tmp_path):
    train.main(RUN + ["--out", str(tmp_path / "run")])
    assert sorted(os.listdir(tmp_path)) == ["run"]  # the trial directory of rundir._writable_ancestor is gone


def test_resume_of_a_path_that_holds_no_run_is_refused(tmp_path, capsys):
    missing = tmp_path / "typo"
    assert "does not exist" in refused(capsys, RUN + ["--out", str(missing), "--resume"])
    assert not missing.exists()
    (tmp_path / "empty").mkdir()
    assert "holds no run" in refused(capsys, RUN + ["--out", str(tmp_path / "empty"), "--resume"])
    assert os.listdir(tmp_path / "empty") == []


def test_resuming_a_finished_run_changes_nothing(finished_run, capsys):
    out, summary = finished_run
    before = snapshot(out)
    assert train.main(TINY + ["--epochs", "2", "--out", out, "--resume"]) == summary
    assert "is finished" in capsys.readouterr().out
    assert snapshot(out) == before


# ---------------------------------------------------------------- 5, 6: Ctrl-C, and time across resumes

@pytest.mark.slow  # a process of its own: the second tier (python -m pytest -q -m slow lab tests)
def test_ctrl_c_is_one_line_with_the_resume_command_and_resuming_matches(tmp_path):
    flags = TINY + ["--synthetic-size", "192", "--epochs", "2", "--seed", "3"]
    full = str(tmp_path / "full")
    train.main(flags + ["--out", full])
    part = str(tmp_path / "a run dir")  # a space, so the command must be quoted
    proc = subprocess.Popen([sys.executable, "train.py", *flags, "--out", part], cwd=HERE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and not os.path.exists(os.path.join(part, "checkpoint.pt")):
        time.sleep(0.02)
    at_epoch_1 = torch.load(os.path.join(part, "checkpoint.pt"), weights_only=True)["seconds"]
    proc.send_signal(signal.SIGINT)  # in epoch 2, or while epoch 1's files are written (held back till after)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130, err
    line = err.strip()
    assert "\n" not in line and "Traceback" not in err
    assert re.match(r"train.py: stopped by Ctrl-C (in epoch 2/2 (at step \d/6|while testing)|after epoch 1/2); "
                    r".*checkpoint.pt holds epoch 1; resume with: ", line), line
    stopped_at = torch.load(os.path.join(part, "checkpoint.pt"), weights_only=True)["seconds"]
    assert stopped_at > at_epoch_1  # the time spent after the checkpoint, until the Ctrl-C, is counted
    cmd = shlex.split(line.split("resume with: ", 1)[1])
    assert cmd[-1] == "--resume" and cmd[cmd.index("--out") + 1] == part
    res = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert metrics(part) == [dict(r, seconds=p["seconds"]) for r, p in zip(metrics(full), metrics(part))]
    total = json.load(open(os.path.join(part, "summary.json")))["seconds"]
    # the total counts both processes: every epoch's time, and what the first one spent before the Ctrl-C
    assert total >= sum(r["seconds"] for r in metrics(part)) - 0.1
    assert total >= stopped_at + sum(r["seconds"] for r in metrics(part)[1:]) - 0.1


@pytest.mark.slow  # a process of its own: the second tier (python -m pytest -q -m slow lab tests)
def test_checkpoint_none_writes_no_checkpoint_and_a_stopped_run_says_it_cannot_resume(tmp_path):
    # what the recipe's waves run: their checkpoints never come back from the GPU machine
    flags = TINY + ["--synthetic-size", "192", "--epochs", "40", "--checkpoint", "none"]
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "train.py", *flags, "--out", str(out)], cwd=HERE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and len(rundir.lines_of(str(out), "metrics.jsonl")) < 2:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130 and re.search(r"metrics.jsonl holds \d+ epochs, and no checkpoint \(--checkpoint "
                                                r"none\); it cannot resume$", err.strip()), err
    assert not list(out.glob("*.pt*")) and len(metrics(str(out))) >= 2
    assert config.get_args(TINY).checkpoint == "epoch"  # the default keeps one every epoch


def test_a_ctrl_c_while_an_epochs_files_are_written_waits_until_they_are_complete():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with rundir.uninterrupted():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # a signal arrives at the next bytecode: here, it must not
            done.append("checkpoint written")
    assert done == ["checkpoint written"]


def test_resume_after_a_stop_in_the_first_epoch_starts_again_and_says_so(tmp_path, capsys):
    out = str(tmp_path / "run")
    os.makedirs(out)
    json.dump({}, open(os.path.join(out, "config.json"), "w"))  # another run's settings: refused
    assert "different settings" in refused(capsys, RUN + ["--out", out, "--resume"])
    shutil.rmtree(out)
    train.main(RUN + ["--out", out])
    first = json.load(open(os.path.join(out, "config.json")))
    for name in ("checkpoint.pt", "summary.json"):  # as if it had stopped before its first checkpoint
        os.remove(os.path.join(out, name))
    train.main(RUN + ["--out", out, "--resume"])
    assert "starting it again from epoch 1" in capsys.readouterr().err
    assert len(metrics(out)) == 1
    again = json.load(open(os.path.join(out, "config.json")))
    assert again["provenance"] == first["provenance"] and len(again["resumed"]) == 1


# ---------------------------------------------------------------- 7, 8: epoch numbers, milestones

def test_epochs_are_counted_from_one_in_progress_lines_and_the_nan_message(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:  # lr jumps to 1e33 after epoch 1
        train.main(TINY + ["--epochs", "3", "--lr", "0.01", "--milestones", "1", "--lr-decay", "1e35",
                           "--log-every", "1", "--out", str(tmp_path / "run")])
    printed, err = capsys.readouterr()
    assert e.value.code == 2 and "NaN/inf in epoch 2; kept the checkpoint of epoch 1" in one_error_line(err)
    assert "epoch 1/3 step 1/3 " in printed and "epoch 2/3 step 3/3 " in printed
    assert not re.search(r"epoch +0 ", printed)


def test_epochs_alone_scale_the_presets_milestones(capsys):
    args = config.resolve(config.get_args(["--dataset", "synthetic", "--epochs", "5"]))
    assert args.milestones == [3, 4]  # the cnn preset's 10, 15 of 20 epochs
    assert "scaled to --epochs 5: 3, 4" in capsys.readouterr().out
    assert config.resolve(config.get_args(["--dataset", "synthetic"])).milestones == [10, 15]
    assert presets.scale_milestones([50, 80], 100, 10) == [5, 8]
    assert presets.scale_milestones([50, 80], 100, 2) == [1]  # 1.0 and 1.6: both round into 1..1, once
    assert presets.scale_milestones([60, 120, 160], 200, 1) == []  # nothing fits strictly inside one epoch
    with pytest.warns(UserWarning, match="--milestones 6, 9 at or after --epochs 5"):
        config.resolve(config.get_args(["--dataset", "synthetic", "--epochs", "5", "--milestones", "2,6,9"]))


def test_the_readme_smoke_command_decays_its_lr_within_the_run():
    readme = open(os.path.join(HERE, "README.md")).read()
    cmd = shlex.split(re.search(r"^(python train.py --dataset synthetic .*--out runs/smoke)", readme, re.M).group(1))
    args = config.resolve(config.get_args(cmd[2:]))
    assert args.milestones and max(args.milestones) < args.epochs and args.lr_decay < 1


# ---------------------------------------------------------------- 12: WebVision's layouts

def test_webvision_needs_synsets_only_for_wnid_folders(tmp_path):
    wnids = write_webvision(tmp_path, with_imagenet=False)
    (tmp_path / "info" / "synsets.txt").unlink()
    with pytest.warns(UserWarning, match="ILSVRC12 val not found"):  # no imagenet/val: no synsets.txt needed
        d = datasets.load_dataset("webvision", tmp_path, image_size=32)
    assert d.train.labels.tolist() == [0, 0, 49, 1] and set(d.tests) == {"webvision_val"}
    save_image(str(tmp_path / "imagenet" / "val" / wnids[3] / "ILSVRC2012_val_00000001.JPEG"))
    with pytest.raises(datasets.DataError, match="synsets.txt"):
        datasets.load_dataset("webvision", tmp_path, image_size=32)


def test_webvision_accepts_class_index_folders(tmp_path):
    write_webvision(tmp_path, with_imagenet=False)
    (tmp_path / "info" / "synsets.txt").unlink()
    for c, n in ((3, 2), (7, 1), (55, 1)):  # 55 is outside the 50 classes
        for j in range(n):
            save_image(str(tmp_path / "imagenet" / "val" / str(c) / f"ILSVRC2012_val_{j:08d}.JPEG"))
    with pytest.warns(UserWarning, match="lacks 48 of the 50"):
        d = datasets.load_dataset("webvision", tmp_path, image_size=32)
    il = d.tests["ilsvrc12_val"]
    assert il.labels.tolist() == [3, 3, 7] and all(f"{os.sep}3{os.sep}" in p for p in il.paths[:2])
    save_image(str(tmp_path / "imagenet" / "val" / "n00000009" / "x.JPEG"))
    with pytest.raises(datasets.DataError, match="mixes class-index folders"):
        datasets.load_dataset("webvision", tmp_path, image_size=32)


# ---------------------------------------------------------------- 13: plots and sweeps

def test_a_one_epoch_curve_is_drawn_with_a_marker():
    pytest.importorskip("matplotlib")
    from tools import plot
    plt = plot.pyplot()
    fig, ax = plt.subplots()
    runs = [dict(rows=[dict(epoch=1, test_acc_a=40.0, test_acc_b=41.0)]),
            dict(rows=[dict(epoch=1, test_acc_a=40.0, test_acc_b=41.0), dict(epoch=2, test_acc_a=45.0, test_acc_b=46.0)])]
    plot.curves(ax, runs, ["one", "two"], "test_acc", "acc")
    assert [line.get_marker() for line in ax.lines] == ["o", "o", "None", "None"]
    plt.close(fig)


# ---------------------------------------------------------------- watching a run

class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_reads_the_loss_only_when_it_prints(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the line is cut to the terminal's width
    t = [0.0]
    reads = []
    p = Progress(steps=50, epochs=2, batch_size=10, display=Display(stream=Terminal(), now=lambda: t[0]))
    p.start_epoch(0)
    for i in range(50):
        t[0] += 0.125
        p.update(i + 1, lambda: reads.append(i) or (1.0, 2.0))
    assert len(reads) == 12  # every 0.5 s on a terminal, i.e. every 4th step, never every step
    text = p.stream.getvalue()
    assert "\n" not in text and text.count("\r") == 12  # rewritten in place
    assert text.rsplit("\r", 1)[1].startswith("epoch 1/2 step 48/50 | 80 img/s | loss A 1.000 B 2.000 | "
                                              "ETA epoch 0:00 run 0:06")
    p.clear()
    assert p.stream.getvalue().endswith("\r")
    monkeypatch.setenv("COLUMNS", "40")
    t[0] += 1.0
    p.update(50, lambda: (1.0, 2.0))
    last = p.stream.getvalue().rsplit("\r", 1)[1]
    assert len(last) == 39 and last.startswith("epoch 1/2 step 50/50 | ")  # a wrapped line could not be rewritten


def test_progress_eta_counts_testing_time_once_an_epoch_has_finished():
    t = [0.0]
    p = Progress(steps=10, epochs=3, batch_size=4, display=Display(every=5, stream=io.StringIO(), now=lambda: t[0]))
    for epoch in range(2):
        p.start_epoch(epoch)
        for i in range(10):
            t[0] += 1.0
            p.update(i + 1, lambda: (0.5, 0.25))
        p.end_training()
        t[0] += 4.0  # testing and writing
    lines = p.stream.getvalue().splitlines()
    assert lines[0] == "  epoch 1/3 step 5/10 | 4 img/s | loss A 0.500 B 0.250 | ETA epoch 0:05 run 0:25"
    assert lines[2] == "  epoch 2/3 step 5/10 | 4 img/s | loss A 0.500 B 0.250 | ETA epoch 0:05 run 0:23"


def test_a_log_gets_plain_progress_lines_and_the_epoch_line_has_losses_and_noise(tmp_path, capsys):
    out = str(tmp_path / "run")
    train.main(RUN + ["--log-every", "2", "--out", out])
    printed = capsys.readouterr().out
    assert re.search(r"^  epoch 1/1 step 2/3 \| \d+ img/s \| loss A \d\.\d{3} B \d\.\d{3} \| ETA epoch \d+:\d\d "
                     r"run \d+:\d\d$", printed, re.M) and "\r" not in printed
    row = metrics(out)[0]
    clean = datasets.load_dataset("synthetic", None, synthetic=datasets.Synthetic(size=96, test_size=48,
                                                                                  classes=4)).train.labels
    assert row["noise_rate"] == np.mean(np.load(os.path.join(out, "noisy_labels.npy")) != clean)
    assert (f"| loss A {row['train_loss_a']:.3f} B {row['train_loss_b']:.3f} | noise {row['noise_rate']:.2f} |"
            in printed)


# ---------------------------------------------------------------- provenance, weights, evaluate.py, tensorboard

def test_config_records_what_ran_and_resume_ignores_it(finished_run, tmp_path):
    out = str(tmp_path / "copy")
    shutil.copytree(finished_run[0], out)
    prov = json.load(open(os.path.join(out, "config.json")))["provenance"]
    assert prov["device"] == "cpu" and prov["device_count"] == 1 and prov["torch"] == str(torch.__version__)
    assert prov["python"] == ".".join(map(str, sys.version_info[:3])) and re.match(r"\d{4}-\d\d-\d\dT", prov["started"])
    git = subprocess.run(["git", "-C", HERE, "rev-parse", "HEAD"], capture_output=True, text=True)
    if git.returncode == 0:
        assert prov["git_commit"] == git.stdout.strip() and isinstance(prov["git_dirty"], bool)
    ckpt = torch.load(os.path.join(out, "checkpoint.pt"), weights_only=True)
    ckpt["config"]["provenance"] = dict(prov, torch="1.0", git_commit="0" * 40, started="2020-01-01T00:00:00")
    ckpt["epoch"] = 1  # unfinished, and written elsewhere with other versions: still resumes
    torch.save(ckpt, os.path.join(out, "checkpoint.pt"))
    train.main(TINY + ["--epochs", "2", "--out", out, "--resume"])
    assert len(metrics(out)) == 2


def test_final_weights_load_safely_and_evaluate_reproduces_the_run(finished_run, capsys):
    out, summary = finished_run
    info = json.load(open(os.path.join(out, "weights.json")))
    assert info["num_classes"] == 4 and info["dataset"] == "synthetic" and info["model_a"]["arch"] == "cnn"
    for k in "ab":
        state = torch.load(os.path.join(out, info[f"model_{k}"]["file"]), weights_only=True)
        assert all(isinstance(v, torch.Tensor) for v in state.values())
        models.build_model("cnn", 4).load_state_dict(state)
    acc = evaluate.main([out])
    assert {k: acc[k] for k in summary if k in acc} == {k: v for k, v in summary.items() if k in acc}
    assert set(acc) == {k for k in summary if k.startswith("test_")} and "test_acc_ens" in acc  # the run's numbers
    capsys.readouterr()
    data = ["--dataset", "synthetic", "--synthetic-size", "96", "--synthetic-test-size", "48",
            "--synthetic-classes", "4", "--device", "cpu"]
    one = evaluate.main(["--weights", os.path.join(out, "model_b.pt"), "--arch", "cnn"] + data)
    assert one["test_acc_a"] == summary["test_acc_b"]
    assert capsys.readouterr().out.strip() == f"test (48 images): {summary['test_acc_b']:.2f}"


def test_evaluate_refuses_weights_that_do_not_fit(finished_run, tmp_path, capsys):
    out = finished_run[0]
    with pytest.raises(SystemExit) as e:
        evaluate.main(["--weights", os.path.join(out, "model_a.pt"), "--arch", "resnet18", "--dataset", "synthetic",
                       "--synthetic-classes", "4", "--device", "cpu"])
    assert e.value.code == 2 and "is not a state_dict of resnet18 with 4 classes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        evaluate.main([str(tmp_path)])
    assert "holds no finished run" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        evaluate.main([str(tmp_path / "typo")])
    assert capsys.readouterr().err.strip().endswith("typo does not exist; check the path")
    with pytest.raises(SystemExit):  # a run's file, not its folder: said as such, not as a missing path
        evaluate.main([os.path.join(out, "config.json")])
    assert "config.json is a file, not a run folder" in capsys.readouterr().err


def test_tensorboard_without_the_package_is_a_hint_and_training_goes_on(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as where tensorboard is not installed
    train.main(RUN + ["--tensorboard", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install tensorboard" in err[0] and len(metrics(str(tmp_path / "run"))) == 1


def test_tensorboard_writes_scalars_when_it_imports(tmp_path):
    pytest.importorskip("torch.utils.tensorboard")
    train.main(RUN + ["--tensorboard", "--out", str(tmp_path / "run")])
    assert any(f.startswith("events.") for f in os.listdir(tmp_path / "run" / "tensorboard"))


# ---------------------------------------------------------------- the repository

def test_license_and_citation_agree_with_the_readme():
    assert open(os.path.join(HERE, "LICENSE")).read().startswith("MIT License")
    cff = open(os.path.join(HERE, "CITATION.cff")).read()
    readme = open(os.path.join(HERE, "README.md")).read()
    bibtex = re.search(r"@article\{.*?\n\}", readme, re.S).group(0)
    assert "2106.01489" in cff and "2106.01489" in bibtex
    for family in ("Li", "Wang", "Hu", "Robertson", "Clifton", "Meinel", "Yang"):
        assert f"family-names: {family}" in cff and family in bibtex


def readme_and_docs():
    """{path relative to the repository: text} of README.md and every docs/*.md."""
    names = ["README.md"] + [os.path.join("docs", f) for f in sorted(os.listdir(os.path.join(HERE, "docs")))
                             if f.endswith(".md")]
    return {name: open(os.path.join(HERE, name)).read() for name in names}


def shown_commands(text, program):
    """The command lines in text's ```bash blocks that start with `python <program>`, comments cut off."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():  # a line continued with a backslash is one
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line.startswith(f"python {program} "):
                lines.append(line)
    return lines


def test_the_readme_and_docs_name_files_and_functions_that_exist():
    for name, text in readme_and_docs().items():
        folder = os.path.dirname(os.path.join(HERE, name))
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):  # relative links and images
            assert os.path.exists(os.path.join(folder, target)), f"{name} links {target}, which does not exist"
        for path, function in re.findall(r"`([\w/]+\.py):(\w+)`", text):  # file.py:function, class or registry
            source = open(os.path.join(HERE, path)).read()
            assert re.search(rf"^((def|class) {function}\b|{function} = )", source, re.M), f"{name} names {path}:{function}"


def test_the_readmes_picture_is_drawn_again_from_its_committed_run(tmp_path, monkeypatch):
    # the README's first picture, by the command it shows, from docs/mechanism alone
    from PIL import Image

    from tools import plot
    readme = open(os.path.join(HERE, "README.md")).read()
    cmd = shlex.split(re.search(r"`(python -m tools\.plot docs/mechanism [^`]+)`", readme).group(1))
    assert "](docs/mechanism/entropy.png)" in readme[:readme.index("## ")]  # on the first screen, before any section
    monkeypatch.chdir(HERE)
    assert plot.main(cmd[3:] + ["--out", str(tmp_path)]) == 0
    assert os.listdir(tmp_path) == ["entropy.png"]
    with Image.open(tmp_path / "entropy.png") as drawn, Image.open(os.path.join(HERE, "docs/mechanism/entropy.png")) as kept:
        assert drawn.size == kept.size
    hist = os.path.join(HERE, "docs", "mechanism", "entropy_hist.npz")
    with np.load(hist) as f:
        assert os.path.getsize(hist) < 10_000 and {1, 10, 30, 80} <= set(f["epoch"].tolist())


def test_every_train_command_shown_in_the_readme_and_docs_is_accepted():
    """python train.py ... in the README and docs: each takes its flags and values (the lab's commands, python
    lab/train.py and the tools', lab/tests/test_sweep.py)."""
    trains = [c for text in readme_and_docs().values() for c in shown_commands(text, "train.py")]
    assert any("--out runs/smoke" in c for c in trains)
    for line in trains:
        config.resolve(config.get_args(shlex.split(line)[2:]))  # refuses a flag or value that no longer exists


# ---------------------------------------------------------------- every entry point: one handler

def test_one_line_reports_our_errors_and_ctrl_c_and_lets_a_bug_keep_its_traceback(capsys):
    def main_raising(err):
        @errors.one_line("prog", stopped="stopped by Ctrl-C; run it again")
        def main():
            raise err
        return main

    for err, code, line in ((datasets.DataError("bad\ndata"), 2, "prog: error: bad data"),
                            (rundir.RunError("--out x"), 2, "prog: error: --out x"),
                            (KeyboardInterrupt(), 130, "prog: stopped by Ctrl-C; run it again")):
        with pytest.raises(SystemExit) as e:
            main_raising(err)()
        assert e.value.code == code and capsys.readouterr().err == line + "\n"
    with pytest.raises(ZeroDivisionError):  # not ours: a bug, with its traceback
        main_raising(ZeroDivisionError("x"))()
    assert capsys.readouterr().err == ""


def test_a_ctrl_c_before_training_is_one_line_130_and_writes_nothing(tmp_path, capsys, monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    from training import build
    monkeypatch.setattr(build, "load_data", interrupted)  # train.py's data step reads it there
    out = str(tmp_path / "run")
    with pytest.raises(SystemExit) as e:
        train.main(RUN + ["--out", out])
    assert e.value.code == 130 and not os.path.exists(out)
    assert capsys.readouterr().err == f"train.py: {train.EARLY}\n"


@pytest.mark.slow  # a process of its own: the second tier (python -m pytest -q -m slow lab tests)
def test_a_ctrl_c_while_torch_imports_stops_the_run_even_where_the_importing_code_catches_the_exit():
    """train.py's handler until torch is imported (errors.stop_early): a SystemExit raised inside an import can be
    caught by the code importing (a bare except), and the run then trained to its end."""
    code = ("import signal\nfrom training.errors import stop_early\nstop_early('train.py')\ntry:\n"
            "    signal.raise_signal(signal.SIGINT)\nexcept BaseException:\n    pass\nprint('went on')")
    p = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout, p.stderr) == (130, "", f"train.py: {train.EARLY}\n")


@pytest.mark.parametrize("tool", ["sweep", "plot", "perf", "perf cost", "perf suite", "perf profile", "perf batched",
                                  "studies.fmnist", "batched", "studies.outbox snapshot", "studies.outbox check",
                                  "cmdloss"])
def test_every_tool_refuses_an_unknown_flag_in_one_line(tool, capsys, tmp_path):
    """python -m tools.NAME [PART] --no-such-flag (and studies.NAME): one line naming the flag and where the help
    is, exit 2, nothing written (argparse's own error would print the usage as well)."""
    name, *part = tool.split()
    main = importlib.import_module(name if "." in name else f"tools.{name}").main
    with pytest.raises(SystemExit) as e:
        main(part + ["--no-such-flag", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "error:" in err and "--help" in err, err
    assert not os.path.exists(tmp_path / "out")


def test_a_line_reaches_stderr_in_one_write_so_that_the_ranks_lines_never_interleave(monkeypatch):
    # under PYTHONUNBUFFERED each write goes straight to the pipe torchrun's ranks share: a line written in two
    # (print's text, then its newline) lets another rank's whole line land between them
    writes = []

    class Pipe:
        def write(self, s):
            writes.append(s)
            return len(s)

        def flush(self):
            pass
    monkeypatch.setattr(sys, "stderr", Pipe())
    errors.say("train.py (rank 1 of 2): error: on rank 1: stopped")
    assert writes == ["train.py (rank 1 of 2): error: on rank 1: stopped\n"]
