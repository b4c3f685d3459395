"""Train two models together with CMD (paper §4 experiments, appendix C settings).

    python train.py --dataset cifar100 --noise sym --rate 0.4 --mode progressive

main reads top to bottom: the settings, the data and its noisy labels, models A and B,
the epochs of the step with χ, the report. The method itself (each model's target,
Eqs. 3-6, the step) is mutual.py; χ is Eq. 7 (schedule.py); what a run writes into
--out and how it resumes, training/rundir.py; the progress line, training/progress.py.
The methods CMD is compared with run through python lab/train.py (lab/), whose modes
may act between epochs (registry.Mode.between).

Every input is checked before the first file is written. A run stopped by Ctrl-C, SIGTERM, a
NaN loss, an unreadable image or a full disk says so in one line and keeps its last checkpoint;
the line names the command that resumes it.

Multi-GPU: torchrun --nproc_per_node=N train.py ... shards every batch over the
ranks with DistributedDataParallel (NCCL on CUDA, gloo on CPU).
"""
import signal
import sys

if __name__ == "__main__":  # a Ctrl-C or SIGTERM while torch is being imported stops as quietly as one later
    from training.errors import stop_early
    stop_early("train.py")

import time
import warnings
from typing import NamedTuple

import torch
import torch.distributed as dist

from label_correction import confidence_from_sum
from mutual import ENTROPY_BINS, MODES, NAMES, Clock, Method, Precision, mutual_step, sum_names
from training import datasets, graph, rundir, runfiles
from training.batches import Batches
from training.build import Setup, batch_args, build_models, data_and_labels, eval_batches, weights_meta
from training.config import settings
from training.errors import EARLY, UserError, exit_code, named, one_line, say, stop_on_sigterm, stopped_by
from training.progress import Display, Progress
from training.ranks import Ranks
from training.report import add_scalars, chi_keys, epoch_line, epoch_row, evaluate, tensorboard


# ---------------------------------------------------------------- main

@one_line("train.py", stopped=EARLY)  # bad input: one line, exit 2; a Ctrl-C, SIGTERM, full disk in training: stopped()
@runfiles.checked_stdout()  # stdout that cannot be written (`> log` on a full disk): a WriteError, as a run file's
def main(argv=None):
    """The paper's procedure: the settings, the data with its noisy labels, models A and B, the epochs of
    mutual_step (Eqs. 3-8), and the report. Returns summary.json's numbers (None on ranks other than 0)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args, method = settings(argv)   # the flags, checked, and the method they make
        setup = Setup.of(args, method)  # the device, precision and record; the step recorded once and replayed, or not
        run = rundir.open_run(args, setup)  # --out: a fresh run, or one to resume with the same settings
        if run.finished:
            setup.log(f"{args.out} is finished ({args.epochs} epochs); nothing to do", flush=True)
            return runfiles.read_json(args.out, "summary.json")
        d, train, tests, noisy = data_and_labels(args, run, setup)  # §4.1: the given labels are noisy
    except runfiles.WriteError as e:  # stdout, before the run has written a file
        raise UserError(f"{e}; the run wrote nothing; {e.fix}, then run the command again") from None
    models = build_models(args, d.num_classes, train, setup, method)  # A and B (or a cohort)
    between, rows = MODES[method.mode].between, None  # what a mode beyond the paper does between epochs (lab/)
    if between is not None:  # before anything is written: on resume what it had made, and the rows it gives batches
        models, method, rows = between.start(models, method, run, args, setup, noisy, d.num_classes)
    start_epoch, r = run.restore(models, setup.device)          # MyLC's r: 0 before epoch 1
    batches = Batches(train, labels=noisy, clean=train.labels, rows=rows, **batch_args(args, d, setup))
    loop = Loop.of(args, setup, models, method, batches)
    evals = eval_batches(d, tests, setup.placement(args.workers))
    row = summary = writer = None
    try:
        run.start(noisy, d.num_classes)
        writer = tensorboard(args.out) if args.tensorboard and setup.rank == 0 else None
        for epoch in range(start_epoch, args.epochs):
            t0 = time.time()
            if between is not None:
                loop = between.advance(loop, epoch, setup, args, d.num_classes)
            s, hist, lr, r = train_epoch(loop, epoch, r, d.num_classes)  # Eqs. 3-6 each step, χ of Eq. 7
            row = end_epoch(loop, run, epoch, (s, hist, lr, r), evals, d.num_classes, args, setup, writer, t0)
        if setup.rank == 0:
            if between is not None:  # what it keeps beyond the weights, before summary.json marks the run finished
                between.finish(loop, args.out)
            summary = finish(args, row, run, models, weights_meta(args, d, train), writer)
        setup.ranks.agree()  # under torchrun: rank 0 has written the run's last files
    except (KeyboardInterrupt, datasets.DataError, runfiles.WriteError) as e:
        stopped(setup.ranks.settled(e), run, argv, loop.progress, setup.ranks)  # under torchrun, every rank at once
    if dist.is_initialized():
        setup.ranks.end()
        dist.destroy_process_group()
    return summary


class Loop(NamedTuple):
    """What every epoch uses: the models as called (DDP- or torch.compile-wrapped), their optimisers and lr
    schedules, the batches, the method, the run's length and seed, the precision, the progress line, the
    step: mutual_step on these models, eager or replayed (training/graph.py, --graph), and under torchrun the
    ranks' agreement before each step (training/ranks.py)."""
    fwd: list
    models: rundir.Models
    batches: Batches
    method: Method
    epochs: int
    seed: int
    precision: Precision
    progress: Progress
    step: object  # (batch, chi, r, clock) -> (sums, hist)
    ranks: Ranks

    @classmethod
    def of(cls, args, setup, models, method, batches):
        """The loop of this run; models: rundir.Models, wrapped here for torchrun and --compile."""
        nets = models.nets
        if dist.is_initialized():  # under torchrun, also with one process: the collectives run as they will on more
            ids = [setup.local_rank] if setup.device.type == "cuda" else None
            nets = [torch.nn.parallel.DistributedDataParallel(n, device_ids=ids) for n in nets]
            setup.log(f"distributed: {setup.world} process{'es' if setup.world > 1 else ''}, "
                      f"{dist.get_backend()} backend, DistributedDataParallel")
        fwd = [torch.compile(n) for n in nets] if args.compile else nets
        autocast = dict(device_type=setup.device.type, dtype=torch.bfloat16 if setup.amp == "bf16" else torch.float16,
                        enabled=setup.amp != "off")
        scaler = torch.amp.GradScaler(setup.device.type, enabled=setup.amp == "fp16")
        progress = Progress(batches.steps(), args.epochs, args.batch_size,
                            Display(every=args.log_every, enabled=setup.rank == 0))
        precision = Precision(autocast, scaler)
        loop = cls(fwd, rundir.Models(nets, models.opts, models.lr_scheds), batches, method, args.epochs, args.seed,
                   precision, progress, None, setup.ranks)
        return loop.training_by(method, setup)

    def training_by(self, method, setup):
        """This loop with its step on method (a Method)."""
        fwd, opts, precision = self.fwd, self.models.opts, self.precision

        def step(batch, chi, r, clock):
            return mutual_step(fwd, opts, batch, method, chi, r, clock, precision)

        return self._replace(method=method, step=graph.replayed(setup.config["graph"], step, opts, method,
                                                                 setup.device))


def train_epoch(loop, epoch, r, k):
    """One epoch of mutual_step, then the lr schedule. k: the number of classes K. Returns (the epoch's sums
    {mutual.sum_names: host float}, the (M, 2, bins) entropy histograms on the device, the epoch's lr, MyLC's
    r for the next epoch)."""
    for n in loop.fwd:
        n.train()
    batches, progress, m = loop.batches, loop.progress, len(loop.fwd)
    names = sum_names(m)
    acc = torch.zeros(len(names), device=batches.device)           # summed on the device, read once an epoch
    hist = torch.zeros(m, 2, ENTROPY_BINS, device=batches.device)  # H(p) of each model, clean / noisy given labels
    lr, steps = float(loop.models.opts[0].param_groups[0]["lr"]), batches.steps()  # a tensor when replayed
    progress.start_epoch(epoch)
    losses = [names.index(f"loss_{x}") for x in NAMES[:m]]

    def running_losses():  # L_A, L_B so far; waits for the device, so only when a progress line is due
        return (acc[losses] / acc[names.index("samples")]).tolist()

    for i, batch in enumerate(loop.ranks.agreed(batches.epoch(loop.seed, epoch))):  # under torchrun, the ranks go on
        # together: a rank that cannot, stops them all here (training/ranks.py)
        clock = Clock(epoch, i, steps, loop.epochs, loop.seed)
        chi = loop.method.chis_at(clock.t, loop.epochs, k, m)  # Eq. 7 at fractional epochs, one per model
        sums, step_hist = loop.step(batch, chi, r, clock)
        acc += sums
        hist += step_hist
        progress.update(i + 1, running_losses)
    progress.end_training()
    if dist.is_initialized():
        dist.all_reduce(acc)
        dist.all_reduce(hist)
    s = dict(zip(names, acc.tolist()))  # the one host sync of the epoch
    if s["nonfinite"] > 0:
        return s, hist, lr, r
    for lr_sched in loop.models.lr_scheds:
        lr_sched.step()
    # MyLC's r for the next epoch: Eq. 8 over this epoch's training predictions, kept on the device
    on_device = dict(zip(names, acc.unbind()))
    r = confidence_from_sum([on_device[f"entropy_{x}"] for x in NAMES[:m]], s["samples"], k)
    return s, hist, lr, r


def end_epoch(loop, run, epoch, trained, evals, k, args, setup, writer, t0):
    """After an epoch's steps (trained: train_epoch's): a NaN loss stops the run in one line; else the test sets,
    the epoch's row (metrics.jsonl, entropy_hist.npz, the checkpoint, the console line). Returns the row."""
    s, hist, lr, r = trained
    if s["nonfinite"] > 0:
        loop.progress.clear()
        kept = f"kept the checkpoint of epoch {epoch}" if epoch else "no epoch had finished to checkpoint"
        raise UserError(f"loss became NaN/inf in epoch {epoch + 1}; {kept}. Try a lower --lr or --amp off")
    results = evaluate(loop.fwd, evals, loop.precision.autocast, setup.device, setup.ranks)
    # chi in the row is the step's (Method.chis_at) at the epoch's end (t = epoch + 1); entropy_hist.npz also keeps
    # it at the start (t = epoch), so that each histogram can be read against both lines of its epoch
    chis = [loop.method.chis_at(t, args.epochs, k, len(loop.fwd)) for t in (epoch, epoch + 1)]
    head = dict(epoch=epoch + 1, lr=lr, **chi_keys(chis[1]), seconds=time.time() - t0)
    row = epoch_row(s, results, head, k, known_clean=args.noise != "none")
    run.log_epoch(row, hist.cpu().numpy(), chis, loop.models, r, loop.method.state)
    report_epoch(row, loop, setup.rank, writer)
    return row


def report_epoch(row, loop, rank, writer):
    """The epoch's console line (rank 0), and its TensorBoard scalars with --tensorboard."""
    if rank != 0:
        return
    loop.progress.clear()
    print(epoch_line(row, len(loop.fwd)), flush=True)
    if writer is not None:
        add_scalars(writer, row)


def finish(args, row, run, models, meta, writer):
    """The end of a run (rank 0): the final weights with meta (weights_meta), summary.json, the last line. Returns
    the summary."""
    summary = run.finish(row, models, meta=meta)
    if writer is not None:
        writer.close()
    print("final: " + " ".join(f"{k} {v:.2f}" for k, v in summary.items() if k.endswith("_acc_mean")) +
          f" | {summary['seconds']}s of training | {args.out}", flush=True)
    return summary


def stopped(err, run, argv, progress, ranks):
    """Ctrl-C, SIGTERM, an image that cannot be read or a file that cannot be written (a full disk), in the
    middle of training: add the time of the epoch cut short to the checkpoint's total, then one line that says
    where the run stopped, what is kept and the command that resumes it. Exit 130 or 143 (128 + SIGINT or
    SIGTERM, what a shell reports for them) or 2 (bad data, a full disk), as one_line would. Under torchrun every
    rank stops here at once (training/ranks.py) and says rank 0's line: only rank 0 knows what its files hold."""
    progress.clear()
    line = ranks.share(stop_line(err, run, argv, progress, ranks) if ranks.rank == 0 else None)
    error = isinstance(err, (datasets.DataError, runfiles.WriteError))
    say(f"{named('train.py')}: {'error: ' if error else ''}{line}")
    code = 2 if error else exit_code(err)
    ranks.said(code)  # under torchrun: every rank has said its line before any exits, then each exits with code
    sys.exit(code)


def stop_line(err, run, argv, progress, ranks):
    """What stopped(err) says: where the run stopped, what is kept, what to do; the time of the epoch cut short added
    to the checkpoint's total."""
    with rundir.uninterrupted(deliver=False):  # a second Ctrl-C or SIGTERM lets the bookkeeping finish
        where, kept = run.stopped_at(progress, writing=isinstance(err, runfiles.WriteError))
    if runfiles.state(run.out) == runfiles.NEW:  # nothing was written that --resume could continue
        resume = f"start it again with: {rundir.resume_command(argv, resume=False)}"
    else:
        resume = f"resume with: {rundir.resume_command(argv)}" if run.resumable else "it cannot resume"
    if isinstance(err, datasets.DataError):
        return f"{err} ({where}); {kept}; {resume}"
    if isinstance(err, runfiles.WriteError) and runfiles.state(run.out) == runfiles.FINISHED:  # the last line
        return f"{err}, after the run finished; {run.out}/summary.json holds its results"
    if isinstance(err, runfiles.WriteError):
        kept += ", and metrics.jsonl the epochs up to it" if run.resumable and run.stopwatch.saved else ""
        then = f"{err.fix}, then {resume}" if run.resumable else resume
        return f"{err} ({where}); {kept}; {then}"
    to = f" sent to rank {err.rank}" if getattr(err, "rank", None) is not None and ranks.world > 1 else ""
    return f"stopped by {stopped_by(err)}{to} {where}; {kept}; {resume}"

if __name__ == "__main__":
    warnings.formatwarning = lambda message, *_, **__: f"train.py: warning: {message}\n"
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stop_on_sigterm()  # SIGTERM (timeout, docker stop, a scheduler) stops as Ctrl-C does, with exit code 143
    main()
