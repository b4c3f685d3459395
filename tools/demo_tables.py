"""The Fashion-MNIST demonstration's tables and figure (tools/demo.py's stages write them).

memorisation_timing, preconditions, preconditions_of, regime_report -- whether zero knowledge's runs meet the
                  regime's preconditions (demo.PRECONDITIONS)
settings_table -- every setting a stage tried, its validation accuracy, the chosen one marked
heat_map       -- MyLC's validation accuracy over (eta, b)
early_stopped, report_table -- the report: every row at its choice, with paired differences and diagnostics
regime_text, select_text, compare_text, report_text -- each stage's markdown
"""
import math
import os

from tools import demo_grid as demo
from tools.stats import fmt, mean_std, paired
from tools.sweep import run_diagnostics
from tools.demo_grid import BASE_LR, KNOBS, PRECONDITIONS, ROWS, SELECT_SEEDS, VERSUS_ALL, finished, rows_of


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


def regime_report(out, seeds=SELECT_SEEDS, stage="select", lrs=None):
    """The precondition lines and whether all hold, for zero knowledge's runs of a stage (at lrs, else BASE_LR)."""
    lrs = lrs or {}

    def dirs(row):
        lr = lrs.get(row, BASE_LR)
        return [d for s in seeds for d in [os.path.join(out, stage, f"{demo.Setting(lr).name(row)}-s{s}"
                                                         if stage == "select" else f"{row}-s{s}")] if finished(d)]
    zero = {ROWS[r][0] + (f" at lr {lrs[r]:g}" if r in lrs else f" at lr {BASE_LR:g}"): dirs(r)
            for r in ("ce-zero", "mylc-zero")}
    if not all(zero.values()) or not dirs("clean"):
        return ["(the regime's runs have not finished)"], False
    return preconditions(zero, dirs("clean"))


def settings_table(out, rows, choice, columns):
    """One line per setting of each row (demo.grid_of): its mean validation accuracy over the selection seeds, each
    seed's, and the chosen one marked. columns: ("η", "b") for CMD's rows, ("knob",) for the comparators'."""
    head = ["row", "lr", *columns, "val acc (mean of 2 seeds)", "seeds", "chosen"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for row in rows:
        for s in demo.grid_of(row, choice):
            v, vals = demo.val_score(out, row, s)
            chosen = "**✓**" if row in choice and demo.setting_of(choice[row]) == s else ""
            cells = {"η": "–" if s.eta is None else f"{s.eta:g}", "b": "–" if s.b is None else f"{s.b:g}",
                     "knob": "–" if s.knob is None else f"{s.knob[0]} {s.knob[1]:g}"}
            lines.append(f"| {ROWS[row][0]} | {s.lr:g} | " + " | ".join(cells[c] for c in columns) +
                         f" | {'–' if v is None else f'{v:.2f}'} | {' '.join(f'{x:.2f}' for x in vals)} | {chosen} |")
    return lines


def heat_map(out, path):
    """Validation accuracy of MyLC CMD-S (b = 0) and CMD-P over (eta, b), each cell its best lr."""
    from tools.plot_style import pyplot, save  # matplotlib only for the figure: select's table and choice need none
    plt = pyplot()
    bs = sorted({b for _, b in demo.ETA_B} | {0.0})
    grid = [[max((demo.val_score(out, "mylc-cmds" if b == 0 else "mylc-cmdp", demo.Setting(lr, eta, b))[0] or -1, lr)
                  for lr in demo.LRS) for b in bs] for eta in demo.ETAS]
    fig, ax = plt.subplots(figsize=(4.8, 3.2))
    im = ax.imshow([[v for v, _ in r] for r in grid], cmap="viridis", aspect="auto")
    for i, r in enumerate(grid):
        for j, (v, lr) in enumerate(r):
            ax.text(j, i, f"{v:.1f}\nlr {lr:g}", ha="center", va="center", color="w", fontsize=8)
    ax.set_xticks(range(len(bs)), [f"b={b:g}" + (" (CMD-S)" if b == 0 else "") for b in bs])
    ax.set_yticks(range(len(demo.ETAS)), [f"η={e:g}" for e in demo.ETAS])
    ax.set_title("MyLC: val accuracy (2 seeds) at each cell's best lr", fontsize=9)
    fig.colorbar(im, ax=ax, label="validation accuracy (%)")
    save(plt, fig, path)


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


def footer(command, seconds, trained):
    return f"`{command}`: {seconds:.0f} s this invocation, which trained {trained} runs (the others had finished before)."


def regime_text(out, end):
    lines, ok = regime_report(out)
    return [f"# Regime: zero knowledge at the base schedule (lr {BASE_LR:g}), seeds "
            f"{', '.join(map(str, SELECT_SEEDS))}", "", PRECONDITIONS + ".", ""] + lines + [
        "", f"All hold: {'yes' if ok else 'no'}.", "", end, ""]


def select_text(out, choice, end):
    lines, _ = regime_report(out)
    return ["# Selection on the clean 10% validation split", "",
            f"Seeds {', '.join(map(str, SELECT_SEEDS))} (not reported). Each row's choice: the best mean final-epoch "
            "validation accuracy (val_acc_mean).", ""] + settings_table(out, list(demo.GRID) + ["ce-cmdp"], choice,
                                                                        ("η", "b")) + [
        "", "Preconditions at the base schedule: " + PRECONDITIONS + "."] + lines + ["", end, ""]


def compare_text(out, picked, end):
    return ["# The comparators' selection on the clean 10% validation split", "",
            f"Seeds {', '.join(map(str, SELECT_SEEDS))}, the lr grid of every row, each comparator's own knob; the "
            "choice is added to choice.json.", ""] + settings_table(out, list(KNOBS), picked, ("knob",)) + ["", end, ""]


def report_text(out, choice, seeds, end):
    lines, _ = regime_report(out, seeds, "report", {r: choice[r]["lr"] for r in ("ce-zero", "mylc-zero")})
    return [f"# Fashion-MNIST, 40% symmetric noise: every row at its validation-chosen setting, seeds "
            f"{', '.join(map(str, seeds))}", ""] + report_table(out, choice, seeds) + [
        "", "Final test accuracy: the mean of the models' final-epoch accuracies (the paper's number), mean ± sample "
            "std over seeds. Δ: per-seed difference against zero knowledge with the same label correction on the "
            "same seed, and for the MyLC rows that select, against all knowledge; a **win** when the 95% "
            "t-interval's lower end is above 0. Diagnostics: means over epochs and models (memorised: the last "
            "epoch).", "",
        "Preconditions again, on the reported zero-knowledge rows at their chosen lr: " + PRECONDITIONS + "."] + lines + [
        "", end, ""]
