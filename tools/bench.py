"""Measure what CMD costs on top of training two networks (README "Performance").

    python -m tools.bench                                   # CPU, small models, under a minute
    python -m tools.bench --arch resnet34 --device cuda     # the real figures
    python -m tools.bench batched                           # many runs in one process (tools/bench_batched.py)

loss_overhead -- time of cmd_loss + both label corrections (MyLC) on a batch of logits, forward and
                 backward, over the time of two plain F.cross_entropy calls on the same logits
step_ratio    -- one CMD mutual training step (both models: forward, backward, SGD) over two plain
                 cross-entropy steps of the same two models on the same batch; 1.00 is the floor
peers         -- the same for cohorts of N = 2, 3, 4 models (--peers): the cohort's step over N plain
                 cross-entropy steps, and the peak GPU memory of the cohort's step (CUDA only)
paper_ratio   -- the appendix's CMDWithLoss (appendix_code.paper_cmd_loss) over cmd_loss, same inputs
step_timing   -- the mutual step eager or under torch.compile: time to steady state, steady-state step
                 (perf_suite.py's compile figures)
replay_timing, graph_figures -- the step eager, with fused SGD, and replayed as one CUDA graph or compiled
                 whole (train.py --graph, training/graph.py): perf_suite.py's graph figures
throughput    -- training images per second of the mutual pair (each image counted once) with the
                 device-resident pipeline and with a torchvision DataLoader pipeline; on CUDA also
                 fp32 against bf16 + channels_last

Every figure is the median of --repeats timings after --warmup untimed runs. On CUDA the device is
synchronised only around each timed region.
"""
import argparse
import gc
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
import torchvision.transforms as T

import models
from appendix_code import paper_cmd_loss
from label_correction import mylc, one_hot
from losses import cmd_loss, log_probs
from mutual import Clock, Method, Precision, mutual_step
from training import config, datasets, graph
from training.batches import Batches, Placement, Spec
from training.errors import Parser, one_line

HALFWAY = Clock(epoch=5, batch=0, batches=1, epochs=10, seed=0)  # t/Γ = 0.5, where every step below is timed


@dataclass(frozen=True)
class Setup:
    """What the figures are measured on: main builds one from its flags, perf_suite.py from its sizes."""
    arch: str = "cnn"          # NAME or NAME_A,NAME_B (models.ARCHS)
    num_classes: int = 100
    batch_size: int = 128
    image_size: int = 32
    amp: str = "off"           # bf16 | off: the step's autocast
    rounds: int = 3            # interleaved rounds for step_ratio
    warmup: int = 3            # untimed runs before each timing
    repeats: int = 10          # timed runs; the figure is their median
    images: int = 2048         # synthetic training images for throughput
    epochs: int = 2            # timed epochs for throughput
    workers: int = 2           # DataLoader workers of the baseline pipeline


def timed(fn, device, warmup, repeats):
    """Median seconds of fn() over `repeats` runs after `warmup` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def loss_figures(setup, device):
    """loss_overhead and paper_ratio on random logits of shape (batch, classes)."""
    g = torch.Generator(device).manual_seed(0)
    n, k = setup.batch_size, setup.num_classes
    za = (3 * torch.randn(n, k, device=device, generator=g)).requires_grad_()
    zb = (3 * torch.randn(n, k, device=device, generator=g)).requires_grad_()
    y = torch.randint(0, k, (n,), device=device, generator=g)
    q = one_hot(y, k)
    r = torch.tensor(0.6, device=device)
    chi = math.log(k) / 2

    def plain():
        (F.cross_entropy(za, y) + F.cross_entropy(zb, y)).backward()

    def cmd():
        logp_a, h_a = log_probs(za)
        logp_b, h_b = log_probs(zb)
        qa = mylc(q, logp_a.detach().exp(), r, 10.0, h=h_a)
        qb = mylc(q, logp_b.detach().exp(), r, 10.0, h=h_b)
        b2a, a2b = cmd_loss(za, zb, qa, qb, chi)
        (b2a + a2b).backward()

    pa, pb = F.softmax(za.detach(), -1), F.softmax(zb.detach(), -1)

    def paper():
        paper_cmd_loss(q, q, pa, pb, chi)

    def ours():
        cmd_loss(za.detach(), zb.detach(), q, q, chi)

    t_plain = timed(plain, device, setup.warmup, setup.repeats)
    t_cmd = timed(cmd, device, setup.warmup, setup.repeats)
    t_paper = timed(paper, device, setup.warmup, setup.repeats)
    t_ours = timed(ours, device, setup.warmup, setup.repeats)
    return dict(loss_overhead=t_cmd / t_plain, paper_ratio=t_paper / t_ours,
                loss_ms=dict(plain_ce=1e3 * t_plain, cmd_with_mylc=1e3 * t_cmd, paper=1e3 * t_paper, cmd_loss=1e3 * t_ours))


def make_pair(setup, device, fmt, m=2):
    """m models (A and B by default) of --arch, with their SGD optimisers; the same weights for a seed."""
    torch.manual_seed(0)
    archs = setup.arch.split(",")
    archs = archs if len(archs) == m else archs[:1] * m
    nets = [models.build_model(a, setup.num_classes).to(device, memory_format=fmt) for a in archs]
    opts = [torch.optim.SGD(n.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4) for n in nets]
    return nets, opts


def step_figures(setup, device, m=2):
    """step_ratio: a CMD-P + MyLC mutual step of m models against m plain CE steps, same models, same batch;
    and, on CUDA, the peak memory of the mutual step."""
    fmt = torch.channels_last if device.type == "cuda" else torch.contiguous_format
    nets, opts = make_pair(setup, device, fmt, m)
    g = torch.Generator(device).manual_seed(1)
    x = torch.randn(setup.batch_size, 3, setup.image_size, setup.image_size, device=device,
                    generator=g).contiguous(memory_format=fmt)
    y = torch.randint(0, setup.num_classes, (setup.batch_size,), device=device, generator=g)
    method = Method(mode="progressive", lc="mylc")
    r = [torch.tensor(0.6, device=device)] * m
    autocast = dict(device_type=device.type, dtype=torch.bfloat16, enabled=setup.amp == "bf16")

    def ce_steps():  # the same step with plain CE in place of CMD, so only the loss differs
        with torch.autocast(**autocast):
            z = [net(x) for net in nets]
        loss = sum(F.cross_entropy(z_k.float(), y) for z_k in z)
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        for opt in opts:
            opt.step()

    scaler = torch.amp.GradScaler(device.type, enabled=False)

    def cmd_step():  # exactly the step train.py runs, epoch sums included
        mutual_step(nets, opts, (x, y, y), method, 1.0, r, HALFWAY, Precision(autocast, scaler))

    # Interleave the two so that drift in machine load hits both alike.
    ce, cmd = [], []
    for _ in range(setup.rounds):
        ce.append(timed(ce_steps, device, setup.warmup, setup.repeats))
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        cmd.append(timed(cmd_step, device, setup.warmup, setup.repeats))
    t_ce, t_cmd = statistics.median(ce), statistics.median(cmd)
    memory = torch.cuda.max_memory_allocated(device) / 2 ** 20 if device.type == "cuda" else None
    return dict(step_ratio=t_cmd / t_ce, step_ms=dict(two_ce_steps=1e3 * t_ce, cmd_step=1e3 * t_cmd),
                peak_memory_mib=memory)


def step_timing(setup, device, mode, warmup_steps=5):
    """(warmup_s, step_ms) of the CMD-P + MyLC mutual step on one fixed batch, eager or compiled.

    mode: None for eager, else torch.compile's mode ("default", "reduce-overhead", ...). warmup_s: the
    time of the first warmup_steps steps beyond what they take at the steady speed (compilation, CUDA-graph
    capture, autotuning, first calls); 5 covers CUDA-graph trees (a warm-up run, a recording, replays).
    step_ms: median of setup.repeats steps after them. bf16 if setup.amp says so; channels_last on CUDA.
    """
    fmt = torch.channels_last if device.type == "cuda" else torch.contiguous_format
    nets, opts = make_pair(setup, device, fmt)
    if mode is not None:
        nets = [torch.compile(n) if mode == "default" else torch.compile(n, mode=mode) for n in nets]
    g = torch.Generator(device).manual_seed(1)
    x = torch.randn(setup.batch_size, 3, setup.image_size, setup.image_size, device=device,
                    generator=g).contiguous(memory_format=fmt)
    y = torch.randint(0, setup.num_classes, (setup.batch_size,), device=device, generator=g)
    method, r = Method(mode="progressive", lc="mylc"), [torch.tensor(0.6, device=device)] * 2
    autocast = dict(device_type=device.type, dtype=torch.bfloat16, enabled=setup.amp == "bf16")
    scaler = torch.amp.GradScaler(device.type, enabled=False)
    # CUDA-graph trees must know where a training step begins (torch >= 2.1 has this function).
    mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None) if mode else None

    def step():
        if mark is not None:
            mark()
        mutual_step(nets, opts, (x, y, y), method, 1.0, r, HALFWAY, Precision(autocast, scaler))

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(warmup_steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    first = time.perf_counter() - t0
    seconds = timed(step, device, 0, setup.repeats)
    return first - warmup_steps * seconds, 1e3 * seconds


def replay_timing(setup, device, how, step="cmd"):
    """(warmup_s, step_ms, peak_gib) of the CMD-P + MyLC step (step="cmd") or of two plain CE steps as one
    ("ce"), on one fixed batch, through training/graph.py: how = "off" (SGD as built: foreach, a float lr),
    "fused" (eager, fused SGD with a device-tensor lr), "capture" or "compile" (graph.replayed). warmup_s: the
    first steps' time beyond the steady speed (graph.WARMUP eager steps and the capture, or compiling);
    peak_gib: CUDA memory reserved at the peak, graph pools included (None on CPU)."""
    cuda = device.type == "cuda"
    if cuda:  # what the previous timing held goes back first
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    fmt = torch.channels_last if cuda else torch.contiguous_format
    nets, opts = make_pair(setup, device, fmt)
    g = torch.Generator(device).manual_seed(1)
    x = torch.randn(setup.batch_size, 3, setup.image_size, setup.image_size, device=device,
                    generator=g).contiguous(memory_format=fmt)
    y = torch.randint(0, setup.num_classes, (setup.batch_size,), device=device, generator=g)
    method, r = Method(mode="progressive", lc="mylc"), [torch.tensor(0.6, device=device)] * 2
    precision = Precision(dict(device_type=device.type, dtype=torch.bfloat16, enabled=setup.amp == "bf16"),
                          torch.amp.GradScaler(device.type, enabled=False))

    def cmd(batch, chi, r, clock):
        return mutual_step(nets, opts, batch, method, chi, r, clock, precision)

    def ce(batch, chi, r, clock):  # step_figures' two CE steps, returning a step's (sums, hist)
        with torch.autocast(**precision.autocast):
            z = [net(batch[0]) for net in nets]
        loss = sum(F.cross_entropy(z_k.float(), batch[1]) for z_k in z)
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        for opt in opts:
            opt.step()
        return loss.detach().reshape(1), loss.detach().reshape(1)

    fn = cmd if step == "cmd" else ce
    if how == "fused":
        graph.place_lr(opts, "capture", device)
    run = fn if how == "fused" else graph.replayed(how, fn, opts, method, device)
    first = graph.WARMUP + 2  # the eager steps, the capture and one replay; a compile and its CUDA-graph trees

    def one():
        run((x, y, y), 1.0, r, HALFWAY)

    t0 = time.perf_counter()
    for _ in range(first):
        one()
    if cuda:
        torch.cuda.synchronize(device)
    warm = time.perf_counter() - t0
    seconds = timed(one, device, 0, setup.repeats)
    peak = torch.cuda.max_memory_reserved(device) / 2 ** 30 if cuda else None
    return warm - first * seconds, 1e3 * seconds, peak


def graph_figures(setup, device):
    """The step eager as train.py --graph off runs it, eager with fused SGD, and (CUDA) replayed as one CUDA
    graph (--graph capture), with two CE steps replayed for the step ratio: perf_suite.py's graph_* figures."""
    _, eager, eager_gib = replay_timing(setup, device, "off")
    fig = dict(graph_step_ms_eager=eager, graph_step_ms_eager_fused=replay_timing(setup, device, "fused")[1])
    if device.type == "cuda":
        capture_s, graphed, graph_gib = replay_timing(setup, device, "capture")
        ce = replay_timing(setup, device, "capture", step="ce")[1]
        fig.update(graph_step_ms=graphed, graph_ce_step_ms=ce, graph_step_ratio=graphed / ce,
                   graph_speedup=eager / graphed, graph_capture_s=capture_s, graph_memory_gib=graph_gib,
                   eager_memory_gib=eager_gib)
    return fig


class PILDataset(torch.utils.data.Dataset):
    """The usual CIFAR pipeline: uint8 HWC image -> PIL -> RandomCrop(32, 4) + flip -> ToTensor -> Normalize."""

    def __init__(self, images, labels, mean, std):
        self.images = images.permute(0, 2, 3, 1).numpy()
        self.labels = labels
        self.tf = T.Compose([T.RandomCrop(images.shape[-1], padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                             T.Normalize(mean, std)])

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        from PIL import Image  # in the DataLoader worker, as a torchvision dataset does
        return self.tf(Image.fromarray(self.images[i])), int(self.labels[i])


def throughput_figures(setup, device, configs=None):
    """Images per second of the mutual pair per pipeline and precision, and their ratios.

    configs: names "<device|dataloader>_<fp32|bf16>"; bf16 runs in channels_last. Default: both
    pipelines in fp32, and in bf16 too on CUDA.
    """
    d = datasets.load_dataset("synthetic", None, synthetic=datasets.Synthetic(
        size=setup.images, classes=setup.num_classes, test_size=10))
    labels = d.train.labels
    method = Method(mode="progressive", lc="mylc")
    out = {}
    precisions = ["fp32", "bf16"] if device.type == "cuda" else ["fp32"]
    configs = configs or [f"{pipeline}_{prec}" for pipeline in ("device", "dataloader") for prec in precisions]
    for pipeline, prec in (c.split("_") for c in configs):
        fmt = torch.channels_last if prec == "bf16" else torch.contiguous_format
        nets, opts = make_pair(setup, device, fmt)
        autocast = dict(device_type=device.type, dtype=torch.bfloat16, enabled=prec == "bf16")
        r = [torch.tensor(0.0, device=device)] * 2
        if pipeline == "device":
            batches = Batches(d.train, labels=labels, clean=labels, spec=Spec(setup.batch_size, d.mean, d.std),
                              placement=Placement(device, memory_format=fmt))
            source = lambda epoch: batches.epoch(0, epoch)  # noqa: E731
        else:
            loader = torch.utils.data.DataLoader(PILDataset(d.train.images, labels, d.mean, d.std),
                                                 batch_size=setup.batch_size, shuffle=True, drop_last=False,
                                                 num_workers=setup.workers, pin_memory=device.type == "cuda",
                                                 persistent_workers=setup.workers > 0)

            def source(epoch):
                for x, y in loader:
                    yield (x.to(device, non_blocking=True).contiguous(memory_format=fmt),
                           y.to(device, non_blocking=True), None)

        scaler = torch.amp.GradScaler(device.type, enabled=False)

        def run_epoch(epoch):
            n = 0
            for x, y, _ in source(epoch):
                mutual_step(nets, opts, (x, y, y), method, 1.0, r, HALFWAY, Precision(autocast, scaler))
                n += len(y)
            return n

        run_epoch(0)  # warm-up: workers, cudnn autotune
        times = []
        for e in range(1, 1 + setup.epochs):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            n = run_epoch(e)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t0)
        out[f"{pipeline}_{prec}"] = n / statistics.median(times)
    if "device_bf16" in out and "dataloader_fp32" in out:
        out["device_bf16_over_dataloader_fp32"] = out["device_bf16"] / out["dataloader_fp32"]
    if "device_fp32" in out and "dataloader_fp32" in out:
        out["device_over_dataloader_fp32"] = out["device_fp32"] / out["dataloader_fp32"]
    return out


def check_json_path(p, path):
    """--json is checked before anything is timed, so that a long measurement is never lost at the end."""
    parent = os.path.dirname(os.path.abspath(path)) if path else None
    if path and (os.path.isdir(path) or not os.path.isdir(parent) or not os.access(parent, os.W_OK)):
        p.error(f"--json {path}: cannot write a file there; give a file path in an existing folder")


@one_line("bench.py")
def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["batched"]:
        from tools import bench_batched  # here: its own figures and flags
        return bench_batched.main(argv[1:])
    p = Parser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--arch", default="cnn", help="NAME or NAME_A,NAME_B (models.ARCHS)")
    config.add_device_flag(p)
    p.add_argument("--amp", choices=("auto", "bf16", "off"), default="auto",
                   help="for step_ratio; auto: bf16 on CUDA, off on CPU")
    for f in fields(Setup):  # every size of Setup is a flag with Setup's default
        if f.name not in ("arch", "amp"):
            p.add_argument(f"--{f.name.replace('_', '-')}", type=int, default=f.default)
    p.add_argument("--peers", default="2,3,4", help="cohort sizes N whose step is timed against N CE steps")
    p.add_argument("--skip", default="", help="comma list of figures to skip: loss,step,throughput")
    p.add_argument("--json", help="write the figures to this file")
    args = p.parse_args(argv)
    try:
        peers = [int(v) for v in args.peers.split(",") if v]
        assert peers and all(2 <= m <= 26 for m in peers)
    except (ValueError, AssertionError):
        p.error(f"--peers {args.peers}: a comma list of cohort sizes between 2 and 26, e.g. 2,3,4")
    for a in args.arch.split(","):
        if a not in models.ARCHS:
            p.error(f"unknown architecture '{a}'; choose from {', '.join(models.ARCHS)}")
    for flag, least in (("batch_size", 1), ("num_classes", 2), ("image_size", 8), ("images", 1), ("epochs", 1),
                        ("workers", 0), ("warmup", 0), ("repeats", 1), ("rounds", 1)):
        if getattr(args, flag) < least:
            p.error(f"--{flag.replace('_', '-')} {getattr(args, flag)}: must be at least {least}")
    unknown = set(filter(None, args.skip.split(","))) - {"loss", "step", "throughput"}
    if unknown:
        p.error(f"unknown figure(s) {', '.join(sorted(unknown))} in --skip; choose from loss, step, throughput")
    check_json_path(p, args.json)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error(config.NO_CUDA)
    device = torch.device("cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = device.type == "cuda"  # as train.py runs (config.pick_device)
    amp = {"auto": "bf16" if device.type == "cuda" else "off"}.get(args.amp, args.amp)
    setup = Setup(**{f.name: getattr(args, f.name) for f in fields(Setup) if f.name != "amp"}, amp=amp)
    skip = set(args.skip.split(","))
    info = dict(device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                torch=torch.__version__, threads=torch.get_num_threads(), arch=args.arch,
                batch_size=args.batch_size, num_classes=args.num_classes, amp=amp,
                date=time.strftime("%Y-%m-%d"), command="python -m tools.bench " + " ".join(argv or sys.argv[1:]))
    print(" ".join(f"{k}={v}" for k, v in info.items()), flush=True)
    res = dict(info)
    if "loss" not in skip:
        res.update(loss_figures(setup, device))
        print(f"loss_overhead {res['loss_overhead']:.2f}  (cmd_loss + 2x MyLC vs 2x F.cross_entropy, fwd+bwd)")
        print(f"paper_ratio   {res['paper_ratio']:.2f}  (appendix CMDWithLoss time / cmd_loss time)", flush=True)
    if "step" not in skip:
        res["peers"] = {}
        for m in peers:
            fig = step_figures(setup, device, m)
            res["peers"][str(m)] = dict(step_ratio=fig["step_ratio"], cmd_step_ms=fig["step_ms"]["cmd_step"],
                                        ce_steps_ms=fig["step_ms"]["two_ce_steps"], peak_memory_mib=fig["peak_memory_mib"])
            if m == 2:
                res.update(step_ratio=fig["step_ratio"], step_ms=fig["step_ms"])
            memory = "" if fig["peak_memory_mib"] is None else f", peak {fig['peak_memory_mib']:.0f} MiB"
            print(f"step_ratio    {fig['step_ratio']:.3f} (CMD step of {m} models / {m} CE steps; "
                  f"{fig['step_ms']['cmd_step']:.1f} ms vs {fig['step_ms']['two_ce_steps']:.1f} ms{memory})", flush=True)
    if "throughput" not in skip:
        res["throughput"] = throughput_figures(setup, device)
        for k, v in res["throughput"].items():
            unit = "x" if "_over_" in k else "img/s"
            print(f"throughput {k:36s} {v:10.2f} {unit}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
