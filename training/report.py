"""What a run reports: test accuracy, one metrics line per epoch, and the console line (paper §4's numbers).

evaluate         -- top-1 accuracy of A, B, their mean (the tables' number) and their ensemble, per test set
correct, tally, accuracies_of -- its parts: one batch's counts (tools/batched.py vmaps it), their sums, the numbers
epoch_row        -- the metrics.jsonl line of an epoch, from its sums (mutual.sum_names)
chi_keys         -- the row's χ, the step's (Method.chis_at), per model where the models' differ
epoch_line       -- the fixed-format console line of an epoch: lr, training losses, realised noise, chi,
                    selection and its precision, test accuracy, time
final_accuracies -- the accuracies of a row, for summary.json
settings_lines   -- the settings a run prints as it starts: every resolved one but the knobs it does not read, wrapped
tensorboard, add_scalars -- the same numbers as TensorBoard scalars, when tensorboard is installed
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

from label_correction import confidence_from_sum
from mutual import NAMES
from training.ranks import ALONE


def epoch_row(s, results, head, num_classes, known_clean):
    """The metrics.jsonl line of an epoch from its sums s ({mutual.sum_names(m): host float}) and the
    evaluation results; head: the row's first keys (epoch, lr, chi, seconds). Per model x: train_loss_x,
    memorized_x, confidence_x (MyLC's r, Eq. 8); per ordered pair j2k (selected_b2a: B taught A): the
    fraction selected, its precision and recall. known_clean: the clean labels are known (precision,
    recall, memorisation and the realised noise rate are None otherwise)."""
    n, m = s["samples"], sum(k.startswith("loss_") for k in s)

    def ratio(part, whole):  # None where the clean labels are unknown or nothing was counted
        return part / whole if known_clean and whole else None

    models = NAMES[:m]
    row = dict(head, seconds=round(head["seconds"], 3), train_samples=int(n))
    row.update({f"train_loss_{x}": s[f"loss_{x}"] / n for x in models})
    row["noise_rate"] = ratio(s["noisy"], n)
    for kind, value in (("selected", lambda pair: s[f"selected_{pair}"] / n),
                        ("precision", lambda pair: ratio(s[f"clean_{pair}"], s[f"selected_{pair}"])),
                        ("recall", lambda pair: ratio(s[f"clean_label_{pair}"], n - s["noisy"]))):
        row.update({f"{kind}_{j}2{k}": value(f"{j}2{k}") for j, k in pairs(m)})
    row.update({f"memorized_{x}": ratio(s[f"memorized_{x}"], s["noisy"]) for x in models})
    r = confidence_from_sum([s[f"entropy_{x}"] for x in models], n, num_classes)  # Eq. 8, MyLC's next r
    row.update({f"confidence_{x}": r_x for x, r_x in zip(models, r)})
    return dict(row, **results)


def chi_keys(chis):
    """The row's χ from what the step used (Method.chis_at: one per model, or None): chi, the models' one value
    (None without a threshold, or where the models' differ), and where they differ chi_a, chi_b, ..., each
    model's own."""
    if chis is None or len(set(chis)) == 1:
        return dict(chi=None if chis is None else chis[0])
    return dict(chi=None, **{f"chi_{x}": c for x, c in zip(NAMES, chis)})


def pairs(m):
    """The ordered pairs (teacher, student) of m models, in the order the pair (A, B) reads: b2a, then a2b."""
    return [(j, k) for k in NAMES[:m] for j in NAMES[:m] if j != k]


def pair_mean(row, kind):
    """The mean over ordered pairs of a per-pair number of the row (None when none is known)."""
    values = [v for key, v in row.items() if key.startswith(f"{kind}_") and "2" in key[len(kind) + 1:]
              and v is not None]
    return sum(values) / len(values) if values else None


def fraction(v):
    """A fraction with 2 decimals; a few samples selected read <0.01, not 0.00, so that a precision beside them
    makes sense."""
    return "<0.01" if 0 < v < 0.005 else f"{v:.2f}"


def each(row, key, form, models):
    """Each model's number of the row: "A 0.123 B 0.456" (key_a, key_b, ...)."""
    return " ".join(f"{x.upper()} {row[f'{key}_{x}']:{form}}" for x in models)


def per_pair(row, kind, m):
    """A per-pair number of the row: each direction of a pair ("b2a 0.61 a2b 0.63"), a cohort's mean over its pairs."""
    show = fraction if kind == "selected" else (lambda v: " -  " if v is None else f"{v:.2f}")
    if m == 2:
        return f"b2a {show(row[f'{kind}_b2a'])} a2b {show(row[f'{kind}_a2b'])}" if kind == "selected" else \
            " ".join(show(row[f"{kind}_{p}"]) for p in ("b2a", "a2b"))
    return "mean " + show(pair_mean(row, kind))


def chi_of(row, models):
    """χ of the row: each model's where they differ, "-" without a threshold."""
    if f"chi_{models[0]}" in row:
        return each(row, "chi", ".2f", models)
    return "  - " if row["chi"] is None else f"{row['chi']:.2f}"


# The epoch line's columns in order: each the word of its numbers (runfiles.WORDS) and what it shows of a row for M
# models. A new column is one entry here (and its word's there, and its line in docs/training.md's legend).
LINE = (
    ("epoch", lambda row, models: f"{row['epoch']:3d}"),
    ("lr", lambda row, models: f"{row['lr']:.4f}" if row["lr"] >= 1e-4 else f"{row['lr']:.0e}"),  # a revision: 5e-07
    ("loss", lambda row, models: each(row, "train_loss", ".3f", models)),
    ("noise", lambda row, models: "  - " if row.get("noise_rate") is None else f"{row['noise_rate']:.2f}"),
    ("chi", chi_of),
    ("taught", lambda row, models: per_pair(row, "selected", len(models))),
    ("precision", lambda row, models: per_pair(row, "precision", len(models))),
    ("test", lambda row, models: each(row, "test_acc", ".1f", models) + f" mean {row['test_acc_mean']:.1f}"),
)


def epoch_line(row, m=2):
    """One fixed-format line per epoch, each number under its word (LINE, runfiles.WORDS), and the epoch's seconds.
    A pair shows each direction; a cohort the mean over its pairs."""
    models = NAMES[:m]
    return " | ".join([f"{word} {show(row, models)}" for word, show in LINE] + [f"{row['seconds']:.1f}s"])


@torch.no_grad()
def evaluate(nets, evals, autocast, device, ranks=ALONE):
    """Top-1 accuracy (%) of each model (A, B, ...), their mean, and of their averaged probabilities, per
    test set: {test_acc_a, test_acc_b, ..., test_acc_mean, test_acc_ens}; the first set is "test". ranks: under
    torchrun, training/ranks.py's agreement, reached before each set's counts are summed over the ranks."""
    for n in nets:
        n.eval()

    def count(x, y):
        with torch.autocast(**autocast):
            return correct([net(x) for net in nets], y)
    return accuracies_of(tally(count, evals, ranks))


def correct(z, y):
    """The counts of one test batch: correct predictions of each model, of their averaged probabilities, and the
    samples, (M + 2,) float. z: M x (N, K) logits; y: (N,). A pure function of tensors: tools/batched.py vmaps it over
    runs."""
    p = [F.softmax(z_k.float(), -1) for z_k in z]
    return torch.stack([(p_k.argmax(-1) == y).sum() for p_k in p] + [
        (sum(p[1:], p[0]).argmax(-1) == y).sum(), torch.ones_like(y).sum()]).float()


def tally(count, evals, ranks=ALONE):
    """{set: counts}: count(x, y) summed over every batch of each test set of evals (under torchrun, over every rank
    too). count: correct on the models' logits, (M + 2,), or tools/batched.py's of every run, (R, M + 2)."""
    out = {}
    for name, batches in evals.items():
        with ranks.held():  # under torchrun, an image this rank cannot read stops every rank at the agreement below
            c = sum(count(x, y) for x, y, _ in batches.epoch(0, 0))
        if dist.is_available() and dist.is_initialized():
            ranks.agree()
            dist.all_reduce(c)
        out[name] = c
    return out


def accuracies_of(counts):
    """evaluate's dict from tally's counts of one run."""
    out = {}
    for name, c in counts.items():
        *right, e, n = c.tolist()
        out.update(accuracies("test" if not out else name, right, e, n))  # the first set is "the" test set
    return out


@torch.no_grad()
def predictions(nets, batches, autocast):
    """Each model's predicted probabilities on every sample of batches (an eval Batches: in order, no
    augmentation), in eval mode: a list of (N, K) float32 CPU tensors: what a mode beyond the paper learns from
    between epochs (lab/stages.py), or a tool's per-sample probabilities."""
    for n in nets:
        n.eval()
    out = [[] for _ in nets]
    for x, _, _ in batches.epoch(0, 0):
        with torch.autocast(**autocast):
            z = [net(x) for net in nets]
        for o, z_k in zip(out, z):
            o.append(F.softmax(z_k.float(), -1).cpu())
    return [torch.cat(o) for o in out]


def accuracies(prefix, correct, ensemble, n):
    """{prefix_acc_a, prefix_acc_b, ..., prefix_acc_mean, prefix_acc_ens} in %, from the counts of correct
    predictions of each model and of their averaged probabilities over n samples (host numbers)."""
    out = {f"{prefix}_acc_{x}": 100 * v / n for x, v in zip(NAMES, correct)}
    out.update({f"{prefix}_acc_mean": 100 * sum(correct) / (len(correct) * n), f"{prefix}_acc_ens": 100 * ensemble / n})
    return out


WIDTH = 200  # the longest line a run prints


def settings_lines(config, unread, width=WIDTH):
    """The settings a run prints as it starts, "settings: k=v ...": every resolved setting of config but those in
    unread (the knobs of the method its mode and label correction do not read), wrapped at width, the lines after the
    first indented."""
    words, lines = [f"{k}={v}" for k, v in config.items() if k not in unread], ["settings:"]
    for w in words:
        if len(lines[-1]) + 1 + len(w) > width and lines[-1].strip():
            lines.append(" ")
        lines[-1] += " " + w
    return lines


def final_accuracies(row):
    return {k: v for k, v in row.items() if "_acc_" in k}


def tensorboard(out):
    """A SummaryWriter into out/tensorboard, or None with a one-line hint when tensorboard is missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # optional: only --tensorboard needs the package
    except Exception as e:  # ImportError, or a tensorboard that does not fit this torch
        print(f"train.py: note: --tensorboard needs the tensorboard package ({type(e).__name__}: {e}); "
              f"pip install tensorboard. Training goes on; metrics.jsonl has every number", file=sys.stderr)
        return None
    return SummaryWriter(os.path.join(out, "tensorboard"))


def add_scalars(writer, row):
    """Every number of a metrics.jsonl row, at step = its epoch. metrics.jsonl stays the record."""
    for key, v in row.items():
        if key != "epoch" and isinstance(v, (int, float)):
            writer.add_scalar(key, v, row["epoch"])
