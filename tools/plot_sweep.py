"""Fig. 3 from a sweep directory: final test accuracy against b, one line per noise rate or η (tools/plot.py
draws it for a sweep folder; b_sweep.png).

sweep_points -- {setting: {b: [final accuracy per seed]}} over a sweep's finished runs
setting      -- a setting in a legend's words
b_lines      -- one axis of error-bar lines
plot_sweep   -- the figure: two panels like Fig. 3 when both the rate and η vary
"""
import json
import math
import os
import sys
from collections import defaultdict

from tools.plot_style import FIGSIZE, LC_NAMES, MODE_NAMES, NOISE_NAMES, number, save


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


def setting(key, value):
    """A sweep_points setting in a legend's words: ("eta", "4.0") -> "η=4", ("rate", "0.2") -> "noise 20%"."""
    if key == "eta":
        return f"η={number(value)}"
    if key == "rate":
        return "noise " + ("–" if value == "None" else f"{100 * float(value):g}%")
    if key == "epochs":
        return f"{value} epochs"
    return dict(mode=MODE_NAMES, lc=LC_NAMES, noise=NOISE_NAMES).get(key, {}).get(value, value)


def b_lines(ax, groups, title):
    """Error-bar lines of mean ± sample std (ddof=1) over seeds; legend names the settings that vary."""
    keys = list(groups)
    vary = [i for i in range(len(keys[0])) if len({k[i][1] for k in keys}) > 1]
    for j, key in enumerate(keys):
        bs = sorted(groups[key])
        means = [sum(groups[key][b]) / len(groups[key][b]) for b in bs]
        stds = [math.sqrt(sum((v - m) ** 2 for v in groups[key][b]) / (len(groups[key][b]) - 1))
                if len(groups[key][b]) > 1 else 0.0 for b, m in zip(bs, means)]
        name = ", ".join(setting(*key[i]) for i in vary) or "runs"
        ax.errorbar(bs, means, yerr=stds, marker="o", capsize=3, color=f"C{j % 10}", label=name)
    ax.set_xlabel("b (Eq. 7; < 0: χ falls during training)")
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
        b_lines(axes[0], {k: v for k, v in groups.items() if dict(k)["eta"] == eta},
                f"(a) noise rates, {setting('eta', eta)}")
        b_lines(axes[1], {k: v for k, v in groups.items() if dict(k)["rate"] == rate},
                f"(b) η, {setting('rate', rate)}")
    else:
        fig, ax = plt.subplots(figsize=FIGSIZE)
        b_lines(ax, groups, "Final accuracy against b")
    return save(plt, fig, path)
