"""Checks of the CUDA configuration that only a GPU can run (README "Performance"; perf_suite.py runs them).

SYNC_CASES        -- the (mode, lc) pairs whose training step the sync check covers
sync_free_samples -- steady-state training steps under torch.cuda.set_sync_debug_mode("error")
torchrun_smoke    -- train.py under a 1-process torchrun: NCCL on CUDA (gloo on CPU)

test_train.py runs sync_free_samples where a GPU is present; perf_suite.py runs both.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

import models
from mutual import THRESHOLDS, Clock, Comparators, Method, Precision, mutual_step
from training import datasets
from training.batches import Batches, Placement, Spec
from training.graph import replayed

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
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
    torch.manual_seed(0)
    nets = [models.build_model("cnn", 10).to(device, memory_format=torch.channels_last) for _ in range(2)]
    opts = [torch.optim.SGD(n.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4) for n in nets]
    scaler = torch.amp.GradScaler(device.type, enabled=False)
    autocast = dict(device_type=device.type, dtype=torch.bfloat16, enabled=True)
    r = [torch.zeros((), device=device), torch.zeros((), device=device)]
    batches = Batches(d.train, labels=d.train.labels, clean=d.train.labels, spec=Spec(batch_size, d.mean, d.std),
                      placement=Placement(device, memory_format=torch.channels_last))
    it = batches.epoch(0, 0)
    precision = Precision(autocast, scaler)
    step = replayed(graph, lambda batch, chi, r, clock: mutual_step(nets, opts, batch, method, chi, r, clock, precision),
                    opts, method, device)
    # epoch 5, past Co-teaching+'s step rule: R(t) < 1 and disagreements for the comparators (baselines.keep_rule)
    clock, chi = Clock(5, 1000, 2000, 10, 0), 1.0
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


def tiny_run_flags(device):
    return ["--dataset", "synthetic", "--arch", "cnn", "--synthetic-size", "256", "--synthetic-test-size", "128",
            "--synthetic-classes", "10", "--batch-size", "64", "--workers", "0", "--epochs", "1",
            "--device", device.type]


def torchrun_smoke(device, timeout):
    """(ok, seconds, why not): train.py under a 1-process torchrun (NCCL on CUDA, gloo on CPU), tiny data;
    ok when DistributedDataParallel ran on that backend, its all-reduces included, and the run finished."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
               os.path.join(HERE, "train.py"), *tiny_run_flags(device), "--out", out]
        t0 = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=HERE)
        seconds = time.perf_counter() - t0
        if res.returncode != 0:
            return False, seconds, f"exit code {res.returncode}: {tail(res.stderr)}"
        with open(os.path.join(out, "config.json")) as f:
            world = json.load(f)["world_size"]
        backend = "nccl" if device.type == "cuda" else "gloo"
        ddp = f"distributed: 1 process, {backend} backend, DistributedDataParallel" in res.stdout  # collectives ran
        ok = world == 1 and ddp and os.path.exists(os.path.join(out, "summary.json"))
        return ok, seconds, None if ok else f"world_size {world}, DDP on {backend} {'ran' if ddp else 'did not run'}, " \
                                            f"summary.json {'written' if os.path.exists(os.path.join(out, 'summary.json')) else 'missing'}"


def tail(text):
    """The last non-empty line of a child's output, for a one-line reason."""
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
