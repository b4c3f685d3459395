"""Table 1's shape in the paper's own recipe on Fashion-MNIST, one GPU lease at a time
(python -m studies.fmnist recipe STAGE; studies/gpu_check.sh runs a wave as its last stage).

REGIMES -- the declaration, made before any of its runs: the rows, the data, the appendix's SGD
ORDER   -- what matters most: the rows a wave keeps first when its runs cannot all finish in its budget
wave    -- one wave: the rows still missing of the next seed(s), as train.py processes at once (under CUDA MPS on
           a GPU), stopped at a time budget; after every run's first epoch it projects the wave's end (Pace, keep)
           and stops the runs last in ORDER that would not finish, so that the rest finish whole; each run's
           metrics are written epoch by epoch, so a wave cut short keeps every finished epoch; a run whose
           --graph capture dies before its first epoch starts again eager
evidence -- whether docs/gpu holds green CUDA tests and both epochs_100_min for this step: a lease may run the
           wave alone (studies/gpu_check.sh, WAVE_ONLY=1)
pack    -- a wave's folder, or studies/gpu_check.sh's archive of it, into the raw data, docs/fmnist/recipe/runs.jsonl.gz
           (refuses a wave packed before)
report  -- docs/fmnist/recipe/report.md from the raw data: the preconditions first, then every row with its n,
           the paired differences, and the paper's Table 1 MyLC column beside ours

    python -m studies.fmnist recipe wave --dry-run                       # the next wave's train.py commands
    python -m studies.fmnist recipe wave --out gpu-check/wave --device cuda --budget 270 --mps
    python -m studies.fmnist recipe pack gpu-check/gpu-check.tar.gz      # into docs/fmnist/recipe/runs.jsonl.gz
    python -m studies.fmnist recipe report                               # docs/fmnist/recipe/report.md

Why a wave: a lent GPU comes for about 15 minutes, start-up included, at most 10 minutes a command, and comes
back with small files only. The recipe at full size (60,000 images, 100 epochs, ResNet34) is about 50 such
leases, so the declared study is what fits one: 8,000 images and 60 epochs on a ResNet18 pair, five rows of one
seed in about four and a half minutes, merged into the raw data wave by wave.
"""
import contextlib
import glob
import gzip
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from typing import NamedTuple
from xml.etree import ElementTree

from studies import outbox
from tools.paper_tables import PAPER
from tools.stats import fmt, mean_std, paired
from tools.sweep import diagnostics, early_stopped, print_commands
from training import runfiles
from training.errors import UserError

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RAW = os.path.join("docs", "fmnist", "recipe", "runs.jsonl.gz")


class Regime(NamedTuple):
    """A declared size of the study: train.py's flags for every row, and the rows it runs."""
    flags: list
    rows: tuple


# The rows: Table 1's MyLC column at the project's Table 1 eta and b (mutual.THRESHOLDS: CMD-S eta 4, CMD-P eta 4
# and b -5), and CE without distillation, the harm the method is meant to undo.
ROWS = {
    "ce-zero": ("CE, zero knowledge", ["--mode", "zero", "--lc", "ce"]),
    "mylc-zero": ("MyLC, zero knowledge", ["--mode", "zero", "--lc", "mylc"]),
    "mylc-all": ("MyLC, all knowledge (η = 1)", ["--mode", "all", "--lc", "mylc"]),
    "mylc-cmds": ("MyLC, CMD-S (η = 4)", ["--mode", "static", "--lc", "mylc"]),
    "mylc-cmdp": ("MyLC, CMD-P (η = 4, b = −5)", ["--mode", "progressive", "--lc", "mylc"]),
}
PAIRS = [("mylc-cmdp", "mylc-zero"), ("mylc-cmdp", "mylc-all"), ("mylc-cmdp", "ce-zero"), ("mylc-cmdp", "mylc-cmds")]
# The paper's numbers beside ours, for the order of the rows only: CIFAR-100, 40% symmetric noise, ResNet34
# (Table 1's MyLC column; CE from Table 2).
PAPER_ROWS = {"ce-zero": PAPER["table2"]["ce"][3], **{f"mylc-{m}": PAPER["table1"][k][3] for m, k in (
    ("zero", "zero"), ("all", "all"), ("cmds", "static"), ("cmdp", "progressive"))}}
# The appendix's SGD, the same for every row: lr 0.1, momentum 0.9, weight decay 5e-4, batch 128, crops with
# padding 4 (and flips). 60 epochs, lr / 10 at 30 and 48: 12 epochs at 0.01 after the second milestone, since the
# MLP runs at 60% noise memorised most after the lr fell (0.24 of the noisy labels by epoch 39, 0.47 by 50).
SGD = ["--lr", "0.1", "--lr-decay", "0.1", "--momentum", "0.9", "--weight-decay", "5e-4", "--augment", "paper"]
DATA = ["--subset", "8000", "--subset-seed", "0", "--val-split", "0.1"]  # 7,200 noisy, 800 clean; all 10,000 test
REGIMES = {
    "gpu": Regime(["--arch", "resnet18", *DATA, *SGD, "--epochs", "60", "--milestones", "30,48", "--batch-size",
                   "128"], tuple(ROWS)),
    # the same command at the size of a CPU test: what a GPU runs has run in the suite first
    "toy": Regime(["--arch", "cnn", "--subset", "300", "--subset-seed", "0", "--val-split", "0.1", *SGD, "--epochs",
                   "2", "--milestones", "1", "--batch-size", "32"], ("ce-zero", "mylc-zero", "mylc-cmdp")),
}
# What matters most, first. A wave whose runs cannot all finish in its budget keeps them in this order (lower
# seeds first) and stops the rest: CE first, since the preconditions are read on it and no answer counts without
# them; then the answer's pair, CMD-P and MyLC zero knowledge; then the rows that place CMD-P among Table 1's.
ORDER = ("ce-zero", "mylc-cmdp", "mylc-zero", "mylc-all", "mylc-cmds")
MARGIN = 1.15  # a projection is stretched by this much before it is trusted to fit
RATE, NOISES, SEEDS_FIRST = 0.4, ("sym", "pair"), 3  # pair-flip noise once symmetric has SEEDS_FIRST seeds
# The preconditions, read on the clean validation split before any comparison: CE is harmed by the noise (its
# validation accuracy falls >= HARM points from its best epoch to its last) and memorises it (>= MEMORISED of
# the noisy labels fitted at the end), as means over seeds. Where they fail, the next wave hardens the regime
# (60% noise, or more epochs), declared here before it runs.
HARM, MEMORISED = 3.0, 0.3
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"  # Debian: apt-get install dataset-fashion-mnist
# what a run brings back (no weights); capture-failed.log: the log of a first try that died under --graph capture
KEEP = ("config.json", "metrics.jsonl", "summary.json", "diverged.json", "train.log", "capture-failed.log")


# ---------------------------------------------------------------- the raw data
def read(path):
    """Every packed run: one JSON line each (wave, size, noise, rate, row, seed, state, flags, provenance, rows)."""
    if not os.path.exists(path):
        return []
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def finished(lines, size, noise):
    """The (row, seed) pairs of the regime that have a finished run."""
    return {(r["row"], r["seed"]) for r in lines if r["size"] == size and r["noise"] == noise and
            r["state"] == "finished"}


def complete(lines, size, noise):
    """The seeds whose every row of the regime has finished."""
    done = finished(lines, size, noise)
    return {s for _, s in done if all((row, s) in done for row in REGIMES[size].rows)}


def next_wave(lines, size, noise, count):
    """(noise, seeds, runs) of the next wave: symmetric noise until SEEDS_FIRST seeds are complete, then pair-flip
    (noise "auto"); the lowest `count` seeds not complete yet in the raw data; runs: the (row, seed) pairs of those
    seeds still missing a finished run (all rows of a new seed; the rows a wave stopped or cut, of an old one), in
    rank order."""
    if noise == "auto":
        noise = "sym" if len(complete(lines, size, "sym")) < SEEDS_FIRST else "pair"
    done, seeds, s = complete(lines, size, noise), [], 0
    while len(seeds) < count:
        seeds += [] if s in done else [s]
        s += 1
    have = finished(lines, size, noise)
    runs = sorted(((row, seed) for seed in seeds for row in REGIMES[size].rows if (row, seed) not in have), key=rank)
    return noise, seeds, runs


def rank(run):
    """Where a (row, seed) stands in what matters most: lower seeds first, then ORDER."""
    row, seed = run
    return seed, ORDER.index(row)


def command(size, noise, row, seed, data_dir, out, device, graph):
    """train.py's argv of one run: each flag once."""
    return ["--dataset", "fashionmnist", "--data-dir", data_dir, *REGIMES[size].flags, "--noise", noise, "--rate",
            f"{RATE:g}", *ROWS[row][1], "--seed", str(seed), "--out", out, "--device", device, "--graph", graph,
            "--workers", "0", "--checkpoint", "none"]  # no checkpoint comes back; metrics.jsonl keeps each epoch


# ---------------------------------------------------------------- a wave
@contextlib.contextmanager
def mps(want, env, probe_s=180):
    """CUDA MPS for the wave's processes, started and stopped here; yields what happened, in words. Without it
    (not asked, no control binary, it would not start, or a CUDA client could not connect within probe_s) the
    processes time-slice the GPU. Whatever happens, a daemon started here is told to quit."""
    ctl = shutil.which("nvidia-cuda-mps-control")
    if not want or ctl is None:
        yield "off: " + ("not asked, or not on a GPU" if not want else "nvidia-cuda-mps-control not found; the runs "
                         "time-slice the GPU")
        return
    d = tempfile.mkdtemp(prefix="cmd-mps-")
    mine = dict(env, CUDA_MPS_PIPE_DIRECTORY=os.path.join(d, "pipe"), CUDA_MPS_LOG_DIRECTORY=os.path.join(d, "log"))
    for k in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
        os.makedirs(mine[k], exist_ok=True)
    started = None
    try:
        try:
            started = subprocess.run([ctl, "-d"], env=mine, capture_output=True, text=True, timeout=60)
            if started.returncode:
                said = "off: the daemon did not start (" + (started.stderr or "").strip()[:200] + ")"
            elif subprocess.run([sys.executable, "-c", "import torch; torch.zeros(1, device='cuda'); "
                                 "torch.cuda.synchronize()"], env=mine, capture_output=True,
                                timeout=probe_s).returncode:
                said = "off: a CUDA client could not connect"
            else:
                env.update(mine)
                said = "on"
        except subprocess.TimeoutExpired as e:
            said = f"off: {'the probe' if started else 'the daemon'} took more than {e.timeout:g} s"
        yield said if said == "on" else said + "; time-slicing"
    finally:
        if started is None or started.returncode == 0:  # a daemon started, or may have: tell it to quit
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                subprocess.run([ctl], input="quit\n", env=mine, capture_output=True, text=True, timeout=60)
        for k in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
            env.pop(k, None)
        shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------- what fits the budget
class Pace:
    """What each run of a wave costs the GPU, from the epochs it has finished: an epoch's seconds divided by how
    many runs shared the GPU while it ran (their time-weighted mean), so that runs sharing a GPU are summed as
    processor sharing sums them. A run's cost is the mean of its last three epochs after the first (the first
    warms up: cuDNN's autotuner, a graph's capture), its first where it has no other."""

    def __init__(self, t):
        self.shared = [(t, 0)]  # (time, how many runs train from then on)
        self.costs, self.startups = {}, []

    def running(self, t, n):
        if n != self.shared[-1][1]:
            self.shared.append((t, n))

    def sharing(self, a, b):
        """The mean number of runs training over [a, b]."""
        total = 0.0
        for (t, n), (t_next, _) in zip(self.shared, self.shared[1:] + [(max(b, self.shared[-1][0]), 0)]):
            total += n * max(0.0, min(b, t_next) - max(a, t))
        return max(1.0, total / max(b - a, 1e-9))

    def epoch(self, name, end, seconds):
        """A finished epoch of the run `name`: `seconds` long, ended at time `end`."""
        self.costs.setdefault(name, []).append(seconds / self.sharing(end - seconds, end))

    def cost(self, name):
        """One epoch of the run alone, in seconds; for a run with no epoch yet, the mean of its peers'."""
        if name not in self.costs:
            known = [self.cost(n) for n in self.costs]
            return sum(known) / len(known)
        c = self.costs[name][1:][-3:] or self.costs[name]
        return sum(c) / len(c)

    def work(self, name, left, started):
        """Seconds of the whole GPU the run still needs: its epochs left at its cost, plus, for a run not started
        yet, the mean time its peers took to reach their first epoch."""
        startup = 0.0 if started else sum(self.startups) / max(1, len(self.startups))
        return left * self.cost(name) + startup


def keep(work, left, margin=MARGIN):
    """The runs a wave keeps: in rank order, each one whose work, added to the work of those kept before it,
    still fits the seconds left (stretched by margin). work: [(name, seconds of the whole GPU it needs)], in rank
    order. The kept runs share the GPU, so the last of them ends when the sum of their work is done; a run that
    does not fit is stopped, so that the runs kept get its share and finish whole."""
    kept, total = [], 0.0
    for name, w in work:
        if (total + w) * margin <= left:
            kept.append(name)
            total += w
    return kept


def gpu_sample():
    """(utilisation %, memory used MiB) of the GPU now, or None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    got = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=20)
    try:
        return [float(v) for v in got.stdout.splitlines()[0].split(",")]
    except (IndexError, ValueError):
        return None


def graph_from(junit_xml, collected, perf_json):
    """train.py's --graph for the wave, in words: "capture" where every CUDA case of tests/test_graph.py that
    pytest collected ran and passed (collected: the output of `pytest -m cuda --collect-only -q
    tests/test_graph.py`; junit_xml: the run's --junitxml, which a run stopped early writes without the cases
    it never reached) and stage 3 trained train.py's epochs with --graph capture (perf.json's epoch_s_graph);
    else "off: " and why, and the wave runs the eager step."""
    try:
        with open(collected) as f:
            ids = [line.strip().split("::", 1) for line in f if "::" in line]  # tests/test_graph.py::test_x[...]
        want = {f"{path.removesuffix('.py').replace('/', '.')}::{name}" for path, name in ids}
    except OSError:
        want = set()
    if not want:
        return "off: no CUDA test of the graph was collected"
    try:
        cases = {f"{c.get('classname')}::{c.get('name')}": c for c in ElementTree.parse(junit_xml).getroot().iter(
            "testcase")}
    except (OSError, ElementTree.ParseError):  # pytest stopped before it wrote the file
        return "off: pytest -m cuda wrote no readable JUnit XML"
    missing = sorted(want - set(cases))
    if missing:
        return f"off: {len(missing)} of the {len(want)} graph tests never ran ({missing[0].split('::')[-1]}, ...)"
    bad = sorted(k for k in want if any(cases[k].find(t) is not None for t in ("skipped", "failure", "error")))
    if bad:
        return f"off: {len(bad)} of the {len(want)} graph tests skipped or failed ({bad[0].split('::')[-1]}, ...)"
    try:
        with open(perf_json) as f:
            graphed = json.load(f).get("epoch_s_graph")
    except (OSError, ValueError):
        graphed = None
    if not graphed:
        return "off: train.py's epochs under --graph capture did not run in the perf stage"
    return "capture"


def evidence(folder, collected):
    """Whether folder (docs/gpu) holds already what stages 2 and 3 of studies/gpu_check.sh measure, for this tree's
    step: a JUnit XML (cuda*.xml) in which no test failed and every graph test now collected passed (collected: as
    for graph_from), and a perf JSON (perf*.json) with both epochs_100_min, eager and graphed, whose step is this
    tree's (training.graph.step_id). One line: "capture: " and the two files where it does (the wave may run alone,
    and captures the graph), else "no: " and what is missing."""
    from training.graph import step_id  # torch: only on the machine that runs the command
    step, xmls = step_id(), sorted(glob.glob(os.path.join(folder, "cuda*.xml")))
    perfs = []
    for path in sorted(glob.glob(os.path.join(folder, "perf*.json"))):
        with contextlib.suppress(OSError, ValueError):
            with open(path) as f:
                got = json.load(f)
            if got.get("step") == step and got.get("epochs_100_min") and got.get("epochs_100_min_graph"):
                perfs.append(path)
    if not perfs:
        return (f"no: {folder} has no perf*.json with eager and graphed epochs_100_min for this step ({step}, "
                "training.graph.step_id)")
    for xml in xmls:
        try:
            root = ElementTree.parse(xml).getroot()
        except (OSError, ElementTree.ParseError):
            continue
        failed = [c for c in root.iter("testcase") if any(c.find(t) is not None for t in ("failure", "error"))]
        if not failed and graph_from(xml, collected, perfs[0]) == "capture":
            return f"capture: {xml} (every graph test passed) and {perfs[0]} hold this step ({step})"
    return f"no: {folder} has no cuda*.xml in which every test and every graph test collected now passed"


def retry_eager(d, argv):
    """A run that died before its first epoch under --graph capture, made ready to start again with --graph off
    (argv changed in place): its log kept as capture-failed.log, its other files removed, so that train.py
    takes the folder as new. Returns why, in words, for wave.json."""
    lines = runfiles.lines_of(d, "train.log")
    why = lines[-1].strip()[:300] if lines else "no output"
    os.replace(os.path.join(d, "train.log"), os.path.join(d, "capture-failed.log"))
    for f in os.listdir(d):
        if f != "capture-failed.log":
            os.remove(os.path.join(d, f))
    argv[argv.index("--graph") + 1] = "off"
    return f"died before its first epoch under --graph capture ({why}); started again with --graph off"


def run_state(d):
    """finished, diverged (its loss turned NaN or inf) or cut short; and its epochs on disk."""
    state = runfiles.state(d)
    return (state if state in (runfiles.FINISHED, runfiles.DIVERGED) else "cut short",
            len(runfiles.lines_of(d, "metrics.jsonl")))


def mark_diverged(d):
    """diverged.json where train.py stopped on a NaN or inf loss (its log's last line says so)."""
    lines = runfiles.lines_of(d, "train.log")
    if lines and "loss became NaN" in lines[-1] and runfiles.state(d) != runfiles.FINISHED:
        runfiles.write_json(d, "diverged.json", dict(error=lines[-1].strip()))


def wave(args, lines):
    """Run one wave: the runs still missing of the next seeds, at most args.jobs processes at once, until they
    finish or args.budget seconds pass (then each is stopped, as Ctrl-C does). With a budget, once every started run
    has finished an epoch, each new epoch projects the wave's finish (Pace, keep): the runs that would not finish in
    time are stopped, the last in rank first, and the runs kept take their share of the GPU and finish whole. A
    SIGTERM (the `timeout` around it) stops it like the budget. wave.json is written at the start, at each run's
    end and at the end, so that even a wave killed outright can be packed."""
    noise, seeds, missing = next_wave(lines, args.size, args.noise, args.seeds)
    ce = {r["seed"]: r["rows"] for r in lines if r["size"] == args.size and r["noise"] == noise and
          r["row"] == "ce-zero" and r["state"] == "finished" and declared(r)}
    if preconditions(ce)[1] is False:
        print(f"recipe wave: the preconditions do not hold on the {len(ce)} CE runs packed; this wave adds seeds "
              "to a regime that does not test the claim (harden REGIMES in studies/recipe.py first)", file=sys.stderr)
    runs = {f"{row}-s{seed}": (row, seed) for row, seed in missing}  # in rank order
    argv = {name: command(args.size, noise, row, seed, args.data_dir, os.path.join(args.out, name), args.device,
                          args.graph) for name, (row, seed) in runs.items()}
    if args.dry_run:
        print_commands(argv.values())
        return 0
    if os.path.exists(os.path.join(args.out, "wave.json")):
        raise UserError(f"{args.out} holds a wave already; give a new --out")
    if not os.path.isdir(args.data_dir):
        raise UserError(f"--data-dir {args.data_dir} not found: the four Fashion-MNIST IDX files "
                        "(Debian: apt-get install dataset-fashion-mnist)")
    from training import build, rundir  # torch is imported here, not for a dry run or a report
    device = build.pick_device(args.device)  # --device cuda without a GPU: one line, nothing written
    os.makedirs(args.out, exist_ok=True)
    info = dict(wave=uuid.uuid4().hex[:12], size=args.size, noise=noise, rate=RATE, seeds=seeds, budget_s=args.budget,
                graph=args.graph, jobs=args.jobs or len(argv), order=ORDER, margin=MARGIN,
                started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), provenance=rundir.provenance(device, 1), gpu=[], runs={})
    env, t0, procs, todo, jobs = dict(os.environ), time.time(), {}, list(argv), args.jobs or len(argv)
    if device.type == "cpu":  # an equal share of the cores each
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // min(jobs, len(argv))))
    epochs = {name: int(a[len(a) - a[::-1].index("--epochs")]) for name, a in argv.items()}  # its last --epochs
    retried = {}  # name -> why its first try, under --graph capture, died before its first epoch
    stopped = {}  # name -> why the wave stopped it: it would not have finished in the budget
    pace, seen, began = Pace(t0), {}, {}  # what the runs cost; the epochs seen of each; when each process began

    def save():
        info["runs"] = {}
        for name in argv:
            state, done = run_state(os.path.join(args.out, name))
            info["runs"][name] = dict(row=runs[name][0], seed=runs[name][1], argv=argv[name], state=(
                "stopped" if name in stopped and state == "cut short" else state), epochs=done, **(
                {"restarted": retried[name]} if name in retried else {}), **(
                {"stopped": stopped[name]} if name in stopped else {}))
        info["seconds"] = round(time.time() - t0, 1)
        runfiles.write_json(args.out, "wave.json", info)

    def shared():  # how many runs train from now on
        pace.running(time.time(), sum(name not in stopped for name in procs))

    def watch():
        """The running runs' new epochs into pace. Returns whether one came."""
        came = False
        for name in procs:
            d = os.path.join(args.out, name)
            rows = whole_lines(d, "metrics.jsonl")[seen.get(name, 0):]
            if not rows:
                continue
            end = os.stat(os.path.join(d, "metrics.jsonl")).st_mtime  # when the last of them was written
            ends = [end - sum(r["seconds"] for r in rows[i + 1:]) for i in range(len(rows))]
            if name not in seen:
                pace.startups.append(ends[0] - rows[0]["seconds"] - began[name])
            for r, e in zip(rows, ends):
                pace.epoch(name, e, r["seconds"])
            seen[name] = seen.get(name, 0) + len(rows)
            came = True
        return came

    def fit():
        """Stop the runs that would not finish in the budget: once every started run has an epoch (keep)."""
        if not args.budget or any(name not in seen for name in procs):
            return
        now = time.time()
        live = [name for name in argv if (name in procs or name in todo) and name not in stopped]  # in rank order
        work = [(name, pace.work(name, epochs[name] - seen.get(name, 0), name in procs)) for name in live]
        kept, left = keep(work, args.budget - (now - t0)), args.budget - (now - t0)
        for name, _ in work:
            if name in kept:
                continue
            stopped[name] = (f"would not finish: at {now - t0:.0f} s its runs needed {sum(w for _, w in work):.0f} s "
                             f"of the GPU against {left:.0f} s left (x{MARGIN:g}), so the runs before it in "
                             "recipe.ORDER were kept")
            if name in todo:
                todo.remove(name)
            else:
                procs[name][0].send_signal(signal.SIGINT)  # it ends at once; its finished epochs are on disk
            print(f"  {name}: stopped after {seen.get(name, 0)} epochs, {stopped[name]}", flush=True)
        if len(kept) < len(work):
            shared()
            save()

    def stop(*_):
        raise KeyboardInterrupt
    # The runs are stopped by SIGINT. A process started with SIGINT ignored (a script's `cmd &`) or blocked hands
    # that on to its runs, and a run still starting, before train.py catches SIGINT, would lose the wave's signal
    # and train to its end. Caught here and unblocked, SIGINT reaches each run at its default: it stops at any time.
    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    cut = None
    with mps(args.mps and device.type == "cuda", env) as info["mps"]:
        print(f"recipe wave {info['wave']}: {len(argv)} runs ({noise} noise, seeds {seeds}), MPS {info['mps']}, "
              f"graph {args.graph}, budget {args.budget or 'none'} s", flush=True)
        save()
        try:
            while todo or procs:
                while todo and len(procs) < jobs:
                    name = todo.pop(0)
                    os.makedirs(os.path.join(args.out, name), exist_ok=True)
                    log = runfiles.open_log(os.path.join(args.out, name, "train.log"), "w")
                    began[name] = time.time()
                    procs[name] = (subprocess.Popen([sys.executable, os.path.join(HERE, "train.py"), *argv[name]],
                                                    stdout=log, stderr=subprocess.STDOUT, env=env, cwd=HERE), log)
                    shared()
                if watch():
                    fit()
                for name, (p, log) in list(procs.items()):
                    if p.poll() is not None:
                        log.close()
                        d = os.path.join(args.out, name)
                        mark_diverged(d)
                        del procs[name]
                        shared()
                        if p.returncode != 0 and name not in retried and name not in stopped and \
                                run_state(d) == ("cut short", 0) and \
                                argv[name][argv[name].index("--graph") + 1] == "capture":
                            retried[name] = retry_eager(d, argv[name])
                            seen.pop(name, None)
                            todo.insert(0, name)
                            print(f"  {name}: {retried[name]}", flush=True)
                        elif name not in stopped:
                            print(f"  {name}: {run_state(d)[0]} after {time.time() - t0:.0f} s", flush=True)
                        save()
                if args.budget and time.time() - t0 > args.budget and procs:
                    cut = "the budget ran out"
                    break
                sample = gpu_sample()
                if sample:
                    info["gpu"].append([round(time.time() - t0, 1), *sample])
                time.sleep(1 if device.type == "cpu" else 5)
        except KeyboardInterrupt:
            cut = "stopped (SIGTERM or Ctrl-C)"
        finally:
            for p, _ in procs.values():  # each stops at once, its finished epochs written
                p.send_signal(signal.SIGINT)
            for name, (p, log) in procs.items():
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                log.close()
            for s, handler in previous.items():
                signal.signal(s, handler)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            info["cut"] = cut
            save()
    for name in argv:  # checkpoints and weights are too large to bring back; the metrics are the study
        for f in os.listdir(os.path.join(args.out, name)) if os.path.isdir(os.path.join(args.out, name)) else []:
            if f not in KEEP:
                os.remove(os.path.join(args.out, name, f))
    states = [r["state"] for r in info["runs"].values()]
    util = [g[1] for g in info["gpu"]]
    print(f"recipe wave {info['wave']}: {states.count('finished')} of {len(states)} finished in {info['seconds']} s"
          + (f", {len(stopped)} stopped so that the rest could finish" if stopped else "")
          + (f" ({cut})" if cut else "") + (f"; GPU utilisation mean {sum(util) / len(util):.0f}%, memory peak "
                                            f"{max(g[2] for g in info['gpu']):.0f} MiB" if util else ""))
    return 0 if states.count("finished") == len(states) - states.count("stopped") else 1


# ---------------------------------------------------------------- pack
def pack(given, path):
    """A wave's runs into the raw data at path; each run marked with its state, so that one cut short is kept and
    never enters a table. given: the wave's folder (recipe wave's --out), a folder holding it as wave/, or
    studies/gpu_check.sh's archive (gpu-check.tar.gz, or the $OUT holding it). Returns (runs added, how many the
    raw data holds)."""
    archive = given if os.path.isfile(given) else os.path.join(given, outbox.ARCHIVE)
    if os.path.isfile(archive) and not any(os.path.exists(os.path.join(given, *w, "wave.json")) for w in ((), ("wave",))):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                outbox.unpack(archive, tmp)
            except (tarfile.TarError, OSError, EOFError) as e:
                raise UserError(f"{archive}: not an archive that can be read ({type(e).__name__}); give the "
                                f"gpu-check.tar.gz that came back whole, or a wave's folder") from None
            return pack_folder(tmp, path, archive)
    return pack_folder(given, path, given)


def whole_lines(d, name):
    """The JSON lines of a run file, up to the first that is not whole (an archive taken while it was written)."""
    rows = []
    for line in runfiles.lines_of(d, name):
        try:
            rows.append(json.loads(line))
        except ValueError:
            break
    return rows


def pack_folder(folder, path, given):
    """pack's work, on a folder (given: what the user named, for the messages)."""
    folder = next((d for d in (folder, os.path.join(folder, "wave")) if os.path.exists(os.path.join(d, "wave.json"))),
                  None)
    if folder is None:
        raise UserError(f"no wave.json in {given} nor in {os.path.join(given, 'wave')}: give a wave's folder (the "
                        f"--out of recipe wave), or the {outbox.ARCHIVE} of studies/gpu_check.sh (or the $OUT that holds it)")
    try:
        with open(os.path.join(folder, "wave.json")) as f:
            info = json.load(f)
        info["wave"], info["runs"]
    except (ValueError, KeyError) as e:
        raise UserError(f"{os.path.join(given, 'wave.json')} is cut short or not a wave's ({type(e).__name__}); "
                        "nothing packed") from None
    if info["size"] != "gpu" and os.path.abspath(path) == os.path.abspath(RAW):
        raise UserError(f"wave {info['wave']} is of the {info['size']} size: the study's raw data {RAW} takes the "
                        "declared (gpu) size only; give --from another file")
    lines = read(path)
    if any(r["wave"] == info["wave"] for r in lines):
        raise UserError(f"wave {info['wave']} ({given}) is packed in {path} already")
    new = []
    for name, run in sorted(info["runs"].items()):
        d = os.path.join(folder, name)
        state, _ = run_state(d)
        state = "stopped" if run.get("stopped") and state == "cut short" else state
        rows, prov = whole_lines(d, "metrics.jsonl"), info["provenance"]
        if os.path.exists(os.path.join(d, "config.json")):
            with open(os.path.join(d, "config.json")) as f:
                prov = json.load(f).get("provenance", prov)
        flags = [a for i, a in enumerate(run["argv"]) if "--out" not in run["argv"][max(0, i - 1):i + 1]]
        new.append(dict(wave=info["wave"], size=info["size"], noise=info["noise"], rate=info["rate"], row=run["row"],
                        seed=run["seed"], state=state, flags=flags, mps=info.get("mps"),
                        graph=run["argv"][run["argv"].index("--graph") + 1] if "--graph" in run["argv"] else info["graph"],
                        restarted=run.get("restarted"), stopped=run.get("stopped"), provenance=prov, rows=rows))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with runfiles.replacing(path, "wb") as f, gzip.open(f, "wt") as z:
        z.writelines(json.dumps(r, sort_keys=True) + "\n" for r in lines + new)
    return len(new), len(lines) + len(new)


# ---------------------------------------------------------------- report
def declared(line):
    """Whether a packed run ran the declaration's flags (whatever its data folder, device and graph)."""
    want = command(line["size"], line["noise"], line["row"], line["seed"], "D", "O", "X", "G")
    free = {"--data-dir", "--out", "--device", "--graph", "--checkpoint"}  # where and how it ran, not what
    strip = lambda a: [v for i, v in enumerate(a) if a[i] not in free and (i == 0 or a[i - 1] not in free)]  # noqa: E731
    return strip(line["flags"]) == strip(want)


def preconditions(ce):
    """Lines on CE's runs {seed: rows} (per seed, then the mean) and whether the preconditions hold (None: no
    run). Harm: validation accuracy at the best epoch minus at the last; memorised: at the last epoch."""
    if not ce:
        return ["- CE has no finished run yet."], None
    harm = {s: max(r["val_acc_mean"] for r in rows) - rows[-1]["val_acc_mean"] for s, rows in sorted(ce.items())}
    mem = {s: diagnostics(rows)["memorized"] for s, rows in sorted(ce.items())}
    lines = [f"- seed {s}: harm {harm[s]:.2f} points (validation accuracy {max(r['val_acc_mean'] for r in ce[s]):.2f} "
             f"at its best epoch, {ce[s][-1]['val_acc_mean']:.2f} at the last); memorised at the end {mem[s]:.3f}"
             for s in harm]
    h, m = mean_std(list(harm.values()))[0], mean_std(list(mem.values()))[0]
    ok = h >= HARM and m >= MEMORISED
    return lines + [f"- mean over {len(harm)} seed{'s' * (len(harm) > 1)}: harm {h:.2f} (needs >= {HARM:g}) {'✓' if h >= HARM else '✗'}; "
                    f"memorised {m:.3f} (needs >= {MEMORISED:g}) {'✓' if m >= MEMORISED else '✗'}"], ok


def answer(got, ok):
    """The study's answer in one sentence at its current n, whatever its sign, gated on the preconditions."""
    if "mylc-cmdp" not in got or "mylc-zero" not in got:
        return "No answer yet: CMD-P and MyLC zero knowledge have no finished pair of runs."
    n = len(set(got["mylc-cmdp"]) & set(got["mylc-zero"]))
    diff = paired(got["mylc-cmdp"], got["mylc-zero"])[0]
    gate = {True: "the preconditions hold", False: "the preconditions do not hold, so this does not test the "
            "paper's claim yet", None: "CE has not finished, so the preconditions are not known"}[ok]
    return f"CMD-P + MyLC − MyLC zero knowledge, final test accuracy: {diff} (n = {n}); {gate}."


def noise_section(lines, noise, size):
    """The report's lines for one noise type."""
    mine = [r for r in lines if r["noise"] == noise and r["size"] == size]
    off = [r for r in mine if not declared(r)]
    done = [r for r in mine if r["state"] == "finished" and declared(r)]
    got = {}
    for r in done:
        got.setdefault(r["row"], {})[r["seed"]] = r["rows"]
    pre, ok = preconditions(got.get("ce-zero", {}))
    out = [f"## 40% {'pair-flip' if noise == 'pair' else 'symmetric'} noise", "",
           "**Preconditions** (CE on the clean validation split; the regime holds when CE's mean harm is >= "
           f"{HARM:g} points and it fits >= {MEMORISED:g} of the noisy labels by the end):", "", *pre, "",
           f"Regime holds: {({True: 'yes', False: 'no', None: 'not known'})[ok]}." + (
               " Until REGIMES in studies/recipe.py is hardened (60% noise, or more epochs) in a commit of its own, "
               "the next waves run the same regime: they add seeds, not an answer."
               if ok is False else ""), "",
           "| row | n | final test acc | best-epoch test acc | memorised (end) | taught | precision | recall | "
           "paper, CIFAR-100 |", "|---" * 9 + "|"]
    for row in REGIMES[size].rows:
        seeds = got.get(row, {})
        if not seeds:
            out.append(f"| {ROWS[row][0]} | 0 | not run |" + " |" * 6)
            continue
        d = [diagnostics(rows) for rows in seeds.values()]
        dia = [mean_std([x[k] for x in d if x[k] is not None] or [math.nan]) for k in ("selected", "precision",
                                                                                       "recall")]
        cells = [fmt(*mean_std([rows[-1]["test_acc_mean"] for rows in seeds.values()])[:2]),
                 fmt(*mean_std([early_stopped(rows) for rows in seeds.values()])[:2]),
                 fmt(*mean_std([x["memorized"] for x in d])[:2], "{:.3f}"),
                 *["–" if math.isnan(x[0]) else fmt(*x[:2], "{:.3f}") for x in dia]]
        out.append(f"| {ROWS[row][0]} | {len(seeds)} | " + " | ".join(cells) + f" | {PAPER_ROWS[row]:.2f} |")
    out += ["", "| paired difference, final test accuracy | mean [95% t-interval] | ahead |", "|---|---|---|"]
    for a, b in PAIRS:
        if a in got and b in got:
            out.append(f"| {ROWS[a][0]} − {ROWS[b][0]} | " + " | ".join(paired(got[a], got[b])) + " |")
    cut = sorted(f"{r['row']}-s{r['seed']} ({r['state']} after {len(r['rows'])} epochs, wave {r['wave']})"
                 for r in mine if r["state"] != "finished")
    where = sorted({f"{r['provenance'].get('device_name', '?')}, torch {r['provenance'].get('torch', '?')}, MPS "
                    f"{(r.get('mps') or '?').split(';')[0]}, graph {r['graph']}" for r in done})
    return out + ["", "**Answer:** " + answer(got, ok), "",
                  "Not in any table: " + ("; ".join(cut) if cut else "none") + ".",
                  *([f"Not of the declaration (other flags), left out: {len(off)} runs."] if off else []),
                  "Ran on: " + ("; ".join(where) if where else "nothing yet") + ".", ""]


def report(path, size, dry_run=False):
    """report.md beside the raw data at path, for the regime `size` (dry_run: printed, not written)."""
    if not os.path.isdir(os.path.dirname(path) or "."):
        raise UserError(f"--from {path}: its folder does not exist (the raw data is {RAW})")
    lines = [r for r in read(path) if r["size"] == size]
    text = ["# Fashion-MNIST in the paper's recipe: Table 1's shape, wave by wave", "",
            f"Declared in studies/recipe.py before any run ({size}): `" + " ".join(REGIMES[size].flags) + "`, the same "
            "for every row; 40% noise; 28x28 images; each row at Eq. 7's η and b of the project's "
            "Table 1 (mutual.THRESHOLDS). Final test accuracy: the mean of the two models' last-epoch accuracies, "
            "mean ± std over seeds; best-epoch: the test accuracy at each run's best validation epoch. Paired "
            "differences over the same seeds, with a 95% t-interval once a pair has n >= 2 seeds. The paper's column is CIFAR-100 "
            "with a ResNet34 (Tables 1 and 2), beside ours for the order of the rows, not the values.", ""]
    for noise in NOISES:
        if noise == "sym" or any(r["noise"] == noise for r in lines):
            text += noise_section(lines, noise, size)
    command = "`python -m studies.fmnist recipe report" + (f" --size {size}" if size != "gpu" else "") + (
        f" --from {path}" if os.path.abspath(path) != os.path.abspath(RAW) else "") + "`"
    text.append(f"Rendered from {path} by {command} ({len(lines)} runs of this size packed)." if os.path.exists(path)
                else f"Rendered by {command} before any wave was packed: {path}, the raw data, does not exist yet.")
    out = os.path.join(os.path.dirname(path) or ".", "report.md")
    print("\n".join(text))
    if not dry_run:
        os.makedirs(os.path.dirname(out), exist_ok=True)
        runfiles.write_text(out, "\n".join(text) + "\n")
        print(f"written: {out}")
    return 0


def run(args):
    """studies.fmnist's `recipe` stages (its parser checked the flags)."""
    path = args.pack or RAW
    if args.stage == "pack" and args.dry_run:
        raise UserError("recipe pack has no --dry-run: it refuses a wave packed before and writes the file at once")
    if args.stage == "pack":
        added, total = pack(args.dir, path)
        print(f"{added} runs of {args.dir} added to {path}, which holds {total}")
        return 0
    if args.stage == "report":
        return report(path, args.size, args.dry_run)
    return wave(args, read(path))
