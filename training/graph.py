"""The training step recorded once and replayed: train.py --graph (docs/performance.md, "The graphed step").

mutual_step launches some 1,500 small kernels a step for the ResNet34 pair, so the host that launches them,
not the device, sets the pace. The step never waits for the device, so all of it -- both forwards, the mode's
objective, the backward, every SGD update and the epoch's sums -- can be captured once as a CUDA graph and
replayed with one launch. What changes from step to step reaches the replay in device tensors filled in place
before it: the batch, Eq. 7's chi, MyLC's r (Eq. 8), ProSelfLC's t/Γ (and MentorNet's ⌊100 t/Γ⌋), and the lr,
which the lr schedule fills at its milestones. What the step takes as host numbers -- the batch's shape, and for the modes beyond the
paper their rules (registry.Mode.rule: R(t), a warm-up) -- is the graph's key: a step with a new key is
captured anew. The last, smaller batch of an epoch gets a graph of its own, so every sample trains as in the
eager step (no drop_last).

resolve   -- what --graph auto|capture|compile|off does in this run, or one line saying why it cannot
replayed  -- the loop's step (batch, chi, r, clock) -> (sums, hist): eager, or a Replayed of it
Replayed  -- train.py's step, or tools.batched's vmapped step of R runs (chi and r one per run), captured (torch.cuda.CUDAGraph) or compiled (torch.compile), with its static inputs
key       -- what a captured step bakes in from host numbers
place_lr  -- the optimisers' lr as the step reads it: a float, or a device tensor for a replay
step_id   -- the hash of the step's sources (STEP_FILES), which the GPU's evidence for it names
"""
import collections
import hashlib
import os
import types
import warnings
from typing import NamedTuple

import torch

from mutual import MODES
from training.errors import UserError

WARMUP = 3  # eager steps of each batch shape before it is captured: cuDNN's autotuner, lazy CUDA state
# torch.compile's options per device type: CUDA graphs of the compiled code on CUDA, inductor's default on CPU
COMPILE = {"cuda": dict(mode="reduce-overhead"), "cpu": {}}
# a mode's rule (a small-loss method's R(t)) gives a new key every epoch for T_k epochs: room for them before
# torch.compile gives up
RECOMPILE_LIMIT = 64
# Whether --graph auto captures on CUDA. Off until tests/test_graph.py's cuda tests (graphed = eager, no sync on
# replay) have passed on a device: the capture has run only on the CPU's compile path so far, and the default
# is what the main command runs. --graph capture asks for it now.
CAPTURE_BY_DEFAULT = False
# The sources of the step: a CUDA test's verdict or a perf figure (tools.perf records step_id in its JSON) stands
# for the step whose sources hash the same, and a lease runs them again where they changed (studies/recipe.py: evidence).
STEP_FILES = ("mutual.py", "losses.py", "label_correction.py", "schedule.py", "models.py", "training/graph.py",
              "training/batches.py")


def step_id():
    """The first 12 hex digits of the SHA-256 of STEP_FILES, read in that order."""
    h = hashlib.sha256()
    for f in STEP_FILES:
        with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), f), "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()[:12]


def resolve(choice, device, amp, method, distributed, compiled_models):
    """--graph as this run does it: "capture", "compile" or "off". auto captures on CUDA where the replay does
    what the eager step does (once CAPTURE_BY_DEFAULT), and is off elsewhere; capture or compile asked for where it cannot run: one line,
    a UserError. compiled_models: --compile (torch.compile of each model) was given."""
    why = ("--amp fp16's GradScaler reads its inf check on the host" if amp == "fp16" else
           "--select shuffled draws from a generator seeded on the host each step" if method.select == "shuffled"
           else "under torchrun, DistributedDataParallel's hooks run the all-reduces" if distributed else None)
    if choice == "auto":
        return "capture" if CAPTURE_BY_DEFAULT and device.type == "cuda" and why is None and not compiled_models \
            else "off"
    if choice == "capture" and device.type != "cuda":
        raise UserError("--graph capture records a CUDA graph and needs a CUDA device; use --graph compile on the CPU")
    if choice != "off" and why is not None:
        raise UserError(f"--graph {choice}: {why}, so the step cannot be replayed; use --graph off")
    return choice


def replayed(how, step, opts, method, device):
    """The loop's step as resolve chose: step itself (off), or a Replayed of it. step(batch, chi, r, clock) ->
    (sums, hist) is mutual_step on the loop's models; opts: their optimisers (place_lr)."""
    place_lr(opts, how, device)
    return step if how == "off" else Replayed(how, step, method, device)


def place_lr(opts, how, device):
    """Each optimiser's lr where the step reads it. off: a float, and SGD as build_models made it (a checkpoint
    of a replayed run may have brought a tensor). capture: a float32 tensor on the device that the replay reads
    and torch.optim.lr_scheduler fills in place, with fused SGD (one kernel for every parameter; foreach SGD
    would turn a tensor lr into a host number). compile: the tensor, with foreach SGD."""
    for o in opts:
        for g in o.param_groups:
            lr = float(g["lr"])
            if how == "off":
                g.update(lr=lr, foreach=o.defaults["foreach"], fused=o.defaults["fused"])
            else:
                g.update(lr=torch.tensor(lr, dtype=torch.float32, device=device), foreach=how == "compile",
                         fused=how == "capture")


def key(method, clock, batch):
    """What a captured step bakes in from host numbers: the batch's shape and length, and what the mode's rule gives
    at this clock (registry.Mode.rule: R(t) of the small-loss methods sets how many samples topk keeps, Co-teaching+'s
    rules and a warm-up choose branches). The rest of the clock the step reads is t/Γ, which the replay reads as a
    tensor."""
    shape = (*batch[0].shape, len(batch))  # a batch with a mode's per-sample rows carries them: a fourth tensor
    rule = MODES[method.mode].rule
    return (shape,) if rule is None else (shape, rule(method, clock))


class Graph(NamedTuple):
    """One captured step: its key, the CUDA graph, the batch it reads, the sums and histogram it writes."""
    key: tuple
    graph: torch.cuda.CUDAGraph
    batch: list
    sums: torch.Tensor
    hist: torch.Tensor


class Replayed:
    """step, recorded once per key and replayed. how: "capture" (torch.cuda.CUDAGraph: WARMUP eager steps of
    each batch shape on a side stream, then one capture per key, replayed every step) or "compile"
    (torch.compile of the step, COMPILE's options). Called as the step is; returns new tensors each step.

    chi, t/Γ and r are copied into one set of static device tensors before every step (chi: one per model, as
    Method.chis_at gives it, or one per run and model as tools.batched gives it); each graph copies the batch into its own. The clock the replay reads is a namespace holding t/Γ as that tensor, and, for the
    modes with a rule, the host numbers of the first clock of its key (the others give the same key).
    """

    def __init__(self, how, step, method, device):
        self.how, self.step, self.method, self.device = how, step, method, device
        self.chi = None                            # float64: the eager step's Python floats, to the same
        self.progress = torch.zeros((), dtype=torch.float64, device=device)  # rounding; made on the first step
        self.percent = torch.zeros((), dtype=torch.int64, device=device)  # ⌊100 t/Γ⌋ from step counts (Clock.percent)
        self.r = None                              # MyLC's r of each model, made on the first step
        self.clocks = {}                           # key -> the clock the replay reads
        self.graphs = {}                           # capture: batch shape -> its Graph
        self.eager_steps = collections.Counter()   # capture: eager steps run per batch shape
        if how == "compile":
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
            # mutual.sum_names is cached: a constant of the number of models, which dynamo may trace through
            warnings.filterwarnings("ignore", message="Dynamo detected a call to a `functools.lru_cache`")
            self.compiled = torch.compile(step, **COMPILE[device.type])
        else:
            self.side = torch.cuda.Stream(device)

    def __call__(self, batch, chi, r, clock):
        k = key(self.method, clock, batch)
        if self.how == "capture" and self.eager_steps[k[0]] < WARMUP:
            self.eager_steps[k[0]] += 1
            return self.eager(batch, chi, r, clock)
        lifted = self.load(k, chi, r, clock)
        chi = None if chi is None else self.chi
        if self.how == "compile":
            if self.device.type == "cuda":  # CUDA-graph trees: a training step begins here
                torch.compiler.cudagraph_mark_step_begin()
            sums, hist = self.compiled(batch, chi, self.r, lifted)
            return sums.clone(), hist.clone()
        g = self.graphs.get(k[0])
        if g is None or g.key != k:
            self.graphs.pop(k[0], None)  # its memory goes back before the new capture takes its own
            g = self.graphs[k[0]] = self.capture(k, batch, chi, lifted)
        for static, t in zip(g.batch, batch):
            static.copy_(t)
        g.graph.replay()
        return g.sums.clone(), g.hist.clone()  # the next replay overwrites the graph's own

    def load(self, k, chi, r, clock):
        """Copy this step's chi, t/Γ and r into the static tensors; the clock the replay reads, for key k.
        fill_ and copy_ on the device: nothing waits for it."""
        if chi is not None:  # each model's (train.py: a tuple of floats), or each run's (tools.batched: (R, M))
            if self.chi is None:
                self.chi = torch.zeros(chi.shape if torch.is_tensor(chi) else len(chi), dtype=torch.float64,
                                       device=self.device)
            if torch.is_tensor(chi):
                self.chi.copy_(chi)
            else:  # fill_ takes a host number as a kernel argument: no copy from the host, nothing waits
                for static, c in zip(self.chi, chi):
                    static.fill_(c)
        self.progress.fill_(clock.progress)
        self.percent.fill_(clock.percent)
        if self.r is None:
            self.r = [torch.empty_like(r_k) for r_k in r]
        for static, r_k in zip(self.r, r):
            static.copy_(r_k)
        if k not in self.clocks:
            host = clock._asdict() if MODES[self.method.mode].rule else {}
            self.clocks[k] = types.SimpleNamespace(**host, progress=self.progress, percent=self.percent)
        return self.clocks[k]

    def eager(self, batch, chi, r, clock):
        """The step as it is, on a side stream, as torch.cuda.graph's warm-up asks: a real training step."""
        main = torch.cuda.current_stream(self.device)
        self.side.wait_stream(main)
        with torch.cuda.stream(self.side):
            out = self.step(batch, chi, r, clock)
        main.wait_stream(self.side)
        return out

    def capture(self, k, batch, chi, clock):
        """Record the step on static copies of the batch (nothing runs: the replay that follows is the step).
        thread_local: a DataLoader's pinning thread may use CUDA meanwhile."""
        static = [t.clone() for t in batch]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            sums, hist = self.step(static, chi, self.r, clock)
        return Graph(k, graph, static, sums, hist)
