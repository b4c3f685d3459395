"""Does the confident selection matter? CMD-P beside the same number of samples taught at random positions, all
knowledge, zero knowledge, a step-size control and Co-teaching, on the Fashion-MNIST regime of tools/demo.py.

    python -m tools.attribution select --rate 0.6 --out sweeps/fmnist --jobs 2   # every row's lr, edge rule
    python -m tools.attribution report --rate 0.6 --out sweeps/fmnist --jobs 2   # 5 seeds at the choices
    python -m tools.attribution all --rate 0.6 -- --device cuda --amp off   # both, on one GPU (tools.batched)
    python -m tools.attribution select --rate 0.6 --dry-run    # the train.py commands, to run one row by hand
    python -m tools.attribution all --rate 0.5 --rows zero,clean --batched   # a new rate's preconditions first
    python -m tools.attribution report --rate 0.4 --published-choice --batched   # 40% at the committed choices
    python -m tools.attribution pack --out sweeps/fmnist       # every run's numbers into docs/fmnist/runs.jsonl.gz
    python -m tools.attribution tables --rate 0.4 --from docs/fmnist/runs.jsonl.gz   # the tables from those alone

ROWS, MyLC unless named: zero, all (eta 1), CMD-P (eta 2, b -5), `shuffled` (CMD-P's count at random positions),
Co-teaching (tau = the rate; 40%); the report adds `step` (zero knowledge at 2x CMD-P's lr) and `mean`
(--peer-weight mean: CMD-P's selection without the extra weight).

select -- each row on its lr grid (GRIDS), selection seeds (not reported); the choice: the best mean final-epoch
          validation accuracy, a diverged setting -inf, then the EDGE and TIE RULES (tools/attribution_grid.py).
          At 40%, zero, all and CMD-P also count the published selection (docs/fmnist/select.md, one H100) at lr
          0.025 to 0.1.
report -- the rows at their choices on REPORT_SEEDS, with paired differences (PAIRS) and diagnostics.
"""
import argparse
import glob
import json
import math
import os
import shlex
import sys
import time

from tools import attribution_grid as grid, batched, demo_grid, demo_tables, rawdata
from tools.attribution_grid import (GRIDS, PAIRS, ROWS, choose, flags, grid_of, published_choice, report_cells,
                                    val_scores)
from tools.stats import fmt, mean_std, paired
from tools.sweep import diagnostics
from training.errors import one_line


def jobs_of(out, rate, stage, cells, data, extra):
    """train.py jobs for cells [(row, lr, seed)], in the stage's folder of this rate."""
    todo = []
    for row, lr, seed in cells:
        name = f"{row}-lr{lr:g}-s{seed}"
        d = os.path.join(out, "attribution", f"r{rate:g}", stage, name)
        key = data + flags(row, rate, lr) + ["--seed", str(seed)]
        todo.append(dict(name=name, dir=d, key=key, argv=key + ["--out", d, *extra]))
    return todo


# ---------------------------------------------------------------- runs, on disk or from the raw data
def load_dir(out, rate):
    """{stage/name: dict(rows=metrics rows, diverged, flags=its train.py key, provenance)}, finished or diverged."""
    runs = {}
    for d in glob.glob(os.path.join(out, "attribution", f"r{rate:g}", "*", "*")):
        done, bad = (os.path.exists(os.path.join(d, f)) for f in ("summary.json", "diverged.json"))
        if done or bad:
            with open(os.path.join(d, "config.json")) as f:
                prov = json.load(f).get("provenance")
            with open(os.path.join(d, "sweep.json")) as f:
                key = json.load(f)
            rows = demo_grid.rows_of(d) if os.path.exists(os.path.join(d, "metrics.jsonl")) else []
            name = os.path.relpath(d, os.path.dirname(os.path.dirname(d)))
            runs[name] = dict(rows=rows, diverged=bad, flags=key, provenance=prov)
    return runs


def pack(out, path):
    """Every finished or diverged run of every rate under out into the raw data at path: (added, in the file)."""
    lines = [dict(rate=rate, run=name, flags=run["flags"], diverged=run["diverged"], provenance=run["provenance"],
                  rows=run["rows"]) for rate in GRIDS for name, run in load_dir(out, rate).items()]
    return len(lines), rawdata.merge(path, lines)


# ---------------------------------------------------------------- select

def select_table(runs, rate, choice):
    seeds = ", ".join(map(str, grid.SELECT_SEEDS))
    lines = [f"| row | lr | val acc, mean ± s.e. over seeds {seeds} | seeds | from | chosen |", "|---" * 6 + "|"]
    for row in GRIDS[rate]:
        for lr in grid_of(rate, row, runs):
            m, vals, where = val_scores(runs, rate, row, lr)
            c = choice.get(row, {})
            se = mean_std(vals)[1] / math.sqrt(len(vals)) if len(vals) > 1 else None
            score = "–" if m is None else "diverged" if m == -math.inf else fmt(m, se)  # "–": not run yet
            edge = {None: "", "published": " (committed)"}.get(c.get("edge"), f" (on the {c.get('edge')} edge)")
            tie = f" (a tie with {c['tie']:g}: nearer the base lr)" if c.get("tie") else ""
            mark = "**✓**" + edge + tie if c.get("lr") == lr else ""
            lines.append(f"| {ROWS[row][0]} | {lr:g} | {score} | {' '.join(f'{v:.2f}' for v in vals)} | {where} | "
                         f"{mark} |")
    es = ", ".join(f"{ROWS[r][0]} {c['es_lr']:g}" for r, c in choice.items() if c.get("es_lr") is not None)
    return lines + ["", f"Chosen by the best epoch's validation accuracy instead (among this experiment's runs): {es}."]


# ---------------------------------------------------------------- report

def report_runs(runs, rate, choice):
    """{row: {seed: metrics rows}} of the finished report runs."""
    got = {}
    for row, lr, s in report_cells(rate, choice):
        r = runs.get(f"report/{row}-lr{lr:g}-s{s}")
        if r is not None and not r["diverged"]:
            got.setdefault(row, {})[s] = r["rows"]
    return got


def report_table(runs, rate, choice):
    got = report_runs(runs, rate, choice)
    lrs = {row: lr for row, lr, _ in report_cells(rate, choice)}
    lines = ["| row | lr | final test acc | early-stopped test acc | memorised (end) | selected | precision | "
             "recall | seeds |", "|---" * 9 + "|"]
    for row, seeds in got.items():
        acc = mean_std([r[-1]["test_acc_mean"] for r in seeds.values()])
        es = mean_std([demo_tables.early_stopped(r) for r in seeds.values()])
        diag = [] if row == "clean" else [diagnostics(rows) for rows in seeds.values()]
        dia = [mean_std([d[k] for d in diag if d[k] is not None] or [math.nan]) for k in
               ("memorized", "selected", "precision", "recall")]
        lines.append(f"| {ROWS[row][0]} | {lrs[row]:g} | {fmt(*acc[:2])} | {fmt(*es[:2])} | " +
                     " | ".join("–" if math.isnan(d[0]) else fmt(*d[:2]) for d in dia) + f" | {len(seeds)} |")
    lines += ["", "| paired difference of final test accuracy | mean [95% t-interval] | ahead |", "|---|---|---|"]
    for row, base in PAIRS:
        if row in got and base in got:
            diff, ahead = paired(got[row], got[base])
            lines.append(f"| {ROWS[row][0]} − {ROWS[base][0]} | {diff} | {ahead} |")
    return lines


def preconditions(runs, rate, choice):
    got = report_runs(runs, rate, choice)
    if "zero" not in got or "clean" not in got:
        return ["(zero knowledge's or the clean reference's report runs are not among these runs)"], None
    label = f"MyLC, zero knowledge at lr {choice['zero']['lr']:g}"
    return demo_tables.preconditions_of({label: list(got["zero"].values())}, list(got["clean"].values()))


# ---------------------------------------------------------------- main
def run_cells(args, cells, stage, data, extra, log):
    """Train the cells not yet finished or diverged; a run that stops on a NaN loss is marked diverged."""
    todo = [j for j in jobs_of(args.out, args.rate, stage, cells, data, extra)
            if not os.path.exists(os.path.join(j["dir"], "diverged.json"))]
    if args.dry_run:
        try:
            for j in todo:
                if not demo_grid.finished(j["dir"]):
                    print(shlex.join(["python", "train.py", *j["argv"]]))
            sys.stdout.flush()
        except BrokenPipeError:  # | head: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    device = next((extra[i + 1] for i in range(len(extra) - 1) if extra[i] == "--device"), "auto")
    failed = batched.run_grid(todo, args.jobs, device, args.batched)
    for j in todo:
        if j["name"] in failed and "NaN" in failed[j["name"]]:
            with open(os.path.join(j["dir"], "diverged.json"), "w") as f:
                json.dump(dict(error=failed[j["name"]]), f)
        elif j["name"] in failed:
            log.append(f"{j['name']}: {failed[j['name']]}")


def select(args, data, extra, log, rows):
    """Select, extending grids by the edge rule, until every row's choice stands; (choice, runs)."""
    while True:
        runs = load_dir(args.out, args.rate)
        choice, todo = choose(runs, args.rate, grid.needs(rows))
        run_cells(args, [(row, lr, s) for row, lr in todo for s in grid.SELECT_SEEDS], "select", data, extra, log)
        if not todo or args.dry_run:
            return choice, runs
        if log:
            raise SystemExit(f"attribution: runs failed: {'; '.join(log)}")


def write(path, lines):
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines) + f"\nwritten: {path}")


def render(runs, rate, choice, where, footer, published=False):
    """select.md (published: the new selection's cells run so far; the committed one is docs/fmnist/select.md)."""
    pct, known = f"{100 * rate:g}%", " The report takes the committed choices for zero, all, CMD-P and shuffled."
    write(os.path.join(where, "select.md"), [
        f"# Selection at {pct} symmetric noise, on the clean 10% validation split", "", "Each row's choice: the "
        "best mean final-epoch validation accuracy over the selection seeds; the edge rule (tools/attribution_grid.py)"
        " extends a grid whose best is on its edge, and the tie rule keeps the lr nearer 0.05 when the best two are"
        " within one standard error of their paired difference." + (known if published else ""), ""] +
        select_table(runs, rate, choice) + ["", footer])
    if any(k.startswith("report/") for k in runs):
        lines, ok = preconditions(runs, rate, choice)
        write(os.path.join(where, "report.md"), [
            f"# Fashion-MNIST, {pct} symmetric noise: does the confident selection matter?", "",
            f"Seeds {', '.join(map(str, grid.REPORT_SEEDS))} (clean reference: "
            f"{', '.join(map(str, grid.CLEAN_SEEDS))}). Final "
            "test accuracy: the mean of the two models' final-epoch accuracies, mean ± std over seeds. Early-stopped: "
            "the test accuracy at each run's best validation epoch. Diagnostics: means over epochs and the two "
            "directions (memorised: the last epoch).", ""] + report_table(runs, rate, choice) +
            ["", "Preconditions on zero knowledge at its chosen lr: " + demo_grid.PRECONDITIONS + "."] + lines +
            [f"All hold: {({True: 'yes', False: 'no'}).get(ok, 'not known')}.", "", footer])


class Parser(argparse.ArgumentParser):
    def error(self, message):  # bad input: one line, exit 2, nothing written
        print(f"attribution: error: {message} (see python -m tools.attribution --help)", file=sys.stderr)
        sys.exit(2)


@one_line("attribution", stopped="stopped by Ctrl-C; run the same command again to continue (finished runs are "
                                "skipped, the others resume from their checkpoints)")  # each at its checkpoint
def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
               epilog="Flags after -- go to every train.py (e.g. -- --device cuda --amp off).")
    p.add_argument("stage", choices=("select", "report", "all", "pack", "tables"))
    rates = ", ".join(map(str, sorted(GRIDS)))
    p.add_argument("--rate", type=float, default=0.4, help=f"the symmetric noise rate: {rates}")
    p.add_argument("--out", default="sweeps/fmnist", metavar="DIR", help="the runs go to DIR/attribution/r<rate>/")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist", help="the four Fashion-MNIST IDX files")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2)")
    batched.batched_flag(p)
    p.add_argument("--dry-run", action="store_true", help="print the train.py commands instead of running them")
    p.add_argument("--from", dest="pack", default="docs/fmnist/runs.jsonl.gz",
                   help="tables: the raw data to render from; pack: where to write it")
    p.add_argument("--rows", help=f"select and report: only these rows, a comma list of {', '.join(ROWS)} (zero "
                                  "knowledge and the clean reference alone: a new rate's preconditions)")
    p.add_argument("--published-choice", action="store_true",
                   help="report at 40%%: the committed selection's choices (docs/fmnist/choice.json), no selection runs")
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    rows = None if args.rows is None else args.rows.split(",")
    if rows is not None and set(rows) - set(ROWS):
        p.error(f"--rows: unknown {', '.join(sorted(set(rows) - set(ROWS)))}; choose from {', '.join(ROWS)}")
    if args.published_choice and (args.rate != 0.4 or args.stage not in ("report", "tables")):
        p.error("--published-choice goes with report or tables --rate 0.4: the committed selection is at 40%")
    if args.rate not in GRIDS:
        p.error(f"--rate {args.rate:g}: the declared grids are for {rates}")
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    command = shlex.join(["python", "-m", "tools.attribution", *argv])
    if args.stage == "pack":
        added, total = pack(args.out, args.pack)
        print(f"{added} runs of {args.out} added to {args.pack}, which holds {total}")
        return 0
    where = os.path.join(args.out, "attribution", f"r{args.rate:g}")
    if args.stage == "tables":
        runs = rawdata.read(args.pack, args.rate)
        choice, todo = (published_choice(runs), []) if args.published_choice else choose(runs, args.rate)
        os.makedirs(where, exist_ok=True)
        render(runs, args.rate, choice, where, f"Rendered from {args.pack} (`{command}`): {rawdata.where(runs)}" +
               (f"; {len(todo)} cells not run." if todo else "."), args.published_choice)
        return 0
    data = ["--dataset", "fashionmnist", "--data-dir", args.data_dir]
    extra = ["--workers", "0"] + extra
    t0, log = time.time(), []
    if args.published_choice:  # 40% on a slow machine: the committed selection's choices, no new selection
        runs = load_dir(args.out, args.rate)
        choice = published_choice(runs)
    else:
        choice, runs = select(args, data, extra, log, rows)  # the report's lrs follow from the selection's runs
    if args.dry_run:
        need = set(GRIDS[args.rate]) if rows is None else grid.needs(rows)
        if args.stage != "select" and not need <= set(choice):
            print("# the report's commands follow from the selection's choices: run the selection first")
        elif args.stage != "select":
            run_cells(args, report_cells(args.rate, choice, rows), "report", data, extra, log)
        return 0
    if args.stage in ("report", "all"):
        run_cells(args, report_cells(args.rate, choice, rows), "report", data, extra, log)
        runs = load_dir(args.out, args.rate)
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, "choice.json"), "w") as f:
        json.dump(dict(choice, command=command), f, indent=1)
    render(runs, args.rate, choice, where, f"`{command}`: {time.time() - t0:.0f} s this invocation; "
                                           f"{rawdata.where(runs)}.", args.published_choice)
    if log:
        print(f"attribution: {len(log)} runs failed: {'; '.join(log)}", file=sys.stderr)
    return 1 if log else 0


if __name__ == "__main__":
    sys.exit(main())
