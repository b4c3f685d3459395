"""The η rule in two regimes: what CMD-P teaches over a whole run, for η = 2, 2.5, 3 and 4 at b = −5, where the
networks do not memorise the noisy labels and where they do (docs/eta/report.md, docs/copy.md's "Choosing η").

    python -m studies.eta run --out sweeps/eta      # the runs (tools.batched, one process a regime), minutes a regime
    python -m studies.eta pack --out sweeps/eta     # their numbers, epoch by epoch, into docs/eta/runs.jsonl.gz
    python -m studies.eta report                    # docs/eta/report.md and docs/eta/eta-regimes.png from those alone

The regimes are fixed by zero knowledge's memorisation alone, in the committed Fashion-MNIST data
(docs/fmnist/runs.jsonl.gz), before any η row ran: the Fashion-MNIST pipeline of studies/fmnist.py (BASE: an mlp
pair, 7,200 noisy training images, 40% symmetric noise, 80 epochs, no weight decay), at lr 0.05, where zero
knowledge memorises 0.81 of the noisy labels by the end (docs/fmnist-regime.md, probe 1), and at lr 0.0044, where it
memorises under 0.06 (the attribution's five report seeds). Each regime trains MyLC + CMD-P at every η of ETAS and
MyLC zero knowledge beside them, on SEEDS.

What each epoch records, per run: χ at its end; taught and precision, b2a and a2b (docs/training.md's legend); the
mean entropy of each model's training predictions on the clean-labelled samples and on the noisy-labelled ones,
from entropy_hist.npz (the bins' centres: within half a bin, 0.029 nats at K = 10); memorised; test accuracy.
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
REGIMES = {0.05: "memorising", 0.0044: "not memorising"}  # lr -> the regime zero knowledge shows there
ETAS = (2.0, 2.5, 3.0, 4.0)
B = -5.0
SEEDS = (0, 1, 2)
EPOCHS = (1, 2, 3, 5, 10, 20, 40, 60, 80)  # the report's epochs
K, RATE = 10, 0.4


def h_noise(k=K, rate=RATE):
    """H_ν of the study's noise (schedule.noise_entropy)."""
    return schedule.noise_entropy(rate, k)


def bound(k=K, rate=RATE):
    """docs/copy.md's bound, schedule.eta_bound: χ starts above H_ν for η < 1.85 ln K / H_ν (b = −5)."""
    return schedule.eta_bound(k, rate, B)


def grids(data_dir):
    """{lr: [tools.batched's argv]}: the η grid of CMD-P and zero knowledge, per regime, on studies.fmnist's BASE."""
    common = ["--dataset", "fashionmnist", "--data-dir", data_dir, *fmnist.BASE, "--lc", "mylc"]
    return {lr: [common + ["--mode", "progressive", "--lr", f"{lr:g}", "--eta", ",".join(f"{e:g}" for e in ETAS),
                           "--b", f"{B:g}", "--seed", ",".join(map(str, SEEDS))],
                 common + ["--mode", "zero", "--lr", f"{lr:g}", "--seed", ",".join(map(str, SEEDS))]]
            for lr in REGIMES}


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
    """Every finished run under out into the raw data at path. Returns how many runs it holds."""
    lines = []
    for lr in sorted(REGIMES):
        folder = os.path.join(out, f"lr{lr:g}")
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            d = os.path.join(folder, name)
            if runfiles.state(d) != runfiles.FINISHED:
                continue
            config = runfiles.read_json(d, "config.json")
            eta = None if config["mode"] == "zero" else float(config["eta"])
            prov = config.get("provenance", {})
            lines.append(dict(lr=lr, eta=eta, seed=config["seed"], rows=run_rows(d),
                              provenance={k: prov.get(k) for k in ("device", "torch", "engine", "date")}))
    if not lines:
        raise UserError(f"no finished run under {out}/lr*/; run `python -m studies.eta run --out {out}` first")
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
def at(runs, lr, eta, epoch, value):
    """mean ± std over seeds of value(row) at that epoch, for the runs of one regime and η (None: zero knowledge)."""
    got = [value(r["rows"][epoch - 1]) for r in runs if r["lr"] == lr and r["eta"] == eta and len(r["rows"]) >= epoch]
    got = [v for v in got if v is not None]
    return mean_std(got) if got else None


def both(row, key):
    """The mean of a row's b2a and a2b (or a and b) numbers; None where either is None."""
    values = [row[f"{key}_{s}"] for s in (("b2a", "a2b") if key in ("selected", "precision") else "ab")]
    return None if None in values else sum(values) / 2


def cell(stat, form="{:.2f}"):
    return "–" if stat is None else fmt(stat[0], stat[1], form)


def ends(runs, lr):
    """The end of each η's runs in one regime: final test accuracy, early-stopped test accuracy (at the best
    validation epoch), memorised, and the paired difference of final accuracy against η = 4 over the same seeds."""
    lines = ["| η | final test acc | early-stopped test acc | memorised (end) | final − η = 4's (95% t-interval) |",
             "|---" * 5 + "|"]
    four = {r["seed"]: r["rows"][-1]["test_acc_mean"] for r in runs if r["lr"] == lr and r["eta"] == 4.0}
    for eta in (*ETAS, None):
        mine = [r for r in runs if r["lr"] == lr and r["eta"] == eta]
        if not mine:
            continue
        final = mean_std([r["rows"][-1]["test_acc_mean"] for r in mine])
        early = mean_std([max(r["rows"], key=lambda row: row["val_acc_mean"])["test_acc_mean"] for r in mine])
        memorised = mean_std([both(r["rows"][-1], "memorized") for r in mine])
        diffs = [r["rows"][-1]["test_acc_mean"] - four[r["seed"]] for r in mine if r["seed"] in four]
        m, ci = interval(diffs) if diffs and eta != 4.0 else (None, None)
        diff = "–" if m is None else f"{m:+.2f}" + ("" if ci is None else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]")
        lines.append(f"| {'zero knowledge' if eta is None else f'{eta:g}'} | {cell(final)} | {cell(early)} | "
                     f"{cell(memorised)} | {diff} |")
    return lines + [""]


def guide_table(runs):
    """docs/copy.md's table of the two regimes (a test holds the page to it): per regime and η, the share taught in
    epochs 2-10 (the range of its per-epoch means) and at epochs 20, 40, 80, the precision at epochs 10 and 40, the
    final test accuracy and the memorised share at the end."""
    lines = ["| regime | η | taught, epochs 2–10 | taught at epoch 20 / 40 / 80 | precision at epoch 10 / 40 | "
             "final test acc | memorised (end) |", "|---" * 7 + "|"]
    for lr in sorted(REGIMES):
        for eta in ETAS:
            taught = [at(runs, lr, eta, e, lambda row: both(row, "selected"))[0] for e in range(2, 11)]
            later = [at(runs, lr, eta, e, lambda row: both(row, "selected"))[0] for e in (20, 40, 80)]
            prec = [at(runs, lr, eta, e, lambda row: both(row, "precision")) for e in (10, 40)]
            final = at(runs, lr, None if eta is None else eta, 80, lambda row: row["test_acc_mean"])
            memorised = at(runs, lr, eta, 80, lambda row: both(row, "memorized"))
            lines.append(f"| {REGIMES[lr]} | {eta:g} | {min(taught):.2f}–{max(taught):.2f} | "
                         + " / ".join(f"{v:.2f}" for v in later) + " | "
                         + " / ".join("–" if p is None else f"{p[0]:.2f}" for p in prec)
                         + f" | {cell(final)} | {memorised[0]:.2f} |")
    return lines


def tables(runs):
    """The report's lines: per regime, the end of each η's runs, then a table of its epochs, a row per η and
    epoch."""
    lines = []
    for lr, regime in REGIMES.items():
        zero = [r for r in runs if r["lr"] == lr and r["eta"] is None]
        n = len({r["seed"] for r in runs if r["lr"] == lr})
        memorised = at(runs, lr, None, 80, lambda row: both(row, "memorized"))
        lines += [f"## lr {lr:g}: {regime}", "",
                  f"Zero knowledge (MyLC, {len(zero)} seeds) memorises {cell(memorised)} of the noisy labels by epoch "
                  f"80 and ends at {cell(at(runs, lr, None, 80, lambda row: row['test_acc_mean']))}% test accuracy. "
                  f"{n} seeds a row; each cell is the mean ± std over seeds of the mean of b2a and a2b (of A and B "
                  f"for the entropies).", "", *ends(runs, lr),
                  "| η | epoch | χ | taught | precision | mean H(p), clean-labelled | mean H(p), noisy-labelled | "
                  "memorised | test acc |", "|---" * 9 + "|"]
        for eta in ETAS:
            for epoch in EPOCHS:
                stats = [at(runs, lr, eta, epoch, f) for f in (
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
    head = ["# The η rule in two regimes", "",
            f"MyLC + CMD-P at η = {', '.join(f'{e:g}' for e in ETAS)} and b = {B:g}, on Fashion-MNIST's mlp pair at "
            f"40% symmetric noise (K = {K}: H_ν = {h_noise():.2f} nats, and docs/copy.md's bound 1.85 ln K / H_ν = "
            f"{bound():.1f}), in a regime where the networks memorise the noisy labels (lr 0.05) and one where they "
            "do not (lr 0.0044); the regimes are fixed from zero knowledge alone (studies/eta.py). χ starts at "
            f"{', '.join(f'{2 * math.log(K) / (1 + math.exp(-2.5)) / e:.2f}' for e in ETAS)} nats for these η. "
            "Picture: [eta-regimes.png](eta-regimes.png).", ""]
    foot = [f"Rendered from {os.path.relpath(path, HERE) if path.startswith(HERE) else path} by `{command}`: "
            f"{len(runs)} runs on {'; '.join(prov)} (tools.batched, one process a regime)."]
    return head + tables(runs) + foot


def picture(runs, path):
    """χ against the measured mean entropies of clean- and noisy-labelled samples, for η = 2 and 4, in each regime,
    and the taught share of every η: a row per regime."""
    import matplotlib  # here: only the picture needs it, not pack or the tables
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display needed
    fig, axes = plt.subplots(2, 3, figsize=(15, 8), layout="constrained")
    epochs = list(range(1, 81))
    colours = dict(zip(ETAS, ("tab:blue", "tab:green", "tab:orange", "tab:red")))
    for row, (lr, regime) in zip(axes, REGIMES.items()):
        for ax, eta in zip(row[:2], (2.0, 4.0)):
            series = {name: [at(runs, lr, eta, e, f) for e in epochs] for name, f in (
                ("χ", lambda r: r["chi"]), ("clean-labelled", lambda r: sum(r["h_clean"]) / 2),
                ("noisy-labelled", lambda r: sum(r["h_noisy"]) / 2))}
            for (name, s), style in zip(series.items(), ("--", "-", ":")):
                ax.plot(epochs, [v[0] if v else math.nan for v in s], style, color="k" if name == "χ" else
                        colours[eta], label=name if name == "χ" else f"mean H(p), {name}")
            ax.axhline(h_noise(), color="grey", lw=0.8, label=f"H_ν = {h_noise():.2f}")
            ax.set(title=f"lr {lr:g} ({regime}), η = {eta:g}", xlabel="epoch", ylabel="nats", ylim=(0, math.log(K)))
            ax.legend(fontsize=8)
        for eta in ETAS:
            s = [at(runs, lr, eta, e, lambda r: both(r, "selected")) for e in epochs]
            row[2].plot(epochs, [v[0] if v else math.nan for v in s], color=colours[eta], label=f"η = {eta:g}")
        row[2].set(title=f"lr {lr:g}: taught (b2a and a2b)", xlabel="epoch", ylabel="fraction", ylim=(0, 1))
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
    p.add_argument("--dry-run", action="store_true", help="run: print tools.batched's commands, train nothing")
    return p.parse_args(argv)


@one_line("studies.eta", again="run the same command again (finished runs are skipped)")
def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    if args.stage == "run":
        from tools import batched  # here: it imports torch, which pack and report need not
        for lr, commands in grids(args.data_dir).items():
            for command in commands:
                command = command + ["--out", os.path.join(args.out, f"lr{lr:g}")]
                if args.dry_run:
                    print(shlex.join(["python", "-m", "tools.batched", *command]))
                elif batched.main(command) != 0:
                    raise UserError(f"a run diverged under {args.out}/lr{lr:g}; see its diverged.json")
        return 0
    if args.stage == "pack":
        print(f"{pack(args.out, args.raw)} runs of {args.out} in {args.raw}")
        return 0
    runs = read(args.raw)
    folder = os.path.dirname(args.raw)
    text = report_text(runs, args.raw, shlex.join(["python", "-m", "studies.eta", *argv]))
    runfiles.write_text(os.path.join(folder, "report.md"), "\n".join(text) + "\n")
    picture(runs, os.path.join(folder, "eta-regimes.png"))
    print(f"written: {folder}/report.md, {folder}/eta-regimes.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
