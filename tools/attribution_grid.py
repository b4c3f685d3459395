"""The attribution experiment's declaration (tools/attribution.py runs it): its rows, their lr grids per noise
rate, and the rules that turn the selection runs into each row's choice.

ROWS, GRIDS, PAIRS -- what each row is in train.py's flags, its declared lrs per rate, the report's differences
choose       -- each row's choice from the selection's runs, or the cells still to run:
  EDGE RULE  -- a best mean on an edge of the row's grid extends it by one step of LADDER (sqrt(2)) that way, until
                it is interior, the next step diverged, or EXTEND steps were added (then the choice is marked);
  TIE RULE   -- then, when the best two settings' paired difference over the selection seeds is within one standard
                error of zero, they tie and the one nearer the base lr (demo_grid.BASE_LR, on the log scale) is kept.
report_cells -- the report's (row, lr, seed) at the choices; published_choice -- 40% at the committed choices.
"""
import functools
import json
import math
import os
import re

from tools import demo_grid
from tools.stats import mean_std

LADDER = (0.0044, 0.00625, 0.0088, 0.0125, 0.0177, 0.025, 0.035, 0.05, 0.07, 0.1, 0.14, 0.2, 0.28, 0.4, 0.57, 0.8)
EXTEND = 3  # at most this many sqrt(2) steps beyond a row's declared grid, each way
CMDP = ["--mode", "progressive", "--lc", "mylc", "--eta", "2", "--b", "-5"]  # the committed selection's eta, b
ROWS = {
    "zero": ("MyLC, zero knowledge", ["--mode", "zero", "--lc", "mylc"]),
    "all": ("MyLC, all knowledge (η = 1)", ["--mode", "all", "--lc", "mylc"]),
    "cmdp": ("MyLC, CMD-P (η = 2, b = −5)", CMDP),
    "shuffled": ("MyLC, CMD-P's count at random positions", CMDP + ["--select", "shuffled"]),
    "coteach": ("Co-teaching, τ = the true rate", ["--mode", "coteach"]),
    "step": ("MyLC, zero knowledge at 2× CMD-P's lr (step-size control)", ["--mode", "zero", "--lc", "mylc"]),
    "mean": ("MyLC, CMD-P, --peer-weight mean (no extra weight)", CMDP + ["--peer-weight", "mean"]),
    "clean": ("CE, clean labels (reference)", ["--mode", "zero", "--lc", "ce", "--noise", "none", "--rate", "0"]),
}
# The declared grids, per noise rate, before any run of this experiment. 40%: the published lrs 0.025 to 0.1
# of zero, all and CMD-P stand (PUBLISHED) and these extend them; 60%: the four rows that decide the question.
GRIDS = {
    0.4: {"zero": (0.0125, 0.0177, 0.14, 0.2, 0.28), "all": (0.14, 0.2, 0.28), "cmdp": (0.14, 0.2, 0.28),
          "shuffled": (0.05, 0.07, 0.1, 0.14, 0.2, 0.28), "coteach": (0.025, 0.035, 0.05, 0.07, 0.1, 0.14)},
    **{rate: {row: (0.05, 0.07, 0.1, 0.14, 0.2, 0.28) for row in ("zero", "all", "cmdp", "shuffled")}
       for rate in (0.6, 0.5)},  # 50%: where 60%'s preconditions fail (docs/results.md)
}
PUBLISHED = {"zero": "MyLC, zero knowledge", "all": "MyLC, all knowledge (η = 1)", "cmdp": "MyLC, CMD-P"}
SELECT_SEEDS, REPORT_SEEDS, CLEAN_SEEDS = demo_grid.SELECT_SEEDS, demo_grid.REPORT_SEEDS, (0, 1)
# (row, against): the paired differences the report prints; the first answers the question
PAIRS = [("cmdp", "shuffled"), ("cmdp", "all"), ("cmdp", "zero"), ("shuffled", "zero"), ("all", "zero"), ("step", "zero"),
         ("cmdp", "step"), ("mean", "zero"), ("cmdp", "mean"), ("coteach", "zero"), ("cmdp", "coteach")]
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def flags(row, rate, lr):
    """train.py's flags of a row at a noise rate and lr: the demonstration's regime (demo_grid.BASE) at this rate."""
    base = [f"{rate:g}" if i and demo_grid.BASE[i - 1] == "--rate" else v for i, v in enumerate(demo_grid.BASE)]
    return base + ROWS[row][1] + ["--lr", f"{lr:g}"]  # later flags win: the clean row's --noise none --rate 0



@functools.cache
def published():
    """{(row, lr): [val acc per selection seed]} of the committed selection at 40% (docs/fmnist/select.md)."""
    got = {}
    with open(os.path.join(HERE, "docs", "fmnist", "select.md")) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            for row, label in PUBLISHED.items():
                if len(cells) == 7 and cells[0] == label and (row != "cmdp" or cells[2:4] == ["2", "-5"]):
                    got[row, float(cells[1])] = [float(v) for v in cells[5].split()]
    return got


def val_scores(runs, rate, row, lr):
    """(mean validation accuracy over the selection seeds, per seed, where from); -inf if one diverged, None if
    a seed has not finished."""
    if rate == 0.4 and (row, lr) in published():
        vals = published()[row, lr]
        return sum(vals) / len(vals), vals, "published"
    got = [runs.get(f"select/{row}-lr{lr:g}-s{s}") for s in SELECT_SEEDS]
    if any(r is None for r in got):
        return None, [], "to run"
    if any(r["diverged"] for r in got):
        return -math.inf, [], "diverged"
    vals = [r["rows"][-1]["val_acc_mean"] for r in got]
    return sum(vals) / len(vals), vals, "run"


def grid_of(rate, row, runs):
    """A row's lrs: the declared grid, the published ones, and every extension the edge rule has made so far
    (the runs say which)."""
    lrs = set(GRIDS[rate][row]) | ({lr for (r, lr) in published() if r == row} if rate == 0.4 else set())
    lrs |= {float(m.group(1)) for name in runs for m in [re.match(rf"select/{re.escape(row)}-lr([0-9.e-]+)-s", name)]
            if m}
    return sorted(lrs)


def choose(runs, rate, rows=None):
    """{row: dict(lr, val, edge, es_lr, tie)} and the cells still to run [(row, lr)]: the declared grid first,
    then the edge rule's next step; then the tie rule. edge: "top"/"bottom" where the cap stopped the edge rule;
    es_lr: the lr chosen by the best-epoch validation accuracy instead; tie: the lr the choice tied with.
    rows: only these (zero knowledge alone first, to check a new rate's preconditions)."""
    choice, todo = {}, []
    for row in [r for r in GRIDS[rate] if rows is None or r in rows]:
        lrs = grid_of(rate, row, runs)
        scored = {lr: val_scores(runs, rate, row, lr) for lr in lrs}
        missing = [lr for lr, s in scored.items() if s[0] is None]
        if missing:
            todo += [(row, lr) for lr in missing]
            continue
        best = max(lrs, key=lambda lr: (scored[lr][0], -lr))
        edge = None
        if best in (lrs[0], lrs[-1]):  # a diverged neighbour is in lrs, so an edge choice has none beyond it
            up = best == lrs[-1]
            declared = sorted(set(GRIDS[rate][row]) | {lr for (r, lr) in published() if r == row and rate == 0.4})
            declared = declared[-1 if up else 0]
            i = LADDER.index(best) + (1 if up else -1)
            if 0 <= i < len(LADDER) and abs(i - LADDER.index(declared)) <= EXTEND:
                todo.append((row, LADDER[i]))
                continue
            edge = "top" if up else "bottom"
        es = {lr: best_epoch_val(runs, row, lr) for lr in lrs if scored[lr][2] == "run"}
        es_lr = max(es, key=lambda lr: (es[lr], -lr)) if es else None
        kept, tie = settle(scored, lrs)
        choice[row] = dict(lr=kept, val=round(scored[kept][0], 3), edge=edge if kept == best else None, es_lr=es_lr,
                           tie=tie)
    return choice, todo


def settle(scored, lrs):
    """The TIE RULE: (the lr kept, the lr it tied with or None). scored: {lr: (mean, per-seed values, where)}."""
    order = sorted(lrs, key=lambda lr: (scored[lr][0], -lr), reverse=True)
    first, second = order[0], order[1] if len(order) > 1 else None
    if second is None or scored[second][0] == -math.inf:
        return first, None
    m, s, n = mean_std([a - b for a, b in zip(scored[first][1], scored[second][1])])
    if s is None or m > s / math.sqrt(n):
        return first, None
    kept = min((first, second), key=lambda lr: (abs(math.log(lr / demo_grid.BASE_LR)), lr))
    return kept, second if kept == first else first


def best_epoch_val(runs, row, lr):
    got = [runs.get(f"select/{row}-lr{lr:g}-s{s}") for s in SELECT_SEEDS]
    if any(r is None or r["diverged"] for r in got):
        return -math.inf
    return sum(max(x["val_acc_mean"] for x in r["rows"]) for r in got) / len(got)



def report_cells(rate, choice, rows=None):
    """(row, lr, seed) of the report, seed by seed (a report cut short still pairs its rows): each row at its
    choice, the step-size control at 2x CMD-P's lr, the normalised control at CMD-P's, the clean reference on
    CLEAN_SEEDS. rows: only these."""
    lr = {row: c["lr"] for row, c in choice.items()}
    lr.update({"step": 2 * lr["cmdp"], "mean": lr["cmdp"]} if "cmdp" in lr else {}, clean=demo_grid.BASE_LR)
    return [(row, lr[row], s) for s in REPORT_SEEDS for row in lr
            if (row != "clean" or s in CLEAN_SEEDS) and (rows is None or row in rows)]


def needs(rows):
    """The selected rows a report of these rows needs (None: all): step and mean follow CMD-P's lr."""
    return None if rows is None else {"cmdp" if r in ("step", "mean") else r for r in rows} - {"clean"}


def published_choice(runs):
    """At 40%: the committed selection's choices (docs/fmnist/choice.json) for zero, all and CMD-P, and CMD-P's
    lr for the shuffled control, for a report on a machine too slow for the new selection; and the choice of
    every other row whose own selection has finished in runs (Co-teaching's)."""
    with open(os.path.join(HERE, "docs", "fmnist", "choice.json")) as f:
        saved = json.load(f)
    lr = {row: saved[f"mylc-{row}"]["lr"] for row in ("zero", "all", "cmdp")}
    lr["shuffled"] = lr["cmdp"]
    own = {row: c for row, c in choose(runs, 0.4)[0].items() if row not in lr}
    return {**{row: dict(lr=v, val=None, edge="published", es_lr=None) for row, v in lr.items()}, **own}

