"""Plot what train.py logged per epoch (the diagnostics behind §3-4) and, for a sweep, accuracy against b (Fig. 3).

    python -m tools.plot runs/RUN_A runs/RUN_B --out plots    # compare runs epoch by epoch
    python -m tools.plot sweeps/fig3-demo                     # Fig. 3: final accuracy against b
    python -m tools.plot --eta-rule --out docs                # how to choose η: Eq. 7 against the noise

accuracy.png     -- test accuracy of model A (solid) and B (dashed) per epoch, one colour per run; a
                    cohort adds C dotted, D dash-dot, ...
chi.png          -- the selection threshold χ of Eq. 7 at the end of each epoch
selection.png    -- taught: the fraction of samples whose peer target was distilled (b2a solid, a2b dashed;
                    for a cohort the mean over its N(N-1) pairs); its precision, the fraction of those
                    targets whose argmax is the clean label; its recall, the fraction of
                    clean-labelled samples that passed χ (the words of training/report.py's WORDS)
memorization.png -- fraction of noisy-labelled samples the model predicts as their wrong given label
entropy.png      -- per run (entropy-<run>.png for several, with parent folders when names collide):
                    histograms of H(p) over the training samples at a few epochs, a row per model
                    (sharing its y-axis), clean given labels and noisy ones overlaid, χ at the epoch's
                    start and end as vertical lines; what passes χ (left of the line) is what the
                    model teaches its peer
b_sweep.png      -- a sweep directory (run folders with summary.json): final test_acc_mean against b,
                    one line per noise rate or η, error bars = sample std over seeds; two panels
                    like Fig. 3 when both the rate and η vary
eta-rule.png     -- --eta-rule, no run needed: schedule.chi over a run for η = 1, 2, 4 and b = 0, −5, a panel
                    for K = 10 and one for K = 100, with the entropy H_ν of labels under symmetric noise at
                    ν = 0.2, 0.4, 0.6 as grey lines: what starts above H_ν falls through the noisy labels

Legends name runs in the paper's words, "CMD-P (η=4, b=−5), model A", adding what else tells the
compared runs apart: "+ MyLC" (the label correction), the noise, the architecture, the seed.

A RUN_DIR holds metrics.jsonl and config.json (written by train.py). Output goes to --out, by
default into the RUN_DIR itself when one is given, else plots/. Needs matplotlib, an optional extra
(pip install matplotlib); uses the Agg backend, so no display is needed.
"""
import argparse
import json
import math
import os
import sys
import textwrap
import zipfile
from collections import defaultdict

import numpy as np

from label_correction import LABEL_CORRECTIONS
from mutual import MODES
from noise import NOISE
from schedule import chi, noise_entropy
from training import runfiles
from training.runfiles import WORDS
from training.errors import Parser, UserError, one_line

# ---------------------------------------------------------------- what every figure shares (studies.fmnist's too)
FIGSIZE, DPI = (6, 4), 120  # readable at README width

MINUS = "\u2212"  # a real minus sign, not a hyphen


def title(key, value):
    """The name plots and tables show for a mode, a label correction or a noise kind (key "mode", "lc", "noise"):
    its registry entry's title (the paper's names, and the comparators' papers'); any other value as it is."""
    registry = dict(mode=MODES, lc=LABEL_CORRECTIONS, noise=NOISE).get(key, {})
    return registry[value].title if value in registry else value


def pyplot():
    """matplotlib.pyplot on Agg; a UserError (one line) when it is not installed."""
    try:
        import matplotlib  # here, so that a missing matplotlib is one line, not a traceback
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # after use("Agg"): no display needed
    except ImportError:
        raise UserError("matplotlib is not installed; pip install matplotlib") from None
    return plt


def number(v):
    """A setting as the legend writes it: 4.0 as 4, -5 as −5 (a real minus sign), inf (or "inf") as ∞."""
    v = float(v)
    if math.isinf(v):
        return ("" if v > 0 else MINUS) + "∞"
    return f"{v:g}".replace("-", MINUS)


def save(plt, fig, path):
    if fig.get_layout_engine() is None:  # a figure made with layout="constrained" lays itself out
        fig.tight_layout()
    with runfiles.replacing(path, "wb") as f:
        fig.savefig(f, dpi=DPI, format=os.path.splitext(path)[1][1:] or "png")
    plt.close(fig)
    print(f"wrote {path}")
    return path


# ---------------------------------------------------------------- one run's figures, epoch by epoch
HIST = "entropy_hist.npz"
HIST_KEYS = ("epoch", "counts", "edges", "known_clean", "chi_start", "chi_end")


def load_run(d):
    """A run folder's config.json, metrics.jsonl and, when there is one, entropy_hist.npz (no pickles)."""
    with open(os.path.join(d, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(d, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    hist = None
    if os.path.exists(os.path.join(d, HIST)):
        with np.load(os.path.join(d, HIST), allow_pickle=False) as f:
            hist = {k: f[k] for k in HIST_KEYS}  # KeyError when one is missing
            for k in ("chi_start", "chi_end"):  # each model's; a file written before they were kept has the one
                hist[k + "_models"] = f[k + "_models"] if k + "_models" in f else np.repeat(
                    f[k][:, None], f["counts"].shape[1], 1)
    return dict(dir=d, config=config, rows=rows, hist=hist)


def method(config):
    """The knowledge mode in the paper's words, with the η and b of Eq. 7 it ran with: "CMD-P (η=4, b=−5)"."""
    mode, eta, b = config["mode"], config.get("eta"), config.get("b")
    name = title("mode", mode)
    if eta is None or mode in ("zero", "mkd", "kdcl"):  # zero: η = ∞ is what the name says; mkd, kdcl: no threshold
        return name
    b = float(b or 0)
    params = [f"η={number(eta)}"] + ([f"b={number(b)}"] if mode == "progressive" or b != 0 else [])
    return f"{name} ({', '.join(params)})"


def describe(config):
    """The fields that name a run, in reading order: method (mode, η, b), lc, noise, dataset, arch, seed."""
    if config["noise"] == "human":  # CIFAR-N: no rate to set, the label set instead (cifar10)
        key = config.get("noise_key")
        noise = "human label noise" + (f" ({key})" if key else "")
    elif config["noise"] == "none":
        noise = "clean labels"
    else:
        noise = f"{100 * config['rate']:g}% {title('noise', config['noise'])} noise"
    given_labels = config["mode"] in MODES and MODES[config["mode"]].thresholds is None  # it trains on them (lc ce)
    lc = "" if given_labels else title("lc", config["lc"])
    archs = str(config.get("arch", "")).split(",")
    arch = archs[0] if len(archs) == 2 and len(set(archs)) == 1 else \
        f"{len(archs)} × {archs[0]}" if len(set(archs)) == 1 else "/".join(archs)
    return dict(method=method(config), lc=lc, noise=noise, dataset=str(config.get("dataset", "")), arch=arch,
                seed=f"seed {config['seed']}")


def labels(configs, dirs, always=("lc", "noise", "seed")):
    """Legend names in the paper's words: the method, then only the fields that differ between runs
    ("CMD-P (η=4, b=−5) + MyLC" when the label correction does, ", seed 1" when the seed does), or the
    method with `always` when no run differs from the others."""
    fields = [describe(c) for c in configs]
    vary = [k for k in fields[0] if k != "method" and len({f[k] for f in fields}) > 1]
    if not vary and len({f["method"] for f in fields}) == 1:
        vary = list(always)
    names = []
    for f in fields:
        name = f["method"] + (f" + {f['lc']}" if "lc" in vary and f["lc"] else "")
        names.append(", ".join([name] + [f[k] for k in vary if k != "lc" and f[k]]))
    if len(set(names)) < len(names):  # same settings in two folders: the folder tells them apart
        names = [f"{n} ({os.path.basename(os.path.normpath(d))})" for n, d in zip(names, dirs)]
    return names


STYLES = ("-", "--", ":", "-.")  # model A, B, C, D (then again); for pairs b2a, a2b
STYLE_NAMES = ("solid", "dashed", "dotted", "dash-dot")


def models_of(run):
    """The run's model letters, a and b for a pair, a, b, c, ... for a cohort (from the logged test_acc_*)."""
    row = run["rows"][0] if run["rows"] else {}
    return [m for m in "abcdefghijklmnopqrstuvwxyz" if f"test_acc_{m}" in row]


def series(run, kind):
    """[(legend suffix, line style, [(epoch, value)])] of one logged quantity of one run.

    Per model (test_acc, memorized): one line per model. Per pair (selected, precision, recall): b2a solid and
    a2b dashed for a pair; for a cohort, whose N(N-1) pairs would be unreadable, their mean. chi: one line, and one
    per model in the epochs where the models' differ. Others: one line.
    Epochs that logged None (precision when nothing was selected) are left out.
    """
    models, rows = models_of(run), run["rows"]
    if kind in ("test_acc", "memorized"):
        keys = [(f"{kind}_{m}", m.upper(), STYLES[i % len(STYLES)]) for i, m in enumerate(models)]
    elif kind in ("selected", "precision", "recall") and len(models) <= 2:
        keys = [(f"{kind}_b2a", "b2a", "-"), (f"{kind}_a2b", "a2b", "--")]
    elif kind in ("selected", "precision", "recall"):
        pairs = [f"{kind}_{src}2{dst}" for dst in models for src in models if src != dst]
        pts = []
        for r in rows:
            v = [r[k] for k in pairs if r.get(k) is not None]
            if v:
                pts.append((r["epoch"], sum(v) / len(v)))
        return [(f"mean of {len(pairs)} pairs", "-", pts)]
    elif kind == "chi" and any(f"chi_{models[0]}" in r for r in rows):  # each model's own χ
        keys = [(kind, "", "-")] + [(f"chi_{m}", m.upper(), STYLES[i % len(STYLES)]) for i, m in enumerate(models)]
    else:
        keys = [(kind, "", "-")]
    return [(label, style, [(r["epoch"], r[k]) for r in rows if r.get(k) is not None]) for k, label, style in keys]


def line_name(label):
    """series' label as the legend says it: "A" -> "model A", "b2a" -> "B→A" (what B distils to A)."""
    if len(label) == 1:
        return f"model {label}"
    if len(label) == 3 and label[1] == "2":
        return f"{label[0].upper()}→{label[2].upper()}"
    return label


def curves(ax, runs, names, kind, ylabel):
    """One colour per run, one line style per model (or pair direction): see series."""
    for i, (run, name) in enumerate(zip(runs, names)):
        for label, style, pts in series(run, kind):
            if pts:  # a single point needs a marker to be seen
                ax.plot(*zip(*pts), style, marker="o" if len(pts) == 1 else None, color=f"C{i % 10}",
                        label=", ".join(filter(None, (name, line_name(label)))))
    for j, x in enumerate(lr_drops(runs)):  # where the lr falls (its milestones), so a jump reads as the schedule's
        ax.axvline(x, color="0.55", ls=":", lw=1, label="lr drop (first run)" if j == 0 else None)
    ax.set_xlabel("epoch")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7)


def data_of(runs):
    """"\nfashionmnist, symmetric noise 40%": the data every run shares, as a title's second line ("" if they differ)."""
    seen = {(c.get("dataset"), c.get("noise"), c.get("rate")) for c in (r["config"] for r in runs)}
    if len(seen) != 1:
        return ""
    dataset, noise, rate = seen.pop()
    if noise in (None, "none"):
        return f"\n{dataset}, clean labels"
    return f"\n{dataset}, " + (f"{title('noise', noise)} noise {100 * float(rate):g}%" if rate is not None
                                else f"{noise} labels")


def lr_drops(runs):
    """The epochs after which the first run's lr fell, from its rows' lr (x = the last epoch at the old lr)."""
    rows = runs[0]["rows"] if runs else []
    return [a["epoch"] for a, b in zip(rows, rows[1:]) if b.get("lr") is not None and a.get("lr") is not None
            and b["lr"] < a["lr"]]


def style_key(runs):
    """"A solid, B dashed" (and C dotted, ... when a run is a cohort) for the per-model titles."""
    n = max([len(models_of(r)) for r in runs] + [2])
    return ", ".join(f"{'ABCDEFGHIJKLMNOPQRSTUVWXYZ'[i]} {STYLE_NAMES[i % len(STYLE_NAMES)]}" for i in range(n))


def unique_names(dirs):
    """File-name tags for run folders: the folder's name, with parent folders added while two tags collide."""
    parts = [os.path.normpath(os.path.abspath(d)).split(os.sep) for d in dirs]
    depth = [1] * len(dirs)
    while True:
        tags = ["-".join(p[-k:]).strip("-") for p, k in zip(parts, depth)]
        clash = [i for i, t in enumerate(tags) if tags.count(t) > 1 and depth[i] < len(parts[i])]
        if not clash:
            break
        for i in clash:
            depth[i] += 1
    return [f"{t}-{i}" if tags.count(t) > 1 else t for i, t in enumerate(tags)]  # one folder given twice


def plot_runs(plt, runs, out, hist_epochs=None, only=None):
    """accuracy, chi, selection and memorization plots for runs read by load_run, and their entropy plots
    (only="entropy": those alone)."""
    names = labels([r["config"] for r in runs], [r["dir"] for r in runs])
    written, key, data = [], style_key(runs), data_of(runs)
    for fname, kind, ylabel, title in () if only == "entropy" else (("accuracy.png", "test_acc", "test accuracy (%)", f"Test accuracy: {key}"),
                                       ("chi.png", "chi", "χ (Eq. 7)", "Selection threshold χ"),
                                       ("memorization.png", "memorized", "noisy samples fitted to their wrong label",
                                        f"Memorisation: {key}")):
        fig, ax = plt.subplots(figsize=FIGSIZE)
        curves(ax, runs, names, kind, ylabel)
        ax.set_title(title + data, fontsize=10)
        written.append(save(plt, fig, os.path.join(out, fname)))
    if only == "entropy":
        return written + plot_entropies(plt, runs, out, hist_epochs)
    fig, axes = plt.subplots(1, 3, figsize=(3 * FIGSIZE[0], FIGSIZE[1]))
    curves(axes[0], runs, names, "selected", f"{WORDS['selected']}: fraction of the samples")
    curves(axes[1], runs, names, "precision", f"{WORDS['precision']} of the taught targets")
    curves(axes[2], runs, names, "recall", f"{WORDS['recall']} of clean-labelled samples")
    pairs = "B→A solid, A→B dashed" + (" (cohorts: mean over pairs)" if any(len(models_of(r)) > 2 for r in runs)
                                         else "")
    axes[0].set_title(f"{WORDS['selected'].capitalize()}: {pairs}{data}", fontsize=10)
    axes[1].set_title("Precision: argmax of target = clean label")
    axes[2].set_title("Recall: clean-labelled samples that passed χ")
    written.append(save(plt, fig, os.path.join(out, "selection.png")))
    return written + plot_entropies(plt, runs, out, hist_epochs)


def plot_entropies(plt, runs, out, hist_epochs):
    """entropy.png (entropy-<run>.png for several) of each run that has entropy_hist.npz."""
    written, with_hist = [], [run for run in runs if run["hist"] is not None]
    tags = unique_names([run["dir"] for run in with_hist])
    for run, tag in zip(with_hist, tags):
        fname = "entropy.png" if len(with_hist) == 1 else f"entropy-{tag}.png"
        full = labels([run["config"]], [run["dir"]])[0]  # a figure of its own: every field that names the run
        written.append(plot_entropy(plt, run, full, os.path.join(out, fname), epochs_wanted=hist_epochs))
    return written


def plot_entropy(plt, run, name, path, panels=6, epochs_wanted=None):
    """Small multiples of H(p) histograms: rows A and B (or each model of a cohort), columns a few epochs.

    The epochs are spaced geometrically (1, 2, 4, 9, 19, 40 of 40), since what decides CMD, which
    samples become confident first, happens early; epochs_wanted picks them instead.

    Clean given labels and noisy ones are overlaid (when the clean labels are known), each as the
    fraction of that model's training samples in a bin; the panels of a row share their y-axis. χ at
    the end of the epoch is a solid line, at its start a dotted one when it moved (CMD-P); the legend,
    below the panels, names both.
    """
    h, run_dir = run["hist"], run["dir"]
    epochs, counts, edges = h["epoch"], h["counts"], h["edges"]
    if epochs_wanted:
        missing = sorted(set(epochs_wanted) - set(epochs.tolist()))
        picks = [i for i, e in enumerate(epochs) if e in set(epochs_wanted)] or [len(epochs) - 1]
        if missing:
            print(f"plot.py: warning: {run_dir} logged epochs {epochs[0]}-{epochs[-1]}, not "
                  f"{','.join(map(str, missing))}; {path} shows {','.join(str(epochs[i]) for i in picks)}",
                  file=sys.stderr)
    else:
        picks = sorted(set(np.geomspace(1, len(epochs), min(panels, len(epochs))).round().astype(int) - 1))
    models = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:counts.shape[1]]  # a row per model: A and B, or a cohort
    width_in = max(2.6 * len(picks), 5.2)  # room for the legend and the title under one or two panels
    fig, axes = plt.subplots(len(models), len(picks), figsize=(width_in, 2.3 * len(models) + 0.9), sharex=True,
                             sharey="row", squeeze=False, layout="constrained")
    width = np.diff(edges)
    handles = {}  # legend entry -> an artist drawn with it, whichever panel drew it first
    for col, i in enumerate(picks):
        for row, model in enumerate(models):
            ax = axes[row, col]
            c = counts[i, row]  # (2, bins): clean, noisy
            total = c.sum()
            splits = [("clean given label", "C0", c[0]), ("noisy given label", "C3", c[1])] if h["known_clean"] \
                else [("all samples", "C0", c.sum(0))]
            for label, colour, v in splits:  # each as a fraction of all the model's training samples
                handles.setdefault(label, ax.bar(edges[:-1], v / total, width=width, align="edge", alpha=0.55,
                                                 color=colour))
            ax.set_xlim(-0.03 * edges[-1], edges[-1])  # so that chi = 0 (zero knowledge) shows beside the axis
            end, start = h["chi_end_models"][i, row], h["chi_start_models"][i, row]  # this model's
            if np.isfinite(end):
                handles.setdefault("end", ax.axvline(max(end, 0.0), color="k", linestyle="-", linewidth=1))
            if np.isfinite(start) and not (np.isfinite(end) and np.isclose(start, end)):
                handles.setdefault("start", ax.axvline(max(start, 0.0), color="k", linestyle=":", linewidth=1))
            ax.set_title(f"{model}, epoch {epochs[i]}", fontsize=9)
            if row == len(models) - 1:
                ax.set_xlabel("H(p) (nats)")
            if col == 0:
                ax.set_ylabel("fraction of samples")
    chi_names = {"end": "χ at the epoch's end", "start": "χ at the epoch's start"} if "start" in handles \
        else {"end": "χ, the same at the epoch's start and end"}
    if h["known_clean"]:  # where the two overlap, the bars blend: name that colour too
        rgb = plt.matplotlib.colors.to_rgb
        mix = tuple(0.55 * n + 0.45 * (0.55 * c + 0.45) for c, n in zip(rgb("C0"), rgb("C3")))
        handles["both groups (overlap)"] = plt.Rectangle((0, 0), 1, 1, color=mix)
    entries = [(a, k) for k, a in handles.items() if k not in chi_names] + \
        [(handles[k], chi_names[k]) for k in ("start", "end") if k in handles]  # a mkd or kdcl run has no χ
    fig.legend(*zip(*entries), loc="outside lower center", ncol=min(len(entries), 2 if width_in < 7 else 4),
               fontsize=7, frameon=False)
    title = ("Entropy of the training predictions; what lies left of χ (Eq. 7) is distilled to the peer", name)
    fig.suptitle("\n".join(textwrap.fill(t, int(width_in * 14)) for t in title), fontsize=9)  # ~15 characters an inch
    return save(plt, fig, path)


# ---------------------------------------------------------------- Fig. 3 from a sweep directory (b_sweep.png)
def sweep_points(sweep_dir):
    """{group: {b: [final test_acc_mean per seed]}} over run folders; a group is every setting but b and seed."""
    groups = defaultdict(lambda: defaultdict(list))
    for name in sorted(os.listdir(sweep_dir)):
        d = os.path.join(sweep_dir, name)
        if runfiles.state(d) != runfiles.FINISHED or not os.path.exists(os.path.join(d, "config.json")):
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
    return title(key, value)


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


# ---------------------------------------------------------------- Eq. 7 against the noise: how to choose η
ETA_RULE = dict(etas=(1.0, 2.0, 4.0), bs=(0.0, -5.0), classes=(10, 100), rates=(0.2, 0.4, 0.6), steps=200)


def plot_eta_rule(plt, path, etas, bs, classes, rates, steps):
    """eta-rule.png: schedule.chi over a run (t from 0 to Γ) for each η (a colour) and b (CMD-S dashed, CMD-P
    solid), a panel per K, with H_ν of symmetric noise at each rate as a grey line. A prediction is taught where
    its entropy is below χ: a χ that starts above H_ν falls through the noisy labels' entropy; one that starts
    below it teaches only what is more confident than the noise allows."""
    total = 1.0  # Γ: χ depends on t/Γ alone, so one run of any length
    t = np.linspace(0, total, steps + 1)
    fig, axes = plt.subplots(1, len(classes), figsize=(len(classes) * FIGSIZE[0], FIGSIZE[1]), sharey=False)
    for ax, k in zip(np.atleast_1d(axes), classes):
        for i, eta in enumerate(etas):
            for b in bs:
                ax.plot(t, [chi(x, total, k, eta, b) for x in t], color=f"C{i}", ls="--" if b == 0 else "-",
                        label=f"η = {number(eta)}, b = {number(b)}" + (" (CMD-S)" if b == 0 else " (CMD-P)"))
        for rate in rates:
            h = noise_entropy(rate, k)  # schedule.noise_entropy
            ax.axhline(h, color="0.5", lw=0.8, ls=":")
            ax.annotate(f"$H_\\nu$, ν = {rate:g}", (total, h), xytext=(-2, 2), textcoords="offset points", ha="right",
                        va="bottom", fontsize=7, color="0.35")
        ax.set_xlabel("t / Γ (training time, t from 0)")
        ax.set_ylabel("χ (nats)")
        ax.set_title(f"K = {k}: χ of Eq. 7 against the noisy labels' entropy", fontsize=10)
        ax.set_ylim(0, None)
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].legend(fontsize=7, loc="upper right")
    return save(plt, fig, path)


def epoch_list(text):
    """--hist-epochs: comma-separated epoch numbers, 1 or more."""
    try:
        epochs = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of epochs, e.g. 1,3,5,10,40")
    if not epochs or min(epochs) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give epochs numbered from 1, e.g. 1,3,5,10,40")
    return epochs


@one_line("plot.py")
def main(argv=None):
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("dirs", nargs="*", metavar="RUN_DIR", help="train.py run folders, or sweep.py sweep folders")
    p.add_argument("--out", help="output folder (default: the RUN_DIR when one is given, else plots/)")
    p.add_argument("--hist-epochs", type=epoch_list,
                   help="epochs shown by entropy.png, e.g. 1,3,5,10,40 (default: six, spaced geometrically)")
    p.add_argument("--only", choices=("entropy",), help="entropy: the entropy figures alone")
    p.add_argument("--eta-rule", action="store_true",
                   help="draw eta-rule.png: Eq. 7's χ over a run for η = 1, 2, 4 and b = 0, −5 at K = 10 and 100, "
                        "with symmetric noise's entropy H_ν at ν = 0.2, 0.4, 0.6 (docs/copy.md); needs no RUN_DIR")
    args = p.parse_args(argv)
    if not args.dirs and not args.eta_rule:
        p.error("give a RUN_DIR or sweep folder, or --eta-rule")
    runs, sweeps = [], []
    for d in args.dirs:  # every folder is read before the first file is written
        if os.path.exists(os.path.join(d, "metrics.jsonl")):
            try:
                runs.append(load_run(d))
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:  # missing, cut short, not ours
                raise UserError(f"{d} cannot be read as a train.py run ({type(e).__name__}: {e}); give a run "
                                f"folder train.py wrote") from None
        elif os.path.isdir(d) and any(runfiles.state(os.path.join(d, n)) == runfiles.FINISHED for n in os.listdir(d)):
            sweeps.append(d)
        else:
            what = "does not exist" if not os.path.exists(d) else \
                "holds neither metrics.jsonl (a train.py run) nor run folders with summary.json (a sweep)"
            raise UserError(f"{d} {what}; check the path")
    plt = pyplot()
    out = args.out or (args.dirs[0] if len(args.dirs) == 1 else "plots")
    created = not os.path.exists(out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:  # a file, or a path through one
        raise UserError(f"--out {out} cannot be a folder ({e.strerror or e}); choose another --out") from None
    written = plot_runs(plt, runs, out, args.hist_epochs, args.only) if runs else []
    if args.eta_rule:
        written.append(plot_eta_rule(plt, os.path.join(out, "eta-rule.png"), **ETA_RULE))
    for d, tag in zip(sweeps, unique_names(sweeps)):
        name = "b_sweep.png" if len(sweeps) == 1 else f"b_sweep-{tag}.png"
        written += [w for w in [plot_sweep(plt, d, os.path.join(out, name))] if w]
    if created and not written:
        os.rmdir(out)  # nothing to show: leave no empty folder behind
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
