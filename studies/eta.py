"""The η rule in three regimes: what CMD-P teaches over a whole run at each η at b = −5, where the networks do not
memorise the noisy labels and where they do, under symmetric noise and under pair noise (docs/eta/report.md,
docs/copy.md's "Choosing η").

    python -m studies.eta run --out sweeps/eta      # the runs (tools.batched, one process a regime), minutes a regime
    python -m studies.eta pack --out sweeps/eta     # their numbers, epoch by epoch, into docs/eta/runs.jsonl.gz
    python -m studies.eta report                    # docs/eta/report.md and docs/eta/eta-regimes.png from those alone

The regimes are fixed by the baselines' memorisation alone, before any η row ran (run --rows baselines first): the
Fashion-MNIST pipeline of studies/fmnist.py (BASE: an mlp pair, 7,200 noisy training images, 40% noise, 80 epochs,
no weight decay). Under symmetric noise, at lr 0.05, where zero knowledge memorises 0.81 of the noisy labels by the
end (docs/fmnist-regime.md, probe 1), and at lr 0.0044, where it memorises under 0.06 (the attribution's five report
seeds); under pair noise at lr 0.05, where CE and zero knowledge memorise too. Each regime trains MyLC + CMD-P at
every η of ETAS (under pair noise: the symmetric table's start, 2, and the pair rule's, schedule.eta_start = 4.5) and
MyLC zero knowledge beside them, and under pair noise plain CE too, on SEEDS.

What each epoch records, per run: χ at its end; taught and precision, b2a and a2b (docs/training.md's legend); the
mean entropy of each model's training predictions on the clean-labelled samples and on the noisy-labelled ones,
from entropy_hist.npz (the bins' centres: within half a bin, 0.029 nats at K = 10); memorised; MyLC's r; test
accuracy.
"""
import gzip
import json
import math
import os
import shlex
import sys

import numpy as np

import schedule
from studies import fmnist
from tools.stats import fmt, interval, mean_std
from training import runfiles
from training.errors import Parser, UserError, one_line

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RAW = os.path.join(HERE, "docs", "eta", "runs.jsonl.gz")
# (noise, lr) -> the regime the baselines show there, in the report's order
REGIMES = {("sym", 0.05): "memorising", ("sym", 0.0044): "not memorising", ("pair", 0.05): "memorising, pair noise"}
ETAS = {"sym": (2.0, 2.5, 3.0, 4.0), "pair": (2.0, 4.5)}  # pair: the symmetric table's start and schedule.eta_start's
BASELINES = {"sym": ("mylc",), "pair": ("mylc", "ce")}  # the label corrections of each noise's zero-knowledge rows
# the rows each regime's final accuracies are paired with, a column each (pair noise: CE, and zero knowledge)
REFERENCE = {"sym": ((4.0, "mylc"),), "pair": ((None, "ce"), (None, "mylc"))}
B = -5.0
SEEDS = (0, 1, 2)
EPOCHS = (1, 2, 3, 5, 10, 20, 40, 60, 80)  # the report's epochs
K, RATE = 10, 0.4


def h_noise(k=K, rate=RATE, kind="sym"):
    """H_ν of the study's noise (schedule.noise_entropy)."""
    return schedule.noise_entropy(rate, k, kind)


def bound(k=K, rate=RATE, kind="sym"):
    """docs/copy.md's bound, schedule.eta_bound: χ starts above H_ν for η < 1.85 ln K / H_ν (b = −5)."""
    return schedule.eta_bound(k, rate, B, kind)


def folder(regime):
    """A regime's runs' folder under --out: lr0.05 (symmetric noise), pair-lr0.05."""
    noise, lr = regime
    return f"lr{lr:g}" if noise == "sym" else f"{noise}-lr{lr:g}"


def grids(data_dir, rows="all", noises=None):
    """{regime: [tools.batched's argv]}: per regime (of the noises given, or all), the baselines (zero knowledge, one
    per correction of BASELINES), then the η grid of CMD-P (rows: baselines, cmd or all), on studies.fmnist's BASE."""
    out = {}
    for (noise, lr) in REGIMES:
        if noises and noise not in noises:
            continue
        base = list(fmnist.BASE)
        base[base.index("--noise") + 1] = noise  # BASE's 40% of this regime's noise
        common = ["--dataset", "fashionmnist", "--data-dir", data_dir, *base]
        seeds = ["--seed", ",".join(map(str, SEEDS))]
        cmd = common + ["--lc", "mylc", "--mode", "progressive", "--lr", f"{lr:g}", "--eta",
                        ",".join(f"{e:g}" for e in ETAS[noise]), "--b", f"{B:g}", *seeds]
        baselines = [common + ["--lc", lc, "--mode", "zero", "--lr", f"{lr:g}", *seeds] for lc in BASELINES[noise]]
        out[noise, lr] = ([] if rows == "cmd" else baselines) + ([] if rows == "baselines" else [cmd])
    return out


# ---------------------------------------------------------------- the runs, epoch by epoch
def entropies(path):
    """{epoch: (mean H(p) of the clean-labelled samples per model, of the noisy-labelled ones)} from an
    entropy_hist.npz: each bin at its centre."""
    with np.load(path) as f:
        centres = (f["edges"][:-1] + f["edges"][1:]) / 2
        counts = f["counts"]  # (E, M, 2, bins)
        means = (counts * centres).sum(-1) / np.maximum(counts.sum(-1), 1)  # (E, M, 2)
        return {int(e): (m[:, 0].tolist(), m[:, 1].tolist()) for e, m in zip(f["epoch"], means)}


def run_rows(d):
    """A finished run's epochs: the numbers of the report."""
    h = entropies(os.path.join(d, "entropy_hist.npz"))
    keep = ("epoch", "chi", "selected_b2a", "selected_a2b", "precision_b2a", "precision_a2b", "memorized_a",
            "memorized_b", "confidence_a", "confidence_b", "test_acc_mean", "val_acc_mean")
    return [dict({k: r.get(k) for k in keep}, h_clean=h[r["epoch"]][0], h_noisy=h[r["epoch"]][1])
            for r in map(json.loads, runfiles.lines_of(d, "metrics.jsonl"))]


def pack(out, path):
    """Every finished run under out into the raw data at path, beside the runs it already holds of the regimes with
    none under out (so a regime can be run, or run again, on its own). Returns how many runs it holds."""
    lines, ran = [], set()
    for noise, lr in REGIMES:
        where = os.path.join(out, folder((noise, lr)))
        for name in sorted(os.listdir(where)) if os.path.isdir(where) else []:
            d = os.path.join(where, name)
            if runfiles.state(d) != runfiles.FINISHED:
                continue
            config = runfiles.read_json(d, "config.json")
            eta = None if config["mode"] == "zero" else float(config["eta"])
            prov = config.get("provenance", {})
            ran.add((noise, lr))
            lines.append(dict(lr=lr, eta=eta, seed=config["seed"], rows=run_rows(d),
                              provenance={k: prov.get(k) for k in ("device", "torch", "engine", "date", "code",
                                                                   "git_commit")},
                              **({} if noise == "sym" else dict(noise=noise)),
                              **({} if config["lc"] == "mylc" else dict(lc=config["lc"]))))
    if not lines:
        raise UserError(f"no finished run under {out}/; run `python -m studies.eta run --out {out}` first")
    kept = [r for r in (read(path) if os.path.exists(path) else []) if (r.get("noise", "sym"), r["lr"]) not in ran]
    lines = sorted(kept + lines, key=lambda r: (r.get("noise", "sym") != "sym", r["lr"], r["eta"] or math.inf,
                                                r.get("lc", "mylc"), r["seed"]))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with runfiles.replacing(path, "wb") as f, gzip.open(f, "wt") as z:
        z.writelines(json.dumps(r, sort_keys=True) + "\n" for r in lines)
    return len(lines)


def read(path):
    if not os.path.exists(path):
        raise UserError(f"{path} not found; run `python -m studies.eta pack --out OUT` first")
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


# ---------------------------------------------------------------- the report
def of(runs, regime, eta, lc="mylc"):
    """The runs of one regime ((noise, lr)) and row: CMD-P at η, or zero knowledge (η None) with correction lc."""
    noise, lr = regime
    return [r for r in runs if r.get("noise", "sym") == noise and r["lr"] == lr and r["eta"] == eta
            and r.get("lc", "mylc") == lc]


def at(runs, regime, eta, epoch, value, lc="mylc"):
    """mean ± std over seeds of value(row) at that epoch, for the runs of one regime and row (of)."""
    got = [value(r["rows"][epoch - 1]) for r in of(runs, regime, eta, lc) if len(r["rows"]) >= epoch]
    got = [v for v in got if v is not None]
    return mean_std(got) if got else None


def both(row, key):
    """The mean of a row's b2a and a2b (or a and b) numbers; None where either is None."""
    values = [row[f"{key}_{s}"] for s in (("b2a", "a2b") if key in ("selected", "precision") else "ab")]
    return None if None in values else sum(values) / 2


def cell(stat, form="{:.2f}"):
    return "–" if stat is None else fmt(stat[0], stat[1], form)


def mean(stat):
    """The mean of a stat (at), to two decimals; – where there is none."""
    return "–" if stat is None else f"{stat[0]:.2f}"


def rows_of(regime):
    """A regime's rows, as (η, lc, name): CMD-P at each η of ETAS, then its baselines."""
    noise = regime[0]
    return ([(eta, "mylc", f"{eta:g}") for eta in ETAS[noise]] +
            [(None, lc, "zero knowledge" if lc == "mylc" else "CE") for lc in BASELINES[noise]])


def ends(runs, regime):
    """The end of each row's runs in one regime: final test accuracy, early-stopped test accuracy (at the best
    validation epoch), memorised, and the paired difference of final accuracy against each of the regime's
    REFERENCE rows over the same seeds."""
    refs = REFERENCE[regime[0]]
    names = {(eta, lc): name for eta, lc, name in rows_of(regime)}
    lines = ["| η | final test acc | early-stopped test acc | memorised (end) | " + " | ".join(
        f"final − {'η = ' + names[ref] if ref[0] is not None else names[ref]}'s (95% t-interval)" for ref in refs)
        + " |", "|---" * (4 + len(refs)) + "|"]
    finals = {ref: {r["seed"]: r["rows"][-1]["test_acc_mean"] for r in of(runs, regime, *ref)} for ref in refs}
    for eta, lc, name in rows_of(regime):
        mine = of(runs, regime, eta, lc)
        if not mine:
            continue
        final = mean_std([r["rows"][-1]["test_acc_mean"] for r in mine])
        early = mean_std([max(r["rows"], key=lambda row: row["val_acc_mean"])["test_acc_mean"] for r in mine])
        memorised = mean_std([both(r["rows"][-1], "memorized") for r in mine])
        cells = []
        for ref in refs:
            diffs = [r["rows"][-1]["test_acc_mean"] - finals[ref][r["seed"]] for r in mine if r["seed"] in finals[ref]]
            m, ci = interval(diffs) if diffs and (eta, lc) != ref else (None, None)
            cells.append("–" if m is None else f"{m:+.2f}" + ("" if ci is None else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]"))
        lines.append(f"| {name} | {cell(final)} | {cell(early)} | {cell(memorised)} | {' | '.join(cells)} |")
    return lines + [""]


def onset_r(h_nu, k=K):
    """The guide's onset threshold on r: mean H(p) = (1 − r) ln K (Eq. 8) below H_ν, that is r above 1 − H_ν/ln K."""
    return 1 - h_nu / math.log(k)


def onset(run, h_nu):
    """The first epoch whose r (the mean of A's and B's) is above onset_r(h_nu); None if none is."""
    return next((row["epoch"] for row in run["rows"] if both(row, "confidence") > onset_r(h_nu)), None)


def best_epoch(run):
    """The epoch of the run's best validation accuracy (early stopping's)."""
    return max(run["rows"], key=lambda row: row["val_acc_mean"])["epoch"]


def predictions(runs, regime):
    """What the guide's rules say of a run, measured: taught in epochs 1-3, r's path, the epoch the onset warning
    first fires (by the regime's own H_ν, and by symmetric noise's where the noise is another), the epoch of the
    best validation accuracy, and memorised at epochs 1 and 3."""
    noise = regime[0]
    h_own, h_sym = h_noise(kind=noise), h_noise()
    by = [("own", h_own)] + ([("symmetric", h_sym)] if noise != "sym" else [])
    lines = [f"The guide's rules, measured (mean over seeds): the onset warning fires in the first epoch whose r is "
             f"above 1 − H_ν/ln K, {onset_r(h_own):.2f} with this noise's H_ν = {h_own:.2f}"
             + (f" and {onset_r(h_sym):.2f} with symmetric noise's, {h_sym:.2f}" if noise != "sym" else "")
             + " (– where it never does).", "",
             "| η | taught, epochs 1 / 2 / 3 | r at epoch 1 / 3 / 10 / 80 | onset epoch"
             + (", own / symmetric H_ν" if noise != "sym" else "") + " | best validation epoch | "
             "memorised at epoch 1 / 3 |", "|---" * 6 + "|"]

    def mean_or_dash(values):  # the mean over the seeds where it fired, and how many of them did where not all
        fired = [v for v in values if v is not None]
        return "–" if not fired else f"{sum(fired) / len(fired):.1f}" + (
            "" if len(fired) == len(values) else f" ({len(fired)} of {len(values)})")

    for eta, lc, name in rows_of(regime):
        mine = of(runs, regime, eta, lc)
        if not mine:
            continue
        def means(value, epochs):
            return " / ".join(mean(at(runs, regime, eta, e, value, lc)) for e in epochs)

        taught = "–" if eta is None else means(lambda row: both(row, "selected"), (1, 2, 3))
        r = means(lambda row: both(row, "confidence"), (1, 3, 10, 80))
        onsets = " / ".join(mean_or_dash([onset(run, h) for run in mine]) for _, h in by)
        best = mean_or_dash([best_epoch(run) for run in mine])
        memorised = means(lambda row: both(row, "memorized"), (1, 3))
        lines.append(f"| {name} | {taught} | {r} | {onsets} | {best} | {memorised} |")
    return lines + [""]


def regime_order():
    """The regimes as the guide's table lists them: symmetric noise first, the lower lr first."""
    return sorted(REGIMES, key=lambda g: (g[0] != "sym", g[1]))


def guide_table(runs):
    """docs/copy.md's table of the regimes (a test holds the page to it): per regime and η, the share taught in
    epochs 2-10 (the range of its per-epoch means) and at epochs 20, 40, 80, the precision at epochs 10 and 40, the
    final test accuracy and the memorised share at the end."""
    lines = ["| regime | η | taught, epochs 2–10 | taught at epoch 20 / 40 / 80 | precision at epoch 10 / 40 | "
             "final test acc | memorised (end) |", "|---" * 7 + "|"]
    for regime in regime_order():
        for eta in ETAS[regime[0]]:
            if not of(runs, regime, eta):
                continue
            taught = [at(runs, regime, eta, e, lambda row: both(row, "selected"))[0] for e in range(2, 11)]
            later = [at(runs, regime, eta, e, lambda row: both(row, "selected"))[0] for e in (20, 40, 80)]
            prec = [at(runs, regime, eta, e, lambda row: both(row, "precision")) for e in (10, 40)]
            final = at(runs, regime, eta, 80, lambda row: row["test_acc_mean"])
            memorised = at(runs, regime, eta, 80, lambda row: both(row, "memorized"))
            lines.append(f"| {REGIMES[regime]} | {eta:g} | {min(taught):.2f}–{max(taught):.2f} | "
                         + " / ".join(f"{v:.2f}" for v in later) + " | "
                         + " / ".join("–" if p is None else f"{p[0]:.2f}" for p in prec)
                         + f" | {cell(final)} | {memorised[0]:.2f} |")
    return lines


def tables(runs):
    """The report's lines: per regime, the end of each row's runs, what the guide's rules say of them, then a table
    of its epochs, a row per η and epoch."""
    lines = []
    for regime, name in REGIMES.items():
        noise, lr = regime
        mine = [r for r in runs if r.get("noise", "sym") == noise and r["lr"] == lr]
        if not mine:
            continue
        n = len({r["seed"] for r in mine})
        said = []
        for lc in BASELINES[noise]:
            zero = of(runs, regime, None, lc)
            said.append(f"{'Zero knowledge (MyLC' if lc == 'mylc' else 'CE (zero knowledge'}, {len(zero)} seeds) "
                        f"memorises {cell(at(runs, regime, None, 80, lambda row: both(row, 'memorized'), lc))} of the "
                        f"noisy labels by epoch 80 and ends at "
                        f"{cell(at(runs, regime, None, 80, lambda row: row['test_acc_mean'], lc))}% test accuracy.")
        lines += [f"## {'' if noise == 'sym' else f'{noise} noise, '}lr {lr:g}: {name}", "",
                  " ".join(said) + f" {n} seeds a row; each cell is the mean ± std over seeds of the mean of b2a and "
                  f"a2b (of A and B for the entropies).", "", *ends(runs, regime), *predictions(runs, regime),
                  "| η | epoch | χ | taught | precision | mean H(p), clean-labelled | mean H(p), noisy-labelled | "
                  "memorised | test acc |", "|---" * 9 + "|"]
        for eta in ETAS[noise]:
            for epoch in EPOCHS:
                stats = [at(runs, regime, eta, epoch, f) for f in (
                    lambda row: row["chi"], lambda row: both(row, "selected"), lambda row: both(row, "precision"),
                    lambda row: sum(row["h_clean"]) / 2, lambda row: sum(row["h_noisy"]) / 2,
                    lambda row: both(row, "memorized"), lambda row: row["test_acc_mean"])]
                if stats[0] is None:
                    continue
                lines.append(f"| {eta:g} | {epoch} | {stats[0][0]:.2f} | " + " | ".join(
                    [cell(s) for s in stats[1:6]] + [cell(stats[6], "{:.1f}")]) + " |")
        lines.append("")
    return lines


def report_text(runs, path, command):
    prov = sorted({f"{r['provenance']['device']}, torch {r['provenance']['torch']}" for r in runs})
    head = ["# The η rule in three regimes", "",
            f"MyLC + CMD-P at b = {B:g} on Fashion-MNIST's mlp pair at 40% noise, K = {K}: under symmetric noise at "
            f"η = {', '.join(f'{e:g}' for e in ETAS['sym'])} (H_ν = {h_noise():.2f} nats, and docs/copy.md's bound "
            f"1.85 ln K / H_ν = {bound():.1f}), in a regime where the networks memorise the noisy labels (lr 0.05) "
            f"and one where they do not (lr 0.0044); under pair noise at η = "
            f"{' and '.join(f'{e:g}' for e in ETAS['pair'])} (H_ν = {h_noise(kind='pair'):.2f} nats, bound "
            f"{bound(kind='pair'):.1f}; η = {schedule.eta_start(K, RATE, B, 'pair'):g} is its start, 2 the symmetric "
            f"table's) at lr 0.05, where they memorise too. The regimes are fixed from the baselines alone "
            f"(studies/eta.py). χ starts at 1.85 ln K/η: "
            f"{', '.join(f'{2 * math.log(K) / (1 + math.exp(-2.5)) / e:.2f}' for e in sorted(set(ETAS['sym'] + ETAS['pair'])))}"
            f" nats for η = {', '.join(f'{e:g}' for e in sorted(set(ETAS['sym'] + ETAS['pair'])))}. "
            "Picture: [eta-regimes.png](eta-regimes.png).", ""]
    codes = []
    for (noise, lr), name in REGIMES.items():  # each regime's runs name their code, or say they predate its record
        mine = {}  # code: the commits its runs started at
        for r in runs:
            if (r.get("noise", "sym"), r["lr"]) == (noise, lr):
                mine.setdefault(r["provenance"].get("code"), set()).add((r["provenance"].get("git_commit") or "")[:7])
        if mine:
            codes.append(f"{name} (lr {lr:g}): " + ", ".join(
                f"code {c} (commit {', '.join(sorted(g - {''})) or 'none'})" if c else
                "code not recorded (run before runs named it)" for c, g in sorted(mine.items(), key=str)))
    foot = [f"Rendered from {os.path.relpath(path, HERE) if path.startswith(HERE) else path} by `{command}`: "
            f"{len(runs)} runs on {'; '.join(prov)} (tools.batched, one process a regime). The code of each regime: "
            + "; ".join(codes) + ". Rows are paired only within a regime."]
    return head + tables(runs) + foot


def picture(runs, path):
    """χ against the measured mean entropies of clean- and noisy-labelled samples, for the least and the largest η,
    in each regime, and the taught share of every η: a row per regime."""
    import matplotlib  # here: only the picture needs it, not pack or the tables
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display needed
    regimes = [g for g in REGIMES if any(of(runs, g, e) for e in ETAS[g[0]])]
    fig, axes = plt.subplots(len(regimes), 3, figsize=(15, 4 * len(regimes)), layout="constrained", squeeze=False)
    epochs = list(range(1, 81))
    every = sorted(set(ETAS["sym"] + ETAS["pair"]))
    colours = dict(zip(every, ("tab:blue", "tab:green", "tab:orange", "tab:red", "tab:purple")))
    for row, regime in zip(axes, regimes):
        noise, lr = regime
        where = f"lr {lr:g} ({REGIMES[regime]})"  # the regime's name says its noise where not symmetric
        for ax, eta in zip(row[:2], (ETAS[noise][0], ETAS[noise][-1])):
            series = {name: [at(runs, regime, eta, e, f) for e in epochs] for name, f in (
                ("χ", lambda r: r["chi"]), ("clean-labelled", lambda r: sum(r["h_clean"]) / 2),
                ("noisy-labelled", lambda r: sum(r["h_noisy"]) / 2))}
            for (name, s), style in zip(series.items(), ("--", "-", ":")):
                ax.plot(epochs, [v[0] if v else math.nan for v in s], style, color="k" if name == "χ" else
                        colours[eta], label=name if name == "χ" else f"mean H(p), {name}")
            ax.axhline(h_noise(kind=noise), color="grey", lw=0.8, label=f"H_ν = {h_noise(kind=noise):.2f}")
            ax.set(title=f"{where}, η = {eta:g}", xlabel="epoch", ylabel="nats", ylim=(0, math.log(K)))
            ax.legend(fontsize=8)
        for eta in ETAS[noise]:
            s = [at(runs, regime, eta, e, lambda r: both(r, "selected")) for e in epochs]
            row[2].plot(epochs, [v[0] if v else math.nan for v in s], color=colours[eta], label=f"η = {eta:g}")
        row[2].set(title=f"{where}: taught (b2a and a2b)", xlabel="epoch", ylabel="fraction", ylim=(0, 1))
        row[2].legend(fontsize=8)
    with runfiles.replacing(path, "wb") as f:
        fig.savefig(f, dpi=90, format="png")
    plt.close(fig)


# ---------------------------------------------------------------- the command line
def parse(argv):
    p = Parser(prog="python -m studies.eta", description=__doc__.split("\n")[0])
    p.add_argument("stage", choices=("run", "pack", "report"))
    p.add_argument("--out", default="sweeps/eta", help="the run folders (run, pack)")
    p.add_argument("--data-dir", default=fmnist.DATA_DIR, help="Fashion-MNIST's files (run)")
    p.add_argument("--raw", default=RAW, help="the raw data (pack writes it, report reads it)")
    p.add_argument("--noise", choices=tuple(ETAS), action="append",
                   help="run: the regimes of this noise only (again for another; default: every regime)")
    p.add_argument("--rows", choices=("all", "baselines", "cmd"), default="all",
                   help="run: the baselines alone (to fix a regime from them first), the CMD-P rows alone, or both")
    p.add_argument("--dry-run", action="store_true", help="run: print tools.batched's commands, train nothing")
    return p.parse_args(argv)


@one_line("studies.eta", again="run the same command again (finished runs are skipped)")
def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    if args.stage == "run":
        from tools import batched  # here: it imports torch, which pack and report need not
        for regime, commands in grids(args.data_dir, args.rows, args.noise).items():
            for command in commands:
                command = command + ["--out", os.path.join(args.out, folder(regime))]
                if args.dry_run:
                    print(shlex.join(["python", "-m", "tools.batched", *command]))
                elif batched.main(command) != 0:
                    raise UserError(f"a run diverged under {args.out}/{folder(regime)}; see its diverged.json")
        return 0
    if args.stage == "pack":
        print(f"{pack(args.out, args.raw)} runs of {args.out} in {args.raw}")
        return 0
    runs = read(args.raw)
    where = os.path.dirname(args.raw)
    text = report_text(runs, args.raw, shlex.join(["python", "-m", "studies.eta", *argv]))
    runfiles.write_text(os.path.join(where, "report.md"), "\n".join(text) + "\n")
    picture(runs, os.path.join(where, "eta-regimes.png"))
    print(f"written: {where}/report.md, {where}/eta-regimes.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
