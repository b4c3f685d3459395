r"""Many runs of a small model pair in one process: a grid trained at once with torch.func, equal to train.py's runs.

    python -m tools.batched --dataset synthetic --arch mlp --epochs 3 --mode zero,progressive --lr 0.05,0.1 \
        --seed 0,1 --out runs/grid        # 8 runs, in runs/grid/<name>/ with train.py's files

--lr, --eta, --b, --seed, --rate and --mode take comma-separated lists, and every combination is one run
(--zip pairs the lists instead, one run per position). Every other flag is train.py's and is the same for
every run. Each run writes train.py's files into OUT/<name> (name: train.py's, config.run_name, without the
dataset and arch, with -lr where --lr lists values): config.json
(with provenance), noisy_labels.npy, metrics.jsonl, entropy_hist.npz and, last, summary.json. There are no
checkpoints and no weights: a finished run is skipped, an interrupted one starts again from epoch 1. A run
whose loss turns NaN or inf writes diverged.json beside its epochs so far, and the others go on.

Per run, exactly as train.py makes it: the training subset, the noisy labels (noise.add_noise with its seed),
the initial weights (build.build_models), the batch order (Batches.epoch), χ(t) (Method.chis_at) and MyLC's r. The
runs' parameters are stacked (torch.func.stack_module_state), and one step of all of them is one vmap of
functional_call and of train.py's step from the logits on (mutual.step_losses); the optimiser and lr schedule are
train.py's (build.optimiser and build.lr_schedule, one for the stack of each lr: SGD is elementwise, so each run's
slice of the stack steps as its own model would), and the evaluation's counts are report.correct's, vmapped. Nothing
of the step, the optimiser or the evaluation is written twice. Floating-point order differs from one run's own
matrix products, so the numbers agree to rounding, not to the bit; docs/performance.md gives the contract and what it
measured.

group     -- the runs that can train together: equal in every flag but those above (and --out)
train     -- train one group: data, runs, the epochs; writes each run's files
run_jobs  -- tools.sweep's job lists ({name, dir, key, argv}) trained in groups, for studies.fmnist's
             studies; returns {name: error} as tools.sweep.run_jobs does
"""
import argparse
import contextlib
import copy
import io
import itertools
import json
import os
import sys
import time

import numpy as np
import torch
from torch.func import functional_call, stack_module_state, vmap

import models
from label_correction import confidence_from_sum
from mutual import CMD_MODES, ENTROPY_BINS, MODES, NAMES, Clock, entropy_histogram, shuffle_draws, step_losses, sum_names
from training import build, graph, rundir, runfiles
from training.batches import Batches
from training.build import pick_device
from training.config import get_args, knobs_for, method_of, resolve, run_name
from training.errors import UserError, one_line
from training.report import accuracies_of, chi_keys, correct, epoch_row, epoch_line, final_accuracies, tally
from tools import sweep
from tools.paper_tables import same_run

VARY = ("lr", "eta", "b", "seed", "rate", "mode")  # what may differ within a group
OWN = VARY + ("out", "forget_rate")  # a run's own settings (forget_rate follows --rate for the comparators)
FILES = ("config.json", "noisy_labels.npy", "metrics.jsonl", "entropy_hist.npz", "train.log")


class BadInput(UserError):
    """A grid that cannot be trained in one process; str(error) is one line that says what to do."""


# ---------------------------------------------------------------- the runs
def resolved(argv, quiet=False):
    """train.py's settings of one run (config.resolve); its UserError as it is. quiet: keep its notes (e.g. the
    milestones it scaled), which every run of a grid shares, to itself unless it fails."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            args = resolve(get_args(argv))
    except UserError:  # the notes that led to it, then its one line
        sys.stderr.write(said.getvalue())
        raise
    if not quiet:
        print(said.getvalue(), end="")
    return args


def group(runs):
    """{key: [run]}: runs whose settings differ only in VARY (and --out) train together. A run is
    dict(name, dir, key, args)."""
    groups = {}
    for run in runs:
        a = vars(run["args"])
        key = json.dumps({k: v for k, v in a.items() if k not in OWN + rundir.RUN_CONTROL}, sort_keys=True,
                         default=str)
        mode = "cmd" if a["mode"] in CMD_MODES else a["mode"]  # CMD's modes differ only in chi: one objective
        groups.setdefault((key, mode, a.get("forget_rate")), []).append(run)
    return list(groups.values())


def check(run):
    """BadInput unless train.py's run `run` can be batched here; called before anything is written."""
    a = run["args"]
    if a.compile or "RANK" in os.environ:
        raise BadInput("--compile and torchrun are train.py's; tools.batched trains its runs in one process")
    if a.noise == "human":
        raise BadInput("--noise human reads CIFAR-N's file per run: use train.py for it")
    if a.train_indices is not None:
        raise BadInput("--train-indices chooses the samples of one run: use train.py for it")
    x = MODES[a.mode]
    if x.unbatched:
        raise BadInput(f"--mode {a.mode} ({x.title}): {x.unbatched}, which one vmapped step cannot hold; use train.py")
    if x.optimiser is not None:
        raise BadInput(f"--mode {a.mode} ({x.title}) steps with an optimiser of its own, which would take every run "
                       f"of a stack for one model; use train.py")
    if a.resume:
        raise BadInput("tools.batched has no --resume: run the same command again; finished runs are skipped and "
                       "the others start again from epoch 1")
    for arch in a.arch.split(","):
        net = models.build_model(arch, 10)
        kinds = {type(m).__name__ for m in net.modules() if list(m.buffers(recurse=False))}
        if kinds:
            raise BadInput(f"--arch {arch} has {', '.join(sorted(kinds))} (running statistics), which one vmapped "
                           f"step cannot keep per run; use --arch mlp, or train.py")
    state = runfiles.state(run["dir"])
    if state == runfiles.STARTED and os.path.exists(os.path.join(run["dir"], "checkpoint.pt")):  # train.py's, stopped
        raise BadInput(f"{run['dir']} holds a train.py run in progress; finish it with train.py --resume, or "
                       f"delete it")
    if state == runfiles.FINISHED and not same_run(run["dir"], run["key"]):
        raise BadInput(f"{run['dir']} finished with other flags; delete it or choose another --out")
    why = rundir._writable_ancestor(run["dir"])
    if why:
        raise BadInput(why)


# ---------------------------------------------------------------- one group
class Runs:
    """One group's runs on the device: each run's data, labels and batches, the models' stacked parameters, their
    optimisers and lr schedules, and MyLC's r. Built per run exactly as train.main builds it; runs in the order of
    their lr (self.runs), the first lr first."""

    def __init__(self, runs, device):
        first = {}
        for run in runs:
            first.setdefault(run["args"].lr, len(first))
        self.runs, self.device = sorted(runs, key=lambda run: first[run["args"].lr]), device
        cache, self.data, self.batches, nets, self.setups = {}, [], [], [], []
        for run in self.runs:
            a = run["args"]
            setup = build.Setup.of(a)._replace(device=device)
            key = (a.dataset, a.data_dir, a.image_size, a.subset, a.val_split,
                   a.seed if a.subset_seed is None or a.dataset == "synthetic" else a.subset_seed)
            if key not in cache:  # the same training set and tests: loaded once
                cache[key] = build.load_data(a)
            d, train_set, tests, keep = cache[key]
            build.check_train_size(len(train_set.labels), 1)  # as train.py: DataError before anything is written
            noisy = build.given_labels(a, d, train_set, keep)
            nets.append(build.build_models(a, d.num_classes, train_set, setup).nets)  # each run's initial weights
            self.data.append((d, tests, key))
            self.batches.append(Batches(train_set, labels=noisy, clean=train_set.labels,
                                        **build.batch_args(a, d, setup)))
            self.setups.append(setup)
            run["noisy"] = noisy
        self.m = len(nets[0])
        self.k = self.data[0][0].num_classes
        self.base = [copy.deepcopy(nets[0][j]).to("meta") for j in range(self.m)]
        self.methods = [method_of(run["args"]) for run in self.runs]
        # the runs of one lr: per model, their parameters stacked (torch.func.stack_module_state), and the optimiser
        # and lr schedule train.py gives one run's model (build.optimiser, build.lr_schedule; elementwise, so the
        # stack's is each run's), the runs sharing every setting those read
        self.stacks, self.opts, self.lr_scheds, self.of_run = [], [], [], []
        for g, lr in enumerate(first):
            idx = [i for i, run in enumerate(self.runs) if run["args"].lr == lr]
            a, method = self.runs[idx[0]]["args"], self.methods[idx[0]]
            stack = [stack_module_state([nets[i][j] for i in idx])[0] for j in range(self.m)]
            opts = [build.optimiser(params.values(), a, method) for params in stack]
            self.stacks.append(stack)
            self.opts += opts
            self.lr_scheds += [build.lr_schedule(o, a, method) for o in opts]
            self.of_run += [opts[0]] * len(idx)
        self.r = [torch.zeros(len(runs), device=device) for _ in range(self.m)]  # MyLC's r: 0 before epoch 1

    def params(self):
        """Each model's parameters of every run, (R, ...) per name: the stacks of each lr joined, in the runs' order."""
        if len(self.stacks) == 1:
            return self.stacks[0]
        return [{n: torch.cat([stack[j][n] for stack in self.stacks]) for n in self.stacks[0][j]} for j in
                range(self.m)]

    def lr(self):
        return [float(o.param_groups[0]["lr"]) for o in self.of_run]

    def forward(self, params, x, autocast):
        with torch.autocast(**autocast):
            return [functional_call(self.base[j], params[j], (x,)) for j in range(self.m)]


def step(runs, batch, chi, clock, autocast, r=None):
    """One training step of every run, up to the optimisers' step (Runs.opts): R x (x, y, y_clean) batches, or the
    three stacked (R, N, ...) -> (sums (R, S), histograms (R, M, 2, bins)). chi: (R, M), each run's Method.chis_at, or
    None; r: MyLC's r, M x (R,) (default runs.r). Each run's is train.py's mutual.step_losses, vmapped."""
    x, y, y_clean = batch if torch.is_tensor(batch[0]) else (torch.stack(t) for t in zip(*batch))
    r = runs.r if r is None else r
    method = runs.methods[0]  # the group shares everything an objective reads but chi (mutual.cmd_objective)
    draws = (torch.stack([shuffle_draws(run["args"].seed, clock.epoch, clock.batch, runs.m, y.shape[1], runs.device)
                          for run in runs.runs]) if method.select == "shuffled" else None)

    def one(params, x, y, y_clean, chi, r, draws):
        return step_losses(runs.forward(params, x, autocast), y, y_clean, method, chi, r, clock, draws)

    chi_dim = None if chi is None else 0
    total, sums, h = vmap(one, in_dims=(0, 0, 0, 0, chi_dim, 0, None if draws is None else 0))(
        runs.params(), x, y, y_clean, chi, r, draws)
    for o in runs.opts:
        o.zero_grad(set_to_none=True)
    total.sum().backward()  # each run's gradient is its own total's: the runs share no parameter
    noisy = (y != y_clean).float().repeat_interleave(runs.m, 0)  # (R M, N)
    hist = entropy_histogram(h.flatten(0, 1), noisy, runs.k).view(len(runs.runs), runs.m, 2, ENTROPY_BINS)
    return sums, hist


@torch.no_grad()
def evaluate(runs, autocast):
    """train.py's evaluation (report.evaluate) of every run: [{test_acc_a, ..., test_acc_ens, ...}], its counts
    (report.correct) vmapped over the runs of each test set."""
    out, by_data, params = [None] * len(runs.runs), {}, runs.params()
    for i, (d, tests, key) in enumerate(runs.data):
        by_data.setdefault(key, []).append(i)
    for idx in by_data.values():
        d, tests, _ = runs.data[idx[0]]
        ps = [{n: p[idx] for n, p in params_j.items()} for params_j in params]
        evals = build.eval_batches(d, tests, runs.setups[idx[0]].placement())
        counts = tally(lambda x, y: vmap(lambda q: correct(runs.forward(q, x, autocast), y))(ps), evals)  # (R, M + 2)
        for row, i in enumerate(idx):
            out[i] = accuracies_of({name: c[row] for name, c in counts.items()})
    return out


def train(group_runs, device, log=print):
    """Train one group (runs that need it) for its epochs; write each run's files. Returns {name: error}."""
    runs = Runs(group_runs, device)
    group_runs, a0 = runs.runs, runs.runs[0]["args"]
    amp = runs.setups[0].amp  # train.py's precision for this device: bf16 autocast on CUDA unless --amp off
    autocast = dict(device_type=device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16,
                    enabled=amp != "off")
    how = graph.resolve(a0.graph, device, amp, runs.methods[0], False, False)  # --graph, as train.py reads it

    def trained(batch, chi, r, clock):
        """step and the optimisers' step: what graph.Replayed records and replays under --graph."""
        sums, h = step(runs, batch, chi, clock, autocast, r)
        for o in runs.opts:
            o.step()
        return sums, h

    trained = graph.replayed(how, trained, runs.opts, runs.methods[0], device)
    for run, setup in zip(group_runs, runs.setups):
        for f in FILES + ("diverged.json",):
            if os.path.exists(os.path.join(run["dir"], f)):
                os.remove(os.path.join(run["dir"], f))
        os.makedirs(run["dir"], exist_ok=True)
        config = dict(setup.config, graph=how, provenance=dict(rundir.provenance(device, 1), engine="tools.batched",
                                                    group_size=len(group_runs)))
        runfiles.write_json(run["dir"], "config.json", config)
        with runfiles.replacing(os.path.join(run["dir"], "noisy_labels.npy"), "wb") as f:
            np.save(f, run["noisy"])
        with runfiles.replacing(os.path.join(run["dir"], "sweep.json")) as f:
            json.dump(run["key"], f)
    names, steps, k = sum_names(runs.m), runs.batches[0].steps(), runs.k
    alive, failed, t_start = list(range(len(group_runs))), {}, time.time()
    for epoch in range(a0.epochs):
        t0 = time.time()
        lr = runs.lr()
        acc = torch.zeros(len(group_runs), len(names), device=device)
        hist = torch.zeros(len(group_runs), runs.m, 2, ENTROPY_BINS, device=device)
        epochs = [b.epoch(run["args"].seed, epoch) for b, run in zip(runs.batches, group_runs)]
        for i in range(steps):
            clock = Clock(epoch, i, steps, a0.epochs, 0)  # the seed of each run's shuffle_draws is its own
            chis = [m.chis_at(clock.t, a0.epochs, k, runs.m) for m in runs.methods]  # R x (χ of each model)
            chi = None if chis[0] is None else torch.tensor(chis, dtype=torch.float64, device=device)  # (R, M)
            sums, h = trained([torch.stack(t) for t in zip(*(next(e) for e in epochs))], chi, runs.r, clock)
            acc += sums
            hist += h
        s_all = acc.tolist()
        results = evaluate(runs, autocast)
        for j in list(alive):
            run, s = group_runs[j], dict(zip(names, s_all[j]))
            if s["nonfinite"] > 0:
                failed[run["name"]] = f"loss became NaN/inf in epoch {epoch + 1}"
                runfiles.write_json(run["dir"], "diverged.json", dict(error=failed[run["name"]], epoch=epoch + 1))
                alive.remove(j)
                continue
            method = runs.methods[j]
            chis = [method.chis_at(t, a0.epochs, k, runs.m) for t in (epoch, epoch + 1)]  # the step's, as train.py
            head = dict(epoch=epoch + 1, lr=lr[j], **chi_keys(chis[1]), seconds=time.time() - t0)
            row = epoch_row(s, results[j], head, k, known_clean=run["args"].noise != "none")
            runfiles.append_metrics(run["dir"], row)
            runfiles.append_entropy_hist(run["dir"], epoch + 1, hist[j].cpu().numpy(), k, chis,
                                         run["args"].noise != "none")
            run["row"] = row
            with runfiles.appending(os.path.join(run["dir"], "train.log")) as f:
                f.write(epoch_line(row, runs.m) + "\n")
        for lr_sched in runs.lr_scheds:
            lr_sched.step()
        samples = s_all[0][names.index("samples")]
        runs.r = confidence_from_sum([acc[:, names.index(f"entropy_{x}")] for x in NAMES[:runs.m]], samples, k)
        if not alive:
            break
        log(f"epoch {epoch + 1:3d}/{a0.epochs} | {len(alive)}/{len(group_runs)} runs | "
            f"test mean {np.mean([results[j]['test_acc_mean'] for j in alive]):.1f} | {time.time() - t0:.1f}s")
    for j in alive:
        run = group_runs[j]
        summary = dict(final_accuracies(run["row"]), epochs=a0.epochs, seconds=round(time.time() - t_start, 1))
        runfiles.write_json(run["dir"], "summary.json", summary)  # last: the run is finished
    return failed


def run_jobs(todo, device="auto", log=print):
    """Train tools.sweep's jobs ({name, dir, key, argv}) that are not finished or diverged, group by group.
    Returns {name: error}; a diverged run's error names NaN, as train.py's does. Raises BadInput first if a job
    cannot be batched."""
    runs = []
    for i, job in enumerate(todo):
        run = dict(job, args=resolved(job["argv"], quiet=i > 0))
        check(run)
        if runfiles.state(run["dir"]) not in (runfiles.FINISHED, runfiles.DIVERGED):
            runs.append(run)
    failed = {}
    dev = pick_device(device)
    for g in group(runs):
        log(f"batched: {len(g)} runs on {dev.type}: " + ", ".join(r["name"] for r in g[:4]) +
            (", ..." if len(g) > 4 else ""))
        failed.update(train(g, dev, log))
    return failed


def run_grid(todo, jobs, device, batched=None):
    """studies.fmnist's runner: these runs through this engine if batched (None: where the
    device is a GPU), else one train.py process per run, `jobs` at a time (tools.sweep.run_jobs). Returns
    {name: error}; BadInput if a job cannot be batched."""
    if batched is None:
        batched = pick_device(device).type == "cuda"
    if not batched:
        return sweep.run_jobs(todo, jobs=jobs)
    return run_jobs(todo, device)


def batched_flag(p):
    """--batched / --no-batched for studies.fmnist."""
    p.add_argument("--batched", action=argparse.BooleanOptionalAction, default=None,
                   help="train the runs in one process with tools.batched (default: on a GPU; one train.py process "
                        "per run, --jobs at a time, on the CPU)")


# ---------------------------------------------------------------- the command line
def expand(argv, zipped):
    """[(name, train.py argv)] of every run the lists in argv make (their product, or their positions); the other
    flags are every run's, less the knobs its mode and label correction do not read (config.knobs_for)."""
    lists, rest, i = {}, [], 0
    while i < len(argv):
        flag, value = argv[i].split("=", 1) if "=" in argv[i] else (argv[i], None)
        if flag[2:] in VARY:
            if value is None:
                if i + 1 >= len(argv):
                    raise BadInput(f"{flag} needs a value")
                value, i = argv[i + 1], i + 1
            values = value.split(",")
            if (len(set(values)) != len(values) and not zipped) or "" in values:
                raise BadInput(f"{flag} {value} lists a value twice or an empty one; list each value once")
            lists[flag[2:]] = values
        else:
            rest.append(argv[i])
        i += 1
    if zipped and len({len(v) for v in lists.values()}) > 1:
        raise BadInput("--zip pairs the lists by position, and they differ in length (" + ", ".join(
            f"--{k} {len(v)}" for k, v in lists.items()) + "); give each the same number of values")
    combos = zip(*lists.values()) if zipped and lists else itertools.product(*lists.values())  # no lists: one run
    runs = [(dict(zip(lists, c)), [a for k, v in zip(lists, c) for a in (f"--{k}", v)]) for c in combos]
    return [(values, knobs_for(rest + own, rest) + own) for values, own in runs]  # each run, the knobs it reads


def name_of(values, args):
    """A run's folder: train.py's name of its settings (config.run_name), without the dataset and arch its grid
    shares, with its lr wherever the grid lists --lr, one value or several (so a later command into the same OUT
    at another lr gives its runs folders of their own)."""
    return run_name(args, omit=("dataset", "arch"), lr=values.get("lr"))


@one_line("batched.py", stopped="stopped by Ctrl-C; run the same command again (finished runs are skipped, the "
                               "others start again from epoch 1)")
def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if "-h" in argv or "--help" in argv:
        print(__doc__)
        return 0
    zipped = "--zip" in argv
    argv = [a for a in argv if a != "--zip"]
    try:
        out_i = max(i for i, a in enumerate(argv) if a == "--out")
        out, argv = argv[out_i + 1], argv[:out_i] + argv[out_i + 2:]
    except (ValueError, IndexError):
        raise BadInput("give --out DIR, the folder the runs go to") from None
    todo = []
    for values, run_argv in expand(argv, zipped):
        args = resolved(run_argv + ["--out", out], quiet=True)
        d = os.path.join(out, name_of(values, args))
        todo.append(dict(name=os.path.basename(d), dir=d, key=run_argv, argv=run_argv + ["--out", d]))
    if len({j["dir"] for j in todo}) != len(todo):
        raise BadInput("two runs would share a folder; list each value once")
    t0 = time.time()
    try:
        failed = run_jobs(todo, resolved(todo[0]["argv"], quiet=True).device if todo else "auto")
    except runfiles.WriteError as e:  # a full disk: what each file held before, and one line
        raise UserError(f"{e}; the finished runs are kept in {out}; {e.fix}, then run the same command again "
                        f"(finished runs are skipped, the others start again from epoch 1)") from None
    print(f"{len(todo)} runs, {len(failed)} diverged, {time.time() - t0:.0f} s: {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
