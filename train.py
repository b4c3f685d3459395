"""Train two models together with CMD (the whole paper: §3 method, §4 experiments, appendix C settings).

    python train.py --dataset cifar100 --noise sym --rate 0.4 --mode progressive

Reads top to bottom: arguments, presets, data, models, the training step, the
loop, the report. Each step, A and B see the same batch; each builds its own
target q_tilde by self label correction (label_correction.py); B's target trains
A only where H(p_B) < chi (Eq. 3) and A's trains B only where H(p_A) < chi
(Eq. 4), with chi from Eq. 7 (schedule.py). Everything a run writes goes in
--out: config.json, noisy_labels.npy, metrics.jsonl, summary.json, checkpoint.pt.

Multi-GPU: torchrun --nproc_per_node=N train.py ... shards every batch over the
ranks with DistributedDataParallel (NCCL on CUDA, gloo on CPU).
"""
import argparse
import json
import math
import os
import sys
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

import data
import models
from label_correction import boot_soft, label_smoothing, mylc, one_hot, proselflc, tfkd_reg_loss
from losses import cmd_distill, cmd_objectives, kdcl_loss, log_probs, mkd_loss, soft_cross_entropy
from noise import add_noise
from schedule import chi as chi_schedule

MODES = ("zero", "all", "static", "progressive", "mkd", "kdcl")
LCS = ("ce", "ls", "cp", "bootsoft", "proselflc", "mylc", "tfkd")
REAL_NOISE = ("food101", "webvision")
# eta, b per knowledge mode. The paper gives no exact values (READING-NOTES 5); Table 5 and
# Fig. 3 show larger eta and smaller b do better, so CMD-S takes Table 5's best eta = 4 and CMD-P
# lets chi fall (b = -5) from 1.85x to 0.15x that static value. all: eta = 1 is Table 5's "H(u)"
# row, which equals Table 1's "All" column.
MODE_ETA_B = {"zero": (math.inf, 0.0), "all": (1.0, 0.0), "static": (4.0, 0.0), "progressive": (4.0, -5.0)}
DEFAULT_ARCH = {"cifar100": "resnet34", "food101": "resnet50_imagenet", "webvision": "inception_resnet_v2",
                "folder": "resnet18", "synthetic": "cnn"}
RUN_CONTROL = ("device", "workers", "out", "resume", "compile", "amp", "log_every", "data_dir")  # may change on --resume


PRESETS_HELP = """optimisation presets (appendix C; any flag given overrides its entry):
  cifar100 + resnet34 (and other archs)   100 epochs, lr 0.1, /10 at 50 and 80, batch 128, SGD 0.9, wd 5e-4
  cifar100 + resnet18 / shufflenetv2      200 epochs, lr 0.1, /5 at 60, 120, 160, batch 128, SGD 0.9, wd 5e-4
  cifar100 + resnet50 (CDR's settings)    200 epochs, lr 0.01, /10 at 40 and 80, batch 64, SGD 0.9, wd 1e-3
  food101                                 100 epochs, lr 0.01, /10 at 50 and 80, batch 32, SGD 0.9, wd 5e-4
  webvision                               80 epochs, lr 0.01, /10 once at 40, batch 32, SGD 0.9, wd 5e-4
                                          (literal reading, /10 every epoch after 40: --milestones 40,41,...,79)
  cnn (not in the paper)                  20 epochs, lr 0.05, /10 at 10 and 15, batch 128, SGD 0.9, wd 5e-4"""


class Help(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    def _get_help_string(self, action):  # show "(default: x)" only where the default is fixed
        if action.default is None or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        fail(f"{message} (see python train.py --help)")


def fail(message):
    """Bad input: one line on stderr, exit 2, nothing written."""
    print(f"train.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def floats(text):
    return [float(v) for v in text.split(",") if v]


def ints(text):
    return [int(v) for v in text.split(",") if v]


def get_args(argv):
    p = Parser(description=__doc__.split("\n")[0], formatter_class=Help, epilog=PRESETS_HELP)
    g = p.add_argument_group("data and noise")
    g.add_argument("--dataset", choices=data.DATASETS, default="cifar100")
    g.add_argument("--data-dir", default="data", help="dataset root; cifar100 downloads here on first use")
    g.add_argument("--image-size", type=int, help="resize/crop size (default: the dataset's own, 32/224/299)")
    g.add_argument("--subset", type=int, help="train on N samples drawn with --seed")
    g.add_argument("--noise", choices=("none", "sym", "pair"),
                   help="synthetic label noise (default: sym, or none for food101/webvision, whose labels are noisy)")
    g.add_argument("--rate", type=float, help="noise rate r in [0, 1) (default 0.4 with --noise sym/pair)")
    g.add_argument("--val-split", type=float, default=0.0,
                   help="hold out this clean fraction of the training set as 'val' (the paper searches with 0.1)")
    g.add_argument("--synthetic-size", type=int, default=2000, help="synthetic: training images")
    g.add_argument("--synthetic-test-size", type=int, default=1000, help="synthetic: test images")
    g.add_argument("--synthetic-classes", type=int, default=10, help="synthetic: number of classes K")
    g.add_argument("--synthetic-difficulty", type=float, default=2.0,
                   help="synthetic: clutter std over class-signal std (2: a small CNN reaches ~80%% clean)")

    g = p.add_argument_group("method")
    g.add_argument("--mode", choices=MODES, default="progressive",
                   help="knowledge selection: zero (eta=inf), all (eta=1), static CMD-S (eta=4, b=0), "
                        "progressive CMD-P (eta=4, b=-5); mkd = Deep Mutual Learning (Eq. 2); kdcl = KDCL-MinLogit")
    g.add_argument("--eta", type=float, help="eta in Eq. 7; inf or < 0 = zero knowledge, (0, 1] = all (default per mode)")
    g.add_argument("--b", type=float, help="b in Eq. 7; 0 static, > 0 chi rises, < 0 chi falls (default per mode)")
    g.add_argument("--lc", choices=LCS, help="self label correction of each model (default mylc; ce for mkd/kdcl)")
    g.add_argument("--ls-eps", type=float, default=0.25, help="LS eps")
    g.add_argument("--cp-beta", type=float, default=0.25, help="CP beta in H(q,p) - beta H(p)")
    g.add_argument("--bootsoft-eps", type=float, default=0.25, help="Boot-soft eps")
    g.add_argument("--proselflc-b", type=float, default=6.0, help="ProSelfLC slope B of s(t/Gamma - transit, B)")
    g.add_argument("--proselflc-transit", type=float, default=0.3, help="ProSelfLC transit point in t/Gamma")
    g.add_argument("--mylc-b1", type=float, default=10.0, help="MyLC b1 in s(r - rho, b1) (Eq. 8)")
    g.add_argument("--mylc-rho", type=float, default=0.5, help="MyLC rho (paper: 0.5)")
    g.add_argument("--tfkd-a", type=float, default=0.99, help="Tf-KD_reg: teacher probability on the label")
    g.add_argument("--tfkd-t", type=float, default=20.0, help="Tf-KD_reg: temperature T")
    g.add_argument("--tfkd-alpha", type=float, default=0.1, help="Tf-KD_reg: weight alpha of the KL term")
    g.add_argument("--tfkd-multiplier", type=float, default=100.0, help="Tf-KD_reg: multiplier of the KL term")
    g.add_argument("--mkd-eps", type=float, default=0.5, help="mkd: eps in Eq. 2 (0.5 = DML's CE + KL, halved)")
    g.add_argument("--kdcl-t", type=float, default=2.0, help="kdcl: temperature T")
    g.add_argument("--kdcl-lambda", type=float, default=1.0, help="kdcl: weight of the KL term")

    g = p.add_argument_group("models and optimisation (defaults: the presets below, per dataset and arch)")
    g.add_argument("--arch", help=f"NAME or NAME_A,NAME_B from {', '.join(models.ARCHS)} "
                                  "(default resnet34 on cifar100, resnet50_imagenet on food101, "
                                  "inception_resnet_v2 on webvision, resnet18 on folder, cnn on synthetic)")
    g.add_argument("--pretrained", action=argparse.BooleanOptionalAction,
                   help="ImageNet weights for resnet50_imagenet (default: on for food101)")
    g.add_argument("--epochs", type=int, help="Gamma, total epochs")
    g.add_argument("--batch-size", type=int)
    g.add_argument("--lr", type=float)
    g.add_argument("--milestones", type=ints, help="epochs where lr is multiplied by --gamma, e.g. 50,80")
    g.add_argument("--gamma", type=float)
    g.add_argument("--momentum", type=float)
    g.add_argument("--weight-decay", type=float)

    g = p.add_argument_group("run control")
    g.add_argument("--seed", type=int, default=0, help="seeds noise, split, init, batch order, augmentation")
    g.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    g.add_argument("--amp", choices=("auto", "bf16", "fp16", "off"), default="auto",
                   help="autocast precision (auto: bf16 on CUDA, off on CPU)")
    g.add_argument("--compile", action="store_true", help="torch.compile both models")
    g.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                   help="DataLoader workers for datasets read from disk")
    g.add_argument("--out", help="run directory (default runs/<dataset>-<noise><rate>-<mode>-<lc>-<arch>-s<seed>)")
    g.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    g.add_argument("--log-every", type=int, default=0, help="progress line every N steps (0: ten per long epoch)")
    return p.parse_args(argv)


def preset(dataset, arch):
    """Appendix C's optimisation settings. Where it is ambiguous the choice is stated here."""
    if dataset == "food101":  # 90/10 split in the paper is --val-split 0.1
        return dict(epochs=100, batch_size=32, lr=0.01, milestones=[50, 80], gamma=0.1, momentum=0.9, weight_decay=5e-4)
    if dataset == "webvision":  # "divided by 10 in each epoch after the 40th": read as one /10 at 40
        return dict(epochs=80, batch_size=32, lr=0.01, milestones=[40], gamma=0.1, momentum=0.9, weight_decay=5e-4)
    if arch == "resnet50":  # "the same settings as CDR" (Xia et al. 2021), from CDR's public code
        return dict(epochs=200, batch_size=64, lr=0.01, milestones=[40, 80], gamma=0.1, momentum=0.9, weight_decay=1e-3)
    if arch in ("resnet18", "shufflenetv2"):  # "ShuffleNetV2 and ResNet28" read as ResNet18
        return dict(epochs=200, batch_size=128, lr=0.1, milestones=[60, 120, 160], gamma=0.2, momentum=0.9,
                    weight_decay=5e-4)
    if arch == "cnn":  # not in the paper: a short schedule for CPU runs
        return dict(epochs=20, batch_size=128, lr=0.05, milestones=[10, 15], gamma=0.1, momentum=0.9,
                    weight_decay=5e-4)
    return dict(epochs=100, batch_size=128, lr=0.1, milestones=[50, 80], gamma=0.1, momentum=0.9, weight_decay=5e-4)


def resolve(args):
    """Fill every unset flag from the presets; refuse contradictions instead of overwriting them."""
    if args.rate is not None and not 0 <= args.rate < 1:
        fail(f"--rate must be in [0, 1), got {args.rate}")
    if args.eta == 0:
        fail("--eta 0 makes chi = H(u)/eta undefined; use --mode zero (eta = inf) or --mode all (eta = 1)")
    if args.mode in ("zero", "all") and (args.eta is not None or args.b is not None):
        fail(f"--mode {args.mode} sets eta itself; use --mode static or progressive to choose --eta/--b")
    if args.mode in ("mkd", "kdcl"):
        if args.lc not in (None, "ce") or args.eta is not None or args.b is not None:
            fail(f"--mode {args.mode} trains on the given labels (no --lc, --eta, --b); "
                 "use zero/all/static/progressive for those")
        args.lc = "ce"
    eta, b = MODE_ETA_B.get(args.mode, (None, None))
    args.eta = eta if args.eta is None else args.eta
    args.b = b if args.b is None else args.b
    args.lc = args.lc or "mylc"
    if args.noise is None:
        args.noise = "none" if args.dataset in REAL_NOISE else "sym"
    elif args.noise != "none" and args.dataset in REAL_NOISE:
        warnings.warn(f"{args.dataset} labels are already noisy; adding {args.noise} noise on top", stacklevel=2)
    if args.rate is None:
        args.rate = 0.0 if args.noise == "none" else 0.4
    if args.noise == "none" and args.rate > 0:
        fail(f"--rate {args.rate} given with --noise none; choose --noise sym or pair")
    args.arch = args.arch or DEFAULT_ARCH[args.dataset]
    archs = args.arch.split(",")
    if len(archs) == 1:
        archs = archs * 2
    for a in archs:
        if a not in models.ARCHS or len(archs) != 2:
            fail(f"unknown architecture '{args.arch}'; choose NAME or NAME_A,NAME_B from {', '.join(models.ARCHS)}")
    args.arch = ",".join(archs)
    if args.pretrained is None:
        args.pretrained = args.dataset == "food101" and archs[0] == "resnet50_imagenet"
    for k, v in preset(args.dataset, archs[0]).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    for name in ("epochs", "batch_size"):
        if getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 <= args.val_split < 1:
        fail(f"--val-split must be in [0, 1), got {args.val_split}")
    if args.out is None:
        tag = "none" if args.noise == "none" else f"{args.noise}{args.rate:g}"
        arch_tag = archs[0] if archs[0] == archs[1] else "+".join(archs)
        args.out = os.path.join("runs", f"{args.dataset}-{tag}-{args.mode}-{args.lc}-{arch_tag}-s{args.seed}")
    return args


# ---------------------------------------------------------------- training step

def targets(lc, q, p, h, r, progress, args):
    """q_tilde for each lc (appendix "Label Correction"). CP and Tf-KD distil q (label_correction.py)."""
    if lc == "ls":
        return label_smoothing(q, args.ls_eps)
    if lc == "bootsoft":
        return boot_soft(q, p, args.bootsoft_eps)
    if lc == "proselflc":
        return proselflc(q, p, progress, args.proselflc_b, args.proselflc_transit, h=h)
    if lc == "mylc":
        return mylc(q, p, r, args.mylc_b1, args.mylc_rho, h=h)
    return q  # ce, cp, tfkd


def own_loss(lc, logits, logp, q, y, args):
    """L_selfKD of Eqs. 5-6 for the loss-type corrections."""
    if lc == "cp":  # H(q, p) - beta H(p), gradient through both
        return (soft_cross_entropy(q, logp) + args.cp_beta * (logp.exp() * logp).sum(-1)).mean()
    return tfkd_reg_loss(logits, y, args.tfkd_a, args.tfkd_t, args.tfkd_alpha, args.tfkd_multiplier)


def mutual_losses(za, zb, y, chi, r_a, r_b, progress, args):
    """Both models' losses for one batch. Returns loss_a, loss_b and diagnostics as device tensors.

    za, zb: (N, K) logits; y: (N,) given (noisy) labels; chi: float; r_*: MyLC confidences (0-dim).
    """
    num_classes = za.shape[-1]
    q = one_hot(y, num_classes)
    logp_a, h_a = log_probs(za)
    logp_b, h_b = log_probs(zb)
    p_a, p_b = logp_a.detach().exp(), logp_b.detach().exp()
    if args.mode == "mkd":
        loss_a, loss_b = mkd_loss(za, zb, q, args.mkd_eps)
    elif args.mode == "kdcl":
        loss_a, loss_b = kdcl_loss(za, zb, y, args.kdcl_t, args.kdcl_lambda)
    if args.mode in ("mkd", "kdcl"):  # all knowledge: the peer's prediction is the distilled target
        ones = torch.ones_like(h_a)
        return loss_a, loss_b, dict(h_a=h_a, h_b=h_b, m_b2a=ones, m_a2b=ones, t_b2a=p_b, t_a2b=p_a)
    qt_a = targets(args.lc, q, p_a, h_a, r_a, progress, args)
    qt_b = targets(args.lc, q, p_b, h_b, r_b, progress, args)
    if args.lc in ("cp", "tfkd"):
        b2a, a2b, m_b2a, m_a2b = cmd_distill(logp_a, logp_b, qt_a, qt_b, h_a, h_b, chi)
        loss_a = own_loss(args.lc, za, logp_a, q, y, args) + b2a
        loss_b = own_loss(args.lc, zb, logp_b, q, y, args) + a2b
    else:  # Eqs. 5-6 in one pass per model
        loss_a, loss_b, m_b2a, m_a2b = cmd_objectives(logp_a, logp_b, qt_a, qt_b, h_a, h_b, chi)
    return loss_a, loss_b, dict(h_a=h_a, h_b=h_b, m_b2a=m_b2a, m_a2b=m_a2b, t_b2a=qt_b, t_a2b=qt_a)


STATS = 13  # the sums train_step returns, in this order:
# samples, loss_a*n, loss_b*n, selected b2a, selected a2b, selected-and-clean b2a, a2b,
# noisy samples, noisy predicted as their label by A, by B, sum H(p_A), sum H(p_B), non-finite loss


def train_step(nets, opts, scaler, autocast, x, y, y_clean, chi, r, progress, args):
    """One mutual step of A and B on the batch x: forward, Eqs. 5-6, backward, SGD.

    Returns a (STATS,) tensor of sums for the epoch's metrics. Nothing here waits for the
    device: chi and progress are Python floats, r and the statistics stay on the device.
    """
    with torch.autocast(**autocast):
        za, zb = nets[0](x), nets[1](x)
    loss_a, loss_b, diag = mutual_losses(za, zb, y, chi, r[0], r[1], progress, args)
    for o in opts:
        o.zero_grad(set_to_none=True)
    scaler.scale(loss_a + loss_b).backward()
    for o in opts:
        scaler.step(o)
    scaler.update()
    with torch.no_grad():
        n = torch.ones_like(diag["h_a"]).sum()  # len(y) as a device scalar, without a host copy
        noisy = (y != y_clean).float()
        return torch.stack([
            n, loss_a.detach() * n, loss_b.detach() * n,
            diag["m_b2a"].sum(), diag["m_a2b"].sum(),
            (diag["m_b2a"] * (diag["t_b2a"].argmax(-1) == y_clean)).sum(),
            (diag["m_a2b"] * (diag["t_a2b"].argmax(-1) == y_clean)).sum(),
            noisy.sum(), (noisy * (za.argmax(-1) == y)).sum(), (noisy * (zb.argmax(-1) == y)).sum(),
            diag["h_a"].sum(), diag["h_b"].sum(), (~torch.isfinite(loss_a + loss_b)).float()])


# ---------------------------------------------------------------- run setup

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


def prepare_out(args, config):
    """Refuse to mix two runs; on --resume, check the checkpoint belongs to this configuration."""
    ckpt_path = os.path.join(args.out, "checkpoint.pt")
    used = any(os.path.exists(os.path.join(args.out, f)) for f in ("config.json", "metrics.jsonl", "checkpoint.pt"))
    if used and not args.resume:
        fail(f"{args.out} already holds a run; pass --resume to continue it, or choose another --out")
    if not args.resume or not os.path.exists(ckpt_path):
        return None
    try:
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
        saved = ckpt["config"]
    except Exception as e:  # truncated file, not a checkpoint, or a pickle we refuse to run
        fail(f"cannot resume: {ckpt_path} is corrupt or not a CMD checkpoint ({type(e).__name__}); "
             f"delete it to start over")
    diff = sorted(k for k in config if k not in RUN_CONTROL and saved.get(k) != config[k])
    if diff:
        fail(f"cannot resume: {ckpt_path} was written with different settings ({', '.join(diff)}); "
             f"rerun with the same flags or another --out")
    return ckpt


def atomic_save(obj, path):
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)  # a kill -9 leaves either the old or the new checkpoint, never half of one


def main(argv=None):
    args = resolve(get_args(argv))
    rank, world, local_rank = setup_distributed()
    device = pick_device(args.device, local_rank)
    amp = {"auto": "bf16" if device.type == "cuda" else "off"}.get(args.amp, args.amp)
    config = {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v)) for k, v in vars(args).items()}
    config.update(amp=amp, world_size=world)
    ckpt = prepare_out(args, config)
    if world > 1:
        dist.barrier()  # every rank has checked --out before rank 0 writes into it
    log = print if rank == 0 else (lambda *a, **k: None)
    log("settings: " + " ".join(f"{k}={v}" for k, v in config.items()))

    # ------------------------------------------------------------ data
    try:
        d = data.load_dataset(args.dataset, args.data_dir, image_size=args.image_size, seed=args.seed,
                              synthetic_size=args.synthetic_size, synthetic_classes=args.synthetic_classes,
                              synthetic_test_size=args.synthetic_test_size,
                              synthetic_difficulty=args.synthetic_difficulty)
    except data.DataError as e:
        fail(str(e))
    num_classes, train = d.num_classes, d.train
    rng = np.random.default_rng(args.seed)
    keep = np.arange(len(train.labels))
    if args.subset:
        if not 0 < args.subset <= len(keep):
            fail(f"--subset {args.subset} must be between 1 and the {len(keep)} training samples")
        keep = np.sort(rng.choice(keep, args.subset, replace=False))
    tests = dict(d.tests)
    if args.val_split > 0:  # the paper's clean validation split for hyperparameter search
        perm = rng.permutation(keep)
        n_val = max(1, int(round(args.val_split * len(keep))))
        tests["val"] = data.take(train, np.sort(perm[:n_val]))
        keep = np.sort(perm[n_val:])
    train = data.take(train, keep)
    clean = train.labels
    labels_path = os.path.join(args.out, "noisy_labels.npy")
    if ckpt is not None:
        noisy = np.load(labels_path)
    else:
        noisy = add_noise(clean, args.noise, args.rate, num_classes, seed=args.seed)
    log(f"data: {args.dataset} train {len(clean)} ({num_classes} classes, realised noise "
        f"{np.mean(noisy != clean):.3f}) " + " ".join(f"{k} {len(v.labels)}" for k, v in tests.items()))
    known_clean = args.noise != "none"  # clean labels known: precision and memorisation can be measured

    # ------------------------------------------------------------ models
    torch.manual_seed(args.seed)
    arch_a, arch_b = args.arch.split(",")
    try:
        nets = [models.build_model(a, num_classes, pretrained=args.pretrained) for a in (arch_a, arch_b)]
    except (RuntimeError, ValueError) as e:
        fail(str(e).splitlines()[0])
    if rank == 0 and ckpt is None:  # inputs are valid: from here on the run writes into --out
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
        np.save(labels_path, noisy)
    fmt = torch.channels_last if device.type == "cuda" else torch.contiguous_format
    nets = [n.to(device, memory_format=fmt) for n in nets]
    opts = [torch.optim.SGD(n.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
            for n in nets]
    scheds = [torch.optim.lr_scheduler.MultiStepLR(o, args.milestones, args.gamma) for o in opts]
    scaler = torch.amp.GradScaler(device.type, enabled=amp == "fp16")
    r = [torch.zeros((), device=device), torch.zeros((), device=device)]  # MyLC r; 0 in epoch 0 (untrained)
    start_epoch = 0
    if ckpt is not None:
        for n, o, s, k in zip(nets, opts, scheds, "ab"):
            n.load_state_dict(ckpt[f"model_{k}"])
            o.load_state_dict(ckpt[f"opt_{k}"])
            s.load_state_dict(ckpt[f"sched_{k}"])
        r = [ckpt["r_a"].to(device), ckpt["r_b"].to(device)]
        start_epoch = ckpt["epoch"]
        torch.set_rng_state(ckpt["rng_cpu"])
        if device.type == "cuda" and "rng_cuda" in ckpt:
            torch.cuda.set_rng_state(ckpt["rng_cuda"], device)
        log(f"resumed from {args.out}/checkpoint.pt at epoch {start_epoch}")
    if world > 1:
        nets = [torch.nn.parallel.DistributedDataParallel(n, device_ids=[local_rank] if device.type == "cuda" else None)
                for n in nets]
    fwd = [torch.compile(n) for n in nets] if args.compile else nets
    autocast = dict(device_type=device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16,
                    enabled=amp != "off")

    batches = data.Batches(train, noisy, clean, args.batch_size, d.mean, d.std, device, rank, world,
                           args.workers, fmt)
    evals = {k: data.Batches(v, v.labels, v.labels, 500, d.mean, d.std, device, rank, world, args.workers, fmt,
                             train=False) for k, v in tests.items()}
    metrics_path = os.path.join(args.out, "metrics.jsonl")
    if rank == 0 and os.path.exists(metrics_path):  # --resume: drop lines written after the checkpoint
        with open(metrics_path) as f:
            lines = f.readlines()[:start_epoch]
        with open(metrics_path, "w") as f:
            f.writelines(lines)

    # ------------------------------------------------------------ loop
    t_run = time.time()
    steps = batches.steps()
    log_every = args.log_every or (steps // 10 if steps >= 100 else 0)
    for epoch in range(start_epoch, args.epochs):
        t0 = time.time()
        for n in nets:
            n.train()
        acc = torch.zeros(STATS, device=device)  # per-epoch sums, read once at the end of the epoch
        lr = opts[0].param_groups[0]["lr"]
        for i, (x, y, y_clean) in enumerate(batches.epoch(args.seed, epoch)):
            t = epoch + i / steps  # fractional epochs for Eq. 7 and ProSelfLC
            chi = chi_schedule(t, args.epochs, num_classes, args.eta, args.b) if args.eta is not None else math.nan
            acc += train_step(fwd, opts, scaler, autocast, x, y, y_clean, chi, r, t / args.epochs, args)
            if log_every and rank == 0 and (i + 1) % log_every == 0:
                print(f"  epoch {epoch:3d} step {i + 1}/{steps} {time.time() - t0:.1f}s", flush=True)
        if world > 1:
            dist.all_reduce(acc)
        s = acc.tolist()  # the one host sync of the epoch
        if s[12] > 0:
            fail(f"loss became NaN/inf in epoch {epoch}; kept the checkpoint of epoch {epoch}. "
                 f"Try a lower --lr or --amp off")
        for sc in scheds:
            sc.step()
        n = s[0]
        # MyLC's r for the next epoch: Eq. 8 over this epoch's training predictions
        r = [1 - acc[10] / (n * math.log(num_classes)), 1 - acc[11] / (n * math.log(num_classes))]
        results = evaluate(fwd, evals, autocast, device, world)
        chi_end = chi_schedule(epoch + 1, args.epochs, num_classes, args.eta, args.b) if args.eta is not None else None
        row = dict(epoch=epoch + 1, lr=lr, chi=chi_end, seconds=round(time.time() - t0, 3), train_samples=int(n),
                   train_loss_a=s[1] / n, train_loss_b=s[2] / n,
                   selected_b2a=s[3] / n, selected_a2b=s[4] / n,
                   precision_b2a=s[5] / s[3] if known_clean and s[3] else None,
                   precision_a2b=s[6] / s[4] if known_clean and s[4] else None,
                   memorized_a=s[8] / s[7] if known_clean and s[7] else None,
                   memorized_b=s[9] / s[7] if known_clean and s[7] else None,
                   confidence_a=1 - s[10] / (n * math.log(num_classes)),
                   confidence_b=1 - s[11] / (n * math.log(num_classes)), **results)
        if rank == 0:
            with open(metrics_path, "a") as f:
                f.write(json.dumps(row) + "\n")
            state = dict(config=config, epoch=epoch + 1, r_a=r[0].cpu(), r_b=r[1].cpu(), rng_cpu=torch.get_rng_state())
            if device.type == "cuda":
                state["rng_cuda"] = torch.cuda.get_rng_state(device)
            for net, o, sc, k in zip(nets, opts, scheds, "ab"):
                state[f"model_{k}"] = getattr(net, "module", net).state_dict()
                state[f"opt_{k}"], state[f"sched_{k}"] = o.state_dict(), sc.state_dict()
            atomic_save(state, os.path.join(args.out, "checkpoint.pt"))
            prec = " ".join(" -  " if v is None else f"{v:.2f}" for v in (row["precision_b2a"], row["precision_a2b"]))
            chi_txt = "  - " if chi_end is None else f"{chi_end:.2f}"
            print(f"epoch {epoch + 1:3d} | lr {lr:.4f} | chi {chi_txt} | "
                  f"sel b2a {row['selected_b2a']:.2f} a2b {row['selected_a2b']:.2f} | prec {prec} | "
                  f"test A {row['test_acc_a']:.1f} B {row['test_acc_b']:.1f} mean {row['test_acc_mean']:.1f} | "
                  f"{row['seconds']:.1f}s", flush=True)

    # ------------------------------------------------------------ report
    summary = {k: v for k, v in row.items() if k.endswith(("_acc_a", "_acc_b", "_acc_mean", "_acc_ens"))} \
        if start_epoch < args.epochs else last_summary(metrics_path)
    summary.update(epochs=args.epochs, seconds=round(time.time() - t_run, 1))
    if rank == 0:
        with open(os.path.join(args.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
        print("final: " + " ".join(f"{k} {v:.2f}" for k, v in summary.items() if k.endswith("_acc_mean")) +
              f" | {args.out}")
    if world > 1:
        dist.destroy_process_group()
    return summary


def last_summary(metrics_path):
    with open(metrics_path) as f:
        row = json.loads(f.readlines()[-1])
    return {k: v for k, v in row.items() if k.endswith(("_acc_a", "_acc_b", "_acc_mean", "_acc_ens"))}


@torch.no_grad()
def evaluate(nets, evals, autocast, device, world):
    """Top-1 accuracy (%) of A, B, their mean, and of the averaged probabilities, per test set."""
    for n in nets:
        n.eval()
    out = {}
    for name, batches in evals.items():
        c = torch.zeros(4, device=device)
        for x, y, _ in batches.epoch(0, 0):
            with torch.autocast(**autocast):
                za, zb = nets[0](x), nets[1](x)
            pa, pb = F.softmax(za.float(), -1), F.softmax(zb.float(), -1)
            c += torch.stack([(pa.argmax(-1) == y).sum(), (pb.argmax(-1) == y).sum(),
                              ((pa + pb).argmax(-1) == y).sum(), torch.tensor(len(y), device=device)]).float()
        if world > 1:
            dist.all_reduce(c)
        a, b, e, n = c.tolist()
        prefix = "test" if not out else name  # the first test set is "the" test set of the tables
        out.update({f"{prefix}_acc_a": 100 * a / n, f"{prefix}_acc_b": 100 * b / n,
                    f"{prefix}_acc_mean": 50 * (a + b) / n, f"{prefix}_acc_ens": 100 * e / n})
    return out


if __name__ == "__main__":
    main()
