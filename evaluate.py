"""Test accuracy of trained models (the number of the paper's tables, §4): each model, their mean, their ensemble.

    python evaluate.py runs/smoke                                 # a run's final models on its own test sets
    python evaluate.py runs/food --data-dir /mnt/data             # the same data, found somewhere else
    python evaluate.py --weights A.pt --weights B.pt --arch resnet34 --dataset cifar100 --data-dir data
    python evaluate.py runs/fold0 --probs fold0.npz               # and each model's probabilities on its training set

A run directory gives the models (model_a.pt, model_b.pt, ... and weights.json, written by train.py
at the end of a run) and the data settings (its config.json); --dataset, --data-dir and
--image-size replace the latter. --weights FILE, once per model, with --arch NAME or one NAME
per file evaluates any state_dicts; the data then come from train.py's data flags, which
evaluate.py passes on (--dataset, --data-dir, --image-size, --seed, --synthetic-*, ...), at
train.py's defaults where not given.

The data come from training/build.py's load_data and eval_batches (train.py's), the accuracies from report.py's
evaluate: for a run directory, the numbers equal the run's final test accuracies.
Weights load with torch.load(weights_only=True): nothing is unpickled.

--probs FILE (a run directory only) writes, for every sample of the run's training set as --subset and --val-split
keep it (those --train-indices held out of training too): index (into the dataset's training set), given (the label
the run drew for it), clean (the dataset's), trained (whether the run trained on it) and probs, each model's
eval-mode softmax (M, N, K) float32: the out-of-sample probabilities a label-cleaning tool (cleanlab) reads.

main -- parse, load the models and the test sets, print one line per test set, return the accuracies
         (output that cannot be written, e.g. `> out.txt` on a full disk: one line, exit code 2)
"""
import argparse
import os
import re
import sys

import numpy as np
import torch

import models
from mutual import NAMES
from training import build, config, datasets, runfiles
from training.batches import Placement
from training.errors import Parser, UserError, one_line
from training.report import evaluate


def get_args(argv):
    p = Parser(command="python evaluate.py",
               description=__doc__.split("\n")[0] + " RUN_DIR: a train.py run directory (its --out).",
               usage="python evaluate.py RUN_DIR [options] | --weights FILE [--weights FILE] --arch NAME [train.py "
                     "data flags]")
    p.add_argument("--weights", action="append", metavar="FILE",
                   help="a model's state_dict (.pt); once per model (instead of a run directory)")
    p.add_argument("--arch", help="with --weights: NAME, or one NAME per file (NAME_A,NAME_B)")
    p.add_argument("--dataset", choices=datasets.DATASETS, help="default: the run's")
    p.add_argument("--data-dir", help="default: the run's")
    p.add_argument("--image-size", type=int, help="default: the run's")
    config.add_device_flag(p)
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                   help="DataLoader workers for datasets read from files")
    p.add_argument("--probs", metavar="FILE", help="with a run directory: write each model's probabilities on the "
                                                   "run's training set to FILE (.npz; see above)")
    argv = sys.argv[1:] if argv is None else list(argv)
    run = argv.pop(0) if argv and not argv[0].startswith("-") else None  # first, so that no flag value is taken
    args, rest = p.parse_known_args(argv)
    args.run = run
    if (args.run is None) == (args.weights is None):
        raise UserError("give a run directory or --weights FILE (with --arch), not both or neither")
    if args.weights and (args.arch is None or len(args.weights) > len(NAMES)):
        raise UserError(f"--weights takes 1 to {len(NAMES)} files and needs --arch NAME (or one NAME per file)")
    if args.workers < 0 or (args.image_size is not None and args.image_size < 1):
        raise UserError("--workers must be at least 0 and --image-size at least 1")
    if args.probs is not None and args.run is None:
        raise UserError("--probs needs a run directory: the training set, its labels and which samples trained are "
                        "the run's")
    if args.probs is not None and not os.path.isdir(os.path.dirname(os.path.abspath(args.probs))):
        raise UserError(f"--probs {args.probs}: its folder does not exist; create it, or choose another path")
    if rest and args.run is not None:
        raise UserError(f"unrecognized arguments: {' '.join(rest)}; a run's own config.json sets its data, "
                        f"only --dataset, --data-dir and --image-size replace it")
    return args, rest


def settings(args, rest):
    """(data settings as train.py's flags, [(weights file, arch)], number of classes or None, amp of the run)."""
    given = {k: v for k, v in (("dataset", args.dataset), ("data_dir", args.data_dir),
                               ("image_size", args.image_size)) if v is not None}
    if args.weights:
        archs = args.arch.split(",")
        if len(archs) != len(args.weights) and len(archs) != 1:
            raise UserError(f"--arch {args.arch} names {len(archs)} architectures for {len(args.weights)} "
                            f"--weights files")
        if any(a not in models.ARCHS for a in archs):
            raise UserError(f"unknown architecture in --arch {args.arch}; choose from {', '.join(models.ARCHS)}")
        flags = vars(config.get_args(rest))  # train.py's data flags, at its defaults where not given
        return argparse.Namespace(**{**flags, **given}), list(zip(args.weights, archs * len(args.weights))), None, "auto"
    if os.path.isfile(args.run):
        raise UserError(f"{args.run} is a file, not a run folder: give train.py's --out, or pass --weights {args.run} "
                        "--arch NAME for a weights file")
    if not os.path.isdir(args.run):
        raise UserError(f"{args.run} does not exist; check the path")
    try:
        run, info = runfiles.read_json(args.run, "config.json"), runfiles.read_json(args.run, "weights.json")
    except (OSError, ValueError) as e:
        raise UserError(f"{args.run} holds no finished run with weights (config.json and weights.json: "
                        f"{type(e).__name__}); train it to the end (--resume), or pass --weights FILE --arch NAME")
    pairs = [(os.path.join(args.run, info[f"model_{k}"]["file"]), info[f"model_{k}"]["arch"])
             for k in NAMES if f"model_{k}" in info]
    return argparse.Namespace(**{**run, **given}), pairs, info["num_classes"], run.get("amp", "auto")


def load_model(path, arch, num_classes, device):
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        net = models.build_model(arch, num_classes)
        net.load_state_dict(state)
    except FileNotFoundError:
        raise UserError(f"weights file {path} not found")
    except Exception as e:  # not a state_dict, a pickle we refuse, or weights of another arch or class count
        lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in str(e).splitlines() if ln.strip()]
        why = next((ln for ln in lines if not ln.endswith(":")), "")[:200]  # load_state_dict's first finding
        raise UserError(f"{path} is not a state_dict of {arch} with {num_classes} classes ({type(e).__name__}: {why})")
    fmt = torch.channels_last if device.type == "cuda" else torch.contiguous_format
    return net.to(device, memory_format=fmt).eval(), fmt


def given_labels(run, data, d, train, keep):
    """The labels the run drew for every kept training sample (build.given_labels, as train.py drew them before any
    --train-indices chose among them), checked against those its noisy_labels.npy says it trained on."""
    given = build.given_labels(data, d, train, keep)
    trained = given[trained_rows(run, keep)]
    ran = np.load(os.path.join(run, "noisy_labels.npy"), allow_pickle=False)
    if not np.array_equal(ran, trained):
        raise UserError(f"the labels drawn here for {run}'s training set are not its noisy_labels.npy; give the data "
                        f"it trained on (--data-dir)")
    return given


def trained_rows(run, keep):
    """Which of the kept samples the run trained on: all, or those of its train_indices.npy (--train-indices)."""
    path = os.path.join(run, "train_indices.npy")
    return np.isin(keep, np.load(path, allow_pickle=False)) if os.path.exists(path) else np.ones(len(keep), bool)


def probabilities(nets, batches, autocast):
    """Each model's softmax on every sample of batches, in order: (M, N, K) float32."""
    with torch.no_grad(), torch.autocast(**autocast):
        out = [torch.stack([torch.softmax(net(x).float(), -1) for net in nets]).cpu() for x, _, _ in
               batches.epoch(0, 0)]
    return torch.cat(out, 1).numpy()


def write_probs(path, run, keep, given, clean, probs):
    """--probs: the .npz, whole or not at all."""
    try:
        with runfiles.replacing(path, "wb") as f:
            np.savez(f, index=keep, given=given, clean=np.asarray(clean), trained=trained_rows(run, keep), probs=probs)
    except runfiles.WriteError as failed:
        raise UserError(f"{failed}; {failed.fix}, then run it again") from None


@one_line("evaluate.py")
def main(argv=None):
    args, rest = get_args(argv)
    data, pairs, num_classes, amp = settings(args, rest)
    device = build.pick_device(args.device)
    d, train, tests, keep = build.load_data(data)
    if num_classes is not None and num_classes != d.num_classes:
        raise UserError(f"the models have {num_classes} classes, {data.dataset} at {data.data_dir} has "
                        f"{d.num_classes}; give the dataset they were trained on")
    nets = [load_model(path, arch, d.num_classes, device) for path, arch in pairs]
    fmt = nets[0][1]
    nets = [n for n, _ in nets]
    # the run's precision on CUDA (auto: bf16, as train.py), none on the CPU (as train.py's auto)
    amp = "off" if device.type == "cpu" else {"auto": "bf16"}.get(amp, amp)
    autocast = dict(device_type=device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16,
                    enabled=amp != "off")
    evals = build.eval_batches(d, tests, Placement(device, workers=args.workers, memory_format=fmt))
    acc = evaluate(nets, evals, autocast, device)
    if args.probs is not None:
        given = given_labels(args.run, data, d, train, keep)
        held = build.eval_batches(d, {"train": train}, Placement(device, workers=args.workers, memory_format=fmt))
        write_probs(args.probs, args.run, keep, given, train.labels, probabilities(nets, held["train"], autocast))
    try:
        with runfiles.checked_stdout():  # a full disk under `> file` is one line here, not a traceback at exit
            for name in tests:
                p = "test" if name == next(iter(tests)) else name
                models_part = (" ".join(f"{x.upper()} {acc[f'{p}_acc_{x}']:.2f}" for x in NAMES[:len(nets)]) +
                               f" mean {acc[f'{p}_acc_mean']:.2f} ensemble {acc[f'{p}_acc_ens']:.2f}" if len(nets) > 1
                               else f"{acc[f'{p}_acc_a']:.2f}")
                print(f"{name} ({len(tests[name].labels)} images): {models_part}")
    except runfiles.WriteError as failed:
        raise UserError(f"{failed}; evaluate.py writes nothing else; {failed.fix}, then run it again") from None
    return acc


if __name__ == "__main__":
    main()
