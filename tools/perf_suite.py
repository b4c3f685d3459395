"""Everything a GPU can tell us about this implementation, in one command (README "Performance").

    python -m tools.perf_suite --json perf.json          # one H100/H200: the full sizes, within --budget (8 min)
    python -m tools.perf_suite --json perf.json --small  # any machine in a minute or two; automatic without a GPU

The parts, in the order they run. Every key is always written: a figure that could not be
measured is null, and "reasons" in the JSON (and the table) says why.
sync           -- the CUDA training step never waits for the host: set_sync_debug_mode("error")
torchrun       -- train.py under a 1-process torchrun on NCCL, on tiny synthetic data
step           -- step_ratio (bench.step_figures): a CMD-P + MyLC step over two CE steps, ResNet34 pair, bf16
throughput     -- images/s of the pair: DataLoader fp32, device-resident fp32, device-resident bf16 + channels_last
graph          -- the step eager (--graph off), eager with fused SGD, and replayed as one CUDA graph (--graph
                  capture, the CUDA default), with two CE steps replayed: step, step_ratio, capture time, memory
epochs         -- three epochs of train.py on CIFAR-100-sized synthetic data, extrapolated to 100; peak memory;
                  with --graph off and, on CUDA, again with --graph capture: the two side by side
graph_compile  -- the step under --graph compile (torch.compile of the whole step, reduce-overhead on CUDA)
batched        -- tools.batched: R runs of the demonstration's MLP pair in one process, run-epochs/s and TFLOP/s
compile        -- the same step eager and under torch.compile: time to steady state, steady-state step
epochs_compile -- the three epochs again with train.py --compile: does compiling pay off over 100 epochs?
compile_modes  -- the step under compile's CUDA-graph mode (reduce-overhead) and max-autotune-no-cudagraphs

Compiled runs go to child processes with an empty inductor cache, so compile times are first-run
times and a slow compile ends at its timeout instead of overrunning the budget.

Sizes, FULL, SMALL -- the sizes of each part on a GPU and in --small
KEYS, ALL_KEYS     -- every key the suite writes, per part, with what it means (the table's rows)
run_suite          -- run the parts in order within --budget seconds; table -- the printed table
The checks themselves are cuda_checks.py; the timings are bench.py's functions.
"""
import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

import torch

from tools import batched, bench, bench_batched
from tools.cuda_checks import SYNC_CASES, sync_free_samples, tail, torchrun_smoke
from training import config
from training.errors import Parser, one_line

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class Sizes:
    """How big each part is: FULL on a GPU, SMALL with --small or without one."""
    arch: str               # step and throughput
    run_arch: str           # compile and both epochs parts
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


FULL = Sizes(arch="resnet34", run_arch="resnet34", batch_size=128, num_classes=100, rounds=3, warmup=3, repeats=10,
             images=10240, throughput_epochs=2, train_size=50000, test_size=10000, workers=min(8, os.cpu_count() or 1),
             batched_runs=(64, 256), batched_epochs=3, batched_flags=(),
             batched_images=(bench_batched.TRAIN, bench_batched.EVAL))
SMALL = Sizes(arch="cnn", run_arch="mlp", batch_size=32, num_classes=10, rounds=1, warmup=1, repeats=5,
              images=64, throughput_epochs=1, train_size=256, test_size=128, workers=0, batched_runs=(2,),
              batched_epochs=2, batched_flags=("--subset", "256", "--synthetic-test-size", "128"),
              batched_images=(230, 26 + 128))  # --val-split 0.1 of 256 keeps 26 out

# part -> {key: what it is}: the table's rows in this order. Every key appears in the JSON.
KEYS = {
    "info": {
        "device": "device name", "torch": "torch version", "cuda": "CUDA version torch was built with",
        "cudnn": "cuDNN version", "date": "date and time of the run", "command": "the command",
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
    "epochs": {
        "epoch_s": "train.py --graph off's three epochs (train + test), s",
        "epochs_100_min": "100 epochs extrapolated: epoch 1 + 99 x mean(epochs 2-3), min (target < 10)",
        "epochs_other_s": "train.py's time outside its epochs: starting Python, data, models, checkpoints, s",
        "peak_memory_gib": "peak CUDA memory allocated during those epochs, GiB",
        "epoch_s_graph": "train.py --graph capture's three epochs, s (epoch 1 warms up and captures)",
        "epochs_100_min_graph": "100 epochs with --graph capture extrapolated, min (target <= 6)",
        "peak_memory_gib_graph": "peak CUDA memory allocated during those epochs, GiB",
        "peak_reserved_gib_graph": "peak CUDA memory reserved during those epochs (graph pools), GiB",
        "graph_run_speedup": "100 epochs eager / 100 epochs graphed"},
    "batched": {
        "batched_runs": "tools.batched: R, the runs of the demonstration's MLP pair trained in one process",
        "batched_run_epochs_per_s": "run-epochs per second at each R, start-up included (targets: >= 100 at R = "
                                    "256 on an H200)",
        "batched_tflops": "TFLOP/s at each R (bench_batched's count; FP32 peak 67)",
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


class Results(dict):
    """The figures by key; reasons[key] says why a figure is null."""

    def __init__(self):
        super().__init__()
        self.reasons = {}

    def null(self, keys, reason):
        for k in keys:
            self[k] = None
            self.reasons[k] = reason


def fresh_cache_env(tmp):
    """Environment for a child whose inductor and Triton caches start empty."""
    return dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                TRITON_CACHE_DIR=os.path.join(tmp, "triton"))


# ---------------------------------------------------------------- timings

def bench_args(sizes, arch, device):
    """bench.py's Setup for these sizes; train.py's precision: bf16 on CUDA, float32 on CPU."""
    return bench.Setup(arch=arch, num_classes=sizes.num_classes, batch_size=sizes.batch_size, image_size=32,
                              amp="bf16" if device.type == "cuda" else "off", rounds=sizes.rounds,
                              warmup=sizes.warmup, repeats=sizes.repeats, images=sizes.images,
                              epochs=sizes.throughput_epochs, workers=sizes.workers)


def compile_child(mode, sizes, device, timeout):
    """bench.step_timing(mode) in a child with empty compile caches: (warmup_s, step_ms); RuntimeError if not.
    mode "graph": bench.replay_timing of --graph compile."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "out.json")
        cmd = [sys.executable, "-m", "tools.perf_suite", "--child-compile", mode, "--device", device.type,
               "--json", path] + (["--small"] if sizes == SMALL else [])
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=HERE,
                                 env=fresh_cache_env(tmp))
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"did not reach steady state within {timeout:.0f} s") from None
        if res.returncode != 0:
            raise RuntimeError(f"failed: {tail(res.stderr)}")
        with open(path) as f:
            out = json.load(f)
        return out["warmup_s"], out["step_ms"]


def run_flags(sizes, device):
    """train.py's flags for the epochs parts: the run_arch pair on CIFAR-100-sized synthetic data (FULL)."""
    return ["--dataset", "synthetic", "--arch", sizes.run_arch, "--synthetic-size", str(sizes.train_size),
            "--synthetic-test-size", str(sizes.test_size), "--synthetic-classes", str(sizes.num_classes),
            "--batch-size", str(sizes.batch_size), "--epochs", "3", "--device", device.type, "--workers", "0"]


# train.py as its own program (python train.py ...), which then prints the CUDA memory it held at its peak:
# the memory is the training process's, so the suite's process cannot read it
TRAIN_WITH_PEAK = ("import atexit, runpy, sys, torch; sys.argv[0] = 'train.py'; "
                   "atexit.register(lambda: torch.cuda.is_available() and "
                   "print('peak_memory_bytes', torch.cuda.max_memory_allocated(), "
                   "'peak_reserved', torch.cuda.max_memory_reserved())); "
                   "runpy.run_path('train.py', run_name='__main__')")


def epoch_seconds(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line)["seconds"] for line in f]


def extrapolate_min(epochs):
    """Minutes for 100 epochs: the first (with its one-off costs) and 99 at the mean of the later ones."""
    return (epochs[0] + 99 * statistics.mean(epochs[1:])) / 60


# ---------------------------------------------------------------- the parts

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
    timeout = min(300, budget())
    try:
        ok, seconds, why = torchrun_smoke(device, timeout=timeout)
    except subprocess.TimeoutExpired:
        res.null(["torchrun_s"], f"timed out after {timeout:.0f} s")
        ok, seconds, why = False, None, f"timed out after {timeout:.0f} s"
    res.update(torchrun_nccl=ok, torchrun_s=seconds)
    if why:
        res.reasons["torchrun_nccl"] = why


def part_step(res, sizes, device, budget):
    fig = bench.step_figures(bench_args(sizes, sizes.arch, device), device)
    res.update(step_ratio=fig["step_ratio"], step_ms_cmd=fig["step_ms"]["cmd_step"],
               step_ms_ce=fig["step_ms"]["two_ce_steps"])


def part_throughput(res, sizes, device, budget):
    fig = bench.throughput_figures(bench_args(sizes, sizes.arch, device), device,
                                   configs=["dataloader_fp32", "device_fp32", "device_bf16"])
    res.update(throughput_dataloader_fp32=fig["dataloader_fp32"], throughput_device_fp32=fig["device_fp32"],
               throughput_device_bf16_cl=fig["device_bf16"],
               device_fp32_over_dataloader=fig["device_over_dataloader_fp32"],
               device_bf16_cl_over_dataloader=fig["device_bf16_over_dataloader_fp32"])


def train_epochs(sizes, device, graph):
    """train.py's three epochs with --graph graph: (epoch seconds, wall seconds, peak allocated and reserved
    CUDA memory in GiB, or None on CPU)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run")
        t0 = time.perf_counter()
        run = subprocess.run([sys.executable, "-c", TRAIN_WITH_PEAK, *run_flags(sizes, device), "--graph", graph,
                              "--out", out], cwd=HERE, capture_output=True, text=True)
        if run.returncode != 0:  # train.py's one-line errors
            raise RuntimeError(f"train.py --graph {graph} exited with {run.returncode}: {tail(run.stderr)}")
        wall = time.perf_counter() - t0
        epochs = epoch_seconds(out)
    if device.type != "cuda":
        return epochs, wall, None, None
    # the training process's own peaks, which it prints last
    return (epochs, wall, *(float(run.stdout.split(f"{k} ")[-1].split()[0]) / 2 ** 30
                            for k in ("peak_memory_bytes", "peak_reserved")))


def part_epochs(res, sizes, device, budget):
    epochs, wall, peak, _ = train_epochs(sizes, device, "off")
    res.update(epoch_s=epochs, epochs_100_min=extrapolate_min(epochs), epochs_other_s=wall - sum(epochs))
    graph_keys = [k for k in KEYS["epochs"] if "graph" in k]
    if device.type != "cuda":
        return res.null(["peak_memory_gib"] + graph_keys, "CUDA only (CUDA graphs, torch.cuda memory statistics)")
    res["peak_memory_gib"] = peak
    if budget() < 60:
        return res.null(graph_keys, "the suite's --budget was spent before the graphed run")
    graphed, _, peak, reserved = train_epochs(sizes, device, "capture")
    res.update(epoch_s_graph=graphed, epochs_100_min_graph=extrapolate_min(graphed), peak_memory_gib_graph=peak,
               peak_reserved_gib_graph=reserved, graph_run_speedup=res["epochs_100_min"] / extrapolate_min(graphed))


def part_graph(res, sizes, device, budget):
    res.update(bench.graph_figures(bench_args(sizes, sizes.run_arch, device), device))
    res.null([k for k in KEYS["graph"] if k not in res], "CUDA only: CUDA graphs and torch.cuda memory statistics")


def part_graph_compile(res, sizes, device, budget):
    keys = list(KEYS["graph_compile"])
    timeout = min(180, budget() - 10)
    if timeout < 50:
        return res.null(keys, "the suite's --budget was spent before this part")
    try:
        warmup_s, step_ms = compile_child("graph", sizes, device, timeout)
    except RuntimeError as e:
        return res.null(keys, str(e))
    res.update(graph_compile_warmup_s=warmup_s, graph_compile_step_ms=step_ms)
    if res.get("graph_step_ms_eager") is None:
        return res.null(keys[2:], "no eager step to compare with (the graph part)")
    res["graph_compile_speedup"] = res["graph_step_ms_eager"] / step_ms


def part_batched(res, sizes, device, budget):
    """tools.batched at each R: eager (--graph off), then on CUDA its step replayed as a CUDA graph (--graph
    capture), side by side."""
    hows = ("off", "capture") if device.type == "cuda" else ("off",)
    graph_keys = [k for k in KEYS["batched"] if "graph" in k]
    res.update(batched_runs=list(sizes.batched_runs), **{k: {} for k in KEYS["batched"] if k != "batched_runs"})
    if device.type != "cuda":
        res.null(graph_keys, "CUDA only (tools.batched --graph capture records a CUDA graph)")
    for runs in sizes.batched_runs:
        for how in hows:
            if budget() < 30:
                res.reasons["batched_runs"] = f"the suite's --budget was spent before R = {runs}, --graph {how}"
                return
            with tempfile.TemporaryDirectory() as tmp:
                todo = bench_batched.jobs(tmp, runs, sizes.batched_epochs, None, device.type,
                                          data=bench_batched.SYNTHETIC, extra=(*sizes.batched_flags, "--graph", how))
                seconds = bench_batched.timed(lambda: batched.run_jobs(todo, device.type, log=lambda *_: None))
            train, evaluated = sizes.batched_images
            flop = runs * sizes.batched_epochs * 2 * bench_batched.FORWARD * (3 * train + evaluated)
            tail = "" if how == "off" else "_graph"
            res["batched_run_epochs_per_s" + tail][str(runs)] = runs * sizes.batched_epochs / seconds
            res["batched_tflops" + tail][str(runs)] = flop / seconds / 1e12
        if len(hows) == 2:
            r = str(runs)
            res["batched_graph_speedup"][r] = res["batched_run_epochs_per_s_graph"][r] / res["batched_run_epochs_per_s"][r]


def compile_mode(res, mode, sizes, device, budget):
    """The compile_<mode>_* figures from a child process, or null with the reason."""
    m = mode.replace("-", "_")
    keys = [f"compile_{m}_warmup_s", f"compile_{m}_step_ms", f"compile_{m}_speedup"]
    if budget() < 60:
        return res.null(keys, "the suite's --budget was spent before this mode")
    try:
        warmup_s, step_ms = compile_child(mode, sizes, device, timeout=budget() - 10)
    except RuntimeError as e:
        return res.null(keys, str(e))
    res.update({keys[0]: warmup_s, keys[1]: step_ms, keys[2]: res["eager_step_ms"] / step_ms})


def part_compile(res, sizes, device, budget):
    args = bench_args(sizes, sizes.run_arch, device)
    res["eager_warmup_s"], res["eager_step_ms"] = bench.step_timing(args, device, None)
    compile_mode(res, "default", sizes, device, budget)


def part_compile_modes(res, sizes, device, budget):
    for mode in COMPILE_MODES[1:]:
        compile_mode(res, mode, sizes, device, budget)


def part_epochs_compile(res, sizes, device, budget):
    keys = ["epoch_s_compile", "epochs_100_min_compile", "compile_breakeven_epochs", "compile_pays_off"]
    timeout = budget() - 10
    if timeout < 60:
        return res.null(keys, "the suite's --budget was spent before this part")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run")
        cmd = [sys.executable, os.path.join(HERE, "train.py"), *run_flags(sizes, device), "--compile", "--out", out]
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=HERE,
                                 env=fresh_cache_env(tmp))
        except subprocess.TimeoutExpired:
            return res.null(keys, f"train.py --compile did not finish 3 epochs within {timeout:.0f} s")
        if run.returncode != 0:
            return res.null(keys, f"train.py --compile failed: {tail(run.stderr)}")
        compiled = epoch_seconds(out)
    res.update(epoch_s_compile=compiled, epochs_100_min_compile=extrapolate_min(compiled))
    if res.get("epoch_s") is None:
        return res.null(keys[2:], "no eager epochs to compare with")
    eager = res["epoch_s"]
    saving = statistics.mean(eager[1:]) - statistics.mean(compiled[1:])  # per epoch, once compiled
    res["compile_pays_off"] = res["epochs_100_min_compile"] < res["epochs_100_min"]
    if saving > 0:
        res["compile_breakeven_epochs"] = 1 + max(0.0, compiled[0] - eager[0]) / saving
    else:
        res.null(["compile_breakeven_epochs"], "compiled epochs are not faster than eager ones")


# In the order they run: what decides the --compile default comes before the other compile modes.
PARTS = {"sync": part_sync, "torchrun": part_torchrun, "step": part_step, "throughput": part_throughput,
         "graph": part_graph, "epochs": part_epochs, "batched": part_batched, "graph_compile": part_graph_compile,
         "compile": part_compile, "epochs_compile": part_epochs_compile, "compile_modes": part_compile_modes}
CUDA_ONLY = {"sync": "CUDA only: set_sync_debug_mode watches CUDA synchronisations",
             "torchrun": "CUDA only: NCCL needs GPUs (test_train.py runs torchrun with gloo on CPU)",
             "compile_modes": "CUDA only: CUDA graphs (reduce-overhead) and GPU kernel autotuning",
             "graph_compile": "CUDA only: reduce-overhead's CUDA graphs (tests/test_graph.py compiles the step on the "
                              "CPU)"}


def run_suite(device, sizes, budget_s, skip=(), command=""):
    """Run every part within budget_s seconds; returns Results with every key of ALL_KEYS."""
    t_start = time.perf_counter()
    res = Results()
    device_name = (torch.cuda.get_device_name(device) if device.type == "cuda" else
                   f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)")
    res.update(device=device_name, torch=torch.__version__, cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
               date=time.strftime("%Y-%m-%d %H:%M"), small=sizes == SMALL, command=command,
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
            res.null(KEYS[name], "the suite's --budget was spent before this part")
        else:
            t0 = time.perf_counter()
            try:
                part(res, sizes, device, budget)
            except Exception as e:  # one part's failure must not cost the figures of the others
                res.null([k for k in KEYS[name] if k not in res], f"{type(e).__name__}: {str(e)[:300]}")
            print(f"[perf_suite] {name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    res["wall_s"] = time.perf_counter() - t_start
    for k in ALL_KEYS:  # a part that returned early may have left keys unset
        if k not in res:
            res.null([k], "not measured")
    return res


def table(res):
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        if isinstance(v, list):
            return " ".join(f"{x:.3g}" for x in v)
        if isinstance(v, dict):
            return ", ".join(f"{k} {x}" for k, x in v.items())
        return str(v)

    rows = [(k, "-" if res[k] is None else fmt(res[k]), res.reasons.get(k) or what) for k, what in ALL_KEYS.items()]
    w0, w1 = max(len(r[0]) for r in rows), min(40, max(len(r[1]) for r in rows))
    return "\n".join(f"{k:{w0}}  {v:{w1}}  {what}" for k, v, what in rows)


@one_line("perf_suite.py")
def main(argv=None):
    p = Parser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    config.add_device_flag(p)
    p.add_argument("--small", action="store_true", help="small sizes (always on without CUDA)")
    p.add_argument("--budget", type=float, default=480, help="seconds the suite may take; later parts are skipped")
    p.add_argument("--skip", default="", help=f"comma list of parts to skip: {', '.join(PARTS)}")
    p.add_argument("--json", help="write every figure here")
    p.add_argument("--child-compile", choices=COMPILE_MODES + ("graph",), help=argparse.SUPPRESS)  # one compiled timing
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error(config.NO_CUDA)
    unknown = set(filter(None, args.skip.split(","))) - set(PARTS)
    if unknown:
        p.error(f"unknown part(s) {', '.join(sorted(unknown))} in --skip; choose from {', '.join(PARTS)}")
    if not 0 < args.budget < math.inf:
        p.error(f"--budget {args.budget}: give the seconds the suite may take, e.g. 480")
    bench.check_json_path(p, args.json)
    device = torch.device("cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = device.type == "cuda"  # as train.py runs (config.pick_device)
    sizes = SMALL if args.small or device.type != "cuda" else FULL
    if args.child_compile == "graph":
        warmup_s, step_ms, _ = bench.replay_timing(bench_args(sizes, sizes.run_arch, device), device, "compile")
    if args.child_compile in COMPILE_MODES:
        warmup_s, step_ms = bench.step_timing(bench_args(sizes, sizes.run_arch, device), device,
                                               args.child_compile)
    if args.child_compile:
        with open(args.json, "w") as f:
            json.dump(dict(warmup_s=warmup_s, step_ms=step_ms), f)
        return None
    command = "python -m tools.perf_suite " + " ".join(sys.argv[1:] if argv is None else argv)
    res = run_suite(device, sizes, args.budget, skip=set(args.skip.split(",")), command=command)
    print(table(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(res, reasons=res.reasons), f, indent=1)
    return res


if __name__ == "__main__":
    res = main()
    sys.exit(1 if res and (res["sync_free"] is False or res["torchrun_nccl"] is False) else 0)  # a check failed
