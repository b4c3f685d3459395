"""The run directory: what a training run writes into --out, and how it resumes from it.

RunError        -- a run directory that cannot be used; its message is one line that says what to do
check_out       -- refuse to mix two runs; on resume, load the checkpoint and check it fits the configuration
save_checkpoint -- models, optimisers, schedulers, MyLC's r, the RNG state; atomic, every epoch
restore         -- put a checkpoint's state back into the models, optimisers and schedulers
trim_metrics    -- on resume, drop metric lines written after the checkpoint
append_metrics  -- one JSON line per epoch
append_entropy_hist -- the epoch's histograms of H(p) into entropy_hist.npz
write_json      -- config.json, summary.json

Files: config.json (resolved settings), noisy_labels.npy (the labels trained on),
metrics.jsonl (one line per epoch), entropy_hist.npz (histograms of H(p) per epoch),
checkpoint.pt (the last finished epoch), summary.json (final accuracies).
Checkpoints load with weights_only=True only; npz files without pickles.
"""
import json
import math
import os

import numpy as np
import torch

# Settings that may differ between a run and its resumption: they change how it runs, not what it computes.
RUN_CONTROL = ("device", "workers", "out", "resume", "compile", "amp", "channels_last", "log_every", "data_dir")
RUN_FILES = ("config.json", "metrics.jsonl", "checkpoint.pt")


class RunError(ValueError):
    """A run directory that cannot be used. str(error) is one line."""


def check_out(out, config, resume):
    """Refuse to mix two runs; on resume, return the checkpoint (None for a fresh run).

    The checkpoint must load with weights_only=True and have been written with the
    same settings, RUN_CONTROL aside.
    """
    ckpt_path = os.path.join(out, "checkpoint.pt")
    used = any(os.path.exists(os.path.join(out, f)) for f in RUN_FILES)
    if used and not resume:
        raise RunError(f"{out} already holds a run; pass --resume to continue it, or choose another --out")
    if not resume or not os.path.exists(ckpt_path):
        return None
    try:
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
        saved = ckpt["config"]
    except Exception as e:  # truncated file, not a checkpoint, or a pickle we refuse to run
        raise RunError(f"cannot resume: {ckpt_path} is corrupt or not a CMD checkpoint ({type(e).__name__}); "
                       f"delete it to start over") from e
    diff = sorted(k for k in config if k not in RUN_CONTROL and saved.get(k) != config[k])
    if diff:
        raise RunError(f"cannot resume: {ckpt_path} was written with different settings ({', '.join(diff)}); "
                       f"rerun with the same flags or another --out")
    return ckpt


def save_checkpoint(out, config, epoch, nets, opts, scheds, r, device):
    """Everything a resumed run needs to continue bit for bit, written atomically."""
    state = dict(config=config, epoch=epoch, r_a=r[0].cpu(), r_b=r[1].cpu(), rng_cpu=torch.get_rng_state())
    if device.type == "cuda":
        state["rng_cuda"] = torch.cuda.get_rng_state(device)
    for net, opt, sched, k in zip(nets, opts, scheds, "ab"):
        state[f"model_{k}"] = getattr(net, "module", net).state_dict()
        state[f"opt_{k}"], state[f"sched_{k}"] = opt.state_dict(), sched.state_dict()
    path = os.path.join(out, "checkpoint.pt")
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)  # a kill -9 leaves either the old or the new checkpoint, never half of one


def restore(ckpt, nets, opts, scheds, device):
    """Load a checkpoint's state in place. Returns (epochs done, MyLC's r as [r_A, r_B] on device)."""
    for net, opt, sched, k in zip(nets, opts, scheds, "ab"):
        net.load_state_dict(ckpt[f"model_{k}"])
        opt.load_state_dict(ckpt[f"opt_{k}"])
        sched.load_state_dict(ckpt[f"sched_{k}"])
    torch.set_rng_state(ckpt["rng_cpu"])
    if device.type == "cuda" and "rng_cuda" in ckpt:
        torch.cuda.set_rng_state(ckpt["rng_cuda"], device)
    return ckpt["epoch"], [ckpt["r_a"].to(device), ckpt["r_b"].to(device)]


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


def append_entropy_hist(out, epoch, counts, num_classes, chi_start, chi_end, known_clean):
    """Add epoch `epoch`'s histograms to entropy_hist.npz, dropping rows of that epoch or later (a resume).

    counts: (2, 2, bins) from mutual.entropy_histogram summed over the epoch (model A/B x
    clean/noisy given label). The file holds epoch (E,), counts (E, 2, 2, bins), edges
    (bins + 1,) in nats over [0, ln K], chi_start and chi_end (E,) (NaN without a threshold),
    and known_clean: whether the clean/noisy split is real (False: all counts are in [:, :, 0]).
    """
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


def write_json(out, name, obj):
    with open(os.path.join(out, name), "w") as f:
        json.dump(obj, f, indent=1)
