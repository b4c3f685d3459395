"""Train two models together with CMD (paper §4 experiments, appendix C settings).

    python train.py --dataset cifar100 --noise sym --rate 0.4 --mode progressive

main reads top to bottom: arguments and presets, data and label noise, models and
optimisers, the loop, the report. The method itself (each model's target, Eqs. 3-6,
the step) is mutual.py; χ is Eq. 7 (schedule.py); what a run writes into --out and
how it resumes is rundir.py; the progress line is progress.py.

Every input is checked before the first file is written. A run stopped by Ctrl-C, a
NaN loss or an unreadable image says so in one line and keeps its last checkpoint;
the line names the command that resumes it.

Multi-GPU: torchrun --nproc_per_node=N train.py ... shards every batch over the
ranks with DistributedDataParallel (NCCL on CUDA, gloo on CPU).
"""
import signal
import sys


def stopped_early(*_):
    print("train.py: stopped by Ctrl-C before training started; run the command again to start", file=sys.stderr)
    sys.exit(130)


if __name__ == "__main__":  # a Ctrl-C while torch is being imported stops as quietly as one later
    signal.signal(signal.SIGINT, stopped_early)

import math
import os
import threading
import time
import warnings
from dataclasses import fields

import numpy as np
import torch
import torch.distributed as dist

from training import datasets
import models
from training import rundir
from training.batches import Batches
from training.config import fail, get_args, pick_device, resolve
from label_correction import confidence_from_sum
from mutual import ENTROPY_BINS, NAMES, Method, mutual_step, sum_names
from noise import add_noise
from training.cifar_n import human_labels
from training.progress import Progress
from training.report import add_scalars, epoch_line, epoch_row, evaluate, final_accuracies, tensorboard


def setup_distributed():
    """rank, world size and local rank; initialises the process group under torchrun."""
    if "RANK" not in os.environ:
        return 0, 1, 0
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0))


def load_data(args):
    """The dataset, its training subset and splits: (d, train, tests, keep), keep the indices of the training
    samples kept (after --subset and --val-split) in the dataset's training set. Raises datasets.DataError."""
    d = datasets.load_dataset(args.dataset, args.data_dir, image_size=args.image_size, seed=args.seed,
                              synthetic_size=args.synthetic_size, synthetic_classes=args.synthetic_classes,
                              synthetic_test_size=args.synthetic_test_size,
                              synthetic_difficulty=args.synthetic_difficulty, synthetic_shift=args.synthetic_shift)
    rng = np.random.default_rng(args.seed)
    keep = np.arange(len(d.train.labels))
    if args.subset is not None:
        if args.subset > len(keep):
            raise datasets.DataError(f"--subset {args.subset} is more than the {len(keep)} training samples")
        keep = np.sort(rng.choice(keep, args.subset, replace=False))
    tests = dict(d.tests)
    if args.val_split > 0:  # the paper's clean validation split for hyperparameter search
        perm = rng.permutation(keep)
        n_val = max(1, int(round(args.val_split * len(keep))))
        tests["val"] = datasets.take(d.train, np.sort(perm[:n_val]))
        keep = np.sort(perm[n_val:])
    return d, datasets.take(d.train, keep), tests, keep


def eval_batches(d, tests, **common):
    """One Batches per test set: every sample once, in order, no augmentation."""
    return {name: Batches(v, labels=v.labels, clean=v.labels, batch_size=500, train=False, mean=d.mean, std=d.std,
                          **common) for name, v in tests.items()}


def build_models(args, num_classes, device, channels_last):
    """Models A and B (or the cohort's), their SGD optimisers and lr schedules, built before anything is written."""
    torch.manual_seed(args.seed)
    try:
        nets = [models.build_model(a, num_classes, pretrained=args.pretrained) for a in args.arch.split(",")]
        fmt = torch.channels_last if channels_last == "on" else torch.contiguous_format
        nets = [n.to(device, memory_format=fmt) for n in nets]
        opts = [torch.optim.SGD(n.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
                for n in nets]
        scheds = [torch.optim.lr_scheduler.MultiStepLR(o, args.milestones, args.lr_decay) for o in opts]
    except (RuntimeError, ValueError) as e:
        fail(str(e).splitlines()[0])
    return nets, opts, scheds, fmt


@torch.no_grad()
def check_input_size(nets, archs, train, device, fmt):
    """Each model takes the training images' size: one forward pass of two blank images, in eval mode (no
    state changes, no random numbers), so that a network too deep for small images fails here, in one
    line, and not after the run's first files are written."""
    size = tuple(train.images.shape[1:]) if isinstance(train, datasets.TensorImages) else (3, train.size, train.size)
    x = torch.zeros(2, *size, device=device).contiguous(memory_format=fmt)
    for net, arch in zip(nets, archs):
        net.eval()
        try:
            net(x)
        except RuntimeError as e:
            fail(f"--arch {arch} cannot take {size[1]}x{size[2]} images ({str(e).splitlines()[0][:120]}); "
                 f"choose an arch for this size, or --image-size")
        net.train()


def check_files(args, train, tests, log):
    """--check-images: decode every image read from files now, and list all that fail."""
    files = [ds for ds in (train, *tests.values()) if isinstance(ds, datasets.FileImages)]
    paths = [p for ds in files for p in ds.paths]
    if paths:
        log(f"checking {len(paths)} images with {max(1, args.workers)} threads", flush=True)
        datasets.check_images(paths, args.workers)
        log(f"--check-images: all {len(paths)} images can be read")
    elif args.dataset == "folder":
        log("--check-images: the folder's images are small, so all were decoded when it was loaded")
    else:
        log(f"--check-images: nothing to check, {args.dataset} is not read from image files")


# ---------------------------------------------------------------- main

def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = resolve(get_args(argv))
    method = Method(**{f.name: getattr(args, f.name) for f in fields(Method)})
    rank, world, local_rank = setup_distributed()
    device = pick_device(args.device, local_rank)
    amp = {"auto": "bf16" if device.type == "cuda" else "off"}.get(args.amp, args.amp)
    channels_last = {"auto": "on" if device.type == "cuda" else "off"}.get(args.channels_last, args.channels_last)
    config = {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v)) for k, v in vars(args).items()}
    config.update(amp=amp, channels_last=channels_last, world_size=world)
    log = print if rank == 0 else (lambda *a, **k: None)
    try:
        ckpt = rundir.check_out(args.out, config, args.resume)
    except rundir.RunError as e:
        fail(str(e))
    if rundir.is_finished(args.out, ckpt, args.epochs):
        log(f"{args.out} is finished ({args.epochs} epochs); nothing to do")
        return rundir.read_json(args.out, "summary.json")
    if dist.is_initialized():
        dist.barrier()  # every rank has checked --out before rank 0 writes into it
    log("settings: " + " ".join(f"{k}={v}" for k, v in config.items()))
    if args.resume and ckpt is None:
        print(f"train.py: note: {args.out} has no checkpoint yet (it stopped in its first epoch); "
              f"starting it again from epoch 1", file=sys.stderr)
    changed = rundir.arithmetic_changes(ckpt, config)
    if changed and rank == 0:
        print("train.py: warning: resuming with " + ", ".join(f"{k} {now} (before: {was})" for k, (was, now) in
                                                               changed.items()) +
              "; the arithmetic differs, so the results will not equal an uninterrupted run's (config.json records "
              "it)", file=sys.stderr)

    d, train, tests, noisy = data_and_labels(args, ckpt, log)
    k, clean = d.num_classes, train.labels
    if len(clean) < 2 * world:  # BatchNorm needs 2 samples a process, so no batch could be made
        fail(f"{len(clean)} training sample{'s' if len(clean) != 1 else ''} after --subset and --val-split: each of "
             f"the {world} process{'es' if world > 1 else ''} needs at least 2; keep more samples")
    known_clean = args.noise != "none"  # clean labels known: precision and memorisation can be measured
    log(f"data: {args.dataset} train {len(clean)} ({k} classes, realised noise {np.mean(noisy != clean):.3f}) "
        + " ".join(f"{name} {len(v.labels)}" for name, v in tests.items()))
    nets, opts, scheds, fmt = build_models(args, k, device, channels_last)
    check_input_size(nets, args.arch.split(","), train, device, fmt)
    start_epoch, r = 0, [torch.zeros((), device=device) for _ in nets]  # MyLC's r of each model: 0 in epoch 0
    if ckpt is not None:
        start_epoch, r = rundir.restore(ckpt, nets, opts, scheds, device)
        log(f"resumed from {args.out}/checkpoint.pt at epoch {start_epoch}")
    if dist.is_initialized():  # under torchrun, also with one process: the collectives run as they will on more
        nets = [torch.nn.parallel.DistributedDataParallel(n, device_ids=[local_rank] if device.type == "cuda" else None)
                for n in nets]
        log(f"distributed: {world} process{'es' if world > 1 else ''}, {dist.get_backend()} backend, "
            f"DistributedDataParallel")
    fwd = [torch.compile(n) for n in nets] if args.compile else nets
    autocast = dict(device_type=device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16,
                    enabled=amp != "off")
    scaler = torch.amp.GradScaler(device.type, enabled=amp == "fp16")
    common = dict(device=device, rank=rank, world=world, workers=args.workers, memory_format=fmt)
    batches = Batches(train, labels=noisy, clean=clean, batch_size=args.batch_size, augment=args.augment == "paper",
                      mean=d.mean, std=d.std, **common)
    evals = eval_batches(d, tests, **common)
    progress = Progress(batches.steps(), args.epochs, args.batch_size, every=args.log_every, enabled=rank == 0)
    clock = rundir.RunClock(ckpt.get("seconds", 0.0) if ckpt else 0.0, start_epoch)
    config["provenance"] = rundir.provenance(device, world)

    row = writer = summary = None
    try:
        if rank == 0:  # every input is valid: from here on the run writes into --out
            try:
                os.makedirs(args.out, exist_ok=True)
            except OSError as e:  # what the checks could not foresee: a read-only file system, /proc, a full disk
                fail(f"--out {args.out} cannot be created: {e.strerror or e}; choose another --out")
            rundir.record_start(args.out, config, resumed=args.resume, changed=changed)
            if ckpt is None:
                np.save(os.path.join(args.out, "noisy_labels.npy"), noisy)
            rundir.trim_metrics(args.out, start_epoch)
            writer = tensorboard(args.out) if args.tensorboard else None
        for epoch in range(start_epoch, args.epochs):
            t0 = time.time()
            s, hist, lr, r = train_epoch(fwd, opts, scheds, batches, method, epoch, args.epochs, args.seed, k, r,
                                         autocast, scaler, progress)
            if s["nonfinite"] > 0:
                progress.clear()
                fail(f"loss became NaN/inf in epoch {epoch + 1}; " +
                     (f"kept the checkpoint of epoch {epoch}" if epoch else "no epoch had finished to checkpoint") +
                     ". Try a lower --lr or --amp off")
            results = evaluate(fwd, evals, autocast, device)
            row = epoch_row(s, len(nets), epoch + 1, lr, method.chi(epoch + 1, args.epochs, k), time.time() - t0, k,
                            known_clean, results)
            seconds = clock.tick()
            with rundir.uninterrupted():  # a Ctrl-C lands after the epoch's files, never among them
                if rank == 0:
                    rundir.append_metrics(args.out, row)
                    rundir.append_entropy_hist(args.out, epoch + 1, hist.cpu().numpy(), k,
                                               method.chi(epoch, args.epochs, k), row["chi"], known_clean)
                    rundir.save_checkpoint(args.out, config, epoch + 1, nets, opts, scheds, r, device, seconds)
                clock.saved = epoch + 1
            if rank == 0:
                progress.clear()
                print(epoch_line(row, len(nets)), flush=True)
                if writer is not None:
                    add_scalars(writer, row)
        if rank == 0:
            summary = finish(args, row, clock, nets, d, train, writer)
    except (KeyboardInterrupt, datasets.DataError) as e:
        stopped(e, args, argv, progress, clock, rank)
    if dist.is_initialized():
        dist.destroy_process_group()
    return summary


def finish(args, row, clock, nets, d, train, writer):
    """The end of a run (rank 0): the final weights, summary.json, the last line. Returns the summary."""
    summary = final_accuracies(row if row is not None else rundir.last_metrics(args.out))
    summary.update(epochs=args.epochs, seconds=round(clock.total(), 1))
    size = list(train.images.shape[1:]) if isinstance(train, datasets.TensorImages) else [3, train.size, train.size]
    rundir.save_weights(args.out, nets, args.arch.split(","), meta=dict(
        dataset=args.dataset, num_classes=d.num_classes, epoch=args.epochs, input_size=size, mean=d.mean, std=d.std))
    rundir.write_json(args.out, "summary.json", summary)  # last: its presence marks the run finished
    if writer is not None:
        writer.close()
    print("final: " + " ".join(f"{k} {v:.2f}" for k, v in summary.items() if k.endswith("_acc_mean")) +
          f" | {summary['seconds']}s of training | {args.out}")
    return summary


def data_and_labels(args, ckpt, log):
    """load_data, --check-images, and the labels trained on (the run's own on resume); bad data: one line."""
    try:
        d, train, tests, keep = load_data(args)
        if args.check_images:
            check_files(args, train, tests, log)
        if ckpt is not None:
            return d, train, tests, rundir.load_noisy_labels(args.out, len(train.labels), d.num_classes)
        if args.noise == "human":  # CIFAR-N: one human label per training image, in its order
            human = human_labels(args.noise_file, args.dataset, args.noise_key, d.train.labels, d.num_classes)
            return d, train, tests, human[keep]  # the indices --subset and --val-split kept, as for the images
        return d, train, tests, add_noise(train.labels, args.noise, args.rate, d.num_classes, seed=args.seed)
    except datasets.BadImages as e:
        if len(e.bad) > 1:  # one line per file, then the error line
            for path, why in e.bad:
                print(f"train.py: unreadable image: {path} ({why})", file=sys.stderr)
        fail(str(e))
    except (datasets.DataError, rundir.RunError) as e:
        fail(str(e))


def train_epoch(nets, opts, scheds, batches, method, epoch, epochs, seed, k, r, autocast, scaler, progress):
    """One epoch of mutual_step, then the lr schedule. Returns (the epoch's sums {mutual.sum_names: host
    float}, the (M, 2, bins) entropy histograms on the device, the epoch's lr, MyLC's r for the next epoch)."""
    for n in nets:
        n.train()
    device, m, names = batches.device, len(nets), sum_names(len(nets))
    acc = torch.zeros(len(names), device=device)           # summed on the device, read once an epoch
    hist = torch.zeros(m, 2, ENTROPY_BINS, device=device)  # H(p) of each model, clean / noisy given labels
    lr, steps = opts[0].param_groups[0]["lr"], batches.steps()
    progress.start_epoch(epoch)
    losses = [names.index(f"loss_{x}") for x in NAMES[:m]]

    def running_losses():  # L_A, L_B so far; waits for the device, so only when a progress line is due
        return (acc[losses] / acc[names.index("samples")]).tolist()

    for i, (x, y, y_clean) in enumerate(batches.epoch(seed, epoch)):
        t = epoch + i / steps  # fractional epochs, for Eq. 7 and ProSelfLC
        sums, step_hist = mutual_step(nets, opts, x, y, y_clean, method=method, chi=method.chi(t, epochs, k),
                                      progress=t / epochs, r=r, autocast=autocast, scaler=scaler)
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
    for sc in scheds:
        sc.step()
    # MyLC's r for the next epoch: Eq. 8 over this epoch's training predictions, kept on the device
    on_device = dict(zip(names, acc.unbind()))
    r = [confidence_from_sum(on_device[f"entropy_{x}"], s["samples"], k) for x in NAMES[:m]]
    return s, hist, lr, r


def stopped(err, args, argv, progress, clock, rank):
    """Ctrl-C, or an image that cannot be read, in the middle of training: add the time of the epoch cut
    short to the checkpoint's total, then one line that says where the run stopped, what is kept and the
    command that resumes it. Exit 130 (128 + SIGINT, what a shell reports for Ctrl-C) or 2 (bad data)."""
    progress.clear()
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main_thread else None  # let the bookkeeping finish
    try:
        if rank == 0:
            rundir.add_seconds(args.out, clock.since_tick())
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, previous)
    if progress.epoch is None or clock.saved == progress.epoch + 1:  # no epoch is under way
        where = f"after epoch {clock.saved}/{args.epochs}" if clock.saved else f"before epoch 1/{args.epochs}"
    else:
        where = (f"in epoch {progress.epoch + 1}/{args.epochs} " +
                 (f"at step {min(progress.step + 1, progress.steps)}/{progress.steps}" if progress.t_train_end is None
                  else "while testing"))
    kept = (f"{args.out}/checkpoint.pt holds epoch {clock.saved}" if clock.saved else
            "no epoch had finished, so it starts again from epoch 1")
    resume = f"resume with: {rundir.resume_command(argv)}"
    if isinstance(err, datasets.DataError):
        fail(f"{err} ({where}); {kept}; {resume}")
    if rank == 0:
        print(f"train.py: stopped by Ctrl-C {where}; {kept}; {resume}", file=sys.stderr, flush=True)
    sys.exit(130)


if __name__ == "__main__":
    warnings.formatwarning = lambda message, *_, **__: f"train.py: warning: {message}\n"
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        main()
    except KeyboardInterrupt:  # before training started; stopped() reports one during training
        stopped_early()
