"""A run stopped away from a terminal: a full disk and SIGTERM are one line, leave nothing half-written, and resume
to the numbers of an uninterrupted run.

A full disk: OSError(ENOSPC) injected into the one write path (training/runfiles.py) at each file train.py writes,
and, as root on Linux, a real tmpfs too small for the checkpoint; tools.sweep's table, tools.batched's run folders
and evaluate.py's output alike. SIGTERM: a real signal to a real train.py, in an epoch and between epochs, held back
while an epoch's files are written, and ignored under the Slurm launcher (tools/slurm.py).
"""
import builtins
import errno
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch
from test_train import HERE, metrics

import evaluate
import train
from tools import batched, slurm, sweep
from training import errors, rundir, runfiles

FLAGS = ["--dataset", "synthetic", "--arch", "mlp", "--synthetic-size", "96", "--synthetic-test-size", "48",
         "--synthetic-classes", "4", "--batch-size", "32", "--device", "cpu", "--workers", "0", "--epochs", "2"]
LONG = ["--dataset", "synthetic", "--arch", "mlp", "--synthetic-size", "96", "--synthetic-test-size", "48",
        "--synthetic-classes", "4", "--batch-size", "8", "--device", "cpu", "--workers", "0", "--epochs", "2"]  # 12 steps
ENOSPC = r"No space left on device \(ENOSPC\), \d+(\.\d)? (B|KiB|MiB|GiB) free in "


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """The uninterrupted run of FLAGS, which every stopped and resumed run must equal."""
    out = str(tmp_path_factory.mktemp("full") / "run")
    train.main(FLAGS + ["--out", out])
    return out


@pytest.fixture(scope="module")
def long_full(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("long") / "run")
    train.main(LONG + ["--out", out])
    return out


def assert_same_run(out, full):
    """Bit for bit: metrics.jsonl line by line but for its wall-clock seconds, the histograms, summary.json but for
    seconds, and the final weights."""
    assert [dict(r, seconds=0) for r in metrics(out)] == [dict(r, seconds=0) for r in metrics(full)]
    with np.load(os.path.join(out, "entropy_hist.npz")) as a, np.load(os.path.join(full, "entropy_hist.npz")) as b:
        assert a.files == b.files and all(np.array_equal(a[k], b[k], equal_nan=True) for k in a.files)
    summary = [dict(runfiles.read_json(d, "summary.json"), seconds=0) for d in (out, full)]
    assert summary[0] == summary[1]
    for k in "ab":
        mine, theirs = (torch.load(os.path.join(d, f"model_{k}.pt"), weights_only=True) for d in (out, full))
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[n], theirs[n]) for n in mine)


def one_line(err, prog="train.py"):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"{prog}: "), err
    return lines[0]


def command_in(line):
    """The train.py flags of the command a line says to run next."""
    argv = shlex.split(re.search(r"(?:resume|start it again) with: (.*)$", line).group(1))
    assert argv[1].endswith("train.py"), line
    return argv[2:]


def leftovers(out):
    return [f for f in os.listdir(out) if f.endswith(".tmp")]


class FullDisk:
    """runfiles.open, as a full disk makes it: from the `after`-th time a file named `name` (or its .tmp) is opened
    to be written, each write puts half its bytes on disk, then fails with ENOSPC."""

    def __init__(self, name, after=1):
        self.name, self.after, self.opened = name, after, 0

    def __call__(self, path, mode="r", *args, **kwargs):
        f = builtins.open(path, mode, *args, **kwargs)
        if mode.startswith("r") or os.path.basename(path).removesuffix(".tmp") != self.name:
            return f
        self.opened += 1
        return f if self.opened < self.after else HalfWritten(f)


class HalfWritten:
    """A file on a full disk: half of each write lands, then ENOSPC."""

    def __init__(self, f):
        self.f = f

    def write(self, data):
        self.f.write(data[:len(data) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


# ---------------------------------------------------------------- a full disk at each of train.py's writes

@pytest.mark.parametrize("name,after,kept", [
    ("config.json", 1, "no epoch had finished"), ("noisy_labels.npy", 1, "no epoch had finished"),
    ("metrics.jsonl", 2, "checkpoint.pt holds epoch 1"), ("entropy_hist.npz", 2, "checkpoint.pt holds epoch 1"),
    ("checkpoint.pt", 1, "no epoch had finished"), ("checkpoint.pt", 2, "checkpoint.pt holds epoch 1"),
    ("model_b.pt", 1, "checkpoint.pt holds epoch 2"), ("weights.json", 1, "checkpoint.pt holds epoch 2"),
    ("summary.json", 1, "checkpoint.pt holds epoch 2")])
def test_a_full_disk_at_each_write_is_one_line_leaves_no_partial_file_and_resumes_equal(
        full, tmp_path, capsys, monkeypatch, name, after, kept):
    out = str(tmp_path / "run")
    monkeypatch.setattr(runfiles, "open", FullDisk(name, after), raising=False)
    with pytest.raises(SystemExit) as e:
        train.main(FLAGS + ["--out", out])
    line = one_line(capsys.readouterr().err)
    assert e.value.code == 2 and re.match(rf"train.py: error: cannot write {re.escape(out)}/{name}: {ENOSPC}", line)
    assert kept in line and f"free some space, then {'start it again' if name == 'config.json' else 'resume'} with: " \
        in line, line
    assert not leftovers(out)
    done = int(re.search(r"holds epoch (\d)", kept).group(1)) if "holds" in kept else 0
    rows = [json.loads(r) for r in runfiles.lines_of(out, "metrics.jsonl")]  # whole lines, none past the checkpoint
    assert [dict(r, seconds=0) for r in rows] == [dict(r, seconds=0) for r in metrics(full)[:done]]
    if done:
        assert torch.load(os.path.join(out, "checkpoint.pt"), weights_only=True)["epoch"] == done
        with np.load(os.path.join(out, "entropy_hist.npz")) as h:
            assert h["epoch"].tolist() == list(range(1, done + 1))
    monkeypatch.undo()  # space is freed
    argv = command_in(line)
    assert ("--resume" in argv) == (name != "config.json")  # a folder with nothing to resume: the command itself
    train.main(argv)
    assert_same_run(out, full)


def test_a_file_system_error_is_a_write_error_and_anything_else_a_bug(tmp_path):
    path = str(tmp_path / "checkpoint.pt")
    torch_own = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 95360 vs 95256")
    assert str(runfiles.write_error(path, torch_own)).startswith(
        f"cannot write {path}: torch.save failed ([enforce fail at inline_container.cc:672] . unexpected pos")
    try:
        with runfiles.replacing(path, "wb") as f:
            f.write(b"half")
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
    except runfiles.WriteError as e:
        assert "(EDQUOT)" in str(e) and e.fix == "free some of your quota"
    for bug in (RuntimeError("a bug"), TypeError("not JSON serializable")):
        with pytest.raises(type(bug)):
            with runfiles.replacing(path) as f:
                raise bug
    assert os.listdir(tmp_path) == []


@pytest.fixture
def small_disk(tmp_path):
    """mount(size): a tmpfs of that size at tmp_path/disk, mounted or remounted to it (root on Linux only)."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("a real full disk is a tmpfs mounted small, which needs root on Linux")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = []

    def mount(size):
        opts = (["remount"] if mounted else []) + [f"size={size}"]
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(opts), "tmpfs", str(disk)], capture_output=True,
                             text=True)
        if res.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
        mounted.append(size)
        return str(disk)
    yield mount
    if mounted:  # lazily: a file a failed test left open does not keep the mount
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


@pytest.mark.parametrize("room", [0, 1])
def test_a_real_full_disk_is_one_line_and_resumes_equal_once_space_is_freed(full, small_disk, capsys, room):
    """room 0: a tmpfs of 300 KiB, too small for any checkpoint; room 1: one and a half checkpoints, so epoch 1's fits
    and epoch 2's does not."""
    size = os.path.getsize(os.path.join(full, "checkpoint.pt"))
    out = os.path.join(small_disk("300k" if room == 0 else f"{size * 3 // 2 // 1024}k"), "run")
    with pytest.raises(SystemExit) as e:
        train.main(FLAGS + ["--out", out])
    line = one_line(capsys.readouterr().err)
    assert e.value.code == 2 and re.match(rf"train.py: error: cannot write {re.escape(out)}/checkpoint.pt: {ENOSPC}",
                                          line)
    assert (f"(in epoch {room + 1}/2 while writing its files); " +
            (f"{out}/checkpoint.pt holds epoch 1, and metrics.jsonl the epochs up to it; " if room else
             "no epoch had finished, so it starts again from epoch 1; ") + "free some space, then resume with: ") in line
    assert not leftovers(out) and len(metrics(out)) == room
    small_disk("64m")
    train.main(command_in(line))
    assert_same_run(out, full)


# ---------------------------------------------------------------- SIGTERM

def started(flags, out, **kwargs):
    """train.py FLAGS --out OUT as its own process, a progress line every step on a pipe."""
    return subprocess.Popen([sys.executable, "train.py", *flags, "--log-every", "1", "--out", out], cwd=HERE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def wait_for(proc, pattern):
    """Read proc's output up to a line that matches pattern: the process is there, or just past it."""
    for line in proc.stdout:
        if re.match(pattern, line):
            return
    raise AssertionError(f"train.py ended (exit {proc.wait()}) before printing {pattern!r}: {proc.stderr.read()}")


@pytest.mark.parametrize("when,where", [
    (r"  epoch 2/2 step 2/12 ", r"in epoch 2/2 at step \d+/12"),
    (r"epoch +1 \|", r"(after epoch 1/2|in epoch 2/2 at step \d+/12)")])  # signalled as epoch 1's line is printed
def test_sigterm_is_one_line_143_keeps_the_checkpoint_and_resumes_equal(long_full, tmp_path, when, where):
    out = str(tmp_path / "run")
    proc = started(LONG, out)
    wait_for(proc, when)
    proc.send_signal(signal.SIGTERM)  # as timeout, docker stop, Kubernetes or systemd do
    err = proc.communicate(timeout=120)[1]
    line = one_line(err)
    assert proc.returncode == 143 and re.match(rf"train.py: stopped by SIGTERM {where}; {re.escape(out)}/checkpoint.pt "
                                               rf"holds epoch 1; resume with: ", line), line
    assert torch.load(os.path.join(out, "checkpoint.pt"), weights_only=True)["epoch"] == 1 and len(metrics(out)) == 1
    train.main(command_in(line))
    assert_same_run(out, long_full)


def test_a_sigterm_while_an_epochs_files_are_written_lands_after_them(full, tmp_path, capsys, monkeypatch):
    out, save = str(tmp_path / "run"), rundir.save_checkpoint

    def terminated_while_saving(out_, config, epoch, *args, **kwargs):
        if epoch == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # delivered at the next bytecode, were it not held back
        save(out_, config, epoch, *args, **kwargs)
    monkeypatch.setattr(rundir, "save_checkpoint", terminated_while_saving)
    previous = signal.signal(signal.SIGTERM, errors.terminated)  # as train.py's __main__ (stop_on_sigterm) does
    try:
        with pytest.raises(SystemExit) as e:
            train.main(FLAGS + ["--out", out])
    finally:
        signal.signal(signal.SIGTERM, previous)
    line = one_line(capsys.readouterr().err)
    assert e.value.code == 143 and line.startswith(f"train.py: stopped by SIGTERM after epoch 1/2; {out}/checkpoint.pt "
                                                   f"holds epoch 1; resume with: "), line
    monkeypatch.undo()
    train.main(command_in(line))
    assert_same_run(out, full)


def test_one_line_says_sigterm_and_exits_143_where_ctrl_c_says_its_own(capsys):
    for err, code, said in ((errors.Terminated(), 143, "SIGTERM"), (KeyboardInterrupt(), 130, "Ctrl-C")):
        with pytest.raises(SystemExit) as e:
            with errors.one_line("prog", stopped="stopped by Ctrl-C before training started"):
                raise err
        assert e.value.code == code and capsys.readouterr().err == f"prog: stopped by {said} before training started\n"


def test_under_the_slurm_launcher_train_py_ignores_sigterm(long_full, tmp_path):
    # Slurm signals every process of a job; submitit's job process stops train.py itself (slurm.Train.stop)
    out = str(tmp_path / "run")
    proc = started(LONG, out, preexec_fn=lambda: slurm.leave_to_the_job(signal.SIGUSR2))
    wait_for(proc, r"  epoch 2/2 step 2/12 ")
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 0 and "stopped" not in err, err
    assert_same_run(out, long_full)


# ---------------------------------------------------------------- the tools

def test_a_sweep_on_a_full_disk_is_one_line_and_keeps_its_table(tmp_path, capsys, monkeypatch):
    out = str(tmp_path / "sweeps")
    monkeypatch.setattr(sweep, "run_jobs", lambda todo, gpus, jobs: {})  # the runs are train.py's, tested above
    assert sweep.main(["table1", "--scale", "smoke", "--out", out]) == 0
    table = open(os.path.join(out, "table1-smoke.md")).read()
    monkeypatch.setattr(runfiles, "open", FullDisk("table1-smoke.md"), raising=False)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        sweep.main(["table1", "--scale", "smoke", "--out", out])
    line = one_line(capsys.readouterr().err, "sweep.py")
    assert e.value.code == 2 and re.match(rf"sweep.py: error: cannot write {re.escape(out)}/table1-smoke.md: {ENOSPC}",
                                          line)
    assert line.endswith("; free some space, then run the same command again (finished runs are skipped, the others "
                         "resume from their checkpoints)")
    assert open(os.path.join(out, "table1-smoke.md")).read() == table and not leftovers(out)


def test_a_batched_grid_on_a_full_disk_is_one_line_and_leaves_whole_lines(tmp_path, capsys, monkeypatch):
    out, grid = str(tmp_path / "grid"), FLAGS + ["--mode", "zero", "--seed", "0,1"]
    monkeypatch.setattr(runfiles, "open", FullDisk("metrics.jsonl", after=3), raising=False)  # epoch 2's first line
    with pytest.raises(SystemExit) as e:
        batched.main(grid + ["--out", out])
    line = one_line(capsys.readouterr().err, "batched.py")
    assert e.value.code == 2 and re.match(rf"batched.py: error: cannot write {re.escape(out)}/\S+/metrics.jsonl: "
                                          rf"{ENOSPC}", line)
    assert "free some space, then run the same command again" in line
    for run in os.listdir(out):
        assert not leftovers(os.path.join(out, run)) and len(metrics(os.path.join(out, run))) == 1  # no half line
    monkeypatch.undo()
    assert batched.main(grid + ["--out", out]) == 0
    assert all(len(metrics(os.path.join(out, run))) == 2 for run in os.listdir(out))


class FullStdout(io.StringIO):
    """stdout as `> file` on a full disk: writes are buffered, and the flush fails (at exit, unless sooner)."""

    def flush(self):
        if self.getvalue():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_evaluate_on_a_full_disk_is_one_line(full, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdout", FullStdout())
    with pytest.raises(SystemExit) as e:
        evaluate.main([full])
    assert e.value.code == 2 and one_line(capsys.readouterr().err, "evaluate.py") == (
        "evaluate.py: error: cannot write stdout: No space left on device (ENOSPC); evaluate.py writes nothing else; "
        "free some space, then run it again")


def test_evaluate_into_a_file_on_a_full_disk_is_one_line_and_nothing_at_exit(full, small_disk):
    sink = os.path.join(small_disk("64k"), "accuracy.txt")
    with open(os.path.join(os.path.dirname(sink), "filler"), "wb", buffering=0) as f:  # the disk fills up
        with pytest.raises(OSError):
            while True:
                f.write(b"0" * 4096)
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout as a user's: block-buffered
    with open(sink, "w") as stdout:
        res = subprocess.run([sys.executable, "evaluate.py", full], cwd=HERE, stdout=stdout, stderr=subprocess.PIPE,
                             text=True, timeout=120, env=buffered)
    assert res.returncode == 2 and one_line(res.stderr, "evaluate.py").startswith(
        f"evaluate.py: error: cannot write {sink}: No space left on device (ENOSPC), 0 B free in "), res.stderr
