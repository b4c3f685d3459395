"""Where the time of one training step goes: the CMD-P + MyLC step of two models under torch.profiler.

    python -m tools.profile_step                       # on a GPU: the ResNet34 pair, batch 128, K = 100, bf16
    python -m tools.profile_step --arch cnn --steps 3  # anywhere, in seconds

Prints the step's median time with cuDNN's autotuner off and on (torch.backends.cudnn.benchmark), then the
operators that take the most device time (CPU time without CUDA), and the host's time against the device's:
a step whose device time is well under its wall time waits on the host (Python, kernel launches).
"""
import argparse
import time

import torch

from mutual import Method, Precision, mutual_step
from tools import bench
from training.errors import Parser, one_line


@one_line("profile_step.py")
def main(argv=None):
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="resnet34")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--num-classes", type=int, default=100)
    p.add_argument("--steps", type=int, default=10, help="timed and profiled steps (default 10)")
    p.add_argument("--top", type=int, default=15, help="operators listed (default 15)")
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.type == "cuda"
    setup = bench.Setup(arch=args.arch, num_classes=args.num_classes, batch_size=args.batch_size,
                        amp="bf16" if cuda else "off")
    fmt = torch.channels_last if cuda else torch.contiguous_format
    nets, opts = bench.make_pair(setup, device, fmt)
    g = torch.Generator(device).manual_seed(1)
    x = torch.randn(args.batch_size, 3, 32, 32, device=device, generator=g).contiguous(memory_format=fmt)
    y = torch.randint(0, args.num_classes, (args.batch_size,), device=device, generator=g)
    r = [torch.tensor(0.6, device=device)] * 2
    precision = Precision(dict(device_type=device.type, dtype=torch.bfloat16, enabled=cuda),
                          torch.amp.GradScaler(device.type, enabled=False))

    def one():
        mutual_step(nets, opts, (x, y, y), Method(), 1.0, r, bench.HALFWAY, precision)

    print(f"device {torch.cuda.get_device_name(0) if cuda else 'cpu'}, torch {torch.__version__}, {args.arch} pair, "
          f"batch {args.batch_size}, K {args.num_classes}, {'bf16 + channels_last' if cuda else 'float32'}")
    for benchmark in ((False, True) if cuda else (False,)):
        torch.backends.cudnn.benchmark = benchmark
        ms = 1e3 * bench.timed(one, device, warmup=3, repeats=args.steps)
        print(f"step {ms:.1f} ms ({args.batch_size / ms * 1e3:.0f} img/s) with cudnn.benchmark={benchmark}")
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(args.steps):
            one()
        if cuda:
            torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / args.steps * 1e3
    events = prof.key_averages()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    print(events.table(sort_by=key, row_limit=args.top))
    device_ms = sum(getattr(e, key) for e in events) / 1e3 / args.steps
    kernels = sum(e.count for e in events if cuda and e.device_type == torch.autograd.DeviceType.CUDA) / args.steps
    print(f"per step under the profiler: wall {wall:.1f} ms, device busy {device_ms:.1f} ms"
          + (f", {kernels:.0f} kernels" if cuda else ""))
    return wall


if __name__ == "__main__":
    main()
