"""Plot what train.py logged per epoch (the diagnostics behind §3-4) and, for a sweep, accuracy against b (Fig. 3).

    python plot.py runs/RUN_A runs/RUN_B --out plots    # compare runs epoch by epoch
    python plot.py sweeps/fig3-demo                     # Fig. 3: final accuracy against b

accuracy.png     -- test accuracy of model A (solid) and B (dashed) per epoch, one colour per run
chi.png          -- the selection threshold chi of Eq. 7 at the end of each epoch
selection.png    -- fraction of samples whose peer target was distilled (b2a solid, a2b dashed); its
                    precision, the fraction of those targets whose argmax is the clean label; its recall,
                    the fraction of clean-labelled samples that passed chi
memorization.png -- fraction of noisy-labelled samples the model predicts as their wrong given label
entropy.png      -- per run (entropy-<run>.png for several): histograms of H(p) over the training samples
                    at a few epochs, clean given labels and noisy ones overlaid, chi as a vertical line;
                    what passes chi (left of the line) is what the model teaches its peer
b_sweep.png      -- a sweep directory (run folders with summary.json): final test_acc_mean against b,
                    one line per noise rate or eta, error bars = sample std over seeds; two panels
                    like Fig. 3 when both the rate and eta vary

A RUN_DIR holds metrics.jsonl and config.json (written by train.py). Output goes to --out, by
default into the RUN_DIR itself when one is given, else plots/. Needs matplotlib, an optional extra
(pip install matplotlib); uses the Agg backend, so no display is needed.
"""
import argparse
import json
import math
import os
import sys
from collections import defaultdict

import numpy as np

FIGSIZE, DPI = (6, 4), 120  # readable at README width


def pyplot():
    """matplotlib.pyplot on Agg, or a one-line error and exit 1 when it is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot.py: error: matplotlib is not installed; pip install matplotlib")
    return plt


def load_run(d):
    with open(os.path.join(d, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(d, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return dict(dir=d, config=config, rows=rows)


def describe(config):
    """The fields that name a run, in reading order: mode, lc, noise, eta, b, arch, seed."""
    if config["noise"] == "human":  # CIFAR-N: no rate to set, the label set instead (cifar10)
        noise = " ".join(filter(None, ("human", config.get("noise_key"))))
    else:
        noise = "clean" if config["noise"] == "none" else f"{config['noise']} {100 * config['rate']:g}%"
    lc = "" if config["mode"] in ("mkd", "kdcl") else config["lc"]
    eta, b = config.get("eta"), config.get("b")  # None for mkd and kdcl, "inf" for zero knowledge
    return dict(mode=config["mode"], lc=lc, noise=noise, eta="" if eta is None else f"eta {eta}",
                b="" if b is None else f"b {b:g}", arch=config["arch"], seed=f"s{config['seed']}")


def labels(configs, dirs, always=("mode", "lc", "noise", "seed")):
    """Short legend names: only the fields that differ between runs (or `always` when none do)."""
    fields = [describe(c) for c in configs]
    vary = [k for k in fields[0] if len({f[k] for f in fields}) > 1] or list(always)
    names = [" ".join(f[k] for k in vary if f[k]) for f in fields]
    if len(set(names)) < len(names):  # same settings in two folders: the folder tells them apart
        names = [f"{n} ({os.path.basename(os.path.normpath(d))})" for n, d in zip(names, dirs)]
    return names


def curves(ax, runs, names, keys, ylabel):
    """One colour per run; the first key solid, the second dashed. Skips runs that logged None."""
    for i, (run, name) in enumerate(zip(runs, names)):
        for key, style in zip(keys, ("-", "--")):
            pts = [(r["epoch"], r[key]) for r in run["rows"] if r.get(key) is not None]
            if pts:  # a single point needs a marker to be seen
                ax.plot(*zip(*pts), style, marker="o" if len(pts) == 1 else None, color=f"C{i % 10}",
                        label=f"{name} {key.rsplit('_', 1)[-1]}")
    ax.set_xlabel("epoch")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7)


def save(plt, fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    print(f"wrote {path}")
    return path


def plot_runs(plt, runs, out, hist_epochs=None):
    """accuracy, chi, selection and memorization plots for runs read by load_run, and their entropy plots."""
    names = labels([r["config"] for r in runs], [r["dir"] for r in runs])
    written = []
    for fname, keys, ylabel in (("accuracy.png", ("test_acc_a", "test_acc_b"), "test accuracy (%)"),
                                ("chi.png", ("chi",), "chi (Eq. 7)"),
                                ("memorization.png", ("memorized_a", "memorized_b"),
                                 "noisy samples fitted to their wrong label")):
        fig, ax = plt.subplots(figsize=FIGSIZE)
        curves(ax, runs, names, keys, ylabel)
        ax.set_title({"accuracy.png": "Test accuracy: A solid, B dashed", "chi.png": "Selection threshold chi",
                      "memorization.png": "Memorisation: A solid, B dashed"}[fname])
        written.append(save(plt, fig, os.path.join(out, fname)))
    fig, axes = plt.subplots(1, 3, figsize=(3 * FIGSIZE[0], FIGSIZE[1]))
    curves(axes[0], runs, names, ("selected_b2a", "selected_a2b"), "fraction of samples distilled")
    curves(axes[1], runs, names, ("precision_b2a", "precision_a2b"), "precision of distilled targets")
    curves(axes[2], runs, names, ("recall_b2a", "recall_a2b"), "recall of clean-labelled samples")
    axes[0].set_title("Selected: B->A solid, A->B dashed")
    axes[1].set_title("Precision: argmax of target = clean label")
    axes[2].set_title("Recall: clean-labelled samples that passed chi")
    written.append(save(plt, fig, os.path.join(out, "selection.png")))
    with_hist = [(run, name) for run, name in zip(runs, names) if os.path.exists(os.path.join(run["dir"], HIST))]
    for run, name in with_hist:
        fname = "entropy.png" if len(with_hist) == 1 else f"entropy-{os.path.basename(os.path.normpath(run['dir']))}.png"
        written.append(plot_entropy(plt, run["dir"], name, os.path.join(out, fname), epochs_wanted=hist_epochs))
    return written


HIST = "entropy_hist.npz"


def plot_entropy(plt, run_dir, name, path, panels=6, epochs_wanted=None):
    """Small multiples of H(p) histograms: rows A and B (or each model of a cohort), columns a few epochs.

    The epochs are spaced geometrically (1, 2, 4, 9, 19, 40 of 40), since what decides CMD, which
    samples become confident first, happens early; epochs_wanted picks them instead.

    Clean given labels and noisy ones are overlaid (when the clean labels are known),
    each as the fraction of that model's training samples in a bin; chi at the end of
    the epoch is a solid line, at its start a dotted one when it moved (CMD-P).
    """
    with np.load(os.path.join(run_dir, HIST)) as f:
        h = {k: f[k] for k in f.files}
    epochs, counts, edges = h["epoch"], h["counts"], h["edges"]
    if epochs_wanted:
        picks = [i for i, e in enumerate(epochs) if e in set(epochs_wanted)] or [len(epochs) - 1]
    else:
        picks = sorted(set(np.geomspace(1, len(epochs), min(panels, len(epochs))).round().astype(int) - 1))
    models = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:counts.shape[1]]  # a row per model: A and B, or a cohort
    fig, axes = plt.subplots(len(models), len(picks), figsize=(2.6 * len(picks), 2.3 * len(models)), sharex=True,
                             squeeze=False)
    width = np.diff(edges)
    for col, i in enumerate(picks):
        for row, model in enumerate(models):
            ax = axes[row, col]
            c = counts[i, row]  # (2, bins): clean, noisy
            total = c.sum()
            splits = [("clean label", "C0", c[0]), ("noisy label", "C3", c[1])] if h["known_clean"] else \
                [("all samples", "C0", c.sum(0))]
            for label, colour, v in splits:
                ax.bar(edges[:-1], v / total, width=width, align="edge", alpha=0.55, color=colour, label=label)
            for chi, style in ((h["chi_end"][i], "-"), (h["chi_start"][i], ":")):
                if np.isfinite(chi) and (style == "-" or not np.isclose(chi, h["chi_end"][i])):
                    ax.axvline(max(chi, 0.0), color="k", linestyle=style, linewidth=1)
            ax.set_title(f"{model}, epoch {epochs[i]}", fontsize=9)
            if row == len(models) - 1:
                ax.set_xlabel("H(p) (nats)")
            if col == 0:
                ax.set_ylabel("fraction of samples")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"Entropy of the training predictions, chi (Eq. 7) as a line: {name}", fontsize=10)
    return save(plt, fig, path)


def sweep_points(sweep_dir):
    """{group: {b: [final test_acc_mean per seed]}} over run folders; a group is every setting but b and seed."""
    groups = defaultdict(lambda: defaultdict(list))
    for name in sorted(os.listdir(sweep_dir)):
        d = os.path.join(sweep_dir, name)
        if not os.path.exists(os.path.join(d, "summary.json")) or not os.path.exists(os.path.join(d, "config.json")):
            continue
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        if c.get("b") is None:  # mkd, kdcl: no threshold
            continue
        with open(os.path.join(d, "summary.json")) as f:
            acc = json.load(f)["test_acc_mean"]
        key = tuple(sorted((k, str(v)) for k, v in c.items() if k in ("mode", "lc", "noise", "rate", "eta", "arch",
                                                                         "dataset", "epochs")))
        groups[key][float(c["b"])].append(acc)
    return {k: v for k, v in groups.items() if len(v) >= 2}  # a line needs two values of b


def b_lines(ax, groups, title):
    """Error-bar lines of mean ± sample std (ddof=1) over seeds; legend names the settings that vary."""
    keys = list(groups)
    vary = [i for i in range(len(keys[0])) if len({k[i][1] for k in keys}) > 1]
    for j, key in enumerate(keys):
        bs = sorted(groups[key])
        means = [sum(groups[key][b]) / len(groups[key][b]) for b in bs]
        stds = [math.sqrt(sum((v - m) ** 2 for v in groups[key][b]) / (len(groups[key][b]) - 1))
                if len(groups[key][b]) > 1 else 0.0 for b, m in zip(bs, means)]
        name = ", ".join(f"{key[i][0]} {key[i][1]}" for i in vary) or "runs"
        ax.errorbar(bs, means, yerr=stds, marker="o", capsize=3, color=f"C{j % 10}", label=name)
    ax.set_xlabel("b (Eq. 7; < 0: chi falls during training)")
    ax.set_ylabel("final test accuracy, mean of A and B (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot_sweep(plt, sweep_dir, path):
    """Fig. 3-style accuracy against b. Returns the path, or None when the sweep varies no b."""
    groups = sweep_points(sweep_dir)
    if not groups:
        print(f"plot.py: {sweep_dir}: no runs that differ only in b (and seed); no b plot", file=sys.stderr)
        return None
    rates = [dict(k)["rate"] for k in groups]
    etas = [dict(k)["eta"] for k in groups]
    if len(set(rates)) > 1 and len(set(etas)) > 1:  # Fig. 3: (a) rates at the usual eta, (b) etas at the usual rate
        eta, rate = max(etas, key=etas.count), max(rates, key=rates.count)
        fig, axes = plt.subplots(1, 2, figsize=(2 * FIGSIZE[0], FIGSIZE[1]))
        b_lines(axes[0], {k: v for k, v in groups.items() if dict(k)["eta"] == eta}, f"(a) noise rates, eta = {eta}")
        b_lines(axes[1], {k: v for k, v in groups.items() if dict(k)["rate"] == rate}, f"(b) eta, noise rate {rate}")
    else:
        fig, ax = plt.subplots(figsize=FIGSIZE)
        b_lines(ax, groups, "Final accuracy against b")
    return save(plt, fig, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dirs", nargs="+", metavar="RUN_DIR", help="train.py run folders, or sweep.py sweep folders")
    p.add_argument("--out", help="output folder (default: the RUN_DIR when one is given, else plots/)")
    p.add_argument("--hist-epochs", type=lambda s: [int(v) for v in s.split(",") if v],
                   help="epochs shown by entropy.png, e.g. 1,3,5,10,40 (default: six, spaced geometrically)")
    args = p.parse_args(argv)
    runs, sweeps = [], []
    for d in args.dirs:
        if os.path.exists(os.path.join(d, "metrics.jsonl")):
            runs.append(d)
        elif os.path.isdir(d) and any(os.path.exists(os.path.join(d, n, "summary.json")) for n in os.listdir(d)):
            sweeps.append(d)
        else:
            sys.exit(f"plot.py: error: {d} holds neither metrics.jsonl nor run folders with summary.json")
    plt = pyplot()
    out = args.out or (args.dirs[0] if len(args.dirs) == 1 else "plots")
    os.makedirs(out, exist_ok=True)
    written = plot_runs(plt, [load_run(d) for d in runs], out, args.hist_epochs) if runs else []
    for d in sweeps:
        name = "b_sweep.png" if len(sweeps) == 1 else f"b_sweep-{os.path.basename(os.path.normpath(d))}.png"
        written += [w for w in [plot_sweep(plt, d, os.path.join(out, name))] if w]
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
