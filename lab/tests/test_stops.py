"""A run stopped away from a terminal: a full disk and SIGTERM are one line, leave nothing half-written, and resume
to the numbers of an uninterrupted run.

A full disk: OSError(ENOSPC) injected into the one write path (training/runfiles.py) at each file train.py writes,
and, as root on Linux, a real tmpfs too small for the checkpoint; train.py's own stdout, tools.sweep's table and run
logs, a Slurm job's record, tools.batched's run folders, evaluate.py's output and the studies' files alike. SIGTERM:
a real signal to a real train.py, in an epoch and between epochs, held back while an epoch's files are written, and
ignored under the Slurm launcher (tools/slurm.py). Under torchrun (two CPU ranks on gloo): SIGTERM to one rank, a
real full disk under rank 0 and an image one rank cannot read each stop both ranks, a line each, and resume equal.
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
import time

import numpy as np
import pytest
import torch
from test_train import HERE, metrics

import evaluate
import train
from tools import batched, slurm, sweep
from training import errors, rundir, runfiles
from training.errors import UserError

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


def learners():
    """Every mode that is not CMD's, with what it keeps beyond the models' own (a stage's state, a stage's optimiser, a
    rule), that runs with no flag of its own but a warm-up; one epoch of it wherever the mode reads --warmup (DMI's
    determinant diverges from random weights here; Joint's second step, which reads another run, resumes in
    lab/tests/test_robust.py)."""
    from mutual import CMD_MODES, MODES, knobs_read
    from test_train import runnable
    out = []
    for mode in MODES:
        warmup = ["--warmup", "1"] if "warmup" in knobs_read(mode, "ce") else []
        try:
            runnable(FLAGS[:-1] + ["3", "--mode", mode, *warmup, "--out", os.devnull])
            out += [] if mode in CMD_MODES else [(mode, warmup)]
        except UserError:
            pass
    return out


@pytest.mark.parametrize("mode,warmup", learners(), ids=[mode for mode, _ in learners()])
def test_every_stage_and_comparator_resumes_bit_for_bit(tmp_path, capsys, monkeypatch, mode, warmup):
    """Stopped after its first of three epochs (its second metrics line cannot be written), resumed by the command
    the line says: the run equals the uninterrupted one bit for bit, whatever the entry keeps (a stage's state, a
    stage's optimiser, a comparator's rule)."""
    flags = FLAGS[:-1] + ["3", "--mode", mode, *warmup]
    whole, out = str(tmp_path / "whole"), str(tmp_path / "run")
    train.main(flags + ["--out", whole])
    monkeypatch.setattr(runfiles, "open", FullDisk("metrics.jsonl", after=2), raising=False)
    with pytest.raises(SystemExit):
        train.main(flags + ["--out", out])
    line = one_line(capsys.readouterr().err)
    assert "checkpoint.pt holds epoch 1" in line, line
    monkeypatch.undo()
    train.main(command_in(line))
    assert_same_run(out, whole)


def test_a_cmd_run_resumes_by_either_entry(tmp_path, capsys, monkeypatch):
    """python lab/train.py's config.json holds the lab's settings beside the paper's (this process has the lab
    registered), the reference's train.py's does not; a CMD-P run reads none of them, so either entry resumes the
    other's run: one stopped by the lab's, resumed by train.py, equals the uninterrupted run, and train.py's finished
    run is finished to the lab's."""
    flags = FLAGS[:-1] + ["2", "--mode", "progressive"]
    whole, out = str(tmp_path / "whole"), str(tmp_path / "run")
    plain = subprocess.run([sys.executable, os.path.join(HERE, "train.py"), *flags, "--out", whole],
                           capture_output=True, text=True, cwd=HERE)
    assert plain.returncode == 0, plain.stderr
    assert "gce_q" not in json.load(open(os.path.join(whole, "config.json")))
    assert train.main(flags + ["--out", whole, "--resume"]) == json.load(open(os.path.join(whole, "summary.json")))
    monkeypatch.setattr(runfiles, "open", FullDisk("metrics.jsonl", after=2), raising=False)
    with pytest.raises(SystemExit):
        train.main(flags + ["--out", out])
    monkeypatch.undo()
    assert "checkpoint.pt holds epoch 1" in one_line(capsys.readouterr().err)
    assert "gce_q" in json.load(open(os.path.join(out, "config.json")))  # a setting of the lab's
    done = subprocess.run([sys.executable, os.path.join(HERE, "train.py"), *flags, "--out", out, "--resume"],
                          capture_output=True, text=True, cwd=HERE)
    assert done.returncode == 0, done.stderr
    assert_same_run(out, whole)


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
    monkeypatch.setattr(sweep, "run_jobs", lambda todo, gpus, jobs, code=None, finished=None: {})  # the runs are train.py's, tested above
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


# ---------------------------------------------------------------- train.py's own stdout on a full disk

class FullOnWrite(io.StringIO):
    """stdout unbuffered (PYTHONUNBUFFERED=1, as many cluster scripts set) on a full disk: every write fails."""

    def write(self, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class FillsAtEpochOne(FullStdout):
    """stdout as `> log` on a disk that fills up in training: flushes fail from epoch 1's line on."""

    def flush(self):
        if "epoch   1 |" in self.getvalue():
            super().flush()


@pytest.mark.parametrize("stdout,kept", [
    (FillsAtEpochOne, "(after epoch 1/2); {out}/checkpoint.pt holds epoch 1, and metrics.jsonl the epochs up to it; "
                      "free some space, then resume with: "),
    (FullOnWrite, "the run wrote nothing; free some space, then run the command again")])
def test_train_py_stdout_on_a_full_disk_is_one_line_and_the_run_resumes_equal(full, tmp_path, capsys, monkeypatch,
                                                                              stdout, kept):
    """A disk that fills in training: epoch 1's line fails after epoch 1's files are written. Full from the start
    (here unbuffered): the first print, the settings, fails before the run writes anything."""
    out = str(tmp_path / "run")
    monkeypatch.setattr(sys, "stdout", stdout())
    with pytest.raises(SystemExit) as e:
        train.main(FLAGS + ["--out", out])
    line = one_line(capsys.readouterr().err)
    assert e.value.code == 2 and line.startswith("train.py: error: cannot write stdout: No space left on device "
                                                 "(ENOSPC)"), line
    assert kept.format(out=out) in line, line
    monkeypatch.undo()
    if stdout is FullOnWrite:
        assert not os.path.exists(out)
        train.main(FLAGS + ["--out", out])
    else:
        assert len(metrics(out)) == 1 and not leftovers(out)
        train.main(command_in(line))
    assert_same_run(out, full)


def test_train_py_into_a_file_on_a_real_full_disk_is_one_line_and_resumes_equal(full, small_disk, tmp_path):
    """python train.py ... > log, the log on a full tmpfs and --out elsewhere: one line on stderr naming the log, exit
    code 2 and nothing more at exit, from the first line flushed, before the run writes a file; the same command
    with the log elsewhere then trains the uninterrupted run."""
    log = os.path.join(small_disk("64k"), "train.log")
    with open(os.path.join(os.path.dirname(log), "filler"), "wb", buffering=0) as f:  # the disk fills up
        with pytest.raises(OSError):
            while True:
                f.write(b"0" * 4096)
    out = str(tmp_path / "run")
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with open(log, "w") as stdout:
        res = subprocess.run([sys.executable, "train.py", *FLAGS, "--out", out], cwd=HERE, stdout=stdout,
                             stderr=subprocess.PIPE, text=True, timeout=120, env=buffered)
    line = one_line(res.stderr)
    assert res.returncode == 2 and line.startswith(f"train.py: error: cannot write {log}: No space left on device "
                                                   f"(ENOSPC), 0 B free in "), line
    assert line.endswith("; the run wrote nothing; free some space, then run the command again"), line
    assert not os.path.exists(out)
    train.main(FLAGS + ["--out", out])
    assert_same_run(out, full)


# ---------------------------------------------------------------- every other writer of the project on a full disk

class NoRoom:
    """runfiles.open on a disk with no room for a new file: opening `name` to write or add to fails with ENOSPC."""

    def __init__(self, name):
        self.name = name

    def __call__(self, path, mode="r", *args, **kwargs):
        if not mode.startswith("r") and os.path.basename(path).removesuffix(".tmp") == self.name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return builtins.open(path, mode, *args, **kwargs)


def test_a_sweep_whose_run_log_cannot_be_opened_is_one_line_and_starts_nothing(tmp_path, capsys, monkeypatch):
    out = str(tmp_path / "sweeps")
    monkeypatch.setattr(runfiles, "open", NoRoom("train.log"), raising=False)
    with pytest.raises(SystemExit) as e:
        sweep.main(["table1", "--scale", "smoke", "--out", out, "--jobs", "1"])
    line = one_line(capsys.readouterr().err, "sweep.py")
    assert e.value.code == 2 and re.match(rf"sweep.py: error: cannot write {re.escape(out)}/table1-smoke/[^/ ]+/train.log:"
                                          rf" {ENOSPC}", line), line
    assert line.endswith("; free some space, then run the same command again (finished runs are skipped, the others "
                         "resume from their checkpoints)"), line
    runs = os.path.join(out, "table1-smoke")
    assert all(os.listdir(os.path.join(runs, r)) == ["sweep.json"] for r in os.listdir(runs) if r != sweep.CODE)  # no run


def test_a_slurm_record_that_cannot_be_written_is_one_line_naming_the_jobs_that_run(tmp_path, capsys, monkeypatch):
    """The job is submitted before its record can be written: the line names it, so that it is not submitted twice.
    (submitit's local executor runs it; its run is made to fail at once, and the test waits for it.)"""
    pytest.importorskip("submitit")
    sweep_dir = tmp_path / "table1-smoke"
    zero, done = (sweep_dir / name for name in ("zero-ls-sym40-s0", "all-ls-sym40-s0"))
    done.mkdir(parents=True)
    (done / "summary.json").write_text(json.dumps({"test_acc_mean": 42.0, "seconds": 1.0}))
    zero.mkdir()
    (zero / "config.json").write_text("{}")
    (zero / "checkpoint.pt").write_text("half a checkpoint")  # train.py --resume refuses it at once
    monkeypatch.setattr(runfiles, "open", FullDisk("slurm.json"), raising=False)
    with pytest.raises(SystemExit) as e:
        sweep.main(["table1", "--scale", "smoke", "--out", str(tmp_path), "--launcher", "slurm", "--slurm-time", "10"],
                   cluster="local")
    line = one_line(capsys.readouterr().err, "sweep.py")
    job = re.search(r"; jobs (\d+) were submitted and run;", line)
    assert e.value.code == 2 and job and re.match(rf"sweep.py: error: cannot write {re.escape(str(zero))}/slurm.json: "
                                                  rf"{ENOSPC}", line), line
    assert f"free some space, wait for those jobs to end (or scancel {job.group(1)}), then run the same command " \
           f"again" in line, line
    assert "slurm.json" not in os.listdir(zero)
    ended = sweep_dir / "slurm" / job.group(1)
    for _ in range(600):  # the job's own end, before the test's folder goes
        if ended.is_dir() and any(f.endswith("_result.pkl") for f in os.listdir(ended)):
            break
        time.sleep(0.1)
    assert not leftovers(str(zero))


def test_a_study_that_cannot_write_its_choice_is_one_line_and_keeps_the_old_one(tmp_path, capsys, monkeypatch):
    """studies.fmnist writes choice.json after its selection: on a full disk, one line with what to run again, and the
    choice.json of before, whole."""
    from studies import fmnist
    from test_fmnist import TINY_BASE
    from test_mnist import write_idx
    write_idx(tmp_path / "data", n_train=160, n_test=40)
    monkeypatch.setattr(fmnist, "BASE", TINY_BASE)
    monkeypatch.setitem(fmnist.ATTRIBUTION.grids, 0.6, {"zero": (0.05,)})
    monkeypatch.setattr(fmnist, "EXTEND", 0)
    monkeypatch.setattr(fmnist, "SELECT_SEEDS", (100,))
    out = str(tmp_path / "sweeps")
    argv = ["attribution", "select", "--rate", "0.6", "--out", out, "--data-dir", str(tmp_path / "data"), "--batched",
            "--", "--device", "cpu"]
    assert fmnist.main(argv) == 0
    choice = os.path.join(out, "attribution", "r0.6", "choice.json")
    before = open(choice).read()
    monkeypatch.setattr(runfiles, "open", FullDisk("choice.json"), raising=False)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        fmnist.main(argv)
    line = one_line(capsys.readouterr().err, "fmnist")
    assert e.value.code == 2 and re.match(rf"fmnist: error: cannot write {re.escape(choice)}: {ENOSPC}", line), line
    assert line.endswith("; free some space, then run the same command again (finished runs are skipped, the others "
                         "resume from their checkpoints)"), line
    assert open(choice).read() == before and not leftovers(os.path.dirname(choice))


def test_a_study_that_cannot_mark_a_diverged_run_is_one_line(tmp_path, capsys, monkeypatch):
    """studies.fmnist marks a train.py run that stopped on a NaN loss with diverged.json: on a full disk, one line, and
    no partial file; the same command afterwards marks it."""
    from studies import fmnist
    from test_fmnist import TINY_BASE
    from test_mnist import write_idx
    write_idx(tmp_path / "data", n_train=160, n_test=40)
    monkeypatch.setattr(fmnist, "BASE", TINY_BASE)
    monkeypatch.setitem(fmnist.ATTRIBUTION.grids, 0.6, {"zero": (1e30,)})  # an lr that takes the loss to inf or NaN
    monkeypatch.setattr(fmnist, "EXTEND", 0)
    monkeypatch.setattr(fmnist, "SELECT_SEEDS", (100,))
    out = str(tmp_path / "sweeps")
    argv = ["attribution", "select", "--rate", "0.6", "--out", out, "--data-dir", str(tmp_path / "data"),
            "--no-batched", "--", "--device", "cpu"]
    monkeypatch.setattr(runfiles, "open", FullDisk("diverged.json"), raising=False)
    with pytest.raises(SystemExit) as e:
        fmnist.main(argv)
    line = one_line(capsys.readouterr().err, "fmnist")
    run = os.path.join(out, "attribution", "r0.6", "select", "zero-lr1e+30-s100")
    assert e.value.code == 2 and re.match(rf"fmnist: error: cannot write {re.escape(run)}/diverged.json: {ENOSPC}",
                                          line), line
    assert not os.path.exists(os.path.join(run, "diverged.json")) and not leftovers(run)
    monkeypatch.setattr(runfiles, "open", open, raising=False)  # space is freed
    monkeypatch.setattr(fmnist, "LADDER", (*fmnist.LADDER, 1e30))  # the choice's edge rule reads the lr's place
    assert fmnist.main(argv) == 0
    assert "NaN" in json.load(open(os.path.join(run, "diverged.json")))["error"]


# ---------------------------------------------------------------- under torchrun: a rank that fails stops the others

DDP = [*LONG[:-1], "3"]  # 3 epochs of 12 steps, each batch of 8 sharded over 2 ranks


def torchrun(flags, out, **kwargs):
    """train.py FLAGS --out OUT under torchrun, 2 processes on the CPU (gloo), as its own process group."""
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             "train.py", *flags, "--out", out], cwd=HERE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.fixture(scope="module")
def ddp_full(tmp_path_factory):
    """The uninterrupted torchrun run of DDP, which every stopped and resumed one must equal."""
    out = str(tmp_path_factory.mktemp("ddp") / "run")
    proc = torchrun(DDP, out)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    return out


def rank_pid(parent, rank):
    """The pid of the process of `rank` among torchrun's (parent's) children, found by its RANK."""
    for _ in range(600):
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = open(f"/proc/{pid}/stat").read()
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            except OSError:  # gone meanwhile
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent and f"RANK={rank}".encode() in env:
                return int(pid)
        time.sleep(0.1)
    raise AssertionError(f"no process of rank {rank} under {parent}")


def said_by_ranks(err):
    """{rank: what it said} from torchrun's stderr: exactly one train.py line per rank, and no traceback of ours."""
    lines = [ln for ln in err.splitlines() if ln.startswith(("train.py:", "train.py ("))]  # not torchrun's own
    said = {}
    for ln in lines:
        m = re.match(r"train\.py \(rank (\d) of 2\): (.*)$", ln)
        assert m and int(m.group(1)) not in said, err[-3000:]
        said[int(m.group(1))] = m.group(2)
    assert sorted(said) == [0, 1] and 'train.py", line' not in err and "ranks.py" not in err, err[-3000:]
    return said


def one_line_each(err, pattern):
    """The line both ranks said, the same on each, matching pattern."""
    said = said_by_ranks(err)
    assert said[0] == said[1] and re.match(pattern, said[0]), err[-3000:]
    return said[0]


def resume_under_torchrun(line, out):
    """The command the line says, run: `your torchrun command with train.py FLAGS --resume`."""
    argv = shlex.split(re.search(r"resume with: your torchrun command with (.*)$", line).group(1))
    assert argv[0] == "train.py" and argv[argv.index("--out") + 1] == out and argv[-1] == "--resume", line
    proc = torchrun(argv[1:argv.index("--out")] + argv[argv.index("--out") + 2:], out)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds rank 1's process in /proc")
def test_a_sigterm_to_one_rank_stops_both_at_the_same_step_a_line_each_and_resumes_equal(ddp_full, tmp_path):
    out = str(tmp_path / "run")
    proc = torchrun([*DDP, "--log-every", "1"], out, start_new_session=True)
    wait_for(proc, r"  epoch 2/3 step 2/12 ")
    os.kill(rank_pid(proc.pid, 1), signal.SIGTERM)  # one rank alone, as a node's OOM killer or a stray kill does
    t0 = time.time()
    _, err = proc.communicate(timeout=120)
    assert time.time() - t0 < 30, "the ranks took more than 30 s to stop"
    line = one_line_each(err, rf"stopped by SIGTERM sent to rank 1 in epoch 2/3 at step \d+/12; {re.escape(out)}/"
                              rf"checkpoint.pt holds epoch 1; resume with: ")
    assert err.count("exitcode  : 143") >= 1 and torch.load(os.path.join(out, "checkpoint.pt"), weights_only=True)[
        "epoch"] == 1
    resume_under_torchrun(line, out)
    assert_same_run(out, ddp_full)


def test_a_full_disk_on_rank_0_stops_both_with_a_line_each_and_resumes_equal(ddp_full, small_disk):
    """--out on a tmpfs with room for one checkpoint and a half: rank 0 cannot write epoch 2's, while rank 1 has gone
    on to epoch 3; both stop there, each with rank 0's line, and resume once space is freed."""
    size = os.path.getsize(os.path.join(ddp_full, "checkpoint.pt"))
    out = os.path.join(small_disk(f"{size * 3 // 2 // 1024}k"), "run")
    _, err = torchrun(DDP, out, start_new_session=True).communicate(timeout=120)
    line = one_line_each(err, rf"error: on rank 0: cannot write {re.escape(out)}/checkpoint.pt: {ENOSPC}\S+ \(in epoch "
                              rf"2/3 while writing its files\); {re.escape(out)}/checkpoint.pt holds epoch 1, and "
                              rf"metrics.jsonl the epochs up to it; free some space, then resume with: ")
    assert "exitcode  : 2" in err and not leftovers(out) and len(metrics(out)) == 1
    small_disk("64m")
    resume_under_torchrun(line, out)
    assert_same_run(out, ddp_full)


def test_an_image_one_rank_cannot_read_stops_both_with_a_line_each_and_resumes_equal(tmp_path):
    """A folder of large images, read batch by batch, each batch's images shared out between the two ranks: the one
    whose share holds the broken image stops, and so does the other, at the same step. The image mended, the run
    resumes to the uninterrupted one."""
    from test_faults import large_folder
    flags = large_folder(tmp_path / "data") + ["--epochs", "2", "--workers", "0"]
    victim = tmp_path / "data" / "train" / "cat" / "1.png"
    good = victim.read_bytes()
    full = str(tmp_path / "full")
    proc = torchrun(flags, full)
    assert proc.communicate(timeout=300) and proc.returncode == 0
    victim.write_bytes(good[:40])  # the header survives: it fails only when decoded
    out = str(tmp_path / "run")
    _, err = torchrun(flags, out, start_new_session=True).communicate(timeout=120)
    line = one_line_each(err, rf"error: on rank [01]: cannot read image {re.escape(str(victim))} \(.*\); replace or "
                              rf"delete the file \(in epoch (1/2 at step 1/1\); no epoch had finished, so it starts "
                              rf"again from epoch 1|2/2 at step 1/1\); {re.escape(out)}/checkpoint.pt holds epoch 1); "
                              rf"resume with: ")  # in the epoch whose batch holds it
    victim.write_bytes(good)
    resume_under_torchrun(line, out)
    assert [dict(r, seconds=0) for r in metrics(out)] == [dict(r, seconds=0) for r in metrics(full)]
