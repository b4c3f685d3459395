"""The run directory's files, and the state they say a run is in (rundir.py decides when train.py writes them;
tools/batched.py writes them too). No torch here: the tools that only read runs (sweep, slurm, plot) import this
without it.

WORDS               -- what each number of metrics.jsonl is called wherever it is shown
state               -- the one answer to "what state is this run in": FINISHED, DIVERGED, STARTED or NEW
                       (train.py, tools.batched, tools.sweep, tools.slurm, studies.fmnist and tools.plot ask it)
append_metrics      -- one JSON line per epoch into metrics.jsonl
lines_of            -- the non-empty lines of a run file (none when it is missing)
trim_metrics        -- drop metric lines written after the checkpoint (on resume, and after a failed write)
last_metrics        -- metrics.jsonl's last line
append_entropy_hist -- the epoch's histograms of H(p) into entropy_hist.npz
trim_entropy_hist   -- drop its epochs after a checkpoint's (an epoch whose files could not all be written)
read_json, write_json -- config.json, summary.json, weights.json, diverged.json (written atomically)
write_text          -- a text file (a table, a report), written atomically
replacing, appending  -- the one way every file the project writes is written: whole or not at all, or added to;
                       a write that fails (a full disk or quota, EIO, torch.save's own error) leaves no partial
                       file and raises WriteError
open_log            -- a log that a child process appends to (train.log, train.err of a sweep's or a job's run)
checked_stdout      -- stdout as a WriteError too: a `> log` on a full disk, a sweep's train.log
WriteError          -- such a failure (training/errors.py): one line naming the file, the cause and the free space there
"""
import contextlib
import errno
import json
import math
import os
import shutil
import sys

import numpy as np

from training.errors import WriteError

RUN_FILES = ("config.json", "metrics.jsonl", "checkpoint.pt")  # what a run writes first, or keeps while it runs
# The word of each number of metrics.jsonl (its key less _a/_b or _b2a/_a2b), the same in train.py's epoch line, the
# copy block's line, the plots, the tables and the docs (docs/training.md's legend of the epoch line, which a test
# holds to this).
WORDS = {"epoch": "epoch", "lr": "lr", "train_loss": "loss", "noise_rate": "noise", "chi": "chi", "selected": "taught",
         "precision": "precision", "recall": "recall", "test_acc": "test", "seconds": "s", "memorized": "memorised",
         "confidence": "r"}
FINISHED, DIVERGED, STARTED, NEW = "finished", "diverged", "started", "new"


def state(out):
    """What the run directory out holds:
    FINISHED -- summary.json, which train.py and tools.batched write last: nothing left to do
    DIVERGED -- diverged.json: its loss turned NaN or inf (tools.batched, studies.fmnist); its epochs are kept
    STARTED  -- a run's files without either: running, or stopped (train.py --resume continues it)
    NEW      -- none of them: a run may start there"""
    def has(name):
        return os.path.exists(os.path.join(out, name))
    if has("summary.json"):
        return FINISHED
    if has("diverged.json"):
        return DIVERGED
    return STARTED if any(has(f) for f in RUN_FILES) else NEW


def lines_of(out, name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line for line in f if line.strip()]


def trim_metrics(out, epochs_done):
    """Keep the first epochs_done lines of metrics.jsonl: later ones came after the checkpoint. Cut in place,
    which needs no space on a full disk."""
    path = os.path.join(out, "metrics.jsonl")
    if os.path.exists(path):
        with open(path, "rb") as f:
            lines = f.readlines()
        if len(lines) > epochs_done:
            os.truncate(path, sum(len(line) for line in lines[:epochs_done]))


def append_metrics(out, row):
    with appending(os.path.join(out, "metrics.jsonl")) as f:
        f.write(json.dumps(row) + "\n")


def append_entropy_hist(out, epoch, counts, num_classes, chi, known_clean):
    """Add epoch `epoch`'s histograms to entropy_hist.npz, dropping rows of that epoch or later (a resume).

    counts: (M, 2, bins) from mutual.entropy_histogram summed over the epoch (model A, B, ... x
    clean/noisy given label). chi: (χ at the epoch's start, at its end), each as the step used it
    (Method.chis_at: one per model), or None without a threshold.
    The file holds epoch (E,), counts (E, M, 2, bins), edges (bins + 1,) in nats over [0, ln K],
    chi_start and chi_end (E,), the models' one χ (NaN without a threshold, or where the models'
    differ), chi_start_models and chi_end_models (E, M), each model's, and known_clean: whether the
    clean/noisy split is real (False: all counts are in [:, :, 0]).
    """
    m = counts.shape[0]
    each = [[math.nan] * m if c is None else [float(v) for v in c] for c in chi]  # (start, end) x M
    path = os.path.join(out, "entropy_hist.npz")
    rows = dict(epoch=np.zeros(0, np.int64), counts=np.zeros((0, *counts.shape), np.int64),
                chi_start=np.zeros(0), chi_end=np.zeros(0), chi_start_models=np.zeros((0, m)),
                chi_end_models=np.zeros((0, m)))
    if os.path.exists(path):
        with np.load(path) as f:
            keep = f["epoch"] < epoch
            rows = {k: f[k][keep] if k in f else np.repeat(f[k[:-7]][keep][:, None], m, 1)  # a file of before
                    for k in rows}
    new = dict(epoch=[epoch], counts=[np.rint(counts).astype(np.int64)],
               chi_start=[each[0][0] if len(set(each[0])) == 1 else math.nan],
               chi_end=[each[1][0] if len(set(each[1])) == 1 else math.nan],
               chi_start_models=[each[0]], chi_end_models=[each[1]])
    rows = {k: np.concatenate([rows[k], np.asarray(new[k], dtype=rows[k].dtype)]) for k in rows}
    edges = np.linspace(0, math.log(num_classes), counts.shape[-1] + 1)
    with replacing(path, "wb") as f:
        np.savez(f, edges=edges, known_clean=known_clean, **rows)


def trim_entropy_hist(out, epochs_done):
    """Drop entropy_hist.npz's rows after epoch epochs_done (an epoch whose checkpoint could not be written)."""
    path = os.path.join(out, "entropy_hist.npz")
    if not os.path.exists(path):
        return
    with np.load(path) as f:
        rows = {k: f[k] for k in f.files}
    keep = rows["epoch"] <= epochs_done
    if not keep.any():
        os.remove(path)
    elif not keep.all():
        with replacing(path, "wb") as f:
            np.savez(f, **{k: v[keep] if k not in ("edges", "known_clean") else v for k, v in rows.items()})


def last_metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return json.loads(f.readlines()[-1])


def read_json(out, name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)


def write_json(out, name, obj):
    with replacing(os.path.join(out, name)) as f:
        json.dump(obj, f, indent=1)


def write_text(path, text):
    with replacing(path) as f:
        f.write(text)


# ---------------------------------------------------------------- the one write path
FIXES = {errno.ENOSPC: "free some space", errno.EDQUOT: "free some of your quota"}


def write_error(path, err, free=True):
    """The WriteError of a failed write of `path`, or None when err is not the file system's (a bug keeps its
    traceback). An OSError, or torch.save's RuntimeError (`[enforce fail at inline_container.cc] unexpected
    pos`), whose cause is the OSError of the file object torch wrote to, where there is one. free: say the free
    space in path's folder (not for a path that is no file's, such as "stdout")."""
    chain = [err]
    while chain[-1].__cause__ or chain[-1].__context__:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    os_err = next((e for e in chain if isinstance(e, OSError)), None)
    if os_err is not None:
        name = errno.errorcode.get(os_err.errno)
        cause = (os_err.strerror or str(os_err)) + (f" ({name})" if name else "")
    elif isinstance(err, RuntimeError) and ("inline_container" in str(err) or "PytorchStreamWriter" in str(err)):
        cause = f"torch.save failed ({' '.join(str(err).split())})"
    else:
        return None
    where = os.path.dirname(os.path.abspath(path))
    try:
        if free and (not os.path.exists(path) or os.path.isfile(path)):  # not a device such as /dev/full
            cause += f", {size_text(shutil.disk_usage(where).free)} free in {where}"
    except OSError:  # the folder is gone, or its file system cannot say
        pass
    return WriteError(f"cannot write {path}: {cause}", FIXES.get(getattr(os_err, "errno", None),
                                                                "once it can be written again"))


def size_text(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


@contextlib.contextmanager
def replacing(path, mode="w"):
    """Write path whole or not at all: into path.tmp, then renamed over path, so that a kill -9 leaves the old
    file or the new one. A write that fails removes path.tmp and raises WriteError (write_error)."""
    tmp = path + ".tmp"
    try:
        with open(tmp, mode) as f:
            yield f
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        failed = write_error(path, e) if isinstance(e, Exception) else None
        if failed is None:
            raise
        raise failed from e


@contextlib.contextmanager
def appending(path):
    """Add to the end of path. A write that fails or is interrupted cuts path back to what it held before (no
    half line stays) and, where the file system refused it, raises WriteError."""
    size = os.path.getsize(path) if os.path.exists(path) else None
    try:
        with open(path, "a") as f:
            yield f
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.truncate(path, size) if size is not None else os.remove(path)
        failed = write_error(path, e) if isinstance(e, Exception) else None
        if failed is None:
            raise
        raise failed from e


def open_log(path, mode="a"):
    """path opened to be added to ("a"; "w": begun anew), for a child process's stdout or stderr (a sweep's or a
    Slurm job's train.log and train.err): a log that cannot be opened (a full disk, a read-only folder) is a
    WriteError, not a traceback. What the child writes into it is the child's to report (train.py: checked_stdout)."""
    try:
        return open(path, mode)
    except OSError as e:
        raise write_error(path, e) from e


class _Checked:
    """A text stream whose write or flush that fails raises WriteError once, naming the file behind it; after
    that its file descriptor points at /dev/null, so that nothing fails again at exit."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except OSError as e:
            raise stdout_error(self._stream, e) from None

    def flush(self):
        try:
            self._stream.flush()
        except OSError as e:
            raise stdout_error(self._stream, e) from None

    def __getattr__(self, name):  # isatty, fileno, encoding, ...
        return getattr(self._stream, name)


def stdout_error(stream, err):
    """The WriteError of stream (stdout), named by its file where it is one (`> log`, a sweep's train.log); what the
    stream still buffers goes to /dev/null from now on."""
    where = "stdout"
    try:
        fd = stream.fileno()
        if os.path.isdir("/proc/self/fd") and os.readlink(f"/proc/self/fd/{fd}").startswith("/"):  # Linux: the file
            where = os.readlink(f"/proc/self/fd/{fd}")
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    except (OSError, ValueError, AttributeError):  # not a file (a test's capture): nothing is buffered at exit
        pass
    return write_error(where, err, free=where != "stdout")


@contextlib.contextmanager
def checked_stdout():
    """Within the block, a print to stdout that fails (its file on a full disk) raises WriteError, and what stdout
    buffers is flushed at the block's end, where that can still be reported in one line, not at exit."""
    stream = sys.stdout
    sys.stdout = _Checked(stream)
    try:
        yield
        sys.stdout.flush()
    finally:
        sys.stdout = stream
