"""Train two models together with CMD (paper §4 experiments, appendix C settings).

    python train.py --dataset cifar100 --noise sym --rate 0.4 --mode progressive

main reads top to bottom: arguments and presets, data and label noise, models and
optimisers, the loop, the report. The method itself (each model's target, Eqs. 3-6,
the step) is mutual.py; χ is Eq. 7 (schedule.py); what a run writes into --out and
how it resumes is rundir.py.

Multi-GPU: torchrun --nproc_per_node=N train.py ... shards every batch over the
ranks with DistributedDataParallel (NCCL on CUDA, gloo on CPU).
"""
import math
import os
import time
from dataclasses import fields

import numpy as np
import torch
import torch.distributed as dist

import datasets
import models
import rundir
from batches import Batches
from config import fail, get_args, resolve
from label_correction import confidence_from_sum
from mutual import ENTROPY_BINS, EpochSums, Method, mutual_step
from noise import add_noise, human_labels
from report import epoch_line, epoch_row, evaluate, final_accuracies

def setup_distributed():
    """rank, world size and local rank; initialises the process group under torchrun."""
    if "RANK" not in os.environ:
        return 0, 1, 0
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0))


def pick_device(choice, local_rank):
    if choice == "cuda" and not torch.cuda.is_available():
        fail("--device cuda but torch sees no CUDA device; use --device cpu")
    if choice == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def load_data(args, ckpt):
    """The dataset, its training subset and splits, and the labels trained on: (d, train, tests, noisy)."""
    try:
        d = datasets.load_dataset(args.dataset, args.data_dir, image_size=args.image_size, seed=args.seed,
                                  synthetic_size=args.synthetic_size, synthetic_classes=args.synthetic_classes,
                                  synthetic_test_size=args.synthetic_test_size,
                                  synthetic_difficulty=args.synthetic_difficulty, synthetic_shift=args.synthetic_shift)
    except datasets.DataError as e:
        fail(str(e))
    if args.noise == "human" and ckpt is None:  # CIFAR-N: one human label per training image, in its order
        try:
            human = human_labels(args.noise_file, args.dataset, args.noise_key, d.train.labels, d.num_classes)
        except datasets.DataError as e:
            fail(str(e))
    rng = np.random.default_rng(args.seed)
    keep = np.arange(len(d.train.labels))
    if args.subset:
        if not 0 < args.subset <= len(keep):
            fail(f"--subset {args.subset} must be between 1 and the {len(keep)} training samples")
        keep = np.sort(rng.choice(keep, args.subset, replace=False))
    tests = dict(d.tests)
    if args.val_split > 0:  # the paper's clean validation split for hyperparameter search
        perm = rng.permutation(keep)
        n_val = max(1, int(round(args.val_split * len(keep))))
        tests["val"] = datasets.take(d.train, np.sort(perm[:n_val]))
        keep = np.sort(perm[n_val:])
    train = datasets.take(d.train, keep)
    if ckpt is not None:
        noisy = np.load(os.path.join(args.out, "noisy_labels.npy"))
    elif args.noise == "human":
        noisy = human[keep]  # the indices --subset and --val-split kept, as for the images
    else:
        noisy = add_noise(train.labels, args.noise, args.rate, d.num_classes, seed=args.seed)
    return d, train, tests, noisy


def build_models(args, num_classes, device, channels_last):
    """Models A and B, their SGD optimisers and lr schedules, built before anything is written."""
    torch.manual_seed(args.seed)
    try:
        nets = [models.build_model(a, num_classes, pretrained=args.pretrained) for a in args.arch.split(",")]
    except (RuntimeError, ValueError) as e:
        fail(str(e).splitlines()[0])
    fmt = torch.channels_last if channels_last == "on" else torch.contiguous_format
    nets = [n.to(device, memory_format=fmt) for n in nets]
    opts = [torch.optim.SGD(n.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
            for n in nets]
    scheds = [torch.optim.lr_scheduler.MultiStepLR(o, args.milestones, args.lr_decay) for o in opts]
    return nets, opts, scheds, fmt


# ---------------------------------------------------------------- main

def main(argv=None):
    args = resolve(get_args(argv))
    method = Method(**{f.name: getattr(args, f.name) for f in fields(Method)})
    rank, world, local_rank = setup_distributed()
    device = pick_device(args.device, local_rank)
    amp = {"auto": "bf16" if device.type == "cuda" else "off"}.get(args.amp, args.amp)
    channels_last = {"auto": "on" if device.type == "cuda" else "off"}.get(args.channels_last, args.channels_last)
    config = {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v)) for k, v in vars(args).items()}
    config.update(amp=amp, channels_last=channels_last, world_size=world)
    try:
        ckpt = rundir.check_out(args.out, config, args.resume)
    except rundir.RunError as e:
        fail(str(e))
    if world > 1:
        dist.barrier()  # every rank has checked --out before rank 0 writes into it
    log = print if rank == 0 else (lambda *a, **k: None)
    log("settings: " + " ".join(f"{k}={v}" for k, v in config.items()))

    d, train, tests, noisy = load_data(args, ckpt)
    k, clean = d.num_classes, train.labels
    known_clean = args.noise != "none"  # clean labels known: precision and memorisation can be measured
    log(f"data: {args.dataset} train {len(clean)} ({k} classes, realised noise {np.mean(noisy != clean):.3f}) "
        + " ".join(f"{name} {len(v.labels)}" for name, v in tests.items()))
    nets, opts, scheds, fmt = build_models(args, k, device, channels_last)
    if rank == 0 and ckpt is None:  # inputs are valid: from here on the run writes into --out
        os.makedirs(args.out, exist_ok=True)
        rundir.write_json(args.out, "config.json", config)
        np.save(os.path.join(args.out, "noisy_labels.npy"), noisy)
    start_epoch, r = 0, [torch.zeros((), device=device), torch.zeros((), device=device)]  # MyLC r: 0 in epoch 0
    if ckpt is not None:
        start_epoch, r = rundir.restore(ckpt, nets, opts, scheds, device)
        log(f"resumed from {args.out}/checkpoint.pt at epoch {start_epoch}")
    if world > 1:
        nets = [torch.nn.parallel.DistributedDataParallel(n, device_ids=[local_rank] if device.type == "cuda" else None)
                for n in nets]
    fwd = [torch.compile(n) for n in nets] if args.compile else nets
    autocast = dict(device_type=device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16,
                    enabled=amp != "off")
    scaler = torch.amp.GradScaler(device.type, enabled=amp == "fp16")
    common = dict(mean=d.mean, std=d.std, device=device, rank=rank, world=world, workers=args.workers,
                  memory_format=fmt)
    batches = Batches(train, labels=noisy, clean=clean, batch_size=args.batch_size, augment=args.augment == "paper",
                      **common)
    evals = {name: Batches(v, labels=v.labels, clean=v.labels, batch_size=500, train=False, **common)
             for name, v in tests.items()}
    if rank == 0:
        rundir.trim_metrics(args.out, start_epoch)

    t_run, steps, row = time.time(), batches.steps(), None
    log_every = args.log_every or (steps // 10 if steps >= 100 else 0)
    for epoch in range(start_epoch, args.epochs):
        t0 = time.time()
        for n in nets:
            n.train()
        acc = torch.zeros(len(EpochSums._fields), device=device)  # summed on the device, read once an epoch
        hist = torch.zeros(2, 2, ENTROPY_BINS, device=device)      # H(p) of A and B, clean / noisy given labels
        lr = opts[0].param_groups[0]["lr"]
        for i, (x, y, y_clean) in enumerate(batches.epoch(args.seed, epoch)):
            t = epoch + i / steps  # fractional epochs, for Eq. 7 and ProSelfLC
            sums, step_hist = mutual_step(fwd, opts, x, y, y_clean, method=method, chi=method.chi(t, args.epochs, k),
                                          progress=t / args.epochs, r=r, autocast=autocast, scaler=scaler)
            acc += sums
            hist += step_hist
            if log_every and rank == 0 and (i + 1) % log_every == 0:
                print(f"  epoch {epoch:3d} step {i + 1}/{steps} {time.time() - t0:.1f}s", flush=True)
        if world > 1:
            dist.all_reduce(acc)
            dist.all_reduce(hist)
        s = EpochSums(*acc.tolist())  # the one host sync of the epoch
        if s.nonfinite > 0:
            fail(f"loss became NaN/inf in epoch {epoch}; kept the checkpoint of epoch {epoch}. "
                 f"Try a lower --lr or --amp off")
        for sc in scheds:
            sc.step()
        # MyLC's r for the next epoch: Eq. 8 over this epoch's training predictions, kept on the device
        on_device = EpochSums(*acc.unbind())
        r = [confidence_from_sum(on_device.entropy_a, s.samples, k), confidence_from_sum(on_device.entropy_b, s.samples, k)]
        results = evaluate(fwd, evals, autocast, device, world)
        row = epoch_row(s, epoch + 1, lr, method.chi(epoch + 1, args.epochs, k), time.time() - t0, k, known_clean,
                        results)
        if rank == 0:
            rundir.append_metrics(args.out, row)
            rundir.append_entropy_hist(args.out, epoch + 1, hist.cpu().numpy(), k, method.chi(epoch, args.epochs, k),
                                       row["chi"], known_clean)
            rundir.save_checkpoint(args.out, config, epoch + 1, nets, opts, scheds, r, device)
            print(epoch_line(row), flush=True)

    summary = final_accuracies(row if row is not None else rundir.last_metrics(args.out))
    summary.update(epochs=args.epochs, seconds=round(time.time() - t_run, 1))
    if rank == 0:
        rundir.write_json(args.out, "summary.json", summary)
        print("final: " + " ".join(f"{k} {v:.2f}" for k, v in summary.items() if k.endswith("_acc_mean")) +
              f" | {args.out}")
    if world > 1:
        dist.destroy_process_group()
    return summary


if __name__ == "__main__":
    main()
