"""Train two models together with CMD (paper §4 experiments, appendix C settings).

    python train.py --dataset cifar100 --noise sym --rate 0.4 --mode progressive

main reads top to bottom: arguments and presets, data and label noise, models and
optimisers, the loop, the report. The method itself (each model's target, Eqs. 3-6,
the step) is mutual.py; χ is Eq. 7 (schedule.py); what a run writes into --out and
how it resumes is training/rundir.py; the progress line is training/progress.py.

Every input is checked before the first file is written. A run stopped by Ctrl-C, SIGTERM, a
NaN loss, an unreadable image or a full disk says so in one line and keeps its last checkpoint;
the line names the command that resumes it.

Multi-GPU: torchrun --nproc_per_node=N train.py ... shards every batch over the
ranks with DistributedDataParallel (NCCL on CUDA, gloo on CPU).
"""
import signal
import sys

EARLY = "stopped by Ctrl-C before training started; run the command again to start"


def stopped_early(signum, frame):
    print(f"train.py: {EARLY.replace('Ctrl-C', 'SIGTERM' if signum == signal.SIGTERM else 'Ctrl-C')}", file=sys.stderr)
    sys.exit(128 + signum)


if __name__ == "__main__":  # a Ctrl-C or SIGTERM while torch is being imported stops as quietly as one later
    signal.signal(signal.SIGINT, stopped_early)
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:  # ignored under tools/slurm.py: it stays so
        signal.signal(signal.SIGTERM, stopped_early)

import dataclasses
import time
import warnings
from typing import NamedTuple

import numpy as np
import torch
import torch.distributed as dist

import robust
from label_correction import LABEL_CORRECTIONS, confidence_from_sum, revision_optimisers
from mutual import ENTROPY_BINS, NAMES, Clock, Method, Precision, mutual_step, sum_names
from training import datasets, graph, images, rundir, runfiles
from training.batches import Batches
from training.build import Setup, batch_args, build_models, check_train_size, eval_batches, given_labels, load_data
from training.config import get_args, method_of, resolve
from training.errors import UserError, exit_code, named, one_line, say, stop_on_sigterm, stopped_by
from training.progress import Display, Progress
from training.ranks import Ranks
from training.report import add_scalars, chi_keys, epoch_line, epoch_row, evaluate, predictions, tensorboard


def check_files(args, train, tests, log):
    """--check-images: decode every image read from files now, and list all that fail."""
    files = [ds for ds in (train, *tests.values()) if isinstance(ds, datasets.FileImages)]
    paths = [p for ds in files for p in ds.paths]
    if paths:
        log(f"checking {len(paths)} images with {max(1, args.workers)} threads", flush=True)
        images.check_images(paths, args.workers)
        log(f"--check-images: all {len(paths)} images can be read")
    elif args.dataset == "folder":
        log("--check-images: the folder's images are small, so all were decoded when it was loaded")
    else:
        log(f"--check-images: nothing to check, {args.dataset} is not read from image files")


# ---------------------------------------------------------------- main

@one_line("train.py", stopped=EARLY)  # bad input: one line, exit 2; a Ctrl-C, SIGTERM, full disk in training: stopped()
@runfiles.checked_stdout()  # stdout that cannot be written (`> log` on a full disk): a WriteError, as a run file's
def main(argv=None):
    """The paper's procedure: the settings, the data with its noisy labels, models A and B, the epochs of
    mutual_step (Eqs. 3-8), and the report. Returns summary.json's numbers (None on ranks other than 0)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = resolve(get_args(argv))
        method, setup = method_of(args), Setup.of(args)  # the method's settings; the device, precision and record
        setup.config["graph"] = graph.resolve(args.graph, setup.device, setup.amp, method, dist.is_initialized(),
                                              args.compile)  # the step recorded once and replayed, or eager
        run = open_run(args, setup)
        if run.finished():
            setup.log(f"{args.out} is finished ({args.epochs} epochs); nothing to do", flush=True)
            return runfiles.read_json(args.out, "summary.json")
        d, train, tests, noisy = data_and_labels(args, run, setup)  # §4.1: the given labels are noisy
    except runfiles.WriteError as e:  # stdout, before the run has written a file
        raise UserError(f"{e}; the run wrote nothing; {e.fix}, then run the command again") from None
    models = build_models(args, d.num_classes, train, setup)     # A and B (or a cohort)
    method = dataclasses.replace(method, estimates=run.estimates(setup.device))  # a warm-up's estimates, on resume
    if run.epochs_done and revising(method, run.epochs_done - 1, args):  # its last epoch revised: the revision's
        # optimisers, before their state is restored
        models, method = revised(models, method, args, setup, run.slack(setup.device))
    start_epoch, r = run.restore(models, setup.device)          # MyLC's r: 0 before epoch 1
    loop = Loop.of(args, setup, models, method, Batches(train, labels=noisy, clean=train.labels, **batch_args(
        args, d, setup)))
    if args.labels_from is not None:  # Joint optimisation's second step: each model on its relabelled labels
        loop.batches.soft = rundir.load_labels(args.labels_from, noisy, len(models.nets), d.num_classes,
                                               setup.config).to(setup.device)
    evals = eval_batches(d, tests, setup.placement(args.workers))
    row = summary = writer = None
    try:
        run.start(noisy, d.num_classes)
        writer = tensorboard(args.out) if args.tensorboard and setup.rank == 0 else None
        for epoch in range(start_epoch, args.epochs):
            t0 = time.time()
            loop = stage(loop, epoch, d, train, args, setup)  # the warm-up's end: each model's estimate, if any
            s, hist, lr, r = train_epoch(loop, epoch, r, d.num_classes)  # Eqs. 3-6 each step, χ of Eq. 7
            if s["nonfinite"] > 0:
                loop.progress.clear()
                kept = f"kept the checkpoint of epoch {epoch}" if epoch else "no epoch had finished to checkpoint"
                raise UserError(f"loss became NaN/inf in epoch {epoch + 1}; {kept}. Try a lower --lr or --amp off")
            results = evaluate(loop.fwd, evals, loop.precision.autocast, setup.device, setup.ranks)
            # chi in the row is the step's (Method.chis_at) at the epoch's end (t = epoch + 1); entropy_hist.npz
            # also keeps it at the start (t = epoch), so that each histogram can be read against both lines of its epoch
            chis = [method.chis_at(t, args.epochs, d.num_classes, len(models.nets)) for t in (epoch, epoch + 1)]
            head = dict(epoch=epoch + 1, lr=lr, **chi_keys(chis[1]), seconds=time.time() - t0)
            row = epoch_row(s, results, head, d.num_classes, known_clean=args.noise != "none")
            run.log_epoch(row, hist.cpu().numpy(), chis, loop.models, r, loop.method.estimates, loop.method.slack)
            report_epoch(row, loop, setup.rank, writer)
        if setup.rank == 0:
            labels = final_labels(loop, args.epochs, d, train, args, setup)
            summary = finish(args, row, run, models, weights_meta(args, d, train), writer, labels)
        setup.ranks.agree()  # under torchrun: rank 0 has written the run's last files
    except (KeyboardInterrupt, datasets.DataError, runfiles.WriteError) as e:
        stopped(setup.ranks.settled(e), run, argv, loop.progress, setup.ranks)  # under torchrun, every rank at once
    if dist.is_initialized():
        setup.ranks.end()
        dist.destroy_process_group()
    return summary


def open_run(args, setup):
    """The run directory: checked (a fresh --out, or a run to resume with the same settings) before anything
    is read or written; says what a resume changes."""
    run = rundir.Run(args.out, setup.config, args.resume, writes=setup.rank == 0)
    if dist.is_initialized():
        dist.barrier()  # every rank has checked --out before rank 0 writes into it
    if run.finished():
        return run
    setup.log("settings: " + " ".join(f"{k}={v}" for k, v in setup.config.items()))
    setup.config["provenance"] = rundir.provenance(setup.device, setup.world)  # config.json, not compared on resume
    if args.resume and run.ckpt is None:
        print(f"train.py: note: {args.out} has no checkpoint yet (it stopped in its first epoch); "
              f"starting it again from epoch 1", file=sys.stderr)
    if run.changed and setup.rank == 0:
        print("train.py: warning: resuming with " + ", ".join(f"{k} {now} (before: {was})" for k, (was, now) in
                                                               run.changed.items()) +
              "; the arithmetic differs, so the results will not equal an uninterrupted run's (config.json records "
              "it)", file=sys.stderr)
    return run


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
        """This loop with its step on method (a Method: the run's, or the run's with a stage's estimates)."""
        fwd, opts, precision = self.fwd, self.models.opts, self.precision

        def step(batch, chi, r, clock):
            return mutual_step(fwd, opts, batch, method, chi, r, clock, precision)

        return self._replace(method=method, step=graph.replayed(setup.config["graph"], step, opts, method,
                                                                 setup.device))


def data_and_labels(args, run, setup):
    """load_data, --check-images, and the labels trained on (the run's own on resume); bad data: one line.
    Returns (Data, the training set, the test sets, the given labels of the training set)."""
    try:
        d, train, tests, keep = load_data(args)
        if args.check_images:
            check_files(args, train, tests, setup.log)
        noisy = run.noisy_labels(len(train.labels), d.num_classes)
        if noisy is None:  # keep: the indices --subset and --val-split kept, as for the images
            noisy = given_labels(args, d, train, keep)
    except datasets.BadImages as e:
        if len(e.bad) > 1:  # one line per file, then main's error line
            for path, why in e.bad:
                print(f"train.py: unreadable image: {path} ({why})", file=sys.stderr)
        raise
    check_train_size(len(noisy), setup.world)
    realised = "-" if args.noise == "none" else f"{np.mean(noisy != train.labels):.3f}"  # none: unknown, or 0
    setup.log(f"data: {args.dataset} train {len(noisy)} ({d.num_classes} classes, realised noise {realised}) " +
              " ".join(f"{name} {len(v.labels)}" for name, v in tests.items()))
    return d, train, tests, noisy


def stage(loop, epoch, d, train, args, setup):
    """What the run's label correction makes of each model's predicted probabilities on the training set (eval mode,
    without augmentation), at the start of an epoch (label_correction.Correction):
    - estimate: once the warm-up ends, each model's estimate (Forward's and T-revision's T̂), which the model trains
      with from then on;
    - relabel: from the epoch its window starts, each model's last predictions (robust.joint_history), whose mean
      is the model's given labels from the epoch relabel names on (Joint optimisation).
    Method.estimates holds either, and the checkpoint keeps it. And where the run revises (Correction.revise:
    T-revision), from the revision's first epoch each model's slack and its Adam (revised; Method.slack, which the
    checkpoint keeps too). Returns the loop, training from then on with them."""
    m, c = loop.method, LABEL_CORRECTIONS[loop.method.lc]
    if c.relabel is not None:
        return relabelled(loop, epoch, c.relabel(m, args.epochs), d, train, args, setup)
    if m.slack is None and revising(m, epoch, args):
        models, m = revised(loop.models, m, args, setup)
        setup.log(f"stage: from epoch {epoch + 1}, {c.title} learns each model's slack ΔT beside its T̂, by Adam at lr "
                  f"{m.comparators.trevision_revise_lr:g}", flush=True)
        return loop._replace(models=models).training_by(m, setup)
    if c.estimate is None or m.estimates is not None or epoch < m.warmup:
        return loop
    probs = train_predictions(loop, d, train, args, setup)
    estimates = tuple(c.estimate(p, m).to(setup.device) for p in probs)
    setup.log(f"stage: after {m.warmup} warm-up epoch{'s' if m.warmup > 1 else ''} of CE, {c.title} "
              f"trains with each model's estimate from its predictions on the {len(train.labels)} training samples",
              flush=True)
    return loop.training_by(dataclasses.replace(m, estimates=estimates), setup)


def revising(m, epoch, args):
    """Whether epoch (0-based) is in the run's revision stage (label_correction.Correction.revise)."""
    revise = LABEL_CORRECTIONS[m.lc].revise
    start = None if revise is None else revise(m, args.epochs)
    return start is not None and epoch >= start


def revised(models, m, args, setup, slack=None):
    """The models with a revision's optimisers: each model's slack (zeros, or a checkpoint's), Adam on the model and
    its slack, a constant lr. Returns (rundir.Models, the method with the slacks)."""
    k = m.estimates[0].shape[0]
    slack = tuple(torch.zeros(k, k, device=setup.device) if s is None else s.clone()
                  for s in (slack or (None,) * len(models.nets)))
    for s in slack:
        s.requires_grad_(True)
    opts = revision_optimisers(models.nets, slack, m, args.weight_decay)
    lr_scheds = [torch.optim.lr_scheduler.MultiStepLR(o, [], 1.0) for o in opts]  # their revision has no schedule
    return rundir.Models(models.nets, opts, lr_scheds), dataclasses.replace(m, slack=slack)


def train_predictions(loop, d, train, args, setup):
    """Each model's predicted probabilities on every training sample, in order: eval mode, no augmentation."""
    return predictions(loop.fwd, eval_batches(d, {"train": train}, setup.placement(args.workers))["train"],
                       loop.precision.autocast)


def relabelled(loop, epoch, begin, d, train, args, setup):
    """Joint optimisation's label update at the start of epoch (0-based): from epoch begin - JOINT_WINDOW + 1 on,
    each model's predictions join its history (Method.estimates); from epoch begin on, the batches carry each
    model's mean of them as its given labels (Batches.soft). The step reads the labels from the batch, so it is
    not made anew."""
    if epoch < max(1, begin - robust.JOINT_WINDOW + 1):
        return loop
    m = loop.method
    kept = m.estimates or (None,) * len(loop.fwd)
    history = tuple(robust.joint_history(h, p.to(setup.device)) for h, p in
                    zip(kept, train_predictions(loop, d, train, args, setup)))
    if epoch >= begin:
        loop.batches.soft = torch.stack([h.mean(0) for h in history])
        if epoch == begin < args.epochs:
            setup.log(f"stage: from epoch {epoch + 1}, each sample's label is each model's mean prediction over its "
                      f"last {robust.JOINT_WINDOW} epochs ({len(history[0])} so far), renewed every epoch", flush=True)
    return loop._replace(method=dataclasses.replace(m, estimates=history))


def final_labels(loop, epochs, d, train, args, setup):
    """The labels a relabelling run ends with (Joint optimisation: their code saves the update after the last
    epoch), for --labels-from: each model's mean of its history once its final predictions have joined it, (M, n,
    K); None for a run that does not relabel. Computed again on a resume of the finished run's last epoch."""
    c = LABEL_CORRECTIONS[loop.method.lc]
    if c.relabel is None:
        return None
    return relabelled(loop, epochs, epochs, d, train, args, setup).batches.soft


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


def report_epoch(row, loop, rank, writer):
    """The epoch's console line (rank 0), and its TensorBoard scalars with --tensorboard."""
    if rank != 0:
        return
    loop.progress.clear()
    print(epoch_line(row, len(loop.fwd)), flush=True)
    if writer is not None:
        add_scalars(writer, row)


def weights_meta(args, d, train):
    """What the final weights file records beside the weights (evaluate.py reads it): the dataset, its number
    of classes, the epochs, the input size of the training images and their normalisation."""
    size = list(train.images.shape[1:]) if isinstance(train, datasets.TensorImages) else [3, train.size, train.size]
    return dict(dataset=args.dataset, num_classes=d.num_classes, epoch=args.epochs, input_size=size, mean=d.mean,
                std=d.std)


def finish(args, row, run, models, meta, writer, labels=None):
    """The end of a run (rank 0): the final weights with meta (weights_meta), a relabelling run's final labels
    (final_labels), summary.json, the last line. Returns the summary."""
    summary = run.finish(row, models, meta=meta, labels=labels)
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
