"""What CMD costs, and how fast the paper's main command trains (README "Performance", docs/performance.md).

    python -m tools.perf cost                                 # CPU, cnn pair: what CMD costs, under a minute
    python -m tools.perf cost --arch resnet34 --device cuda   # the real figures
    python -m tools.perf suite --json perf.json               # one H100/H200: every part, within --budget (480 s)
    python -m tools.perf suite --json perf.json --small       # any machine in a minute or two; automatic without a GPU
    python -m tools.perf profile                              # where a step's time goes, under torch.profiler
    python -m tools.perf batched                              # many runs in one process against a process per run

cost -- what CMD costs on top of training two networks. Every figure is the median of --repeats timings
        after --warmup untimed runs; the device is synchronised only around each timed region.
  loss_overhead  cmd_loss + both label corrections (MyLC) on a batch of logits, forward and backward, over
                 two plain F.cross_entropy calls on the same logits
  paper_ratio    the appendix's CMDWithLoss (appendix_code.paper_cmd_loss) over cmd_loss, same inputs
  step_ratio     one CMD-P + MyLC mutual step (both models: forward, backward, SGD) over two plain
                 cross-entropy steps of the same models on the same batch, in interleaved rounds; 1.00 is the floor
  peers          the same for cohorts of N = 2, 3, 4 models (--peers), and the step's peak memory (CUDA only)
  throughput     training images per second of the pair (each image counted once), device-resident batches
                 against a torchvision DataLoader; on CUDA also fp32 against bf16 + channels_last
suite -- everything a GPU can tell about the main command, PARTS in this order; KEYS says what every key
        means. Every key is always written: a figure not measured is null, with the reason under "reasons".
  sync, torchrun    the checks only a GPU can run: the CUDA step never waits for the host
                    (set_sync_debug_mode("error")); train.py under a 1-process torchrun on NCCL
  step, throughput  cost's step_ratio and throughput at the main command's sizes (ResNet34 pair, bf16)
  epochs_graph, epochs   three epochs of train.py on CIFAR-100-sized synthetic data, extrapolated to 100:
                    graphed (--graph capture) first, what decides the default, then eager
  graph             the step eager (--graph off), with fused SGD, and replayed as one CUDA graph (--graph capture)
  batched           tools.batched: R runs of the demonstration's MLP pair in one process
  graph_compile, compile, epochs_compile, compile_modes   the step and the epochs under torch.compile, in
                    child processes with empty inductor caches (first-run compile times, ended by a timeout)
profile -- the step's median time with cuDNN's autotuner off and on, then the operators that take the most
        device time (CPU time without CUDA), and the host's time against the device's: a step whose device
        time is well under its wall time waits on the host (Python, kernel launches)
batched -- R of the Fashion-MNIST demonstration's runs (REGIME, studies/fmnist.py's BASE: two MLPs on 7,200 images, 800
        for validation, 10,000 for test), differing in lr and seed, trained by tools.batched in one process
        against the same runs as train.py processes (tools.sweep.run_jobs), each timed from the command to the
        last summary.json; FLOPs counted from the model's shapes (FORWARD)

Shared by the parts: Setup (what a timing runs on), Pair (models, optimisers and one batch, with train.py's
step and plain cross-entropy steps), timed and step_timing, about (what every figure is quoted with).
"""
import argparse
import gc
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, fields, replace

import torch
import torch.nn.functional as F
import torchvision.transforms as T

import models
from appendix_code import paper_cmd_loss
from label_correction import mylc, one_hot
from losses import cmd_loss, log_probs
from mutual import THRESHOLDS, Clock, Comparators, Method, Precision, mutual_step
from tools import batched, sweep
from training import build, config, datasets, runfiles
from training.batches import Batches, Placement, Spec
from training.errors import Parser, UserError, one_line
from training.graph import WARMUP, place_lr, replayed, step_id

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
HALFWAY = Clock(epoch=5, batch=0, batches=1, epochs=10, seed=0)  # t/Γ = 0.5, where every step is timed
METHOD = Method(mode="progressive", lc="mylc")  # CMD-P + MyLC, the main command's
# Steps before a steady-state timing: graph.WARMUP eager steps, the capture and one replay; or a compile and
# its CUDA-graph trees (a warm-up run, a recording, replays).
FIRST = WARMUP + 2
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")


# ---------------------------------------------------------------- shared: what is timed, and how

@dataclass(frozen=True)
class Setup:
    """What a timing runs on: cost builds one from its flags, the suite from its Sizes, profile from its flags
    (each size's meaning: SETUP_HELP)."""
    arch: str = "cnn"          # NAME or NAME_A,NAME_B (models.ARCHS)
    num_classes: int = 100
    batch_size: int = 128
    image_size: int = 32
    amp: str = "off"           # bf16 | off: the step's autocast
    rounds: int = 3
    warmup: int = 3
    repeats: int = 10
    images: int = 2048
    epochs: int = 2
    workers: int = 2


SETUP_HELP = dict(num_classes="K, the classes of the synthetic data", batch_size="images a step",
                  image_size="the synthetic images' side", rounds="interleaved rounds for step_ratio",
                  warmup="untimed runs before each timing", repeats="timed runs; the figure is their median",
                  images="synthetic training images for throughput", epochs="timed epochs for throughput",
                  workers="DataLoader workers of the baseline pipeline")


class Pair:
    """m models of setup.arch (A and B by default) with their SGD, the same weights for a seed, and one fixed
    batch of random images, in train.py's precision and (default) layout: channels_last on CUDA. cmd and ce
    are steps as graph.replayed takes them, (batch, chi, r, clock) -> (sums, hist): train.py's step of
    `method`, and the same models' plain cross-entropy steps as one summed loss, so that only the loss differs."""

    def __init__(self, setup, device, m=2, layout=None, method=METHOD):
        cuda = device.type == "cuda"
        layout = layout or (torch.channels_last if cuda else torch.contiguous_format)
        torch.manual_seed(0)
        archs = setup.arch.split(",")
        archs = archs if len(archs) == m else archs[:1] * m
        self.nets = [models.build_model(a, setup.num_classes).to(device, memory_format=layout) for a in archs]
        self.opts = [torch.optim.SGD(n.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4) for n in self.nets]
        g = torch.Generator(device).manual_seed(1)
        x = torch.randn(setup.batch_size, 3, setup.image_size, setup.image_size, device=device, generator=g)
        y = torch.randint(0, setup.num_classes, (setup.batch_size,), device=device, generator=g)
        self.batch, self.r = (x.contiguous(memory_format=layout), y, y), [torch.tensor(0.6, device=device)] * m
        self.method = method
        self.precision = Precision(dict(device_type=device.type, dtype=torch.bfloat16, enabled=setup.amp == "bf16"),
                                   torch.amp.GradScaler(device.type, enabled=False))

    def cmd(self, batch, chi, r, clock):
        return mutual_step(self.nets, self.opts, batch, self.method, chi, r, clock, self.precision)

    def ce(self, batch, chi, r, clock):
        with torch.autocast(**self.precision.autocast):
            z = [net(batch[0]) for net in self.nets]
        loss = sum(F.cross_entropy(z_k.float(), batch[1]) for z_k in z)
        for opt in self.opts:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        for opt in self.opts:
            opt.step()
        return loss.detach().reshape(1), loss.detach().reshape(1)

    def on_batch(self, step):
        """step on the fixed batch at t/Γ = 0.5, as a function of nothing."""
        return lambda: step(self.batch, (1.0,) * len(self.nets), self.r, HALFWAY)  # χ of each model


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds(fn, device):
    """Wall seconds of fn(), the device synchronised before and after."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def timed(fn, device, warmup, repeats):
    """Median seconds of fn() over `repeats` runs after `warmup` runs."""
    for _ in range(warmup):
        fn()
    return statistics.median(seconds(fn, device) for _ in range(repeats))


def step_timing(setup, device, how="off", compile_mode=None, step="cmd"):
    """(warmup_s, step_ms, peak_gib) of the pair's CMD step (step "cmd") or CE steps ("ce") on its fixed batch.

    how: train.py's --graph through training/graph.py, "off" (SGD as built: foreach, a float lr), "capture" or
    "compile" (graph.replayed); or "fused" (eager, fused SGD with a device-tensor lr). compile_mode: each model
    under torch.compile in this mode, as train.py --compile ("default"). warmup_s: the first FIRST steps' time
    beyond the steady speed (eager warm-up steps and the capture, or compiling, autotuning, first calls);
    step_ms: the median of setup.repeats steps after them; peak_gib: CUDA memory reserved at the peak, graph
    pools included (None on CPU). bf16 if setup.amp says so.
    """
    cuda = device.type == "cuda"
    if cuda:  # what the previous timing held goes back first
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    pair = Pair(setup, device)
    if compile_mode is not None:
        pair.nets = [torch.compile(n, mode=compile_mode) for n in pair.nets]
    fn = getattr(pair, step)
    if how == "fused":
        place_lr(pair.opts, "capture", device)
    one = pair.on_batch(fn if how == "fused" else replayed(how, fn, pair.opts, METHOD, device))
    # CUDA-graph trees must know where a training step begins (torch >= 2.1 has this function).
    mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None) if compile_mode else None

    def run():
        if mark is not None:
            mark()
        one()

    def first():
        for _ in range(FIRST):
            run()

    warm = seconds(first, device)
    step_s = timed(run, device, 0, setup.repeats)
    return warm - FIRST * step_s, 1e3 * step_s, torch.cuda.max_memory_reserved(device) / 2 ** 30 if cuda else None


def about(device, argv):
    """What every figure is quoted with: the device, torch, CUDA and cuDNN, the date, the command, the step."""
    name = (torch.cuda.get_device_name(device) if device.type == "cuda" else
            f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)")
    return dict(device=name, torch=torch.__version__, cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                date=time.strftime("%Y-%m-%d %H:%M"), command=shlex.join(["python", "-m", "tools.perf", *argv]),
                step=step_id())


def write_json(path, figures):
    """figures at path (none: nothing), written beside it and renamed over it: a kill leaves the last whole file."""
    if path:
        runfiles.write_json(os.path.dirname(path), os.path.basename(path), figures)


def child(cmd, tmp, what, timeout=None):
    """(the finished process, its wall seconds): cmd from the repository root, its output captured, its inductor
    and Triton caches empty (under tmp). RuntimeError saying that `what` did not finish if it outlasts timeout."""
    t0 = time.perf_counter()
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=HERE,
                             env=dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                                      TRITON_CACHE_DIR=os.path.join(tmp, "triton")))
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{what} did not finish within {timeout:.0f} s") from None
    return run, time.perf_counter() - t0


def tail(text):
    """The last non-empty line of a child's output, for a one-line reason."""
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def train_flags(arch, size, test_size, classes, batch_size, epochs, device):
    """train.py's flags for a run of an arch pair on synthetic data."""
    return ["--dataset", "synthetic", "--arch", arch, "--synthetic-size", str(size), "--synthetic-test-size",
            str(test_size), "--synthetic-classes", str(classes), "--batch-size", str(batch_size), "--epochs",
            str(epochs), "--device", device.type, "--workers", "0"]


# ---------------------------------------------------------------- cost: what CMD costs on top of two networks

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

    t_plain, t_cmd, t_paper, t_ours = (timed(fn, device, setup.warmup, setup.repeats) for fn in (plain, cmd, paper, ours))
    return dict(loss_overhead=t_cmd / t_plain, paper_ratio=t_paper / t_ours,
                loss_ms=dict(plain_ce=1e3 * t_plain, cmd_with_mylc=1e3 * t_cmd, paper=1e3 * t_paper, cmd_loss=1e3 * t_ours))


def step_figures(setup, device, m=2):
    """step_ratio: a CMD-P + MyLC mutual step of m models against m plain CE steps, same models, same batch;
    and, on CUDA, the peak memory of the mutual step."""
    pair = Pair(setup, device, m)
    ce, cmd = [], []
    for _ in range(setup.rounds):  # interleaved, so that drift in machine load hits both alike
        ce.append(timed(pair.on_batch(pair.ce), device, setup.warmup, setup.repeats))
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        cmd.append(timed(pair.on_batch(pair.cmd), device, setup.warmup, setup.repeats))
    t_ce, t_cmd = statistics.median(ce), statistics.median(cmd)
    memory = torch.cuda.max_memory_allocated(device) / 2 ** 20 if device.type == "cuda" else None
    return dict(step_ratio=t_cmd / t_ce, step_ms=dict(two_ce_steps=1e3 * t_ce, cmd_step=1e3 * t_cmd),
                peak_memory_mib=memory)


def graph_figures(setup, device):
    """The step eager as train.py --graph off runs it, eager with fused SGD, and (CUDA) replayed as one CUDA
    graph (--graph capture), with two CE steps replayed for the step ratio: the suite's graph part."""
    _, eager, eager_gib = step_timing(setup, device, "off")
    fig = dict(graph_step_ms_eager=eager, graph_step_ms_eager_fused=step_timing(setup, device, "fused")[1])
    if device.type == "cuda":
        capture_s, graphed, graph_gib = step_timing(setup, device, "capture")
        ce = step_timing(setup, device, "capture", step="ce")[1]
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
    out = {}
    precisions = ["fp32", "bf16"] if device.type == "cuda" else ["fp32"]
    configs = configs or [f"{pipeline}_{prec}" for pipeline in ("device", "dataloader") for prec in precisions]
    for pipeline, prec in (c.split("_") for c in configs):
        layout = torch.channels_last if prec == "bf16" else torch.contiguous_format
        pair = Pair(replace(setup, amp="bf16" if prec == "bf16" else "off"), device, layout=layout)
        r = [torch.tensor(0.0, device=device)] * 2
        if pipeline == "device":
            batches = Batches(d.train, labels=labels, clean=labels, spec=Spec(setup.batch_size, d.mean, d.std),
                              placement=Placement(device, memory_format=layout))
            source = lambda epoch: batches.epoch(0, epoch)  # noqa: E731
        else:
            loader = torch.utils.data.DataLoader(PILDataset(d.train.images, labels, d.mean, d.std),
                                                 batch_size=setup.batch_size, shuffle=True, drop_last=False,
                                                 num_workers=setup.workers, pin_memory=device.type == "cuda",
                                                 persistent_workers=setup.workers > 0)

            def source(epoch):
                for x, y in loader:
                    yield (x.to(device, non_blocking=True).contiguous(memory_format=layout),
                           y.to(device, non_blocking=True), None)

        def run_epoch(epoch):
            n = 0
            for x, y, _ in source(epoch):
                pair.cmd((x, y, y), 1.0, r, HALFWAY)
                n += len(y)
            return n

        n = run_epoch(0)  # warm-up (workers, cudnn autotune); every epoch counts the same images
        out[f"{pipeline}_{prec}"] = n / statistics.median(seconds(lambda: run_epoch(e), device)
                                                          for e in range(1, 1 + setup.epochs))
    if "device_bf16" in out and "dataloader_fp32" in out:
        out["device_bf16_over_dataloader_fp32"] = out["device_bf16"] / out["dataloader_fp32"]
    if "device_fp32" in out and "dataloader_fp32" in out:
        out["device_over_dataloader_fp32"] = out["device_fp32"] / out["dataloader_fp32"]
    return out


def cost(args, device, argv):
    """The cost part: its figures, each printed as it is measured."""
    amp = {"auto": "bf16" if device.type == "cuda" else "off"}.get(args.amp, args.amp)
    setup = Setup(**{f.name: getattr(args, f.name) for f in fields(Setup) if f.name != "amp"}, amp=amp)
    res = dict(about(device, argv), arch=args.arch, batch_size=args.batch_size, num_classes=args.num_classes, amp=amp)
    print(" ".join(f"{k}={v}" for k, v in res.items()), flush=True)
    if "loss" not in args.skip:
        res.update(loss_figures(setup, device))
        print(f"loss_overhead {res['loss_overhead']:.2f}  (cmd_loss + 2x MyLC vs 2x F.cross_entropy, fwd+bwd)")
        print(f"paper_ratio   {res['paper_ratio']:.2f}  (appendix CMDWithLoss time / cmd_loss time)", flush=True)
    if "step" not in args.skip:
        res["peers"] = {}
        for m in args.peers:
            fig = step_figures(setup, device, m)
            ms = fig["step_ms"]
            res["peers"][str(m)] = dict(step_ratio=fig["step_ratio"], cmd_step_ms=ms["cmd_step"],
                                        ce_steps_ms=ms["two_ce_steps"], peak_memory_mib=fig["peak_memory_mib"])
            if m == 2:
                res.update(step_ratio=fig["step_ratio"], step_ms=ms)
            memory = "" if fig["peak_memory_mib"] is None else f", peak {fig['peak_memory_mib']:.0f} MiB"
            print(f"step_ratio    {fig['step_ratio']:.3f} (CMD step of {m} models / {m} CE steps; "
                  f"{ms['cmd_step']:.1f} ms vs {ms['two_ce_steps']:.1f} ms{memory})", flush=True)
    if "throughput" not in args.skip:
        res["throughput"] = throughput_figures(setup, device)
        for k, v in res["throughput"].items():
            print(f"throughput {k:36s} {v:10.2f} {'x' if '_over_' in k else 'img/s'}", flush=True)
    return res


# ---------------------------------------------------------------- the checks only a GPU can run

SYNC_CASES = (("progressive", "mylc"), ("progressive", "proselflc"), ("static", "cp"), ("mkd", "ce"), ("kdcl", "ce"),
              ("coteach", "ce"), ("coteach+", "ce"), ("jocor", "ce"))


def sync_free_samples(mode, lc, device, batch_size=128, warmup=3, steps=2, graph="off"):
    """Samples counted by warmup + steps training steps; the last `steps` ran under set_sync_debug_mode("error").
    graph: train.py's --graph (training/graph.py); with "capture" and warmup > graph.WARMUP, the checked steps
    are replays, their static inputs' copies included.

    Two cnn in bf16 and channels_last on device-resident synthetic batches, augmented on the device with
    a CUDA generator (batches.Batches). The warm-up creates lazy state (momentum buffers). In the checked
    steps PyTorch raises RuntimeError, naming the operation, if anything waits for the GPU: drawing the
    batch, mutual_step, adding up the sums. The count is read after the check.
    """
    method = Method(mode=mode, lc=lc, eta=4.0 if mode in THRESHOLDS else None, comparators=Comparators(forget_rate=0.2))
    d = datasets.load_dataset("synthetic", None, synthetic=datasets.Synthetic(size=1024, classes=10))
    pair = Pair(Setup(arch="cnn", num_classes=10, batch_size=batch_size, amp="bf16"), device, method=method)
    r = [torch.zeros((), device=device), torch.zeros((), device=device)]
    batches = Batches(d.train, labels=d.train.labels, clean=d.train.labels, spec=Spec(batch_size, d.mean, d.std),
                      placement=Placement(device, memory_format=torch.channels_last))
    it = batches.epoch(0, 0)
    step = replayed(graph, pair.cmd, pair.opts, method, device)
    # epoch 5, past Co-teaching+'s step rule: R(t) < 1 and disagreements for the comparators (baselines.keep_rule)
    clock, chi = Clock(5, 1000, 2000, 10, 0), (1.0, 1.0)  # χ of each model
    acc = torch.zeros((), device=device)
    for _ in range(warmup):
        acc = acc + step(next(it), chi, r, clock)[0][0]
    torch.cuda.synchronize(device)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(steps):
            acc = acc + step(next(it), chi, r, clock)[0][0]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return int(acc.item())


def torchrun_smoke(device, timeout):
    """(ok, seconds, why not): train.py under a 1-process torchrun (NCCL on CUDA, gloo on CPU), tiny data;
    ok when DistributedDataParallel ran on that backend, its all-reduces included, and the run finished.
    seconds is None if it outlasted timeout."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
               os.path.join(HERE, "train.py"), *train_flags("cnn", 256, 128, 10, 64, 1, device), "--out", out]
        try:
            res, wall = child(cmd, tmp, "torchrun", timeout)
        except RuntimeError as e:
            return False, None, str(e)
        if res.returncode != 0:
            return False, wall, f"exit code {res.returncode}: {tail(res.stderr)}"
        with open(os.path.join(out, "config.json")) as f:
            world = json.load(f)["world_size"]
        backend = "nccl" if device.type == "cuda" else "gloo"
        ddp = f"distributed: 1 process, {backend} backend, DistributedDataParallel" in res.stdout  # collectives ran
        summary = os.path.exists(os.path.join(out, "summary.json"))
        ok = world == 1 and ddp and summary
        return ok, wall, None if ok else (f"world_size {world}, DDP on {backend} {'ran' if ddp else 'did not run'}, "
                                          f"summary.json {'written' if summary else 'missing'}")


# ---------------------------------------------------------------- batched: many runs in one process

FORWARD = 2 * (768 * 512 + 512 * 512 + 512 * 10)  # FLOPs of one MLP on one image (AdaptiveAvgPool2d aside)
TRAIN, EVAL = 7200, 720 + 10000  # the demonstration's training images; validation and test images
FP32_PEAK = {"H100": 67e12, "H200": 67e12}  # dense float32 (no tensor cores), NVIDIA's data sheets
# the suite's stand-in for Fashion-MNIST where its files are not installed: as many images, the same FLOPs
SYNTHETIC = ["--dataset", "synthetic", "--synthetic-size", "8000", "--synthetic-test-size", "10000",
             "--synthetic-classes", "10"]


def flops(runs, epochs, train=TRAIN, evaluated=EVAL):
    """Training 3x forward on the training images, and a forward on the evaluated images, every epoch."""
    return runs * epochs * 2 * FORWARD * (3 * train + evaluated)


# The Fashion-MNIST demonstration's regime (studies/fmnist.py's BASE; a test holds them equal): tools import no study.
REGIME = ["--arch", "mlp", "--subset", "8000", "--subset-seed", "0", "--val-split", "0.1", "--augment", "none",
          "--weight-decay", "0", "--epochs", "80", "--milestones", "40,60", "--batch-size", "128", "--noise", "sym",
          "--rate", "0.4"]


def jobs(out, runs, epochs, data_dir, device, data=None, extra=()):
    """R of the demonstration's runs (CMD-P, MyLC), lrs 0.025..0.1 and seeds 0, 1, ..., for `epochs` epochs.
    data: the data's flags (default: Fashion-MNIST in data_dir); extra: flags after the demonstration's."""
    lrs = (0.025, 0.035, 0.05, 0.07, 0.1)
    data = data or ["--dataset", "fashionmnist", "--data-dir", data_dir]
    todo = []
    for i in range(runs):
        lr, seed = lrs[i % len(lrs)], i // len(lrs)
        key = (data + REGIME +
               ["--mode", "progressive", "--lc", "mylc", "--lr", f"{lr:g}", "--seed", str(seed), "--epochs",
                str(epochs), "--milestones", str(epochs), "--device", device, "--workers", "0", "--amp", "off",
                *extra])
        d = os.path.join(out, f"run{i}")
        todo.append(dict(name=f"run{i}", dir=d, key=key, argv=key + ["--out", d]))
    return todo


def wall_seconds(train, todo, **kwargs):
    """Seconds from the command to the last summary.json of todo's runs, trained by train (batched.run_jobs
    or sweep.run_jobs); a UserError naming each run that failed, and its error."""
    t0 = time.perf_counter()
    failed = train(todo, **kwargs)
    if failed:
        raise UserError(f"runs failed: {failed}")
    return time.perf_counter() - t0


def batched_against_processes(args, device, argv):
    """The batched part: R runs trained by tools.batched, then (unless --skip-processes) as train.py processes."""
    if not os.path.isdir(args.data_dir):
        raise UserError(f"--data-dir {args.data_dir} not found: apt-get install dataset-fashion-mnist, or give the "
                        "folder")
    cuda, where = device.type == "cuda", device.type
    with tempfile.TemporaryDirectory(prefix="perf-batched-") as tmp:
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        one = wall_seconds(batched.run_jobs, jobs(os.path.join(tmp, "b"), args.runs, args.epochs, args.data_dir, where),
                           device=where, log=lambda *_: None)
        peak = torch.cuda.max_memory_allocated() / 2 ** 30 if cuda else None
        many = None if args.skip_processes else wall_seconds(
            sweep.run_jobs, jobs(os.path.join(tmp, "p"), args.runs, args.epochs, args.data_dir, where), jobs=args.jobs)
    flop = flops(args.runs, args.epochs)
    fig = about(device, argv)
    peak_flops = next((v for k, v in FP32_PEAK.items() if k in fig["device"]), None)
    fig.update(runs=args.runs, epochs=args.epochs, jobs=args.jobs, batched_s=round(one, 1),
               batched_runs_per_s=args.runs / one, batched_tflops=flop / one / 1e12,
               processes_s=None if many is None else round(many, 1),
               processes_runs_per_s=None if many is None else args.runs / many,
               speedup=None if many is None else many / one,
               peak_gib_per_run=None if peak is None else peak / args.runs,
               fraction_of_fp32_peak=None if peak_flops is None else flop / one / peak_flops)
    print(f"{args.runs} runs x {args.epochs} epochs on {fig['device']}: batched {one:.1f} s "
          f"({fig['batched_runs_per_s'] * args.epochs:.3f} run-epochs/s, {fig['batched_tflops']:.3f} TFLOP/s)" +
          ("" if many is None else f"; {args.jobs} train.py processes at a time {many:.1f} s: "
                                   f"batched is {fig['speedup']:.2f}x") +
          ("" if peak is None else f"; peak {fig['peak_gib_per_run']:.3f} GiB per run"))
    return fig


# ---------------------------------------------------------------- suite: everything a GPU can tell

@dataclass(frozen=True)
class Sizes:
    """How big each part is: FULL on a GPU, SMALL with --small or without one."""
    arch: str               # step and throughput
    run_arch: str           # graph, compile and the epochs parts
    batch_size: int
    num_classes: int
    rounds: int             # step_ratio: interleaved rounds of warmup + repeats timings
    warmup: int
    repeats: int
    images: int             # throughput: synthetic training images, timed over throughput_epochs
    throughput_epochs: int
    train_size: int         # epochs: synthetic training and test images
    test_size: int
    workers: int            # DataLoader workers of the throughput baseline
    batched_runs: tuple     # batched: R, the runs of each timing
    batched_epochs: int
    batched_flags: tuple    # ... flags after the demonstration's
    batched_images: tuple   # ... training images, and evaluated images an epoch (validation and test)

    def setup(self, arch, device):
        """cost's Setup at these sizes, in train.py's precision: bf16 on CUDA, float32 on the CPU."""
        return Setup(arch=arch, num_classes=self.num_classes, batch_size=self.batch_size,
                     amp="bf16" if device.type == "cuda" else "off", rounds=self.rounds, warmup=self.warmup,
                     repeats=self.repeats, images=self.images, epochs=self.throughput_epochs, workers=self.workers)


FULL = Sizes(arch="resnet34", run_arch="resnet34", batch_size=128, num_classes=100, rounds=3, warmup=3, repeats=10,
             images=10240, throughput_epochs=2, train_size=50000, test_size=10000, workers=min(8, os.cpu_count() or 1),
             batched_runs=(64, 256), batched_epochs=3, batched_flags=(), batched_images=(TRAIN, EVAL))
SMALL = Sizes(arch="cnn", run_arch="mlp", batch_size=32, num_classes=10, rounds=1, warmup=1, repeats=5,
              images=64, throughput_epochs=1, train_size=256, test_size=128, workers=0, batched_runs=(2,),
              batched_epochs=2, batched_flags=("--subset", "256", "--synthetic-test-size", "128"),
              batched_images=(230, 26 + 128))  # --val-split 0.1 of 256 keeps 26 out

# part -> {key: what it is}: the table's rows in this order. Every key appears in the JSON.
KEYS = {
    "info": {
        "device": "device name", "torch": "torch version", "cuda": "CUDA version torch was built with",
        "cudnn": "cuDNN version", "date": "date and time of the run", "command": "the command",
        "step": "graph.step_id(): the hash of the step's sources (graph.STEP_FILES) the figures stand for",
        "small": "small sizes (--small, automatic without CUDA)", "budget_s": "time budget, s (--budget)",
        "amp": "autocast of the step, compile and epochs parts: train.py's default (bf16 on CUDA)"},
    "sync": {
        "sync_free": "no host sync in steady-state steps of every mode (set_sync_debug_mode error)",
        "sync_free_cases": "mode/lc -> ok or the error"},
    "torchrun": {
        "torchrun_nccl": "train.py under torchrun --nproc_per_node=1 on NCCL trained and wrote its files",
        "torchrun_s": "wall time of that run, s"},
    "step": {
        "step_ratio": "CMD-P + MyLC mutual step / two plain CE steps (target <= 1.03)",
        "step_ms_cmd": "CMD mutual step, ms", "step_ms_ce": "two CE steps, ms"},
    "throughput": {
        "throughput_dataloader_fp32": "img/s, DataLoader (PIL crops and flips in workers), fp32",
        "throughput_device_fp32": "img/s, device-resident batches and augmentation, fp32",
        "throughput_device_bf16_cl": "img/s, device-resident, bf16 autocast + channels_last",
        "device_fp32_over_dataloader": "device fp32 / DataLoader fp32",
        "device_bf16_cl_over_dataloader": "device bf16 + channels_last / DataLoader fp32 (target >= 3)"},
    "graph": {
        "graph_step_ms_eager": "CMD-P + MyLC step, eager (--graph off: foreach SGD, a float lr), ms",
        "graph_step_ms_eager_fused": "the same step eager with fused SGD and a device-tensor lr, ms",
        "graph_step_ms": "the same step replayed as one CUDA graph (--graph capture), ms",
        "graph_ce_step_ms": "two plain CE steps replayed as one CUDA graph, ms",
        "graph_step_ratio": "graphed CMD step / graphed two CE steps (target <= 1.03)",
        "graph_speedup": "eager step / graphed step",
        "graph_capture_s": "the graphed step's eager warm-up steps and capture beyond its steady steps, s",
        "graph_memory_gib": "peak CUDA memory reserved by the graphed step, its graph's pool included, GiB",
        "eager_memory_gib": "peak CUDA memory reserved by the eager step, GiB"},
    "epochs_graph": {
        "epoch_s_graph": "train.py --graph capture's three epochs, s (epoch 1 warms up and captures)",
        "epochs_100_min_graph": "100 epochs with --graph capture extrapolated, min (target <= 6)",
        "peak_memory_gib_graph": "peak CUDA memory allocated during those epochs, GiB",
        "peak_reserved_gib_graph": "peak CUDA memory reserved during those epochs (graph pools), GiB"},
    "epochs": {
        "epoch_s": "train.py --graph off's three epochs (train + test), s",
        "epochs_100_min": "100 epochs extrapolated: epoch 1 + 99 x mean(epochs 2-3), min (target < 10)",
        "epochs_other_s": "train.py's time outside its epochs: starting Python, data, models, checkpoints, s",
        "peak_memory_gib": "peak CUDA memory allocated during those epochs, GiB",
        "graph_run_speedup": "100 epochs eager / 100 epochs graphed"},
    "batched": {
        "batched_runs": "tools.batched: R, the runs of the demonstration's MLP pair trained in one process",
        "batched_run_epochs_per_s": "run-epochs per second at each R, start-up included (targets: >= 100 at R = "
                                    "256 on an H200)",
        "batched_tflops": "TFLOP/s at each R (the batched part's count; FP32 peak 67)",
        "batched_run_epochs_per_s_graph": "the same with tools.batched --graph capture (its step one CUDA graph), "
                                          "at each R",
        "batched_tflops_graph": "TFLOP/s at each R, --graph capture",
        "batched_graph_speedup": "run-epochs/s graphed / eager, at each R"},
    "graph_compile": {
        "graph_compile_warmup_s": "--graph compile (torch.compile of the whole step, reduce-overhead): time to "
                                  "steady state beyond the steps' own, s",
        "graph_compile_step_ms": "--graph compile: step, ms",
        "graph_compile_speedup": "eager step (graph_step_ms_eager) / this step"},
    "compile": {
        "eager_warmup_s": "eager: first steps' time beyond the steady speed, s", "eager_step_ms": "eager: step, ms",
        "compile_default_warmup_s": "torch.compile: time to steady state beyond the steps' own, s",
        "compile_default_step_ms": "torch.compile: step, ms", "compile_default_speedup": "eager step / compiled step"},
    "epochs_compile": {
        "epoch_s_compile": "train.py --compile's three epochs, s (epoch 1 compiles)",
        "epochs_100_min_compile": "100 epochs with --compile extrapolated, min",
        "compile_breakeven_epochs": "epochs after which --compile has paid for its compile time",
        "compile_pays_off": "100 epochs with --compile are faster than without"},
    "compile_modes": {f"compile_{mode.replace('-', '_')}_{k}": f"mode={mode}: {what}" for mode in COMPILE_MODES[1:]
                      for k, what in (("warmup_s", "time to steady state beyond the steps' own, s"),
                                      ("step_ms", "step, ms"), ("speedup", "eager step / this step"))},
    "end": {"wall_s": "wall time of the suite, s"},
}
ALL_KEYS = {k: what for part in KEYS.values() for k, what in part.items()}
SPENT = "the suite's --budget was spent before this part"


class Results(dict):
    """The figures by key; reasons[key] says why a figure is null."""

    def __init__(self):
        super().__init__()
        self.reasons = {}

    def null(self, keys, reason):
        for k in keys:
            self[k] = None
            self.reasons[k] = reason


# train.py as its own program (python train.py ...), which then prints the CUDA memory it held at its peak:
# the memory is the training process's, so the suite's process cannot read it
TRAIN_WITH_PEAK = ("import atexit, runpy, sys, torch; sys.argv[0] = 'train.py'; "
                   "atexit.register(lambda: torch.cuda.is_available() and "
                   "print('peak_memory_bytes', torch.cuda.max_memory_allocated(), "
                   "'peak_reserved', torch.cuda.max_memory_reserved())); "
                   "runpy.run_path('train.py', run_name='__main__')")


def train_epochs(sizes, device, flags, timeout=None):
    """train.py's three epochs of the run_arch pair with these flags (FULL: synthetic data of CIFAR-100's size),
    its compile caches empty: (epoch seconds, wall seconds, peak allocated and reserved CUDA memory in GiB, or
    None on CPU). RuntimeError if it fails or outlasts timeout."""
    what = f"train.py {' '.join(flags)}"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run")
        cmd = [sys.executable, "-c", TRAIN_WITH_PEAK, *train_flags(sizes.run_arch, sizes.train_size, sizes.test_size,
                                                                   sizes.num_classes, sizes.batch_size, 3, device),
               *flags, "--out", out]
        run, wall = child(cmd, tmp, f"{what}'s 3 epochs", timeout)
        if run.returncode != 0:  # train.py's one-line errors
            raise RuntimeError(f"{what} exited with {run.returncode}: {tail(run.stderr)}")
        with open(os.path.join(out, "metrics.jsonl")) as f:
            epochs = [json.loads(line)["seconds"] for line in f]
    if device.type != "cuda":
        return epochs, wall, None, None
    # the training process's own peaks, which it prints last
    return (epochs, wall, *(float(run.stdout.split(f"{k} ")[-1].split()[0]) / 2 ** 30
                            for k in ("peak_memory_bytes", "peak_reserved")))


def extrapolate_min(epochs):
    """Minutes for 100 epochs: the first (with its one-off costs) and 99 at the mean of the later ones."""
    return (epochs[0] + 99 * statistics.mean(epochs[1:])) / 60


def compiled(res, prefix, mode, eager, sizes, device, budget, cap=math.inf):
    """{prefix}_warmup_s and _step_ms of step_timing under mode (a torch.compile mode, or "graph": train.py's
    --graph compile) in a child process with empty compile caches, and _speedup, res[eager] over that step;
    or null with the reason. The child has what is left of the budget, at most cap seconds."""
    keys = [f"{prefix}_{k}" for k in ("warmup_s", "step_ms", "speedup")]
    timeout = min(cap, budget() - 10)
    if timeout < 50:
        return res.null(keys, SPENT)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "out.json")
        cmd = [sys.executable, "-m", "tools.perf", "suite", "--child-compile", mode, "--device", device.type,
               "--json", path] + (["--small"] if sizes == SMALL else [])
        try:
            run = child(cmd, tmp, "the compiled step's steady state", timeout)[0]
        except RuntimeError as e:
            return res.null(keys, str(e))
        if run.returncode != 0:
            return res.null(keys, f"failed: {tail(run.stderr)}")
        with open(path) as f:
            res[keys[0]], res[keys[1]] = json.load(f)
    if res.get(eager) is None:
        return res.null(keys[2:], f"no eager step to compare with ({eager})")
    res[keys[2]] = res[eager] / res[keys[1]]


def part_sync(res, sizes, device, budget):
    cases = {}
    for mode, lc in SYNC_CASES:
        try:
            n = sync_free_samples(mode, lc, device)
            cases[f"{mode}/{lc}"] = "ok" if n == 5 * 128 else f"counted {n} samples, expected {5 * 128}"
        except Exception as e:  # RuntimeError naming the op that synchronised, or whatever else went wrong
            cases[f"{mode}/{lc}"] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"
    res.update(sync_free=all(v == "ok" for v in cases.values()), sync_free_cases=cases)


def part_torchrun(res, sizes, device, budget):
    ok, wall, why = torchrun_smoke(device, timeout=min(300, budget()))
    res.update(torchrun_nccl=ok, torchrun_s=wall)
    if why:
        res.reasons["torchrun_nccl"] = why
    if wall is None:
        res.reasons["torchrun_s"] = why


def part_step(res, sizes, device, budget):
    fig = step_figures(sizes.setup(sizes.arch, device), device)
    res.update(step_ratio=fig["step_ratio"], step_ms_cmd=fig["step_ms"]["cmd_step"],
               step_ms_ce=fig["step_ms"]["two_ce_steps"])


def part_throughput(res, sizes, device, budget):
    fig = throughput_figures(sizes.setup(sizes.arch, device), device,
                             configs=["dataloader_fp32", "device_fp32", "device_bf16"])
    res.update(throughput_dataloader_fp32=fig["dataloader_fp32"], throughput_device_fp32=fig["device_fp32"],
               throughput_device_bf16_cl=fig["device_bf16"],
               device_fp32_over_dataloader=fig["device_over_dataloader_fp32"],
               device_bf16_cl_over_dataloader=fig["device_bf16_over_dataloader_fp32"])


def part_graph(res, sizes, device, budget):
    res.update(graph_figures(sizes.setup(sizes.run_arch, device), device))
    res.null([k for k in KEYS["graph"] if k not in res], "CUDA only: CUDA graphs and torch.cuda memory statistics")


def part_epochs_graph(res, sizes, device, budget):
    """train.py's three epochs with --graph capture, before the eager ones: the figure that decides
    graph.CAPTURE_BY_DEFAULT comes first, so a suite cut short still has it."""
    graphed, _, peak, reserved = train_epochs(sizes, device, ["--graph", "capture"], timeout=budget() - 5)
    res.update(epoch_s_graph=graphed, epochs_100_min_graph=extrapolate_min(graphed), peak_memory_gib_graph=peak,
               peak_reserved_gib_graph=reserved)


def part_epochs(res, sizes, device, budget):
    epochs, wall, peak, _ = train_epochs(sizes, device, ["--graph", "off"], timeout=budget() - 5)
    res.update(epoch_s=epochs, epochs_100_min=extrapolate_min(epochs), epochs_other_s=wall - sum(epochs))
    if device.type != "cuda":
        return res.null(["peak_memory_gib", "graph_run_speedup"], "CUDA only (CUDA graphs, torch.cuda memory "
                        "statistics)")
    res["peak_memory_gib"] = peak
    if res.get("epochs_100_min_graph") is None:
        return res.null(["graph_run_speedup"], "no graphed epochs to compare with (epochs_graph)")
    res["graph_run_speedup"] = res["epochs_100_min"] / res["epochs_100_min_graph"]


def part_batched(res, sizes, device, budget):
    """tools.batched at each R: eager (--graph off), then on CUDA its step replayed as a CUDA graph (--graph
    capture), side by side."""
    hows = ("off", "capture") if device.type == "cuda" else ("off",)
    graph_keys = [k for k in KEYS["batched"] if "graph" in k]
    res.update(batched_runs=list(sizes.batched_runs), **{k: {} for k in KEYS["batched"] if k != "batched_runs"})
    if device.type != "cuda":
        res.null(graph_keys, "CUDA only (tools.batched --graph capture records a CUDA graph)")
    for runs in sizes.batched_runs:
        r = str(runs)
        for how in hows:
            if budget() < 30:
                res.reasons["batched_runs"] = f"the suite's --budget was spent before R = {runs}, --graph {how}"
                return
            with tempfile.TemporaryDirectory() as tmp:
                todo = jobs(tmp, runs, sizes.batched_epochs, None, device.type, data=SYNTHETIC,
                            extra=(*sizes.batched_flags, "--graph", how))
                wall = wall_seconds(batched.run_jobs, todo, device=device.type, log=lambda *_: None)
            graphed = "" if how == "off" else "_graph"
            res["batched_run_epochs_per_s" + graphed][r] = runs * sizes.batched_epochs / wall
            res["batched_tflops" + graphed][r] = flops(runs, sizes.batched_epochs, *sizes.batched_images) / wall / 1e12
        if len(hows) == 2:
            res["batched_graph_speedup"][r] = res["batched_run_epochs_per_s_graph"][r] / res["batched_run_epochs_per_s"][r]


def part_graph_compile(res, sizes, device, budget):
    compiled(res, "graph_compile", "graph", "graph_step_ms_eager", sizes, device, budget, cap=180)


def part_compile(res, sizes, device, budget):
    res["eager_warmup_s"], res["eager_step_ms"], _ = step_timing(sizes.setup(sizes.run_arch, device), device)
    compiled(res, "compile_default", "default", "eager_step_ms", sizes, device, budget)


def part_epochs_compile(res, sizes, device, budget):
    keys = list(KEYS["epochs_compile"])
    if budget() - 10 < 60:
        return res.null(keys, SPENT)
    try:
        compiled_s = train_epochs(sizes, device, ["--compile"], timeout=budget() - 10)[0]
    except RuntimeError as e:
        return res.null(keys, str(e))
    res.update(epoch_s_compile=compiled_s, epochs_100_min_compile=extrapolate_min(compiled_s))
    if res.get("epoch_s") is None:
        return res.null(keys[2:], "no eager epochs to compare with")
    eager = res["epoch_s"]
    saving = statistics.mean(eager[1:]) - statistics.mean(compiled_s[1:])  # per epoch, once compiled
    res["compile_pays_off"] = res["epochs_100_min_compile"] < res["epochs_100_min"]
    if saving > 0:
        res["compile_breakeven_epochs"] = 1 + max(0.0, compiled_s[0] - eager[0]) / saving
    else:
        res.null(["compile_breakeven_epochs"], "compiled epochs are not faster than eager ones")


def part_compile_modes(res, sizes, device, budget):
    for mode in COMPILE_MODES[1:]:
        compiled(res, f"compile_{mode.replace('-', '_')}", mode, "eager_step_ms", sizes, device, budget)


# In the order they run: what decides a default comes first (the graphed epochs before the eager ones and the
# step timings; the --compile default before the other compile modes).
PARTS = {"sync": part_sync, "torchrun": part_torchrun, "step": part_step, "throughput": part_throughput,
         "epochs_graph": part_epochs_graph, "epochs": part_epochs, "graph": part_graph, "batched": part_batched,
         "graph_compile": part_graph_compile, "compile": part_compile, "epochs_compile": part_epochs_compile,
         "compile_modes": part_compile_modes}
CUDA_ONLY = {"sync": "CUDA only: set_sync_debug_mode watches CUDA synchronisations",
             "torchrun": "CUDA only: NCCL needs GPUs (test_train.py runs torchrun with gloo on CPU)",
             "epochs_graph": "CUDA only (--graph capture records a CUDA graph)",
             "compile_modes": "CUDA only: CUDA graphs (reduce-overhead) and GPU kernel autotuning",
             "graph_compile": "CUDA only: reduce-overhead's CUDA graphs (tests/test_graph.py compiles the step on the "
                              "CPU)"}


def run_suite(device, sizes, budget_s, skip=(), argv=(), after_part=None):
    """Run every part within budget_s seconds; returns Results with every key of ALL_KEYS. after_part(res): called
    after each part with the figures so far (the suite's --json is rewritten then, so a kill keeps them)."""
    t_start = time.perf_counter()
    res = Results()
    res.update(about(device, argv), small=sizes == SMALL,
               sizes=json.loads(json.dumps(asdict(sizes))),  # as the JSON holds it: tuples as lists
               budget_s=budget_s, amp="bf16" if device.type == "cuda" else "off")

    def budget():
        return budget_s - (time.perf_counter() - t_start)

    for name, part in PARTS.items():
        if name in skip:
            res.null(KEYS[name], "skipped with --skip")
        elif name in CUDA_ONLY and device.type != "cuda":
            res.null(KEYS[name], CUDA_ONLY[name])
        elif budget() < 30:
            res.null(KEYS[name], SPENT)
        else:
            t0 = time.perf_counter()
            try:
                part(res, sizes, device, budget)
            except Exception as e:  # one part's failure must not cost the figures of the others
                res.null([k for k in KEYS[name] if k not in res], f"{type(e).__name__}: {str(e)[:300]}")
            print(f"[perf suite] {name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
        res["wall_s"] = time.perf_counter() - t_start
        if after_part is not None:
            after_part(dict(res, reasons=res.reasons, **{k: None for k in ALL_KEYS if k not in res}))
    for k in ALL_KEYS:  # a part that returned early may have left keys unset
        if k not in res:
            res.null([k], "not measured")
    return res


def table(res):
    def text(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        if isinstance(v, list):
            return " ".join(f"{x:.3g}" for x in v)
        if isinstance(v, dict):
            return ", ".join(f"{k} {x}" for k, x in v.items())
        return str(v)

    rows = [(k, "-" if res[k] is None else text(res[k]), res.reasons.get(k) or what) for k, what in ALL_KEYS.items()]
    w0, w1 = max(len(r[0]) for r in rows), min(40, max(len(r[1]) for r in rows))
    return "\n".join(f"{k:{w0}}  {v:{w1}}  {what}" for k, v, what in rows)


def suite(args, device, argv):
    """The suite part, or with --child-compile MODE one compiled timing for compiled(): [warmup_s, step_ms]."""
    sizes = SMALL if args.small or device.type != "cuda" else FULL
    if args.child_compile:
        graph_mode, compile_mode = ("compile", None) if args.child_compile == "graph" else ("off", args.child_compile)
        return list(step_timing(sizes.setup(sizes.run_arch, device), device, graph_mode, compile_mode)[:2])
    res = run_suite(device, sizes, args.budget, skip=args.skip, argv=argv,
                    after_part=lambda figures: write_json(args.json, figures))
    print(table(res))
    return res


# ---------------------------------------------------------------- profile: where a step's time goes

def profile(args, device, argv):
    """The profile part: the pair's CMD-P + MyLC step timed, then under torch.profiler."""
    cuda = device.type == "cuda"
    pair = Pair(Setup(arch=args.arch, num_classes=args.num_classes, batch_size=args.batch_size,
                      amp="bf16" if cuda else "off"), device)
    one = pair.on_batch(pair.cmd)
    fig = dict(about(device, argv), arch=args.arch, batch_size=args.batch_size, num_classes=args.num_classes)
    print(f"device {fig['device']}, torch {torch.__version__}, {args.arch} pair, batch {args.batch_size}, "
          f"K {args.num_classes}, {'bf16 + channels_last' if cuda else 'float32'}")
    for benchmark in ((False, True) if cuda else (False,)):
        torch.backends.cudnn.benchmark = benchmark
        ms = fig[f"step_ms_cudnn_benchmark_{str(benchmark).lower()}"] = 1e3 * timed(one, device, 3, args.steps)
        print(f"step {ms:.1f} ms ({args.batch_size / ms * 1e3:.0f} img/s) with cudnn.benchmark={benchmark}")
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=activities) as prof:
        wall = seconds(lambda: [one() for _ in range(args.steps)], device) / args.steps * 1e3
    events = prof.key_averages()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    print(events.table(sort_by=key, row_limit=args.top))
    device_ms = sum(getattr(e, key) for e in events) / 1e3 / args.steps
    kernels = sum(e.count for e in events if cuda and e.device_type == torch.autograd.DeviceType.CUDA) / args.steps
    print(f"per step under the profiler: wall {wall:.1f} ms, device busy {device_ms:.1f} ms"
          + (f", {kernels:.0f} kernels" if cuda else ""))
    return dict(fig, profiled_wall_ms=wall, device_busy_ms=device_ms, kernels=kernels if cuda else None)


# ---------------------------------------------------------------- the command line

def check_json(p, path):
    """--json is checked before anything is timed, so that a long measurement is never lost at the end."""
    parent = os.path.dirname(os.path.abspath(path)) if path else None
    if path and (os.path.isdir(path) or not os.path.isdir(parent) or not os.access(parent, os.W_OK)):
        p.error(f"--json {path}: cannot write a file there; give a file path in an existing folder")


def parse(argv):
    """The flags of every part, checked before anything is measured; the checks of the machine (a CUDA device,
    the data) come in main."""
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parts = p.add_subparsers(dest="part", required=True)
    shared = argparse.ArgumentParser(add_help=False)
    config.add_device_flag(shared)
    shared.add_argument("--json", help="write the figures to this file")

    def part(name, text):
        return parts.add_parser(name, help=text, description=text, parents=[shared],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)

    c = part("cost", "what CMD costs on top of training two networks")
    c.add_argument("--arch", default="cnn", help="NAME or NAME_A,NAME_B (models.ARCHS)")
    c.add_argument("--amp", choices=("auto", "bf16", "off"), default="auto",
                   help="for step_ratio; auto: bf16 on CUDA, off on CPU")
    for f in fields(Setup):  # every size of Setup is a flag with Setup's default and its comment as help
        if f.name not in ("arch", "amp"):
            c.add_argument(f"--{f.name.replace('_', '-')}", type=int, default=f.default, help=SETUP_HELP[f.name])
    c.add_argument("--peers", default="2,3,4", help="cohort sizes N whose step is timed against N CE steps")
    c.add_argument("--skip", default="", help="comma list of figures to skip: loss,step,throughput")
    s = part("suite", "everything a GPU can tell about the main command, within --budget")
    s.add_argument("--small", action="store_true", help="small sizes (always on without CUDA)")
    s.add_argument("--budget", type=float, default=480, help="seconds the suite may take; later parts are skipped")
    s.add_argument("--skip", default="", help=f"comma list of parts to skip: {', '.join(PARTS)}")
    s.add_argument("--child-compile", choices=COMPILE_MODES + ("graph",), help=argparse.SUPPRESS)  # compiled()
    f = part("profile", "where the time of one training step goes, under torch.profiler")
    f.add_argument("--arch", default="resnet34", help="NAME or NAME_A,NAME_B (models.ARCHS)")
    f.add_argument("--batch-size", type=int, default=128, help="images a step")
    f.add_argument("--num-classes", type=int, default=100, help="K, the classes of the synthetic batch")
    f.add_argument("--steps", type=int, default=10, help="timed and profiled steps")
    f.add_argument("--top", type=int, default=15, help="operators listed")
    b = part("batched", "many runs in one process (tools.batched) against one train.py process per run")
    b.add_argument("--runs", type=int, default=8, help="R, the runs")
    b.add_argument("--epochs", type=int, default=2, help="epochs of each run")
    b.add_argument("--jobs", type=int, default=2, help="train.py processes at a time for the comparison")
    b.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist", help="the four Fashion-MNIST IDX files")
    b.add_argument("--skip-processes", action="store_true", help="time only the batched runs")
    args = p.parse_args(argv)
    check_json(p, args.json)
    if args.part in ("cost", "profile"):
        for a in args.arch.split(","):
            if a not in models.ARCHS:
                p.error(f"unknown architecture '{a}'; choose from {', '.join(models.ARCHS)}")
    least = dict(cost=dict(batch_size=1, num_classes=2, image_size=8, images=1, epochs=1, workers=0, warmup=0,
                           repeats=1, rounds=1),
                 profile=dict(batch_size=1, num_classes=2, steps=1, top=1), batched=dict(runs=1, epochs=1, jobs=1))
    for flag, low in least.get(args.part, {}).items():
        if getattr(args, flag) < low:
            p.error(f"--{flag.replace('_', '-')} {getattr(args, flag)}: must be at least {low}")
    if args.part == "cost":
        try:
            peers = [int(v) for v in args.peers.split(",") if v]
            assert peers and all(2 <= m <= 26 for m in peers)
        except (ValueError, AssertionError):
            p.error(f"--peers {args.peers}: a comma list of cohort sizes between 2 and 26, e.g. 2,3,4")
        args.peers = peers
    if args.part in ("cost", "suite"):
        choices = ("loss", "step", "throughput") if args.part == "cost" else tuple(PARTS)
        args.skip = set(filter(None, args.skip.split(",")))
        if args.skip - set(choices):
            p.error(f"unknown {'figure' if args.part == 'cost' else 'part'}(s) {', '.join(sorted(args.skip - set(choices)))} "
                    f"in --skip; choose from {', '.join(choices)}")
    if args.part == "suite" and not 0 < args.budget < math.inf:
        p.error(f"--budget {args.budget}: give the seconds the suite may take, e.g. 480")
    return args


@one_line("perf.py")
def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    device = build.pick_device(args.device)  # and cuDNN's autotuner on CUDA, as train.py runs
    res = dict(cost=cost, suite=suite, profile=profile, batched=batched_against_processes)[args.part](args, device, argv)
    write_json(args.json, dict(res, reasons=res.reasons) if isinstance(res, Results) else res)
    return res


if __name__ == "__main__":
    res = main()  # the suite exits 1 if a check failed
    sys.exit(1 if isinstance(res, dict) and (res.get("sync_free") is False or res.get("torchrun_nccl") is False) else 0)
