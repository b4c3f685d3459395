"""CMD on real data where noisy labels are memorised slowly: Fashion-MNIST, every row tuned on clean validation data.

    python -m tools.demo regime --out sweeps/fmnist   # zero knowledge alone: do the preconditions hold?
    python -m tools.demo select --out sweeps/fmnist   # every row's lr (and CMD's eta, b) on the clean val split
    python -m tools.demo compare --out sweeps/fmnist  # Co-teaching(+), JoCoR, GCE chosen the same way (optional)
    python -m tools.demo report --out sweeps/fmnist   # the rows at their chosen settings, 5 seeds, the table
    python -m tools.demo select --out sweeps/fmnist --jobs 14 -- --device cuda --amp off   # one GPU, 14 runs at a time

Stages, each a grid of train.py runs (finished runs are skipped; with --batched, or on a GPU, they train in one
process, tools.batched; else one train.py process per run, and cut ones resume):
regime -- CE and MyLC with zero knowledge, and CE on clean labels, at the base schedule (BASE, lr 0.05), on
          the selection seeds. Prints the preconditions (PRECONDITIONS) before any CMD row has run.
select -- the declared grids (LRS, ETAS, ETA_B) on the selection seeds SELECT_SEEDS, which are not reported.
          Each row's setting is the one with the best mean final-epoch accuracy on the clean 10% validation
          split ('val_acc_mean'). CE CMD-P takes MyLC CMD-P's eta and b and tunes only its lr, so it runs
          after them. Writes DIR/choice.json (the choice, read by report) and DIR/select.md (every
          configuration's validation accuracy), and DIR/select-eta-b.png (validation accuracy over eta, b).
report -- the ROWS at the chosen settings on REPORT_SEEDS, the same fixed data in every seed
          (--subset-seed): DIR/report.md, the table with paired differences and diagnostics.

The data: a fixed 8,000 of Fashion-MNIST's 60,000 training images (--subset-seed 0), of which a clean 10%
is the validation split; the full 10,000 test images. 40% symmetric noise; the mlp; no augmentation; no
weight decay; 80 epochs, lr / 10 at 40 and 60. Fixed from zero knowledge's preconditions (docs/fmnist-regime.md).
"""
import argparse
import json
import math
import os
import shlex
import sys
import time

from tools import batched
from tools.stats import fmt, mean_std, paired
from tools.sweep import run_diagnostics
from training import config

DATA = ["--dataset", "fashionmnist", "--data-dir", "/usr/share/datasets/fashion-mnist"]
BASE = ["--arch", "mlp", "--subset", "8000", "--subset-seed", "0", "--val-split", "0.1", "--augment", "none",
        "--weight-decay", "0", "--epochs", "80", "--milestones", "40,60", "--batch-size", "128", "--noise", "sym",
        "--rate", "0.4"]
BASE_LR = 0.05
# The grids, declared before any run: lr in steps of sqrt(2) for every row; CMD-S's eta; CMD-P's (eta, b).
# chi <= ln K / eta: at K = 10, eta = 2 starts at 1.15 nats, the paper's eta = 4 at K = 100.
LRS = (0.025, 0.035, 0.05, 0.07, 0.1)
ETAS = (2.0, 4.0)
ETA_B = tuple((eta, b) for eta in (2.0, 4.0) for b in (-2.0, -5.0))
SELECT_SEEDS = (100, 101)
REPORT_SEEDS = (0, 1, 2, 3, 4)

# key: (label, train.py flags, the zero-knowledge row it is compared with on the same seed); the MyLC rows
# that select knowledge are also compared with all knowledge (VERSUS_ALL), the paper's Table 1 claim.
ROWS = {
    "clean": ("CE, clean labels (reference)", ["--mode", "zero", "--lc", "ce", "--noise", "none", "--rate", "0"], None),
    "ce-zero": ("CE, zero knowledge", ["--mode", "zero", "--lc", "ce"], None),
    "mylc-zero": ("MyLC, zero knowledge", ["--mode", "zero", "--lc", "mylc"], None),
    "control": ("MyLC, zero knowledge at 2x its lr (control)", ["--mode", "zero", "--lc", "mylc"], "mylc-zero"),
    "ce-cmdp": ("CE, CMD-P (selection alone)", ["--mode", "progressive", "--lc", "ce"], "ce-zero"),
    "mylc-all": ("MyLC, all knowledge (η = 1)", ["--mode", "all", "--lc", "mylc"], "mylc-zero"),
    "mylc-cmds": ("MyLC, CMD-S", ["--mode", "static", "--lc", "mylc"], "mylc-zero"),
    "mylc-cmdp": ("MyLC, CMD-P", ["--mode", "progressive", "--lc", "mylc"], "mylc-zero"),
    "cohort": ("MyLC, CMD-P, a cohort of 3", ["--mode", "progressive", "--lc", "mylc", "--peers", "3"], "mylc-zero"),
}
VERSUS_ALL = {"mylc-cmds": "mylc-all", "mylc-cmdp": "mylc-all", "cohort": "mylc-all"}
# What select tunes per row: (lr, eta, b) candidates. clean runs at the base schedule; control, cohort
# and ce-cmdp derive from other rows' choices (see choose).
GRID = {
    "ce-zero": [(lr, None, None) for lr in LRS],
    "mylc-zero": [(lr, None, None) for lr in LRS],
    "mylc-all": [(lr, None, None) for lr in LRS],
    "mylc-cmds": [(lr, eta, 0.0) for lr in LRS for eta in ETAS],
    "mylc-cmdp": [(lr, eta, b) for lr in LRS for eta, b in ETA_B],
}
# The comparators (baselines.py; GCE is a label correction), beside CMD on the same data, seeds and lr grid,
# each with its own knob on 3 values; Co-teaching also at the true noise rate, the authors' oracle setting.
# `compare` chooses them on the same validation split; `report` then runs them with the other rows.
ROWS.update({
    "coteach-oracle": ("Co-teaching, τ = 0.4 (the true noise rate)", ["--mode", "coteach", "--forget-rate", "0.4"],
                       "ce-zero"),
    "coteach": ("Co-teaching, τ chosen on validation", ["--mode", "coteach"], "ce-zero"),
    "coteach+": ("Co-teaching+", ["--mode", "coteach+"], "ce-zero"),
    "jocor": ("JoCoR", ["--mode", "jocor"], "ce-zero"),
    "gce-zero": ("GCE, zero knowledge", ["--mode", "zero", "--lc", "gce"], "ce-zero"),
})
KNOBS = {"coteach-oracle": None, "coteach": ("--forget-rate", (0.3, 0.4, 0.5)),
         "coteach+": ("--forget-rate", (0.3, 0.4, 0.5)), "jocor": ("--jocor-lambda", (0.7, 0.85, 0.95)),
         "gce-zero": ("--gce-q", (0.5, 0.7, 0.9))}
PRECONDITIONS = ("harm: zero knowledge's final test accuracy >= 5 points below clean labels; memorisation happens: "
                 ">= 30% of the noisy labels memorised at the end; memorisation is slow: < 25% memorised at a "
                 "quarter of the run, and memorisation first reaches half its final value after a third of it")


def setting_flags(row, lr, eta, b, knob=None):
    """train.py flags of a row at a setting; knob: a comparator's own (flag, value)."""
    flags = ROWS[row][1] + ["--lr", f"{lr:g}"]
    flags += [] if eta is None else ["--eta", f"{eta:g}", "--b", f"{b:g}"]
    return flags + ([] if knob is None else [knob[0], f"{knob[1]:g}"])


def name_of(row, lr, eta, b, knob=None):
    return (f"{row}-lr{lr:g}" + ("" if eta is None else f"-eta{eta:g}-b{b:g}") +
            ("" if knob is None else f"-{knob[0][2:]}{knob[1]:g}"))


def job(stage_dir, name, flags, seed, extra):
    d = os.path.join(stage_dir, f"{name}-s{seed}")
    key = DATA + BASE + flags + ["--seed", str(seed)]
    return dict(name=f"{name}-s{seed}", dir=d, key=key, argv=key + ["--out", d, *extra])


def rows_of(path):
    with open(os.path.join(path, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def finished(d):
    return os.path.exists(os.path.join(d, "summary.json"))


# ---------------------------------------------------------------- regime
def regime_jobs(out, extra):
    stage = os.path.join(out, "select")  # the same runs as the selection's lr 0.05 cells: reused there
    return [job(stage, name_of(row, BASE_LR, None, None), setting_flags(row, BASE_LR, None, None), s, extra)
            for row in ("ce-zero", "mylc-zero", "clean") for s in SELECT_SEEDS]


def memorisation_timing(rows):
    """(memorised at the end, at a quarter of the run, the first epoch reaching half the final value) of a run,
    on the mean of its models."""
    mem = [sum(v for k, v in r.items() if k.startswith("memorized_")) /
           sum(1 for k in r if k.startswith("memorized_")) for r in rows]
    end, n = mem[-1], len(mem)
    half = next(i + 1 for i, m in enumerate(mem) if m >= end / 2)
    return end, mem[max(0, round(n / 4) - 1)], half, n


def preconditions(zero_dirs, clean_dirs):
    """Lines that say, from zero knowledge's run folders (means over seeds), whether each precondition holds."""
    return preconditions_of({label: [rows_of(d) for d in dirs] for label, dirs in zero_dirs.items()},
                            [rows_of(d) for d in clean_dirs])


def preconditions_of(zero_runs, clean_runs):
    """preconditions from the runs' metrics rows: zero_runs {label: [rows of each seed]}, clean_runs [rows]."""
    clean = mean_std([rows[-1]["test_acc_mean"] for rows in clean_runs])[0]
    lines, ok = [], True
    for label, runs in zero_runs.items():
        t = [memorisation_timing(rows) for rows in runs]
        end, quarter = (sum(x[i] for x in t) / len(t) for i in (0, 1))
        half, n = sum(x[2] for x in t) / len(t), t[0][3]
        acc = mean_std([rows[-1]["test_acc_mean"] for rows in runs])[0]
        checks = [(clean - acc >= 5, f"harm {clean - acc:.1f} points (final {acc:.2f} vs clean {clean:.2f})"),
                  (end >= 0.3, f"memorised at the end {end:.2f}"),
                  (quarter < 0.25, f"at a quarter ({round(n / 4)} of {n} epochs) {quarter:.2f}"),
                  (half > n / 3, f"half of the final value first at epoch {half:.1f} (a third: {n / 3:.1f})")]
        ok &= all(c for c, _ in checks)
        lines.append(f"- {label} (n={len(runs)}): " + "; ".join(f"{text} {'✓' if c else '✗'}" for c, text in checks))
    return lines, ok


def regime_report(out, seeds=SELECT_SEEDS, stage="select", lrs=None):
    lrs = lrs or {}
    def dirs(row):
        lr = lrs.get(row, BASE_LR)
        return [d for s in seeds for d in [os.path.join(out, stage, f"{name_of(row, lr, None, None)}-s{s}"
                                                         if stage == "select" else f"{row}-s{s}")] if finished(d)]
    zero = {ROWS[r][0] + (f" at lr {lrs[r]:g}" if r in lrs else f" at lr {BASE_LR:g}"): dirs(r)
            for r in ("ce-zero", "mylc-zero")}
    if not all(zero.values()) or not dirs("clean"):
        return ["(the regime's runs have not finished)"], False
    return preconditions(zero, dirs("clean"))


# ---------------------------------------------------------------- select
def select_jobs(out, extra, choice=None):
    stage = os.path.join(out, "select")
    todo = [job(stage, name_of("clean", BASE_LR, None, None), setting_flags("clean", BASE_LR, None, None), s, extra)
            for s in SELECT_SEEDS]
    for row, grid in GRID.items():
        todo += [job(stage, name_of(row, *g), setting_flags(row, *g), s, extra) for g in grid for s in SELECT_SEEDS]
    if choice is not None:  # CE CMD-P: MyLC CMD-P's eta and b, its own lr
        eta, b = choice["mylc-cmdp"]["eta"], choice["mylc-cmdp"]["b"]
        todo += [job(stage, name_of("ce-cmdp", lr, eta, b), setting_flags("ce-cmdp", lr, eta, b), s, extra)
                 for lr in LRS for s in SELECT_SEEDS]
    return todo


def compare_grid(row):
    """A comparator's settings: (lr, None, None, (flag, value)) for each lr and value of its knob."""
    knob = KNOBS[row]
    return [(lr, None, None, None if knob is None else (knob[0], v)) for lr in LRS
            for v in ((None,) if knob is None else knob[1])]


def compare_jobs(out, extra):
    stage = os.path.join(out, "select")
    return [job(stage, name_of(row, *g), setting_flags(row, *g), s, extra)
            for row in KNOBS for g in compare_grid(row) for s in SELECT_SEEDS]


def choose_compare(out):
    """{row: {lr, eta, b, knob, val}} of each comparator: the best mean validation accuracy, as choose."""
    choice = {}
    for row in KNOBS:
        scored = [(val_score(out, row, g)[0], g) for g in compare_grid(row)]
        if any(v is None for v, _ in scored):
            raise RuntimeError(f"{row}: {sum(v is None for v, _ in scored)} of its settings did not finish")
        v, (lr, _, _, knob) = max(scored, key=lambda x: x[0])
        choice[row] = dict(lr=lr, eta=None, b=None, knob=knob, val=round(v, 3))
    return choice


def compare_table(out, choice):
    lines = ["| row | lr | knob | val acc (mean of 2 seeds) | seeds | chosen |", "|---|---|---|---|---|---|"]
    for row in KNOBS:
        for g in compare_grid(row):
            v, vals = val_score(out, row, g)
            c = choice.get(row, {})
            chosen = "**✓**" if (c.get("lr"), c.get("knob")) == (g[0], g[3]) else ""
            knob = "–" if g[3] is None else f"{g[3][0]} {g[3][1]:g}"
            lines.append(f"| {ROWS[row][0]} | {g[0]:g} | {knob} | {'–' if v is None else f'{v:.2f}'} | "
                         f"{' '.join(f'{x:.2f}' for x in vals)} | {chosen} |")
    return lines


def val_score(out, row, setting):
    """Mean over the selection seeds of the final epoch's val_acc_mean, and the seeds' values."""
    dirs = [os.path.join(out, "select", f"{name_of(row, *setting)}-s{s}") for s in SELECT_SEEDS]
    vals = [rows_of(d)[-1]["val_acc_mean"] for d in dirs if finished(d)]
    return (sum(vals) / len(vals) if len(vals) == len(SELECT_SEEDS) else None), vals


def choose(out, rows, given=None):
    """{row: {lr, eta, b, val}} for the tuned rows, the best mean validation accuracy (ties: the first).
    given: the choices made before (CE CMD-P's grid is MyLC CMD-P's eta and b)."""
    choice = dict(given or {})
    for row in rows:
        grid = GRID.get(row) or [(lr, choice["mylc-cmdp"]["eta"], choice["mylc-cmdp"]["b"]) for lr in LRS]
        scored = [(val_score(out, row, g)[0], g) for g in grid]
        scored = [(v, g) for v, g in scored if v is not None]
        if len(scored) < len(grid):
            raise RuntimeError(f"{row}: {len(grid) - len(scored)} of its {len(grid)} settings did not finish")
        v, (lr, eta, b) = max(scored, key=lambda x: x[0])
        choice[row] = dict(lr=lr, eta=eta, b=b, val=round(v, 3))
    return {row: choice[row] for row in rows}


def derived(choice):
    """The rows whose settings follow from the tuned ones: clean, the control, the cohort."""
    c = dict(choice)
    c["clean"] = dict(lr=BASE_LR, eta=None, b=None, val=None)
    c["control"] = dict(lr=2 * choice["mylc-zero"]["lr"], eta=None, b=None, val=None)
    c["cohort"] = dict(choice["mylc-cmdp"], val=None)
    return c


def select_table(out, choice):
    lines = ["| row | lr | η | b | val acc (mean of 2 seeds) | seeds | chosen |", "|---|---|---|---|---|---|---|"]
    for row in list(GRID) + ["ce-cmdp"]:
        grid = GRID.get(row) or [(lr, choice["mylc-cmdp"]["eta"], choice["mylc-cmdp"]["b"]) for lr in LRS]
        for lr, eta, b in grid:
            v, vals = val_score(out, row, (lr, eta, b))
            pick = choice.get(row, {})
            chosen = "**✓**" if (pick.get("lr"), pick.get("eta"), pick.get("b")) == (lr, eta, b) else ""
            lines.append(f"| {ROWS[row][0]} | {lr:g} | {'–' if eta is None else f'{eta:g}'} | "
                         f"{'–' if b is None else f'{b:g}'} | {'–' if v is None else f'{v:.2f}'} | "
                         f"{' '.join(f'{x:.2f}' for x in vals)} | {chosen} |")
    return lines


def heat_map(out, path):
    """Validation accuracy of MyLC CMD-S (b = 0) and CMD-P over (eta, b), each cell its best lr."""
    from tools.plot import pyplot, save  # matplotlib only for the figure: select's table and choice need none
    plt = pyplot()
    bs = sorted({b for _, b in ETA_B} | {0.0})
    grid = [[max((val_score(out, "mylc-cmds" if b == 0 else "mylc-cmdp", (lr, eta, b))[0] or -1, lr) for lr in LRS)
             for b in bs] for eta in ETAS]
    fig, ax = plt.subplots(figsize=(4.8, 3.2))
    im = ax.imshow([[v for v, _ in r] for r in grid], cmap="viridis", aspect="auto")
    for i, r in enumerate(grid):
        for j, (v, lr) in enumerate(r):
            ax.text(j, i, f"{v:.1f}\nlr {lr:g}", ha="center", va="center", color="w", fontsize=8)
    ax.set_xticks(range(len(bs)), [f"b={b:g}" + (" (CMD-S)" if b == 0 else "") for b in bs])
    ax.set_yticks(range(len(ETAS)), [f"η={e:g}" for e in ETAS])
    ax.set_title("MyLC: val accuracy (2 seeds) at each cell's best lr", fontsize=9)
    fig.colorbar(im, ax=ax)
    save(plt, fig, path)


# ---------------------------------------------------------------- report
def report_jobs(out, choice, seeds, extra):
    stage = os.path.join(out, "report")  # seed by seed: a report cut short still pairs every row
    return [job(stage, row, setting_flags(row, c["lr"], c["eta"], c["b"], c.get("knob")), s, extra)
            for s in seeds for row, c in choice.items()]


def early_stopped(rows):
    """Test accuracy at the epoch with the best validation accuracy (the first such epoch)."""
    best = max(range(len(rows)), key=lambda i: (rows[i]["val_acc_mean"], -i))
    return rows[best]["test_acc_mean"]


def report_table(out, choice, seeds):
    got = {}
    for row in choice:
        dirs = {s: os.path.join(out, "report", f"{row}-s{s}") for s in seeds}
        got[row] = {s: rows_of(d) for s, d in dirs.items() if finished(d)}
    lines = ["| row | lr | η, b | final test acc (mean of models) | ensemble | early-stopped test acc | "
             "Δ vs zero, same lc (95% t-interval) | ahead | Δ vs all knowledge | ahead | memorised (end) | selected | "
             "precision | recall |", "|---" * 14 + "|"]
    for row, c in choice.items():
        runs = got[row]
        if not runs:
            lines.append(f"| {ROWS[row][0]} | not run |" + " |" * 10)
            continue
        acc = mean_std([r[-1]["test_acc_mean"] for r in runs.values()])
        ens = mean_std([r[-1]["test_acc_ens"] for r in runs.values()])
        es = mean_std([early_stopped(r) for r in runs.values()])
        clean_labels = "--noise" in ROWS[row][1] and ROWS[row][1][ROWS[row][1].index("--noise") + 1] == "none"
        diag = [] if clean_labels else [run_diagnostics(os.path.join(out, "report", f"{row}-s{s}")) for s in runs]
        dia = {k: mean_std([d[k] for d in diag if d[k] is not None] or [math.nan]) for k in
               ("memorized", "selected", "precision", "recall")}
        compared = [paired(runs, got.get(base)) if base else ("–", "–") for base in (ROWS[row][2], VERSUS_ALL.get(row))]
        setting = "–" if c["eta"] is None else f"{c['eta']:g}, {c['b']:g}"
        cells = [fmt(*acc[:2]), fmt(*ens[:2]), fmt(*es[:2]), *compared[0], *compared[1]] + [
            "–" if math.isnan(dia[k][0]) else fmt(*dia[k][:2]) for k in ("memorized", "selected", "precision", "recall")]
        label = ROWS[row][0] + ("" if len(runs) == len(seeds) else f" (n={len(runs)} of {len(seeds)})")
        lines.append(f"| {label} | {c['lr']:g} | {setting} | " + " | ".join(cells) + " |")
    return lines


# ---------------------------------------------------------------- main
def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Flags after -- go to every train.py (e.g. -- --amp off).")
    p.add_argument("stage", choices=("regime", "select", "compare", "report"))
    p.add_argument("--out", default="sweeps/fmnist", metavar="DIR", help="the runs, choice.json and the tables")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                   help="the four Fashion-MNIST IDX files (Debian: apt-get install dataset-fashion-mnist)")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time, each with an equal share of the cores "
                                                        "(and the one GPU, when train.py sees one) (default 2)")
    config.add_device_flag(p)
    batched.batched_flag(p)
    p.add_argument("--seeds", type=int, default=len(REPORT_SEEDS), help="report: seeds 0..N-1 (default 5)")
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.jobs < 1 or not 1 <= args.seeds <= 9:
        p.error("--jobs must be at least 1 and --seeds between 1 and 9")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        p.error(f"--out {args.out} is a file; give a directory")
    global DATA
    DATA = ["--dataset", "fashionmnist", "--data-dir", args.data_dir]
    extra = ["--device", args.device, "--workers", "0"] + extra
    choice_path = os.path.join(args.out, "choice.json")
    if args.stage in ("compare", "report") and not os.path.exists(choice_path):  # before anything is written
        p.error(f"{choice_path} not found: run `python -m tools.demo select --out {args.out}` first, or copy the "
                f"published choice, docs/fmnist/choice.json, there")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    command = shlex.join(["python", "-m", "tools.demo", *argv])
    try:
        return run_stage(args, extra, command, t0)
    except KeyboardInterrupt:  # each run stops at its checkpoint; the same command continues them
        print("demo: stopped by Ctrl-C; run the same command again to continue (finished runs are skipped, the "
              "others resume from their checkpoints)", file=sys.stderr)
        return 130


def run(todo, args, trained):
    """The runs (batched.run_grid: in one process with --batched or on a GPU, else sweep.run_jobs), counting in
    trained[0] the runs this invocation trains (not those finished before)."""
    trained[0] += sum(not finished(j["dir"]) for j in todo)
    return batched.run_grid(todo, args.jobs, args.device, args.batched)


def run_stage(args, extra, command, t0):
    """One stage: its runs, then its table (and, for select, choice.json and the heat map)."""
    choice_path, trained = os.path.join(args.out, "choice.json"), [0]

    def footer():
        return (f"`{command}`: {time.time() - t0:.0f} s this invocation, which trained {trained[0]} runs "
                f"(the others had finished before).")
    if args.stage == "regime":
        failed = run(regime_jobs(args.out, extra), args, trained)
        lines, ok = regime_report(args.out)
        text = "\n".join([f"# Regime: zero knowledge at the base schedule (lr {BASE_LR:g}), seeds "
                          f"{', '.join(map(str, SELECT_SEEDS))}", "", PRECONDITIONS + ".", ""] + lines +
                         ["", f"All hold: {'yes' if ok else 'no'}.", "", footer(), ""])
        path = os.path.join(args.out, "regime.md")
    elif args.stage == "select":
        failed = run(select_jobs(args.out, extra), args, trained)
        choice = choose(args.out, ["ce-zero", "mylc-zero", "mylc-all", "mylc-cmds", "mylc-cmdp"])
        failed.update(run(select_jobs(args.out, extra, choice)[-len(LRS) * len(SELECT_SEEDS):], args, trained))
        choice.update(choose(args.out, ["ce-cmdp"], choice))
        with open(choice_path, "w") as f:
            json.dump(dict(derived(choice), command=command), f, indent=1)
        try:
            heat_map(args.out, os.path.join(args.out, "select-eta-b.png"))
        except (ImportError, SystemExit):  # no matplotlib: the table and choice.json are what the report needs
            print("demo: no heat map without matplotlib (pip install matplotlib)", file=sys.stderr)
        lines, ok = regime_report(args.out)
        text = "\n".join(["# Selection on the clean 10% validation split", "",
                          f"Seeds {', '.join(map(str, SELECT_SEEDS))} (not reported). Each row's choice: the best "
                          "mean final-epoch validation accuracy (val_acc_mean).", ""] + select_table(args.out, choice)
                         + ["", "Preconditions at the base schedule: " + PRECONDITIONS + "."] + lines +
                         ["", footer(), ""])
        path = os.path.join(args.out, "select.md")
    elif args.stage == "compare":
        failed = run(compare_jobs(args.out, extra), args, trained)
        picked = choose_compare(args.out)
        with open(choice_path) as f:
            saved = json.load(f)
        saved.update(picked, compare_command=command)
        with open(choice_path, "w") as f:
            json.dump(saved, f, indent=1)
        text = "\n".join(["# The comparators' selection on the clean 10% validation split", "",
                          f"Seeds {', '.join(map(str, SELECT_SEEDS))}, the lr grid of every row, each comparator's "
                          "own knob; the choice is added to choice.json.", ""] + compare_table(args.out, picked) +
                         ["", footer(), ""])
        path = os.path.join(args.out, "compare.md")
    else:
        with open(choice_path) as f:
            choice = {k: v for k, v in json.load(f).items() if k in ROWS}
        choice = {row: choice[row] for row in ROWS if row in choice}
        seeds = REPORT_SEEDS[:args.seeds]
        failed = run(report_jobs(args.out, choice, seeds, extra), args, trained)
        lines, ok = regime_report(args.out, seeds, "report", {r: choice[r]["lr"] for r in ("ce-zero", "mylc-zero")})
        text = "\n".join([f"# Fashion-MNIST, 40% symmetric noise: every row at its validation-chosen setting, seeds "
                          f"{', '.join(map(str, seeds))}", ""] + report_table(args.out, choice, seeds) +
                         ["", "Final test accuracy: the mean of the models' final-epoch accuracies (the paper's "
                          "number), mean ± sample std over seeds. Δ: per-seed difference against zero knowledge with "
                          "the same label correction on the same seed, and for the MyLC rows that select, against "
                          "all knowledge; a **win** when the 95% t-interval's lower end is above 0. Diagnostics: means over epochs and models (memorised: the last epoch).", "",
                          "Preconditions again, on the reported zero-knowledge rows at their chosen lr: " +
                          PRECONDITIONS + "."] + lines + ["", footer(), ""])
        path = os.path.join(args.out, "report.md")
    with open(path, "w") as f:
        f.write(text)
    print(text)
    print(f"written: {path}" + (f"; {len(failed)} runs failed: {', '.join(sorted(failed))}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
