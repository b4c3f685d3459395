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
The declaration (data, rows, grids, jobs, the choice) is tools/demo_grid.py; the tables and the figure
tools/demo_tables.py; this file runs the stages.
"""

import argparse
import json
import os
import shlex
import sys
import time

from tools import batched, demo_tables
from tools.demo_grid import (DATA_DIR, KNOBS, REPORT_SEEDS, ROWS, Plan, choose, compare_jobs, data_flags, derived,
                             finished, regime_jobs, report_jobs, select_jobs)
from training import config
from training.errors import one_line


def run(todo, args):
    """The runs (batched.run_grid: in one process with --batched or on a GPU, else one train.py process per
    run): ({name: error}, the number of runs this invocation trains, not those finished before)."""
    trained = sum(not finished(j["dir"]) for j in todo)
    return batched.run_grid(todo, args.jobs, args.device, args.batched), trained


def regime(args, plan, choice_path, end):
    failed, trained = run(regime_jobs(plan), args)
    return failed, lambda: demo_tables.regime_text(args.out, end(trained)), "regime.md"


def select(args, plan, choice_path, end):
    failed, trained = run(select_jobs(plan), args)
    choice = choose(args.out, ["ce-zero", "mylc-zero", "mylc-all", "mylc-cmds", "mylc-cmdp"])
    more, n = run([j for j in select_jobs(plan, choice) if j["name"].startswith("ce-cmdp-")], args)  # CE CMD-P
    failed.update(more)
    choice.update(choose(args.out, ["ce-cmdp"], choice))
    with open(choice_path, "w") as f:
        json.dump(dict(derived(choice), command=end.command), f, indent=1)
    try:
        demo_tables.heat_map(args.out, os.path.join(args.out, "select-eta-b.png"))
    except (ImportError, SystemExit):  # no matplotlib: the table and choice.json are what the report needs
        print("demo: no heat map without matplotlib (pip install matplotlib)", file=sys.stderr)
    return failed, lambda: demo_tables.select_text(args.out, choice, end(trained + n)), "select.md"


def compare(args, plan, choice_path, end):
    failed, trained = run(compare_jobs(plan), args)
    picked = choose(args.out, list(KNOBS))
    with open(choice_path) as f:
        saved = json.load(f)
    saved.update(picked, compare_command=end.command)
    with open(choice_path, "w") as f:
        json.dump(saved, f, indent=1)
    return failed, lambda: demo_tables.compare_text(args.out, picked, end(trained)), "compare.md"


def report(args, plan, choice_path, end):
    with open(choice_path) as f:
        saved = json.load(f)
    choice = {row: saved[row] for row in ROWS if row in saved}
    seeds = REPORT_SEEDS[:args.seeds]
    failed, trained = run(report_jobs(plan, choice, seeds), args)
    return failed, lambda: demo_tables.report_text(args.out, choice, seeds, end(trained)), "report.md"


STAGES = {"regime": regime, "select": select, "compare": compare, "report": report}


def dry_run(args, plan, choice_path):
    """The train.py commands a stage would run, so that a reader can run one row by hand."""
    if args.stage == "report":
        with open(choice_path) as f:
            saved = json.load(f)
        todo = report_jobs(plan, {row: saved[row] for row in ROWS if row in saved}, REPORT_SEEDS[:args.seeds])
    else:
        todo = {"regime": regime_jobs, "select": select_jobs, "compare": compare_jobs}[args.stage](plan)
    print("\n".join(shlex.join(["python", "train.py", *j["argv"]]) for j in todo if not finished(j["dir"])))
    return 0


class Footer:
    """The last line of a stage's table: its command, and the time and runs of this invocation."""

    def __init__(self, command):
        self.command, self.t0 = command, time.time()

    def __call__(self, trained):
        return demo_tables.footer(self.command, time.time() - self.t0, trained)


@one_line("demo", stopped="stopped by Ctrl-C; run the same command again to continue (finished runs are skipped, "
                         "the others resume from their checkpoints)")  # each run stops at its checkpoint
def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Flags after -- go to every train.py (e.g. -- --amp off).")
    p.add_argument("stage", choices=tuple(STAGES))
    p.add_argument("--out", default="sweeps/fmnist", metavar="DIR", help="the runs, choice.json and the tables")
    p.add_argument("--data-dir", default=DATA_DIR,
                   help="the four Fashion-MNIST IDX files (Debian: apt-get install dataset-fashion-mnist)")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time, each with an equal share of the cores "
                                                        "(and the one GPU, when train.py sees one) (default 2)")
    config.add_device_flag(p)
    batched.batched_flag(p)
    p.add_argument("--seeds", type=int, default=len(REPORT_SEEDS), help="report: seeds 0..N-1 (default 5)")
    p.add_argument("--dry-run", action="store_true", help="print the train.py commands of the stage's runs not yet "
                                                          "finished, and write nothing (select: before CE CMD-P's)")
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.jobs < 1 or not 1 <= args.seeds <= 9:
        p.error("--jobs must be at least 1 and --seeds between 1 and 9")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        p.error(f"--out {args.out} is a file; give a directory")
    choice_path = os.path.join(args.out, "choice.json")
    if args.stage in ("compare", "report") and not os.path.exists(choice_path):  # before anything is written
        p.error(f"{choice_path} not found: run `python -m tools.demo select --out {args.out}` first, or copy the "
                f"published choice, docs/fmnist/choice.json, there")
    plan = Plan(args.out, data_flags(args.data_dir), ["--device", args.device, "--workers", "0"] + extra)
    if args.dry_run:
        return dry_run(args, plan, choice_path)
    os.makedirs(args.out, exist_ok=True)
    end = Footer(shlex.join(["python", "-m", "tools.demo", *argv]))
    failed, text, name = STAGES[args.stage](args, plan, choice_path, end)
    text, path = "\n".join(text()), os.path.join(args.out, name)
    with open(path, "w") as f:
        f.write(text)
    print(text)
    print(f"written: {path}" + (f"; {len(failed)} runs failed: {', '.join(sorted(failed))}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
