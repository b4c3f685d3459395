"""Many runs in one process against one process per run, side by side (`python -m tools.bench batched`).

    python -m tools.bench batched --device cpu             # CPU: 8 runs of the demonstration's MLP pair, 2 epochs
    python -m tools.bench batched --runs 64 --device cuda  # one GPU: also TFLOP/s, memory per run, largest R
    python -m tools.bench batched --agreement sweeps/batched-check   # 80 epochs: batched runs against train.py's

The runs are the Fashion-MNIST demonstration's (tools/fmnist.py: BASE: two MLPs on 7,200 images, 720 for
validation, 10,000 for test), R of them differing in lr and seed, for --epochs epochs each. tools.batched
trains them in one process; tools.sweep.run_jobs trains the same runs as train.py processes, --jobs at a time.
Both are timed from the command to the last summary.json, start-up and data loading included, so the figures
are what a user waits for. FLOPs are counted from the model's shapes: forward 2 x (768 x 512 + 512 x 512 + 512
x 10) multiply-adds per image and model, training 3x forward, evaluation on the validation and test images
every epoch.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import torch

from tools import batched, fmnist, sweep
from tools.stats import fmt, interval, mean_std
from training import config
from training.errors import Parser, UserError, one_line

FORWARD = 2 * (768 * 512 + 512 * 512 + 512 * 10)  # FLOPs of one MLP on one image (AdaptiveAvgPool2d aside)
TRAIN, EVAL = 7200, 720 + 10000  # the demonstration's training images; validation and test images
FP32_PEAK = {"H100": 67e12, "H200": 67e12}  # dense float32 (no tensor cores), NVIDIA's data sheets


# perf_suite.py's stand-in for Fashion-MNIST where its files are not installed: as many images, the same FLOPs
SYNTHETIC = ["--dataset", "synthetic", "--synthetic-size", "8000", "--synthetic-test-size", "10000",
             "--synthetic-classes", "10"]


def jobs(out, runs, epochs, data_dir, device, data=None, extra=()):
    """R of the demonstration's runs (CMD-P, MyLC), lrs 0.025..0.1 and seeds 0, 1, ..., for `epochs` epochs.
    data: the data's flags (default: Fashion-MNIST in data_dir); extra: flags after the demonstration's."""
    lrs = (0.025, 0.035, 0.05, 0.07, 0.1)
    data = data or ["--dataset", "fashionmnist", "--data-dir", data_dir]
    todo = []
    for i in range(runs):
        lr, seed = lrs[i % len(lrs)], i // len(lrs)
        key = (data + fmnist.BASE +
               ["--mode", "progressive", "--lc", "mylc", "--lr", f"{lr:g}", "--seed", str(seed), "--epochs",
                str(epochs), "--milestones", str(epochs), "--device", device, "--workers", "0", "--amp", "off",
                *extra])
        d = os.path.join(out, f"run{i}")
        todo.append(dict(name=f"run{i}", dir=d, key=key, argv=key + ["--out", d]))
    return todo


def timed(fn):
    t0 = time.perf_counter()
    failed = fn()
    if failed:
        raise UserError(f"runs failed: {failed}")
    return time.perf_counter() - t0


def agreement(out, pack, rate=0.4, rows=("zero", "cmdp")):
    """Lines of a markdown table: the attribution report's rows (tools/fmnist.py, at the 40% published
    choices) trained by tools.batched into OUT against the same runs trained by train.py (the raw data, pack):
    final test accuracy over seeds, the paired difference with its 95% t-interval, the largest per-seed gap,
    and epoch 1's training loss (mean of A and B) as the one-step contract sees it."""
    mine, theirs = fmnist.load_dir(fmnist.ATTRIBUTION.folder(out, rate)), fmnist.read_raw(pack, rate)
    lines = ["| row | train.py | tools.batched | batched − train.py (95% t) | largest per-seed gap | epoch 1 loss, "
             "largest relative gap |", "|---|---|---|---|---|---|"]
    for row in rows:
        names = sorted(n for n in mine if n.startswith(f"report/{row}-") and n in theirs)
        if not names:
            continue
        a = [theirs[n]["rows"][-1]["test_acc_mean"] for n in names]
        b = [mine[n]["rows"][-1]["test_acc_mean"] for n in names]
        m, ci = interval([y - x for x, y in zip(a, b)])
        loss = [(mine[n]["rows"][0][f"train_loss_{k}"], theirs[n]["rows"][0][f"train_loss_{k}"]) for n in names
                for k in "ab"]
        lines.append(f"| {fmnist.ATTRIBUTION.rows[row][0]} ({names[0].split('-')[1]}, n={len(names)}) | "
                     f"{fmt(*mean_std(a)[:2])} | {fmt(*mean_std(b)[:2])} | {m:+.2f}" +
                     ("" if ci is None else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]") +
                     f" | {max(abs(y - x) for x, y in zip(a, b)):.2f} | {max(abs(u / v - 1) for u, v in loss):.1e} |")
    return lines


@one_line("bench batched")
def main(argv=None):
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=8, help="R, the runs (default 8)")
    p.add_argument("--epochs", type=int, default=2, help="epochs of each run (default 2)")
    p.add_argument("--jobs", type=int, default=2, help="train.py processes at a time for the comparison (default 2)")
    config.add_device_flag(p)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist", help="the four Fashion-MNIST IDX files")
    p.add_argument("--skip-processes", action="store_true", help="time only the batched runs")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--agreement", metavar="OUT", help="instead: the table of agreement of the runs tools.batched "
                   "trained into OUT (python -m tools.fmnist attribution report --rate 0.4 --published-choice --rows "
                   "zero,cmdp --batched --out OUT) with train.py's runs in --pack")
    p.add_argument("--pack", default="docs/fmnist/runs.jsonl.gz", help="train.py's runs, for --agreement")
    args = p.parse_args(argv)
    if args.agreement:
        print("\n".join(agreement(args.agreement, args.pack)))
        return 0
    if args.runs < 1 or args.epochs < 1 or args.jobs < 1:
        p.error("--runs, --epochs and --jobs must be at least 1")
    if not os.path.isdir(args.data_dir):
        p.error(f"--data-dir {args.data_dir} not found: apt-get install dataset-fashion-mnist, or give the folder")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error(config.NO_CUDA)
    args.device = config.pick_device(args.device).type
    cuda = args.device == "cuda"
    tmp = tempfile.mkdtemp(prefix="bench-batched-")
    try:
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        one = timed(lambda: batched.run_jobs(jobs(os.path.join(tmp, "b"), args.runs, args.epochs, args.data_dir,
                                                  args.device), args.device, log=lambda *_: None))
        peak = torch.cuda.max_memory_allocated() / 2 ** 30 if cuda else None
        many = None if args.skip_processes else timed(lambda: sweep.run_jobs(
            jobs(os.path.join(tmp, "p"), args.runs, args.epochs, args.data_dir, args.device), jobs=args.jobs))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    flop = args.runs * args.epochs * 2 * FORWARD * (3 * TRAIN + EVAL)
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    peak_flops = next((v for k, v in FP32_PEAK.items() if k in name), None)
    fig = dict(device=name, torch=torch.__version__, threads=torch.get_num_threads(), runs=args.runs,
               epochs=args.epochs, jobs=args.jobs, date=time.strftime("%Y-%m-%d"),
               command="python -m tools.bench batched " + " ".join(argv if argv is not None else sys.argv[2:]),
               batched_s=round(one, 1), batched_runs_per_s=args.runs / one,
               batched_tflops=flop / one / 1e12, processes_s=None if many is None else round(many, 1),
               processes_runs_per_s=None if many is None else args.runs / many,
               speedup=None if many is None else many / one,
               peak_gib_per_run=None if peak is None else peak / args.runs,
               fraction_of_fp32_peak=None if peak_flops is None else flop / one / peak_flops)
    print(f"{args.runs} runs x {args.epochs} epochs on {name}: batched {one:.1f} s "
          f"({fig['batched_runs_per_s'] * args.epochs:.3f} run-epochs/s, {fig['batched_tflops']:.3f} TFLOP/s)" +
          ("" if many is None else f"; {args.jobs} train.py processes at a time {many:.1f} s: "
                                   f"batched is {fig['speedup']:.2f}x") +
          ("" if peak is None else f"; peak {fig['peak_gib_per_run']:.3f} GiB per run"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(fig, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
