"""The run directory: what a training run writes into --out, and how it resumes from it.

open_run        -- train.py's --out, checked before anything is read or written: a fresh run, or one to resume
Run             -- one run's directory as train.main uses it: open or resume, the labels, restore, start,
                   each epoch's files, finish, where a stopped run stopped
RunError        -- a run directory that cannot be used; its message is one line that says what to do
check_out       -- refuse to mix two runs; on resume, load the checkpoint and check it fits the configuration
provenance      -- what ran: device, versions, the code (its digest, its git commit), start time (config.json; not compared on resume)
load_noisy_labels -- on resume, the labels the run trained on, checked against the training set
save_checkpoint -- models, optimisers, lr schedulers, MyLC's r, the RNG state, the time so far; atomic, every epoch
                   (none with --checkpoint none)
Stopwatch       -- the run's training time across processes, and the last epoch on disk
resume_command  -- the command line that resumes a run
add_seconds     -- add the time of an epoch cut short to the checkpoint's total
restore         -- put a checkpoint's state back into the models, optimisers and lr schedulers
save_weights    -- the final models as plain state_dicts (model_a.pt, model_b.pt) and weights.json
uninterrupted   -- hold a Ctrl-C or SIGTERM back while an epoch's files are written
record_start    -- config.json at the start, and a line of provenance for each resumption
(the files' own readers and writers, and the state they say a run is in, are runfiles.py)

Files: config.json (resolved settings and provenance), noisy_labels.npy (the labels trained on),
train_indices.npy (with --train-indices: the dataset's indices of the samples trained on, in noisy_labels' order),
metrics.jsonl (one line per epoch), entropy_hist.npz (histograms of H(p) per epoch),
checkpoint.pt (the last finished epoch), summary.json (final accuracies and total time),
model_a.pt, model_b.pt and weights.json (the final models).
Checkpoints and weights load with weights_only=True only; npy/npz files without pickles. Every file goes
through runfiles.replacing or runfiles.appending: a full disk leaves no partial file, and an epoch whose
files cannot all be written leaves none of them.
"""
import contextlib
import datetime
import importlib.metadata
import os
import platform
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import NamedTuple

import numpy as np
import torch
import torch.distributed as dist

from mutual import NAMES, knobs_read
from training import runfiles, source
from training.config import knob_flags
from training.errors import UserError
from training.report import final_accuracies, settings_lines
from training.runfiles import (append_entropy_hist, append_metrics, last_metrics, lines_of, read_json, trim_metrics,
                               write_json)

# Settings that may differ between a run and its resumption. RUN_CONTROL changes how it runs, not what it
# computes. ARITHMETIC lets a run move to another machine, but changes the floating-point arithmetic, so the
# resumed epochs are not bit-identical to an uninterrupted run: train.py says so and config.json records it.
RUN_CONTROL = ("workers", "out", "resume", "log_every", "data_dir", "data_mirror", "check_images", "tensorboard",
               "provenance", "checkpoint")
ARITHMETIC = ("device", "compile", "amp", "channels_last", "graph")


class RunError(UserError):
    """A run directory that cannot be used. str(error) is one line."""


def check_out(out, config, resume, state):
    """Refuse to mix two runs; on resume, return the checkpoint (None for a fresh run). state: what --out holds
    (runfiles.state).

    The checkpoint must load with weights_only=True and have been written with the
    same settings, RUN_CONTROL aside. --resume needs an --out that holds a run: a
    checkpoint, or a config.json alone (a run stopped before its first epoch ended,
    which then starts again); anything else is most likely a mistyped path.
    """
    where = _writable_ancestor(out)
    if where is not None:
        raise RunError(where)
    ckpt_path, config_path = os.path.join(out, "checkpoint.pt"), os.path.join(out, "config.json")
    used = state != runfiles.NEW
    if used and not resume:
        raise RunError(f"{out} already holds a run; pass --resume to continue it, or choose another --out")
    if not resume:
        return None
    if not used:
        raise RunError(f"cannot resume: {out} {'holds no run' if os.path.isdir(out) else 'does not exist'}; "
                       f"check the path, or drop --resume to start a new run there")
    if not os.path.exists(ckpt_path):
        try:
            saved = read_json(out, "config.json")
        except (OSError, ValueError) as e:
            raise RunError(f"cannot resume: {config_path} is missing or unreadable ({type(e).__name__}) and there "
                           f"is no checkpoint; choose another --out") from e
        _same_settings(saved, config, config_path)
        done = [f for f, least in (("summary.json", 1), ("metrics.jsonl", 2)) if len(lines_of(out, f)) >= least]
        if done:  # epochs finished, then the checkpoint went: starting over would overwrite them (one metrics
            # line alone can be epoch 1's, written just before a kill -9 stopped its checkpoint: that one restarts)
            raise RunError(f"cannot resume: {ckpt_path} is missing, but {' and '.join(done)} record finished "
                           f"epochs that a restart would overwrite; put the checkpoint back, or choose another --out")
        return None
    try:
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
        saved = ckpt["config"]
    except Exception as e:  # truncated file, not a checkpoint, or a pickle we refuse to run
        raise RunError(f"cannot resume: {ckpt_path} is corrupt or not a CMD checkpoint ({type(e).__name__}); "
                       f"delete it to start over") from e
    _same_settings(saved, config, ckpt_path)
    if not os.path.exists(os.path.join(out, "noisy_labels.npy")):
        raise RunError(f"cannot resume: {out}/noisy_labels.npy, the labels this run trains on, is missing; "
                       f"put it back, or start again in another --out")
    return ckpt


def _writable_ancestor(out):
    """None if --out is, or can become, a directory we may write; else what is wrong, in one line."""
    if os.path.exists(out) and not os.path.isdir(out):
        return f"--out {out} is a file, not a directory; choose another --out"
    parent = os.path.abspath(out)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"--out {out} cannot be created: {parent} is a file; choose another --out"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"--out {out}: no permission to write in {parent}; choose another --out"
    try:  # /proc or a read-only file system pass access() (for root in particular) and refuse the mkdir: try one
        os.rmdir(tempfile.mkdtemp(prefix=".cmd-out-check-", dir=parent))  # now, before the data is read
    except OSError as e:
        return f"--out {out} cannot be created: {e.strerror or e}; choose another --out"
    return None


def _same_settings(saved, config, path):
    """RunError unless config's settings are saved's, RUN_CONTROL, ARITHMETIC and the knobs the run does not read
    aside (a CMD run started by python lab/train.py, whose config.json holds the lab's knobs too, resumes by
    train.py)."""
    unread = set(knob_flags().values()) - knobs_read(config["mode"], config["lc"])
    diff = sorted(k for k in config if k not in RUN_CONTROL + ARITHMETIC and k not in unread
                  and saved.get(k) != config[k])
    if diff:
        raise RunError(f"cannot resume: {path} was written with different settings ({', '.join(diff)}); "
                       f"rerun with the same flags or another --out")


def provenance(device, world):
    """What this process runs on and with: start time, device, versions, and its code: the digest of its source
    files and the git commit where there is one (training/source.py)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = _cpu_name() + f" ({torch.get_num_threads()} threads)"
    return dict(started=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                device=device.type, device_name=name, device_count=world, python=platform.python_version(),
                torch=str(torch.__version__), torchvision=importlib.metadata.version("torchvision"), **source.identity())


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine() or "cpu"


def load_noisy_labels(out, n, num_classes):
    """On resume: noisy_labels.npy, checked to be n integer labels in 0..K-1 (no pickles)."""
    path = os.path.join(out, "noisy_labels.npy")
    try:
        noisy = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise RunError(f"cannot resume: {path} is unreadable ({type(e).__name__}); put back the labels this run "
                       f"trained on, or start again in another --out") from e
    if noisy.shape != (n,) or noisy.dtype.kind not in "iu":
        raise RunError(f"cannot resume: {path} holds {noisy.dtype} {noisy.shape}, not the {n} integer labels of "
                       f"this training set; put back the run's own file")
    if n and not 0 <= noisy.min() <= noisy.max() < num_classes:
        raise RunError(f"cannot resume: {path} holds labels {noisy.min()}..{noisy.max()}, outside the "
                       f"{num_classes} classes 0..{num_classes - 1}; put back the run's own file")
    return noisy.astype(np.int64)


class Models(NamedTuple):
    """The models trained together, their SGD optimisers and lr schedulers (MultiStepLR; the word "schedule"
    alone is χ's, Eq. 7): index k is model NAMES[k]."""
    nets: list
    opts: list
    lr_scheds: list


def save_checkpoint(out, config, epoch, models, r, seconds, states=None):
    """Everything a resumed run needs to continue bit for bit, written atomically.

    models: Models; r: MyLC's r of each model (device tensors);
    seconds: the run's training time up to here, summed over every process that worked on it;
    states: what the mode has made between epochs (mutual.Method.state: {name: each model's}), or None.
    """
    device = r[0].device
    state = dict(config=config, epoch=epoch, rng_cpu=torch.get_rng_state(), seconds=seconds)
    if device.type == "cuda":
        state["rng_cuda"] = torch.cuda.get_rng_state(device)
    for net, opt, lr_sched, r_k, k in zip(*models, r, NAMES):  # model_a, opt_a, sched_a, r_a, model_b, ...
        state[f"r_{k}"] = r_k.cpu()
        for name, per_model in (states or {}).items():
            state[f"state_{name}_{k}"] = per_model[NAMES.index(k)].detach().cpu()
        state[f"model_{k}"] = getattr(net, "module", net).state_dict()
        state[f"opt_{k}"], state[f"sched_{k}"] = opt.state_dict(), lr_sched.state_dict()
    _save(state, os.path.join(out, "checkpoint.pt"))


def _save(obj, path):
    with runfiles.replacing(path, "wb") as f:  # a kill -9 or a full disk leaves the old file or the new one
        torch.save(obj, f)


class Stopwatch:
    """Training time summed over every process that worked on a run (the checkpoint carries it from one
    to the next), and the last epoch whose checkpoint is on disk."""

    def __init__(self, seconds_before, saved_epoch):
        self.before, self.start, self.saved = seconds_before, time.time(), saved_epoch
        self.mark = self.start  # when the total was last brought up to date

    def tick(self):
        """The total up to now, for a checkpoint about to be written."""
        self.mark = time.time()
        return self.total()

    def total(self):
        return self.before + self.mark - self.start

    def since_tick(self):
        """Time spent since the last tick: work an interruption throws away."""
        return time.time() - self.mark


def add_seconds(out, seconds):
    """Add the time of work lost to an interruption (an epoch cut short) to the checkpoint's total."""
    path = os.path.join(out, "checkpoint.pt")
    if os.path.exists(path):
        state = torch.load(path, map_location="cpu", weights_only=True)
        state["seconds"] = state.get("seconds", 0.0) + seconds
        with contextlib.suppress(runfiles.WriteError):  # a full disk: that time goes uncounted, the rest is kept
            _save(state, path)


def resume_command(argv, resume=True):
    """The command line that resumes a run: the user's own (argv: its flags), plus --resume, quoted for a
    POSIX shell. The interpreter goes by its name where PATH finds that same one, else by its full path.
    resume=False: the user's own command as it was (for a run that wrote nothing it could resume from)."""
    exe = os.path.basename(sys.executable)
    python = exe if shutil.which(exe) and os.path.samefile(shutil.which(exe), sys.executable) else sys.executable
    script = sys.argv[0] if sys.argv[0].endswith("train.py") else "train.py"
    flags = [*argv] + ([] if "--resume" in argv or not resume else ["--resume"])
    if "RANK" in os.environ:  # launched by torchrun, whose own flags this process does not see
        return f"your torchrun command with {shlex.join([script, *flags])}"
    return shlex.join([python, script, *flags])


def save_weights(out, nets, archs, meta):
    """The final models, one plain state_dict each (CPU tensors; torch.load(weights_only=True)), and
    weights.json: each file's arch, plus meta (dataset, num_classes, normalisation, epoch)."""
    info = dict(meta)
    for net, arch, k in zip(nets, archs, NAMES):
        state = {n: t.detach().cpu() for n, t in getattr(net, "module", net).state_dict().items()}
        _save(state, os.path.join(out, f"model_{k}.pt"))
        info[f"model_{k}"] = dict(file=f"model_{k}.pt", arch=arch)
    write_json(out, "weights.json", info)


def restore(ckpt, models, device):
    """Load a checkpoint's state in place into Models. Returns (epochs done, MyLC's r of each model, on device)."""
    for net, opt, lr_sched, k in zip(*models, NAMES):
        net.load_state_dict(ckpt[f"model_{k}"])
        opt.load_state_dict(ckpt[f"opt_{k}"])
        lr_sched.load_state_dict(ckpt[f"sched_{k}"])
    torch.set_rng_state(ckpt["rng_cpu"])
    if device.type == "cuda" and "rng_cuda" in ckpt:
        torch.cuda.set_rng_state(ckpt["rng_cuda"], device)
    return ckpt["epoch"], [ckpt[f"r_{k}"].to(device) for k in NAMES[:len(models.nets)]]


@contextlib.contextmanager
def uninterrupted(deliver=True):
    """Hold a Ctrl-C (SIGINT) or SIGTERM back until the block is done, then deliver the first (deliver=False:
    drop it, for the bookkeeping of a run already stopping): the metrics, histograms and checkpoint of a stopped
    run always end at the same epoch. A signal the process ignores stays ignored (SIGTERM under tools/slurm.py).
    (Main thread only; elsewhere a no-op.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    held = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) not in (signal.SIG_IGN, None)]
    previous = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if caught and deliver:
        signal.raise_signal(caught[0])


def arithmetic_changes(ckpt, config):
    """The ARITHMETIC settings a resumed run changes, {name: [the checkpoint's, now]}; {} for a fresh run."""
    saved = ckpt["config"] if ckpt is not None else {}
    return {k: [saved[k], config[k]] for k in ARITHMETIC if k in saved and saved[k] != config[k]}


def record_start(out, config, resumed, changed=None):
    """config.json: written when a run starts; each resumption adds its provenance to the list "resumed",
    with the ARITHMETIC settings it changed (`changed`, from arithmetic_changes) when there are any."""
    path = os.path.join(out, "config.json")
    if resumed and os.path.exists(path):
        saved = read_json(out, "config.json")
        saved["resumed"] = saved.get("resumed", []) + [dict(config["provenance"], **({"changed": changed} if changed
                                                                                       else {}))]
        config = saved
    write_json(out, "config.json", config)


def open_run(args, setup):
    """The run directory: checked (a fresh --out, or a run to resume with the same settings) before anything
    is read or written; says what a resume changes."""
    run = Run(args.out, setup.config, args.resume, writes=setup.rank == 0)
    if dist.is_initialized():
        dist.barrier()  # every rank has checked --out before rank 0 writes into it
    if run.finished:
        return run
    unread = set(knob_flags().values()) - knobs_read(setup.config["mode"], setup.config["lc"])
    for line in settings_lines(setup.config, unread):  # what a setting the run does not read would have been, unsaid
        setup.log(line)
    setup.config["provenance"] = provenance(setup.device, setup.world)  # config.json, not compared on resume
    if args.resume and run.ckpt is None:
        print(f"train.py: note: {args.out} has no checkpoint yet (it stopped in its first epoch); "
              f"starting it again from epoch 1", file=sys.stderr)
    if run.changed and setup.rank == 0:
        print("train.py: warning: resuming with " + ", ".join(f"{k} {now} (before: {was})" for k, (was, now) in
                                                               run.changed.items()) +
              "; the arithmetic differs, so the results will not equal an uninterrupted run's (config.json records "
              "it)", file=sys.stderr)
    return run


class Run:
    """One training run's directory (--out), as train.py uses it: open or resume it, then start it, log and
    checkpoint each epoch, and finish it, or stop it on Ctrl-C or bad data. Only rank 0 writes (writes=False
    on the other ranks of torchrun). Raises RunError (one line) when --out cannot hold this run."""

    def __init__(self, out, config, resume, writes=True):
        self.out, self.config, self.resume, self.writes = out, config, resume, writes
        state = runfiles.state(out)
        self.ckpt = check_out(out, config, resume, state)      # None for a fresh run
        self.changed = arithmetic_changes(self.ckpt, config)   # ARITHMETIC settings a resume changes
        self.epochs_done = self.ckpt["epoch"] if self.ckpt else 0
        self.stopwatch = Stopwatch(self.ckpt.get("seconds", 0.0) if self.ckpt else 0.0, self.epochs_done)
        self.finished = state == runfiles.FINISHED  # --resume of a finished run (check_out has compared its
        # settings): nothing left to do
        self.indices = None  # --train-indices: the dataset's indices of the samples it trains on (trains_on)

    def noisy_labels(self, n, num_classes):
        """On resume, the labels the run trained on; None for a fresh run."""
        return None if self.ckpt is None else load_noisy_labels(self.out, n, num_classes)

    def trains_on(self, indices):
        """--train-indices: the run trains on these samples of the dataset's training set; start writes them as
        train_indices.npy. On resume, the run's own file must hold the same ones."""
        self.indices = indices
        if self.ckpt is None:
            return
        path = os.path.join(self.out, "train_indices.npy")
        try:
            ran = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise RunError(f"cannot resume: {path}, the samples this run trains on, is unreadable ({type(e).__name__}); "
                           "put it back, or start again in another --out") from e
        if not np.array_equal(ran, indices):
            raise RunError(f"cannot resume: --train-indices {self.config['train_indices']} names other samples than "
                           f"{path}, the ones this run trained on; give the run's own, or start again in another --out")

    def states(self, device):
        """What the mode had made between epochs (mutual.Method.state: {name: each model's}), as the checkpoint holds
        it; None for a fresh run, or one whose mode had made nothing."""
        if self.ckpt is None:
            return None
        names = dict.fromkeys(key[len("state_"):key.rindex("_")] for key in self.ckpt if key.startswith("state_"))
        return {name: tuple(self.ckpt[f"state_{name}_{k}"].to(device) for k in NAMES if f"state_{name}_{k}" in
                            self.ckpt) for name in names} or None

    def restore(self, models, device):
        """(epochs done, MyLC's r): the checkpoint's, put back into models; 0 and r = 0 for a fresh run."""
        if self.ckpt is None:
            return 0, [torch.zeros((), device=device) for _ in models.nets]
        return restore(self.ckpt, models, device)

    def start(self, noisy, num_classes):
        """Every input is valid: from here on the run writes into --out. config.json, the labels trained on,
        and metrics.jsonl cut back to the checkpoint's epoch. Raises RunError if --out cannot be made."""
        self.num_classes = num_classes
        if not self.writes:
            return
        try:
            os.makedirs(self.out, exist_ok=True)
        except OSError as e:  # what the checks could not foresee: a read-only file system, /proc, a full disk
            raise RunError(f"--out {self.out} cannot be created: {e.strerror or e}; choose another --out") from e
        record_start(self.out, self.config, resumed=self.resume, changed=self.changed)
        if self.ckpt is None:
            with runfiles.replacing(os.path.join(self.out, "noisy_labels.npy"), "wb") as f:
                np.save(f, noisy)
            if self.indices is not None:
                with runfiles.replacing(os.path.join(self.out, "train_indices.npy"), "wb") as f:
                    np.save(f, self.indices)
        trim_metrics(self.out, self.epochs_done)

    def log_epoch(self, row, hist, chis, models, r, states=None):
        """The epoch's metrics line, entropy histograms and checkpoint, as one: a Ctrl-C or SIGTERM lands after
        them, and when one cannot be written (runfiles.WriteError) the others are taken back: metrics.jsonl
        never holds an epoch that the checkpoint does not. chis: the step's χ of each model (Method.chis_at) at
        the epoch's start and end; states: what the mode has made between epochs (Method.state), or None."""
        seconds = self.stopwatch.tick()
        with uninterrupted():
            if self.writes:
                try:
                    append_metrics(self.out, row)
                    append_entropy_hist(self.out, row["epoch"], hist, self.num_classes, chis,
                                        self.config["noise"] != "none")
                    if self.resumable:  # --checkpoint none: the metrics alone
                        save_checkpoint(self.out, self.config, row["epoch"], models, r, seconds, states)
                except runfiles.WriteError:
                    trim_metrics(self.out, self.stopwatch.saved)  # in place: needs no space
                    with contextlib.suppress(runfiles.WriteError):  # a resume rewrites the epoch's row anyway
                        runfiles.trim_entropy_hist(self.out, self.stopwatch.saved)
                    raise
            self.stopwatch.saved = row["epoch"]

    def finish(self, row, models, meta):
        """The final weights and summary.json (written last: its presence marks the run finished)."""
        summary = final_accuracies(row if row is not None else last_metrics(self.out))
        summary.update(epochs=self.config["epochs"], seconds=round(self.stopwatch.total(), 1))
        save_weights(self.out, models.nets, self.config["arch"].split(","), meta)
        write_json(self.out, "summary.json", summary)
        return summary

    def stopped_at(self, progress, writing=False):
        """Where a run stopped (writing: while writing its files), what is kept, and the time of the epoch cut
        short added to the checkpoint."""
        if self.writes:
            add_seconds(self.out, self.stopwatch.since_tick())
        epochs, saved = self.config["epochs"], self.stopwatch.saved
        if progress.epoch is None or saved == progress.epoch + 1:  # no epoch is under way
            where = f"after epoch {saved}/{epochs}" if saved else f"before epoch 1/{epochs}"
        else:
            where = (f"in epoch {progress.epoch + 1}/{epochs} " +
                     (f"at step {min(progress.step + 1, progress.steps)}/{progress.steps}"
                      if progress.t_train_end is None else "while writing its files" if writing else "while testing"))
        if not self.resumable:
            return where, f"{self.out}/metrics.jsonl holds {saved} epochs, and no checkpoint (--checkpoint none)"
        kept = (f"{self.out}/checkpoint.pt holds epoch {saved}" if saved else
                "no epoch had finished, so it starts again from epoch 1")
        return where, kept

    @property
    def resumable(self):
        """Whether the run keeps a checkpoint to resume from (not with --checkpoint none)."""
        return self.config.get("checkpoint", "epoch") == "epoch"
