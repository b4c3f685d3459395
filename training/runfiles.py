"""The run directory's files, and the state they say a run is in (rundir.py decides when train.py writes them;
tools/batched.py writes them too). No torch here: the tools that only read runs (sweep, slurm, plot) import this
without it.

state               -- the one answer to "what state is this run in": FINISHED, DIVERGED, STARTED or NEW
                       (train.py, tools.batched, tools.sweep, tools.slurm, tools.fmnist and tools.plot ask it)
append_metrics      -- one JSON line per epoch into metrics.jsonl
lines_of            -- the non-empty lines of a run file (none when it is missing)
trim_metrics        -- on resume, drop metric lines written after the checkpoint
last_metrics        -- metrics.jsonl's last line
append_entropy_hist -- the epoch's histograms of H(p) into entropy_hist.npz
read_json, write_json -- config.json, summary.json, weights.json, diverged.json (written atomically)
"""
import json
import math
import os

import numpy as np

RUN_FILES = ("config.json", "metrics.jsonl", "checkpoint.pt")  # what a run writes first, or keeps while it runs
FINISHED, DIVERGED, STARTED, NEW = "finished", "diverged", "started", "new"


def state(out):
    """What the run directory out holds:
    FINISHED -- summary.json, which train.py and tools.batched write last: nothing left to do
    DIVERGED -- diverged.json: its loss turned NaN or inf (tools.batched, tools.fmnist); its epochs are kept
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
    """Keep the first epochs_done lines of metrics.jsonl: later ones came after the checkpoint."""
    path = os.path.join(out, "metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            lines = f.readlines()[:epochs_done]
        with open(path, "w") as f:
            f.writelines(lines)


def append_metrics(out, row):
    with open(os.path.join(out, "metrics.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")


def append_entropy_hist(out, epoch, counts, num_classes, chi, known_clean):
    """Add epoch `epoch`'s histograms to entropy_hist.npz, dropping rows of that epoch or later (a resume).

    counts: (2, 2, bins) from mutual.entropy_histogram summed over the epoch (model A/B x
    clean/noisy given label). chi: (χ at the epoch's start, at its end), None without a threshold.
    The file holds epoch (E,), counts (E, 2, 2, bins), edges (bins + 1,) in nats over [0, ln K],
    chi_start and chi_end (E,) (NaN without a threshold), and known_clean: whether the clean/noisy
    split is real (False: all counts are in [:, :, 0]).
    """
    chi_start, chi_end = chi
    path = os.path.join(out, "entropy_hist.npz")
    rows = dict(epoch=np.zeros(0, np.int64), counts=np.zeros((0, *counts.shape), np.int64),
                chi_start=np.zeros(0), chi_end=np.zeros(0))
    if os.path.exists(path):
        with np.load(path) as f:
            keep = f["epoch"] < epoch
            rows = {k: f[k][keep] for k in rows}
    new = dict(epoch=[epoch], counts=[np.rint(counts).astype(np.int64)],
               chi_start=[math.nan if chi_start is None else chi_start], chi_end=[math.nan if chi_end is None else chi_end])
    rows = {k: np.concatenate([rows[k], np.asarray(new[k], dtype=rows[k].dtype)]) for k in rows}
    edges = np.linspace(0, math.log(num_classes), counts.shape[-1] + 1)
    with open(path + ".tmp", "wb") as f:
        np.savez(f, edges=edges, known_clean=known_clean, **rows)
    os.replace(path + ".tmp", path)


def last_metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return json.loads(f.readlines()[-1])


def read_json(out, name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)


def write_json(out, name, obj):
    path = os.path.join(out, name)
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(path + ".tmp", path)
