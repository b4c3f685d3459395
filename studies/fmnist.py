"""CMD on real data where noisy labels are memorised slowly: Fashion-MNIST, every row chosen on a clean validation
split. One pipeline, three studies of it:

demo        -- every row tuned (its lr; CMD's eta and b; each comparator's knob) at 40% symmetric noise, five seeds
               at the choices: does CMD help here, and which settings? (docs/fmnist/select.md)
attribution -- does the confident selection matter? CMD-P beside the same count taught at random positions, all
               knowledge, zero knowledge, a step-size control, CMD-P without the extra weight and Co-teaching, per
               noise rate, each row's lr by an edge and a tie rule (docs/fmnist/attribution/)
recipe      -- Table 1's shape in the paper's own recipe: a ResNet18 pair at the appendix's SGD, the same for every
               row, wave by wave on a lent GPU (studies/recipe.py: its declaration, waves, raw data and report)

    python -m studies.fmnist demo regime --out sweeps/fmnist    # zero knowledge alone: do the preconditions hold?
    python -m studies.fmnist demo select --out sweeps/fmnist    # every row's lr (and CMD's eta, b) on the val split
    python -m studies.fmnist demo compare --out sweeps/fmnist   # Co-teaching(+), JoCoR, GCE chosen the same way
    python -m studies.fmnist demo report --out sweeps/fmnist    # the rows at their choices, 5 seeds, the table
    python -m studies.fmnist attribution all --rate 0.6 -- --device cuda --amp off   # select, then report, one GPU
    python -m studies.fmnist attribution all --rate 0.5 --rows zero,clean --batched  # a new rate's preconditions
    python -m studies.fmnist attribution report --rate 0.4 --published-choice        # 40% at the committed choices
    python -m studies.fmnist attribution pack --out sweeps/fmnist   # every run's numbers into docs/fmnist/runs.jsonl.gz
    python -m studies.fmnist attribution tables --rate 0.4 --out docs/fmnist   # the tables again from those alone
    python -m studies.fmnist attribution agreement --out OUT   # OUT's report --batched runs against train.py's
    python -m studies.fmnist recipe wave --dry-run              # the recipe's next wave: five train.py commands
    python -m studies.fmnist recipe pack gpu-check              # a wave's $OUT into docs/fmnist/recipe/runs.jsonl.gz
    python -m studies.fmnist recipe report                      # docs/fmnist/recipe/report.md from the raw data
    python -m studies.fmnist demo select --dry-run              # a stage's train.py commands, to run one by hand

The demo's and the attribution's data: a fixed 8,000 of Fashion-MNIST's 60,000 training images (--subset-seed 0),
of which a clean 10% is the validation split; the full 10,000 test images; the mlp; no augmentation; no weight
decay; 80 epochs, lr / 10 at 40 and 60 (BASE; docs/fmnist-regime.md). The recipe has its own declaration, waves
and report: studies/recipe.py. Each stage is a grid of train.py runs (finished runs are skipped; with
--batched, or on a GPU, they train in one process, tools.batched; else one train.py process per run).

SELECTION: each row's setting is the one of best mean final-epoch accuracy on the clean validation split over the
selection seeds (SELECT_SEEDS, never reported), ties to the smaller lr; a diverged setting scores -inf. The
attribution adds two rules on its lr grids:
  EDGE RULE -- a best mean on an edge of the grid extends it by one step of LADDER (sqrt(2)) that way, until it is
               interior, the next step diverged, or EXTEND steps were added (then the choice is marked);
  TIE RULE  -- when the best two settings' paired difference over the selection seeds is within one standard error
               of zero, they tie and the one nearer the base lr (BASE_LR, on the log scale) is kept.
The report: every row at its choice on REPORT_SEEDS, the same fixed data in every seed, with paired differences.

The parts, in order: the declaration (BASE, Setting, DEMO and ATTRIBUTION: rows, grids, pairs); the runs (on disk
or in the raw data, runs.jsonl.gz); the selection (choose); the tables; the stages and the command line.
"""
import argparse
import functools
import glob
import gzip
import json
import math
import os
import re
import shlex
import sys
import time
from typing import NamedTuple

from studies import recipe
from studies.recipe import RAW
from tools import batched
from tools.paper_tables import FMNIST_REGIME
from tools.stats import fmt, interval, mean_std, paired
from tools.sweep import diagnostics, early_stopped, print_commands, where
from training import config, runfiles
from training.errors import Parser, UserError, one_line

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = "/usr/share/datasets/fashion-mnist"  # Debian: apt-get install dataset-fashion-mnist

# ---------------------------------------------------------------- the declaration
BASE = [*FMNIST_REGIME, "--noise", "sym", "--rate", "0.4"]  # tools.sweep's --scale fmnist runs the same regime
BASE_LR = 0.05
SELECT_SEEDS, REPORT_SEEDS, CLEAN_SEEDS = (100, 101), (0, 1, 2, 3, 4), (0, 1)
# lr in steps of sqrt(2); the demo's grid is LRS, the attribution's edge rule walks LADDER
LADDER = (0.0044, 0.00625, 0.0088, 0.0125, 0.0177, 0.025, 0.035, 0.05, 0.07, 0.1, 0.14, 0.2, 0.28, 0.4, 0.57, 0.8)
LRS = (0.025, 0.035, 0.05, 0.07, 0.1)
EXTEND = 3  # at most this many sqrt(2) steps beyond a row's declared grid, each way
# chi <= ln K / eta: at K = 10, eta = 2 starts at 1.15 nats, the paper's eta = 4 at K = 100.
ETAS = (2.0, 4.0)
ETA_B = tuple((eta, b) for eta in (2.0, 4.0) for b in (-2.0, -5.0))
PRECONDITIONS = ("harm: zero knowledge's final accuracy on the clean validation split >= 5 points below clean "
                 "labels; memorisation happens: >= 30% of the noisy labels memorised at the end; memorisation is "
                 "slow: < 25% memorised at a quarter of the run, and memorisation first reaches half its final value "
                 "after a third of it")


class Setting(NamedTuple):
    """One point of a row's grid: its lr, CMD's eta and b (None: the row's mode's), a comparator's (flag, value)."""
    lr: float
    eta: float | None = None
    b: float | None = None
    knob: tuple | None = None

    def flags(self, flags):
        """train.py's flags of a row (its flags) at this setting."""
        flags = flags + ["--lr", f"{self.lr:g}"]
        flags += [] if self.eta is None else ["--eta", f"{self.eta:g}", "--b", f"{self.b:g}"]
        return flags + ([] if self.knob is None else [self.knob[0], f"{self.knob[1]:g}"])

    def name(self, row):
        return (f"{row}-lr{self.lr:g}" + ("" if self.eta is None else f"-eta{self.eta:g}-b{self.b:g}") +
                ("" if self.knob is None else f"-{self.knob[0][2:]}{self.knob[1]:g}"))


def setting_of(c):
    """The Setting of a choice ({lr, eta, b, val[, knob]}, choice.json's form: a knob may be a list)."""
    return Setting(c["lr"], c.get("eta"), c.get("b"), None if c.get("knob") is None else tuple(c["knob"]))


class Study(NamedTuple):
    """rows: {row: (label, train.py flags)}, the report's rows in its order; grids: {rate: {row: [Setting]}},
    declared before any run (a row not there follows from others: FOLLOWS, or the clean reference at BASE_LR);
    follows: {row: (the row whose lr it takes, the factor)}; pairs: the report's paired differences, the demo's
    {row: (zero knowledge of its lc, all knowledge or None)} in its lines, the others' [(row, against)] below;
    rules: the edge and tie rules apply; keep: a choice's fields as choice.json holds them."""
    name: str
    rows: dict
    grids: dict
    follows: dict
    pairs: dict | list
    rules: bool
    keep: tuple

    def folder(self, out, rate):
        return out if self.name == "demo" else os.path.join(out, "attribution", f"r{rate:g}")

    def report_name(self, row, setting):
        """The demo's report runs are named by row (and seed), the attribution's by row and lr (and seed)."""
        return row if self.name == "demo" else setting.name(row)


CLEAN = ("CE, clean labels (reference)", ["--mode", "zero", "--lc", "ce", "--noise", "none", "--rate", "0"])
KNOBS = {"coteach-oracle": None, "coteach": ("--forget-rate", (0.3, 0.4, 0.5)),
         "coteach+": ("--forget-rate", (0.3, 0.4, 0.5)), "jocor": ("--jocor-lambda", (0.7, 0.85, 0.95)),
         "gce-zero": ("--gce-q", (0.5, 0.7, 0.9))}
# The demo: its rows, each compared with zero knowledge of the same lc on the same seed (pairs: the first), and the
# MyLC rows that select knowledge also with all knowledge (the second), the paper's Table 1 claim. `select` tunes
# its GRID rows, then CE CMD-P's lr at MyLC CMD-P's eta and b; `compare` each comparator's lr and knob (KNOBS),
# Co-teaching also at the true noise rate, the authors' oracle setting.
DEMO = Study("demo", rows={
    "clean": CLEAN,
    "ce-zero": ("CE, zero knowledge", ["--mode", "zero", "--lc", "ce"]),
    "mylc-zero": ("MyLC, zero knowledge", ["--mode", "zero", "--lc", "mylc"]),
    "control": ("MyLC, zero knowledge at 2x its lr (control)", ["--mode", "zero", "--lc", "mylc"]),
    "ce-cmdp": ("CE, CMD-P (selection alone)", ["--mode", "progressive", "--lc", "ce"]),
    "mylc-all": ("MyLC, all knowledge (η = 1)", ["--mode", "all", "--lc", "mylc"]),
    "mylc-cmds": ("MyLC, CMD-S", ["--mode", "static", "--lc", "mylc"]),
    "mylc-cmdp": ("MyLC, CMD-P", ["--mode", "progressive", "--lc", "mylc"]),
    "cohort": ("MyLC, CMD-P, a cohort of 3", ["--mode", "progressive", "--lc", "mylc", "--peers", "3"]),
    "coteach-oracle": ("Co-teaching, τ = 0.4 (the true noise rate)", ["--mode", "coteach", "--forget-rate", "0.4"]),
    "coteach": ("Co-teaching, τ chosen on validation", ["--mode", "coteach"]),
    "coteach+": ("Co-teaching+", ["--mode", "coteach+"]),
    "jocor": ("JoCoR", ["--mode", "jocor"]),
    "gce-zero": ("GCE, zero knowledge", ["--mode", "gce"]),
}, grids={0.4: {
    "ce-zero": [Setting(lr) for lr in LRS],
    "mylc-zero": [Setting(lr) for lr in LRS],
    "mylc-all": [Setting(lr) for lr in LRS],
    "mylc-cmds": [Setting(lr, eta, 0.0) for lr in LRS for eta in ETAS],
    "mylc-cmdp": [Setting(lr, eta, b) for lr in LRS for eta, b in ETA_B],
    **{row: [Setting(lr, knob=None if k is None else (k[0], v)) for lr in LRS for v in ((None,) if k is None else k[1])]
       for row, k in KNOBS.items()},
}}, follows={"control": ("mylc-zero", 2), "cohort": ("mylc-cmdp", 1)},
    pairs={"control": ("mylc-zero", None), "ce-cmdp": ("ce-zero", None), "mylc-all": ("mylc-zero", None),
           "mylc-cmds": ("mylc-zero", "mylc-all"), "mylc-cmdp": ("mylc-zero", "mylc-all"),
           "cohort": ("mylc-zero", "mylc-all"), **dict.fromkeys(("coteach-oracle", "coteach", "coteach+", "jocor",
                                                                 "gce-zero"), ("ce-zero", None))},
    rules=False, keep=("lr", "eta", "b", "val"))
SELECTED = ["ce-zero", "mylc-zero", "mylc-all", "mylc-cmds", "mylc-cmdp", "ce-cmdp"]  # demo select's rows, in order

CMDP = ["--mode", "progressive", "--lc", "mylc", "--eta", "2", "--b", "-5"]  # the demo's chosen eta, b
# The attribution: at 40% the demo's lrs 0.025 to 0.1 of zero, all and CMD-P stand (PUBLISHED, the committed
# selection) and its grids extend them; at 60% (and 50%, where 60%'s preconditions fail) the four rows that
# decide the question. The report adds `step` (zero knowledge at 2x CMD-P's lr) and `mean` (CMD-P's selection
# without the extra weight); its first paired difference answers the question.
ATTRIBUTION = Study("attribution", rows={
    "zero": ("MyLC, zero knowledge", ["--mode", "zero", "--lc", "mylc"]),
    "all": ("MyLC, all knowledge (η = 1)", ["--mode", "all", "--lc", "mylc"]),
    "cmdp": ("MyLC, CMD-P (η = 2, b = −5)", CMDP),
    "shuffled": ("MyLC, CMD-P's count at random positions", CMDP + ["--select", "shuffled"]),
    "coteach": ("Co-teaching, τ = the true rate", ["--mode", "coteach"]),
    "step": ("MyLC, zero knowledge at 2× CMD-P's lr (step-size control)", ["--mode", "zero", "--lc", "mylc"]),
    "mean": ("MyLC, CMD-P, --peer-weight mean (no extra weight)", CMDP + ["--peer-weight", "mean"]),
    "clean": CLEAN,
}, grids={
    0.4: {"zero": (0.0125, 0.0177, 0.14, 0.2, 0.28), "all": (0.14, 0.2, 0.28), "cmdp": (0.14, 0.2, 0.28),
          "shuffled": (0.05, 0.07, 0.1, 0.14, 0.2, 0.28), "coteach": (0.025, 0.035, 0.05, 0.07, 0.1, 0.14)},
    **{rate: {row: (0.05, 0.07, 0.1, 0.14, 0.2, 0.28) for row in ("zero", "all", "cmdp", "shuffled")}
       for rate in (0.6, 0.5)},
}, follows={"step": ("cmdp", 2), "mean": ("cmdp", 1)},
    pairs=[("cmdp", "shuffled"), ("cmdp", "all"), ("cmdp", "zero"), ("shuffled", "zero"), ("all", "zero"),
           ("step", "zero"), ("cmdp", "step"), ("mean", "zero"), ("cmdp", "mean"), ("coteach", "zero"),
           ("cmdp", "coteach")],
    rules=True, keep=("lr", "val", "edge", "es_lr", "tie"))
PUBLISHED = {"zero": "mylc-zero", "all": "mylc-all", "cmdp": "mylc-cmdp"}  # the demo's rows the attribution extends

STUDIES = {"demo": DEMO, "attribution": ATTRIBUTION}
STAGES = {"demo": ("regime", "select", "compare", "report"),
          "attribution": ("select", "report", "all", "pack", "tables", "agreement"),
          "recipe": ("wave", "pack", "report")}


def base(rate):
    """BASE at this noise rate."""
    return [f"{rate:g}" if i and BASE[i - 1] == "--rate" else v for i, v in enumerate(BASE)]


def data_flags(data_dir=DATA_DIR):
    return ["--dataset", "fashionmnist", "--data-dir", data_dir]


# ---------------------------------------------------------------- the runs, on disk or in the raw data
class Plan(NamedTuple):
    """Where a study's runs go (folder/<stage>/<name>), and what every run is given: the data's and the regime's
    flags (data), and after them the device and the flags after -- (extra), less the knobs a run's mode and label
    correction do not read (config.knobs_for)."""
    folder: str
    data: list
    extra: list

    def job(self, stage, name, flags, seed):
        d = os.path.join(self.folder, stage, f"{name}-s{seed}")
        key = merged(self.data, flags, ["--seed", str(seed)])  # clean's --noise none --rate 0 replaces the base's
        return dict(name=f"{name}-s{seed}", dir=d, key=key, argv=key + ["--out", d, *config.knobs_for(key, self.extra)])


def merged(*parts):
    """train.py flags, each once: a later part's value replaces an earlier one's in place."""
    out = []
    for part in parts:
        for i, v in enumerate(part):
            if not v.startswith("--") or i + 1 == len(part) or part[i + 1].startswith("--"):
                continue  # a value (taken with its flag), or a flag without one: none in these studies
            if v in out:
                out[out.index(v) + 1] = part[i + 1]
            else:
                out += [v, part[i + 1]]
    return out


def cell_jobs(plan, study, stage, cells):
    """train.py jobs of cells [(row, Setting, seed)]: the selection's named by setting, the report's by study."""
    return [plan.job(stage, setting.name(row) if stage == "select" else study.report_name(row, setting),
                     setting.flags(study.rows[row][1]), s) for row, setting, s in cells]


def finished(d):
    return runfiles.state(d) == runfiles.FINISHED


def load_dir(folder):
    """{stage/name: dict(rows=metrics rows, diverged, flags=its train.py key, provenance)}, finished or diverged."""
    runs = {}
    for d in glob.glob(os.path.join(folder, "*", "*")):
        state = runfiles.state(d)
        bad = state == runfiles.DIVERGED
        if bad or state == runfiles.FINISHED:
            got = {}
            for f in ("config.json", "sweep.json"):  # a run made by hand has no sweep.json
                if os.path.exists(os.path.join(d, f)):
                    with open(os.path.join(d, f)) as fh:
                        got[f] = json.load(fh)
            rows = []
            if os.path.exists(os.path.join(d, "metrics.jsonl")):
                with open(os.path.join(d, "metrics.jsonl")) as f:
                    rows = [json.loads(line) for line in f]
            runs[os.path.relpath(d, folder)] = dict(rows=rows, diverged=bad, flags=got.get("sweep.json"),
                                                   provenance=got.get("config.json", {}).get("provenance"))
    return runs


def read_raw(path, rate):
    """{run: line} of one noise rate of the raw data: one JSON line per run, gzipped (docs/fmnist/runs.jsonl.gz),
    with rate, run (stage/name), flags (train.py's), diverged, provenance (config.json's), rows (metrics.jsonl)."""
    with gzip.open(path, "rt") as f:
        lines = [json.loads(line) for line in f]
    return {r["run"]: r for r in lines if r["rate"] == rate}


def pack(out, path):
    """Every finished or diverged attribution run under out into the raw data at path, a run of the same rate and
    name replaced: (added, how many the file holds)."""
    new = [dict(rate=rate, run=name, flags=run["flags"], diverged=run["diverged"], provenance=run["provenance"],
                rows=run["rows"]) for rate in ATTRIBUTION.grids
           for name, run in load_dir(ATTRIBUTION.folder(out, rate)).items()]
    lines = {}
    if os.path.exists(path):
        with gzip.open(path, "rt") as f:
            lines = {(r["rate"], r["run"]): r for r in map(json.loads, f)}
    lines.update({(r["rate"], r["run"]): r for r in new})
    with runfiles.replacing(path, "wb") as f, gzip.open(f, "wt") as z:
        z.writelines(json.dumps(lines[k], sort_keys=True) + "\n" for k in sorted(lines))
    return len(new), len(lines)


# ---------------------------------------------------------------- the selection
@functools.cache
def published():
    """{(row, lr): [val acc per selection seed]} of the demo's committed selection (docs/fmnist/select.md), one
    H100, for the attribution's rows at 40% (CMD-P at eta 2, b -5 only)."""
    got = {}
    with open(os.path.join(HERE, "docs", "fmnist", "select.md")) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            for row, demo_row in PUBLISHED.items():
                if len(cells) == 7 and cells[0] == DEMO.rows[demo_row][0] and (row != "cmdp" or
                                                                               cells[2:4] == ["2", "-5"]):
                    got[row, float(cells[1])] = [float(v) for v in cells[5].split()]
    return got


def val_scores(runs, study, rate, row, setting):
    """(mean validation accuracy over the selection seeds, the finished seeds' values, where from): None while a
    seed has not finished; -inf if one diverged."""
    if study is ATTRIBUTION and rate == 0.4 and (row, setting.lr) in published():
        vals = published()[row, setting.lr]
        return sum(vals) / len(vals), vals, "published"
    got = [runs.get(f"select/{setting.name(row)}-s{s}") for s in SELECT_SEEDS]
    vals = [r["rows"][-1]["val_acc_mean"] for r in got if r is not None and not r["diverged"]]
    if any(r is None for r in got):
        return None, vals, "to run"
    if any(r["diverged"] for r in got):
        return -math.inf, [], "diverged"
    return sum(vals) / len(vals), vals, "run"


def grid_of(study, rate, row, choice, runs):
    """A row's settings: its declared grid; CE CMD-P's lrs at MyLC CMD-P's chosen eta and b; in the attribution,
    with the lrs of the committed selection (40%) and every step the edge rule has added (the runs say which)."""
    if row == "ce-cmdp":
        return [Setting(lr, choice["mylc-cmdp"]["eta"], choice["mylc-cmdp"]["b"]) for lr in LRS]
    if not study.rules:
        return study.grids[rate][row]
    lrs = set(study.grids[rate][row]) | {lr for r, lr in published() if r == row and rate == 0.4}
    lrs |= {float(m.group(1)) for name in runs for m in [re.match(rf"select/{re.escape(row)}-lr([0-9.e-]+)-s", name)]
            if m}
    return [Setting(lr) for lr in sorted(lrs)]


def choose(runs, study, rate, rows):
    """{row: its choice} and the cells still to run [(row, Setting)]: a row's grid first (CE CMD-P's once MyLC
    CMD-P's stands), then the edge rule's next step, then the tie rule. A choice: dict(lr, eta, b, val[, knob],
    edge, es_lr, tie), of which study.keep stands; edge: "top"/"bottom" where the cap stopped the edge rule;
    es_lr: the lr chosen by the best-epoch validation accuracy instead; tie: the lr the choice tied with."""
    choice, todo = {}, []
    for row in rows:
        if row == "ce-cmdp" and "mylc-cmdp" not in choice:
            continue
        grid = grid_of(study, rate, row, choice, runs)
        scored = [val_scores(runs, study, rate, row, s) for s in grid]
        missing = [s for s, v in zip(grid, scored) if v[0] is None]
        if missing:
            todo += [(row, s) for s in missing]
            continue
        best = max(range(len(grid)), key=lambda i: (scored[i][0], -i))  # ties: the first, the smaller lr
        kept, edge, es_lr, tie = best, None, None, None
        if study.rules:
            if best in (0, len(grid) - 1):  # a diverged neighbour is in the grid: an edge choice has none beyond it
                up = best == len(grid) - 1
                declared = sorted(set(study.grids[rate][row]) |
                                  {lr for (r, lr) in published() if r == row and rate == 0.4})[-1 if up else 0]
                i = LADDER.index(grid[best].lr) + (1 if up else -1)
                if 0 <= i < len(LADDER) and abs(i - LADDER.index(declared)) <= EXTEND:
                    todo.append((row, Setting(LADDER[i])))
                    continue
                edge = "top" if up else "bottom"
            es = {i: best_epoch_val(runs, row, grid[i]) for i in range(len(grid)) if scored[i][2] == "run"}
            es_lr = grid[max(es, key=lambda i: (es[i], -i))].lr if es else None
            kept, tie = settle(scored, grid)
            edge = edge if kept == best else None
        s = grid[kept]
        full = dict(lr=s.lr, eta=s.eta, b=s.b, val=round(scored[kept][0], 3), edge=edge, es_lr=es_lr,
                    tie=None if tie is None else grid[tie].lr)
        choice[row] = {k: full[k] for k in study.keep} | ({"knob": s.knob} if row in KNOBS and not study.rules else {})
    return choice, todo


def settle(scored, grid):
    """The TIE RULE: (the index kept, the index it tied with or None). scored: [(mean, per-seed values, where)]."""
    order = sorted(range(len(grid)), key=lambda i: (scored[i][0], -i), reverse=True)
    first, second = order[0], order[1] if len(order) > 1 else None
    if second is None or scored[second][0] == -math.inf:
        return first, None
    m, s, n = mean_std([a - b for a, b in zip(scored[first][1], scored[second][1])])
    if s is None or m > s / math.sqrt(n):
        return first, None
    kept = min((first, second), key=lambda i: (abs(math.log(grid[i].lr / BASE_LR)), grid[i].lr))
    return kept, second if kept == first else first


def best_epoch_val(runs, row, setting):
    got = [runs.get(f"select/{setting.name(row)}-s{s}") for s in SELECT_SEEDS]
    if any(r is None or r["diverged"] for r in got):
        return -math.inf
    return sum(max(x["val_acc_mean"] for x in r["rows"]) for r in got) / len(got)


def at_choices(study, choice):
    """{row: Setting} of the report: each chosen row, the rows that follow another's lr (FOLLOWS), the clean
    reference at BASE_LR; in the study's order of rows."""
    got = {row: setting_of(c) for row, c in choice.items() if row in study.rows}
    got.update({row: Setting(factor * got[src].lr, got[src].eta, got[src].b) for row, (src, factor) in
                study.follows.items() if src in got and row not in got}, clean=got.get("clean", Setting(BASE_LR)))
    return {row: got[row] for row in study.rows if row in got}


def report_cells(study, choice, seeds, rows=None):
    """(row, Setting, seed) of the report, seed by seed (a report cut short still pairs its rows); the
    attribution's clean reference on CLEAN_SEEDS. rows: only these."""
    settings = at_choices(study, choice)
    return [(row, s, seed) for seed in seeds for row, s in settings.items()
            if (row != "clean" or study is DEMO or seed in CLEAN_SEEDS) and (rows is None or row in rows)]


def derived(choice):
    """The demo's choice.json: the tuned rows' choices, then the rows that follow from them: clean, the control,
    the cohort."""
    c = dict(choice)
    c.update({row: dict(lr=s.lr, eta=s.eta, b=s.b, val=None) for row, s in at_choices(DEMO, choice).items()
              if row not in c})
    return c


def needs(rows):
    """The selected rows a report of these rows needs (None: all): step and mean follow CMD-P's lr."""
    return None if rows is None else {"cmdp" if r in ("step", "mean") else r for r in rows} - {"clean"}


def published_choice(runs):
    """At 40%: the demo's committed choices (docs/fmnist/choice.json) for zero, all and CMD-P, and CMD-P's lr for
    the shuffled control, for a report on a machine too slow for the new selection; and the choice of every other
    row whose own selection has finished in runs (Co-teaching's)."""
    with open(os.path.join(HERE, "docs", "fmnist", "choice.json")) as f:
        saved = json.load(f)
    lr = {row: saved[demo_row]["lr"] for row, demo_row in PUBLISHED.items()}
    lr["shuffled"] = lr["cmdp"]
    own = {row: c for row, c in choose(runs, ATTRIBUTION, 0.4, ATTRIBUTION.grids[0.4])[0].items() if row not in lr}
    return {**{row: dict(lr=v, val=None, edge="published", es_lr=None) for row, v in lr.items()}, **own}


# ---------------------------------------------------------------- the tables
def memorisation_timing(rows):
    """(memorised at the end, at a quarter of the run, the first epoch reaching half the final value, epochs) of
    a run, on the mean of its models."""
    mem = [sum(v for k, v in r.items() if k.startswith("memorized_")) /
           sum(1 for k in r if k.startswith("memorized_")) for r in rows]
    end, n = mem[-1], len(mem)
    half = next(i + 1 for i, m in enumerate(mem) if m >= end / 2)
    return end, mem[max(0, round(n / 4) - 1)], half, n


def preconditions(zero_runs, clean_runs):
    """Lines that say whether each precondition holds, and whether all do, from zero knowledge's runs
    {label: [metrics rows of each seed]} and the clean reference's [metrics rows] (means over seeds)."""
    clean = mean_std([rows[-1]["val_acc_mean"] for rows in clean_runs])[0]  # the clean validation split, never test
    lines, ok = [], True
    for label, runs in zero_runs.items():
        t = [memorisation_timing(rows) for rows in runs]
        end, quarter = (sum(x[i] for x in t) / len(t) for i in (0, 1))
        half, n = sum(x[2] for x in t) / len(t), t[0][3]
        acc = mean_std([rows[-1]["val_acc_mean"] for rows in runs])[0]
        checks = [(clean - acc >= 5, f"harm {clean - acc:.1f} points (final val {acc:.2f} vs clean {clean:.2f})"),
                  (end >= 0.3, f"memorised at the end {end:.2f}"),
                  (quarter < 0.25, f"at a quarter ({round(n / 4)} of {n} epochs) {quarter:.2f}"),
                  (half > n / 3, f"half of the final value first at epoch {half:.1f} (a third: {n / 3:.1f})")]
        ok &= all(c for c, _ in checks)
        lines.append(f"- {label} (n={len(runs)}): " + "; ".join(f"{text} {'✓' if c else '✗'}" for c, text in checks))
    return lines, ok


def report_runs(runs, study, cells):
    """{row: {seed: metrics rows}} of the report's finished runs of these cells."""
    got = {}
    for row, s, seed in cells:
        r = runs.get(f"report/{study.report_name(row, s)}-s{seed}")
        if r is not None and not r["diverged"]:
            got.setdefault(row, {})[seed] = r["rows"]
    return got


def demo_regime(runs, seeds=None, stage="select", choice=None):
    """The demo's precondition lines and whether all hold: zero knowledge's runs of a stage (seeds: the selection
    seeds), at BASE_LR in the selection, at the chosen lr (choice) in the report."""
    lrs = {r: choice[r]["lr"] for r in ("ce-zero", "mylc-zero")} if choice else {}
    seeds = SELECT_SEEDS if seeds is None else seeds

    def got(row):
        names = [f"{Setting(lrs.get(row, BASE_LR)).name(row)}-s{s}" if stage == "select" else f"{row}-s{s}"
                 for s in seeds]
        return [runs[f"{stage}/{n}"]["rows"] for n in names if f"{stage}/{n}" in runs and
                not runs[f"{stage}/{n}"]["diverged"]]
    zero = {DEMO.rows[r][0] + f" at lr {lrs.get(r, BASE_LR):g}": got(r) for r in ("ce-zero", "mylc-zero")}
    if not all(zero.values()) or not got("clean"):
        return ["(the regime's runs have not finished)"], False
    return preconditions(zero, got("clean"))


def settings_table(runs, rows, choice, columns):
    """The demo's: one line per setting of each row, its mean validation accuracy over the selection seeds, each
    seed's, the chosen one marked. columns: ("η", "b") for CMD's rows, ("knob",) for the comparators'."""
    head = ["row", "lr", *columns, "val acc (mean of 2 seeds)", "seeds", "chosen"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for row in rows:
        for s in grid_of(DEMO, 0.4, row, choice, runs):
            v, vals, _ = val_scores(runs, DEMO, 0.4, row, s)
            chosen = "**✓**" if row in choice and setting_of(choice[row]) == s else ""
            cells = {"η": "–" if s.eta is None else f"{s.eta:g}", "b": "–" if s.b is None else f"{s.b:g}",
                     "knob": "–" if s.knob is None else f"{s.knob[0]} {s.knob[1]:g}"}
            lines.append(f"| {DEMO.rows[row][0]} | {s.lr:g} | " + " | ".join(cells[c] for c in columns) +
                         f" | {'–' if v is None else f'{v:.2f}'} | {' '.join(f'{x:.2f}' for x in vals)} | {chosen} |")
    return lines


def select_table(runs, rate, choice):
    """The attribution's: one line per lr of each row, its mean ± s.e. over the selection seeds, where it is from,
    the choice marked with the rule that made it."""
    seeds = ", ".join(map(str, SELECT_SEEDS))
    lines = [f"| row | lr | val acc, mean ± s.e. over seeds {seeds} | seeds | from | chosen |", "|---" * 6 + "|"]
    for row in ATTRIBUTION.grids[rate]:
        for s in grid_of(ATTRIBUTION, rate, row, choice, runs):
            m, vals, where_from = val_scores(runs, ATTRIBUTION, rate, row, s)
            c = choice.get(row, {})
            se = mean_std(vals)[1] / math.sqrt(len(vals)) if len(vals) > 1 else None
            score = "–" if m is None else "diverged" if m == -math.inf else fmt(m, se)  # "–": not run yet
            edge = {None: "", "published": " (committed)"}.get(c.get("edge"), f" (on the {c.get('edge')} edge)")
            tie = f" (a tie with {c['tie']:g}: nearer the base lr)" if c.get("tie") else ""
            mark = "**✓**" + edge + tie if c.get("lr") == s.lr else ""
            lines.append(f"| {ATTRIBUTION.rows[row][0]} | {s.lr:g} | {score} | {' '.join(f'{v:.2f}' for v in vals)} | "
                         f"{where_from} | {mark} |")
    es = ", ".join(f"{ATTRIBUTION.rows[r][0]} {c['es_lr']:g}" for r, c in choice.items() if c.get("es_lr") is not None)
    return lines + ["", f"Chosen by the best epoch's validation accuracy instead (among this experiment's runs): {es}."]


def heat_map(runs, path):
    """Validation accuracy of MyLC CMD-S (b = 0) and CMD-P over (eta, b), each cell its best lr."""
    from tools.plot import pyplot, save  # matplotlib only for the figure: select's table and choice need none
    plt = pyplot()
    bs = sorted({b for _, b in ETA_B} | {0.0})
    grid = [[max((val_scores(runs, DEMO, 0.4, "mylc-cmds" if b == 0 else "mylc-cmdp", Setting(lr, eta, b))[0] or -1,
                  lr) for lr in LRS) for b in bs] for eta in ETAS]
    fig, ax = plt.subplots(figsize=(4.8, 3.2))
    im = ax.imshow([[v for v, _ in r] for r in grid], cmap="viridis", aspect="auto")
    for i, r in enumerate(grid):
        for j, (v, lr) in enumerate(r):
            ax.text(j, i, f"{v:.1f}\nlr {lr:g}", ha="center", va="center", color="w", fontsize=8)
    ax.set_xticks(range(len(bs)), [f"b={b:g}" + (" (CMD-S)" if b == 0 else "") for b in bs])
    ax.set_yticks(range(len(ETAS)), [f"η={e:g}" for e in ETAS])
    ax.set_title("MyLC: val accuracy (2 seeds) at each cell's best lr", fontsize=9)
    fig.colorbar(im, ax=ax, label="validation accuracy (%)")
    save(plt, fig, path)


def row_cells(seeds, flags, columns=("test_acc_mean",)):
    """A reported row's cells, each mean ± std over its seeds {seed: metrics rows}: the final epoch's columns,
    the early-stopped test accuracy, and the diagnostics (memorised, selected, precision, recall; none on clean
    labels, the row's flags say)."""
    clean = "--noise" in flags and flags[flags.index("--noise") + 1] == "none"
    diag = [] if clean else [diagnostics(rows) for rows in seeds.values()]
    dia = [mean_std([d[k] for d in diag if d[k] is not None] or [math.nan]) for k in
           ("memorized", "selected", "precision", "recall")]
    return ([fmt(*mean_std([r[-1][k] for r in seeds.values()])[:2]) for k in columns] +
            [fmt(*mean_std([early_stopped(r) for r in seeds.values()])[:2])] +
            ["–" if math.isnan(d[0]) else fmt(*d[:2]) for d in dia])


def report_table(runs, study, choice, seeds):
    """The report: a line per row at its choice; the demo's with its paired differences in the line, the other
    studies' in a table of their pairs below."""
    cells = report_cells(study, choice, seeds)
    got, settings = report_runs(runs, study, cells), at_choices(study, choice)
    if study is DEMO:
        lines = ["| row | lr | η, b | final test acc (mean of models) | ensemble | early-stopped test acc | "
                 "Δ vs zero, same lc (95% t-interval) | ahead | Δ vs all knowledge | ahead | memorised (end) | "
                 "taught | precision | recall |", "|---" * 14 + "|"]
        for row, s in settings.items():
            if row not in got:
                lines.append(f"| {DEMO.rows[row][0]} | not run |" + " |" * 10)
                continue
            c = row_cells(got[row], DEMO.rows[row][1], ("test_acc_mean", "test_acc_ens"))
            compared = [paired(got[row], got.get(b)) if b else ("–", "–") for b in DEMO.pairs.get(row, (None, None))]
            label = DEMO.rows[row][0] + ("" if len(got[row]) == len(seeds) else f" (n={len(got[row])} of {len(seeds)})")
            lines.append(f"| {label} | {s.lr:g} | {'–' if s.eta is None else f'{s.eta:g}, {s.b:g}'} | " +
                         " | ".join([*c[:3], *compared[0], *compared[1], *c[3:]]) + " |")
        return lines
    lines = ["| row | lr | final test acc | early-stopped test acc | memorised (end) | taught | precision | "
             "recall | seeds |", "|---" * 9 + "|"]
    for row, by_seed in got.items():
        lines.append(f"| {study.rows[row][0]} | {settings[row].lr:g} | " +
                     " | ".join(row_cells(by_seed, study.rows[row][1])) + f" | {len(by_seed)} |")
    lines += ["", "| paired difference of final test accuracy | mean [95% t-interval] | ahead |", "|---|---|---|"]
    for row, against in study.pairs:
        if row in got and against in got:
            diff, ahead = paired(got[row], got[against])
            lines.append(f"| {study.rows[row][0]} − {study.rows[against][0]} | {diff} | {ahead} |")
    return lines


def regime_text(runs, end):
    lines, ok = demo_regime(runs)
    return [f"# Regime: zero knowledge at the base schedule (lr {BASE_LR:g}), seeds "
            f"{', '.join(map(str, SELECT_SEEDS))}", "", PRECONDITIONS + ".", ""] + lines + [
        "", f"All hold: {'yes' if ok else 'no'}.", "", end, ""]


def select_text(runs, choice, end):
    lines, _ = demo_regime(runs)
    return ["# Selection on the clean 10% validation split", "",
            f"Seeds {', '.join(map(str, SELECT_SEEDS))} (not reported). Each row's choice: the best mean final-epoch "
            "validation accuracy (val_acc_mean).", ""] + settings_table(runs, SELECTED, choice, ("η", "b")) + [
        "", "Preconditions at the base schedule: " + PRECONDITIONS + "."] + lines + ["", end, ""]


def compare_text(runs, picked, end):
    return ["# The comparators' selection on the clean 10% validation split", "",
            f"Seeds {', '.join(map(str, SELECT_SEEDS))}, the lr grid of every row, each comparator's own knob; the "
            "choice is added to choice.json.", ""] + settings_table(runs, list(KNOBS), picked, ("knob",)) + ["", end, ""]


def report_text(runs, choice, seeds, end):
    lines, _ = demo_regime(runs, seeds, "report", choice)
    return [f"# Fashion-MNIST, 40% symmetric noise: every row at its validation-chosen setting, seeds "
            f"{', '.join(map(str, seeds))}", ""] + report_table(runs, DEMO, choice, seeds) + [
        "", "Final test accuracy: the mean of the models' final-epoch accuracies (the paper's number), mean ± sample "
            "std over seeds. Δ: per-seed difference against zero knowledge with the same label correction on the "
            "same seed, and for the MyLC rows that select, against all knowledge; a **win** when the 95% "
            "t-interval's lower end is above 0. Diagnostics: means over epochs and models (memorised: the last "
            "epoch).", "",
        "Preconditions again, on the reported zero-knowledge rows at their chosen lr: " + PRECONDITIONS + "."] + lines + [
        "", end, ""]


def attribution_texts(runs, rate, choice, footer, published_choices=False):
    """The attribution's select.md and, once report runs exist, report.md: {name: lines}."""
    pct, known = f"{100 * rate:g}%", " The report takes the committed choices for zero, all, CMD-P and shuffled."
    texts = {"select.md": [
        f"# Selection at {pct} symmetric noise, on the clean 10% validation split", "", "Each row's choice: the "
        "best mean final-epoch validation accuracy over the selection seeds; the edge rule (studies/fmnist.py)"
        " extends a grid whose best is on its edge, and the tie rule keeps the lr nearer 0.05 when the best two are"
        " within one standard error of their paired difference." + (known if published_choices else ""), ""] +
        select_table(runs, rate, choice) + ["", footer]}
    if any(k.startswith("report/") for k in runs):
        got = report_runs(runs, ATTRIBUTION, report_cells(ATTRIBUTION, choice, REPORT_SEEDS))
        if "zero" not in got or "clean" not in got:
            lines, ok = ["(zero knowledge's or the clean reference's report runs are not among these runs)"], None
        else:
            lines, ok = preconditions({f"MyLC, zero knowledge at lr {choice['zero']['lr']:g}": list(got["zero"].values())},
                                      list(got["clean"].values()))
        texts["report.md"] = [
            f"# Fashion-MNIST, {pct} symmetric noise: does the confident selection matter?", "",
            f"Seeds {', '.join(map(str, REPORT_SEEDS))} (clean reference: {', '.join(map(str, CLEAN_SEEDS))}). Final "
            "test accuracy: the mean of the two models' final-epoch accuracies, mean ± std over seeds. Early-stopped: "
            "the test accuracy at each run's best validation epoch. Diagnostics: means over epochs and the two "
            "directions (memorised: the last epoch).", ""] + report_table(runs, ATTRIBUTION, choice, REPORT_SEEDS) + [
            "", "Preconditions on zero knowledge at its chosen lr: " + PRECONDITIONS + "."] + lines + [
            f"All hold: {({True: 'yes', False: 'no'}).get(ok, 'not known')}.", "", footer]
    return texts


def agreement(out, pack, rate=0.4, rows=("zero", "cmdp")):
    """Lines of a markdown table: the attribution report's rows (at the 40% published choices) trained by tools.batched into OUT against the same runs trained by train.py (the raw data, pack):
    final test accuracy over seeds, the paired difference with its 95% t-interval, the largest per-seed gap,
    and epoch 1's training loss (mean of A and B) as the one-step contract sees it."""
    mine, theirs = load_dir(ATTRIBUTION.folder(out, rate)), read_raw(pack, rate)
    lines = ["| row | train.py | tools.batched | batched − train.py (95% t) | largest per-seed gap | epoch 1 loss, "
             "largest relative gap |", "|---|---|---|---|---|---|"]
    for row in rows:
        names = sorted(n for n in mine if n.startswith(f"report/{row}-") and n in theirs)
        if not names:
            continue
        a = [theirs[n]["rows"][-1]["test_acc_mean"] for n in names]
        b = [mine[n]["rows"][-1]["test_acc_mean"] for n in names]
        m, ci = interval([y - x for x, y in zip(a, b)])
        loss = [(mine[n]["rows"][0][f"train_loss_{k}"], theirs[n]["rows"][0][f"train_loss_{k}"]) for n in names
                for k in "ab"]
        lines.append(f"| {ATTRIBUTION.rows[row][0]} ({names[0].split('-')[1]}, n={len(names)}) | "
                     f"{fmt(*mean_std(a)[:2])} | {fmt(*mean_std(b)[:2])} | {m:+.2f}" +
                     ("" if ci is None else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]") +
                     f" | {max(abs(y - x) for x, y in zip(a, b)):.2f} | {max(abs(u / v - 1) for u, v in loss):.1e} |")
    return lines


# ---------------------------------------------------------------- the stages
class Run(NamedTuple):
    """One invocation: the parsed flags, its study, the runs' plan, the command line, its start, failures."""
    args: argparse.Namespace
    study: Study
    plan: Plan
    command: str
    t0: float
    failed: dict

    def cells(self, stage, cells):
        """Train the cells [(row, Setting, seed)] not yet finished or diverged (--dry-run: print their train.py
        commands); a run that stops on a NaN loss is marked diverged. Returns how many it trained."""
        todo = [j for j in cell_jobs(self.plan, self.study, stage, cells)
                if not os.path.exists(os.path.join(j["dir"], "diverged.json"))]
        if self.args.dry_run:
            print_commands(j["argv"] for j in todo if not finished(j["dir"]))
            return 0
        trained = sum(not finished(j["dir"]) for j in todo)  # a finished run with other flags fails in run_grid
        failed = batched.run_grid(todo, self.args.jobs, self.device(), self.args.batched)
        for j in todo:
            if j["name"] in failed and "NaN" in failed[j["name"]]:
                runfiles.write_json(j["dir"], "diverged.json", dict(error=failed[j["name"]]))
            elif j["name"] in failed:
                self.failed[j["name"]] = failed[j["name"]]
        return trained

    def device(self):
        extra = self.plan.extra
        return next((extra[i + 1] for i in range(len(extra) - 2, -1, -1) if extra[i] == "--device"), "auto")

    def runs(self):
        return load_dir(self.plan.folder)

    def select(self, rows):
        """Select, running each pass's cells (CE CMD-P's after MyLC CMD-P's; the edge rule's steps), until every
        row's choice stands: (choice, runs, how many runs it trained)."""
        trained = 0
        while True:
            runs = self.runs()
            choice, todo = choose(runs, self.study, self.args.rate, rows)
            trained += self.cells("select", [(row, s, seed) for row, s in todo for seed in SELECT_SEEDS])
            if not todo or self.args.dry_run:
                return choice, runs, trained
            if self.failed:
                raise UserError(f"runs failed: {'; '.join(f'{k}: {v}' for k, v in self.failed.items())}")

    def footer(self, trained):
        return (f"`{self.command}`: {time.time() - self.t0:.0f} s this invocation, which trained {trained} runs "
                "(the others had finished before).")


def write(path, lines):
    runfiles.write_text(path, "\n".join(lines) + "\n")
    print("\n".join(lines) + f"\nwritten: {path}")


def saved_choice(path):
    with open(path) as f:
        return json.load(f)


def demo_stage(r, stage):
    """The demo's stages: (the table's name, its lines)."""
    out, clean = r.plan.folder, [("clean", Setting(BASE_LR), s) for s in SELECT_SEEDS]
    choice_path = os.path.join(out, "choice.json")
    if stage == "regime":
        n = r.cells("select", [(row, Setting(BASE_LR), s) for row in ("ce-zero", "mylc-zero", "clean")
                               for s in SELECT_SEEDS])
        return "regime.md", None if r.args.dry_run else regime_text(r.runs(), r.footer(n))
    if stage == "select":
        n = r.cells("select", clean)
        choice, runs, more = r.select(SELECTED)
        if r.args.dry_run:
            return None, None
        runfiles.write_json(out, "choice.json", dict(derived(choice), command=r.command))
        try:
            heat_map(runs, os.path.join(out, "select-eta-b.png"))
        except (ImportError, UserError):  # no matplotlib: the table and choice.json are what the report needs
            print("fmnist: no heat map without matplotlib (pip install matplotlib)", file=sys.stderr)
        return "select.md", select_text(runs, choice, r.footer(n + more))
    saved = saved_choice(choice_path)
    if stage == "compare":
        picked, runs, n = r.select(list(KNOBS))
        if r.args.dry_run:
            return None, None
        saved.update(picked, compare_command=r.command)
        runfiles.write_json(out, "choice.json", saved)
        return "compare.md", compare_text(runs, picked, r.footer(n))
    choice, seeds = {row: saved[row] for row in DEMO.rows if row in saved}, REPORT_SEEDS[:r.args.seeds]
    n = r.cells("report", report_cells(DEMO, choice, seeds))
    return "report.md", None if r.args.dry_run else report_text(r.runs(), choice, seeds, r.footer(n))


def attribution_stage(r, stage, rows):
    """The attribution's select, report and all: select (or the committed choices), then the report's runs;
    writes choice.json, select.md and report.md."""
    if r.args.published_choice:  # 40% on a slow machine: the committed selection's choices, no new selection
        runs = r.runs()
        choice = published_choice(runs)
    else:
        choice, runs, _ = r.select([row for row in ATTRIBUTION.grids[r.args.rate]
                                    if needs(rows) is None or row in needs(rows)])
    if r.args.dry_run:
        need = set(ATTRIBUTION.grids[r.args.rate]) if rows is None else needs(rows)
        if stage != "select" and not need <= set(choice):
            print("# the report's commands follow from the selection's choices: run the selection first")
        elif stage != "select":
            r.cells("report", report_cells(ATTRIBUTION, choice, REPORT_SEEDS, rows))
        return
    if stage in ("report", "all"):
        r.cells("report", report_cells(ATTRIBUTION, choice, REPORT_SEEDS, rows))
        runs = r.runs()
    os.makedirs(r.plan.folder, exist_ok=True)
    runfiles.write_json(r.plan.folder, "choice.json", dict(choice, command=r.command))
    footer = f"`{r.command}`: {time.time() - r.t0:.0f} s this invocation; {where(runs.values())}."
    for name, lines in attribution_texts(runs, r.args.rate, choice, footer, r.args.published_choice).items():
        write(os.path.join(r.plan.folder, name), lines)




def parse(argv):
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
               epilog="Flags after -- go to every train.py (e.g. -- --amp off).")
    p.add_argument("study", choices=(*STUDIES, "recipe"))
    p.add_argument("stage", choices=sorted({s for stages in STAGES.values() for s in stages}),
                   help="; ".join(f"{k}: {', '.join(v)}" for k, v in STAGES.items()))
    p.add_argument("dir", nargs="?", help="recipe pack: a wave's folder (a gpu_check $OUT, or its wave/)")
    rates = ", ".join(map(str, sorted(ATTRIBUTION.grids)))
    p.add_argument("--rate", type=float, default=0.4, help=f"the noise rate: the attribution's {rates}; the demo's "
                                                           "and the recipe's 0.4")
    p.add_argument("--noise", choices=("auto", "sym", "pair"), help="the recipe wave's noise type (default auto: "
                   "symmetric until it has 3 seeds, then pair-flip); the other studies' is sym")
    p.add_argument("--out", metavar="DIR", help="the runs, choice.json and the tables (default sweeps/fmnist; the "
                   "attribution's in DIR/attribution/r<rate>/); the recipe wave's runs (default "
                   "sweeps/fmnist/recipe/wave-<time>)")
    p.add_argument("--data-dir", default=DATA_DIR,
                   help="the four Fashion-MNIST IDX files (Debian: apt-get install dataset-fashion-mnist)")
    p.add_argument("--jobs", type=int, help="runs at a time, each with an equal share of the cores (and the one "
                   "GPU, when train.py sees one) (default 2; the recipe wave's: all at once)")
    config.add_device_flag(p)
    batched.batched_flag(p)
    p.add_argument("--seeds", type=int, help="the demo's report: seeds 0..N-1 (default 5); the recipe wave: the "
                   "next N seeds not yet in the raw data, every row of each at once (default 1)")
    p.add_argument("--size", choices=("gpu", "toy"), default="gpu", help="the recipe: its declared size (toy: the "
                   "suite's, a CNN on a few hundred images for 2 epochs) (default gpu)")
    p.add_argument("--budget", type=float, help="the recipe wave: stop its runs after this many seconds, "
                   "each after its last finished epoch (default: none)")
    p.add_argument("--mps", action="store_true", help="the recipe wave: run its processes under CUDA MPS, started "
                   "and stopped here (if it cannot start, they time-slice, and wave.json says so)")
    p.add_argument("--graph", choices=("capture", "off"), default="off", help="the recipe wave: train.py's --graph "
                   "(default off: eager)")
    p.add_argument("--dry-run", action="store_true", help="print the train.py commands of the stage's runs not yet "
                                                          "finished, and write nothing")
    p.add_argument("--from", dest="pack", help="tables and the recipe's report: the raw data to render from; pack: "
                   "where to write it (default docs/fmnist/runs.jsonl.gz; the recipe's docs/fmnist/recipe/"
                   "runs.jsonl.gz)")
    p.add_argument("--rows", help=f"the attribution's select and report: only these rows, a comma list of "
                                  f"{', '.join(ATTRIBUTION.rows)} (zero knowledge and the clean reference alone: a new "
                                  "rate's preconditions)")
    p.add_argument("--published-choice", action="store_true",
                   help="the attribution's report at 40%%: the demo's committed choices (docs/fmnist/choice.json), "
                        "no selection runs")
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    rows = None if args.rows is None else args.rows.split(",")
    if args.stage not in STAGES[args.study]:
        p.error(f"{args.study} has the stages {', '.join(STAGES[args.study])}, not {args.stage}")
    if (args.dir is not None) != (args.study == "recipe" and args.stage == "pack"):
        p.error("recipe pack takes a wave's folder: python -m studies.fmnist recipe pack DIR" if args.dir is None else
                f"{args.dir}: only recipe pack takes a folder")
    recipe = args.study == "recipe"
    given = [f for f, v in (("--size", args.size != "gpu"), ("--budget", args.budget), ("--mps", args.mps),
                            ("--graph", args.graph != "off")) if v]
    if given and not recipe:
        p.error(f"{', '.join(given)}: the recipe's flags")
    args.noise = args.noise or ("auto" if recipe else "sym")
    args.jobs = (None if recipe else 2) if args.jobs is None else args.jobs
    args.seeds = (1 if recipe else len(REPORT_SEEDS)) if args.seeds is None else args.seeds
    args.out = args.out or ("sweeps/fmnist" if not recipe else time.strftime("sweeps/fmnist/recipe/wave-%Y%m%d-%H%M%S"))
    args.pack = args.pack or (RAW if recipe else "docs/fmnist/runs.jsonl.gz")
    if recipe and (args.rate != 0.4 or args.noise != "auto" and args.stage != "wave" or rows or args.published_choice
                   or "--" in argv):
        p.error("the recipe is declared in studies/recipe.py: 40% noise, its rows, no flags after --; --noise is the "
                "wave's")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        p.error(f"--out {args.out} is a file; give a directory")
    if recipe and (args.jobs is not None and args.jobs < 1 or not 1 <= args.seeds <= 9 or (args.budget or 0) < 0):
        p.error("--jobs must be at least 1, --seeds between 1 and 9 and --budget positive")
    if recipe and args.batched is not None:
        p.error("--batched: the recipe's ResNets have BatchNorm, which tools.batched refuses; its runs are train.py "
                "processes")
    if recipe:
        return args, rows
    if rows is not None and (args.study != "attribution" or set(rows) - set(ATTRIBUTION.rows)):
        p.error(f"--rows: unknown {', '.join(sorted(set(rows) - set(ATTRIBUTION.rows))) or args.rows}; choose from "
                f"{', '.join(ATTRIBUTION.rows)} (the attribution's)")
    if args.published_choice and (args.study != "attribution" or args.rate != 0.4 or
                                  args.stage not in ("report", "tables")):
        p.error("--published-choice goes with attribution report or tables --rate 0.4: the committed selection is "
                "at 40%")
    if args.rate not in STUDIES[args.study].grids:
        p.error(f"--rate {args.rate:g}: the declared grids are for {rates if args.study == 'attribution' else '0.4'}")
    if args.noise != "sym":
        p.error(f"--noise {args.noise}: only the recipe declares pair-flip noise")
    if args.jobs < 1 or not 1 <= args.seeds <= 9:
        p.error("--jobs must be at least 1 and --seeds between 1 and 9")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        p.error(f"--out {args.out} is a file; give a directory")
    choice_path = os.path.join(args.out, "choice.json")
    if args.study == "demo" and args.stage in ("compare", "report") and not os.path.exists(choice_path):
        p.error(f"{choice_path} not found: run `python -m studies.fmnist demo select --out {args.out}` first, or copy "
                "the published choice, docs/fmnist/choice.json, there")
    return args, rows


@one_line("fmnist", stopped="stopped by Ctrl-C; run the same command again to continue (finished runs are skipped, "
                           "the others resume from their checkpoints)",  # each run stops at its checkpoint
          again="run the same command again (finished runs are skipped, the others resume from their checkpoints)")
def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args, rows = parse(argv)
    if args.study == "recipe":
        return recipe.run(args)
    study, command = STUDIES[args.study], shlex.join(["python", "-m", "studies.fmnist", *argv])
    if args.stage == "pack":
        added, total = pack(args.out, args.pack)
        print(f"{added} runs of {args.out} added to {args.pack}, which holds {total}")
        return 0
    if args.stage == "agreement":  # tools.batched's runs of `attribution report --batched` against train.py's
        print("\n".join(agreement(args.out, args.pack, args.rate)))
        return 0
    folder = study.folder(args.out, args.rate)
    if args.stage == "tables":
        runs = read_raw(args.pack, args.rate)
        choice, todo = (published_choice(runs), []) if args.published_choice else choose(
            runs, ATTRIBUTION, args.rate, ATTRIBUTION.grids[args.rate])
        os.makedirs(folder, exist_ok=True)
        footer = f"Rendered from {args.pack} (`{command}`): {where(runs.values())}" + (f"; {len(todo)} cells not run."
                                                                               if todo else ".")
        for name, lines in attribution_texts(runs, args.rate, choice, footer, args.published_choice).items():
            write(os.path.join(folder, name), lines)
        return 0
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    r = Run(args, study, Plan(folder, data_flags(args.data_dir) + base(args.rate), ["--device", args.device, "--workers",
                                                                                   "0"] + extra), command, time.time(), {})
    if not args.dry_run:
        os.makedirs(folder, exist_ok=True)
    if study is ATTRIBUTION:
        attribution_stage(r, args.stage, rows)
    else:
        name, text = demo_stage(r, args.stage)
        if text is not None and not args.dry_run:
            write(os.path.join(folder, name), text[:-1])
    if r.failed:
        print(f"fmnist: {len(r.failed)} runs failed: {'; '.join(f'{k}: {v}' for k, v in sorted(r.failed.items()))}",
              file=sys.stderr)
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
