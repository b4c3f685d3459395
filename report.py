"""What a run reports: test accuracy, one metrics line per epoch, and the console line (paper §4's numbers).

evaluate         -- top-1 accuracy of A, B, their mean (the tables' number) and their ensemble, per test set
epoch_row        -- the metrics.jsonl line of an epoch, from its EpochSums
epoch_line       -- the fixed-format console line of an epoch: lr, training losses, realised noise, chi,
                    selection and its precision, test accuracy, time
final_accuracies -- the accuracies of a row, for summary.json
tensorboard, add_scalars -- the same numbers as TensorBoard scalars, when tensorboard is installed
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

from label_correction import confidence_from_sum


def epoch_row(s, epoch, lr, chi, seconds, num_classes, known_clean, results):
    """The metrics.jsonl line of an epoch from its EpochSums s (host floats) and the evaluation results."""
    n = s.samples

    def ratio(part, whole):  # None where the clean labels are unknown or nothing was counted
        return part / whole if known_clean and whole else None

    return dict(epoch=epoch, lr=lr, chi=chi, seconds=round(seconds, 3), train_samples=int(n),
                train_loss_a=s.loss_a / n, train_loss_b=s.loss_b / n, noise_rate=ratio(s.noisy, n),
                selected_b2a=s.selected_b2a / n, selected_a2b=s.selected_a2b / n,
                precision_b2a=ratio(s.clean_b2a, s.selected_b2a), precision_a2b=ratio(s.clean_a2b, s.selected_a2b),
                recall_b2a=ratio(s.clean_label_b2a, n - s.noisy), recall_a2b=ratio(s.clean_label_a2b, n - s.noisy),
                memorized_a=ratio(s.memorized_a, s.noisy), memorized_b=ratio(s.memorized_b, s.noisy),
                confidence_a=confidence_from_sum(s.entropy_a, n, num_classes),
                confidence_b=confidence_from_sum(s.entropy_b, n, num_classes), **results)


def epoch_line(row):
    prec = " ".join(" -  " if v is None else f"{v:.2f}" for v in (row["precision_b2a"], row["precision_a2b"]))
    chi = "  - " if row["chi"] is None else f"{row['chi']:.2f}"
    noise = "  - " if row.get("noise_rate") is None else f"{row['noise_rate']:.2f}"
    return (f"epoch {row['epoch']:3d} | lr {row['lr']:.4f} | loss A {row['train_loss_a']:.3f} "
            f"B {row['train_loss_b']:.3f} | noise {noise} | chi {chi} | "
            f"sel b2a {row['selected_b2a']:.2f} a2b {row['selected_a2b']:.2f} | prec {prec} | "
            f"test A {row['test_acc_a']:.1f} B {row['test_acc_b']:.1f} mean {row['test_acc_mean']:.1f} | "
            f"{row['seconds']:.1f}s")


@torch.no_grad()
def evaluate(nets, evals, autocast, device, world):
    """Top-1 accuracy (%) of A, B, their mean, and of the averaged probabilities, per test set."""
    for n in nets:
        n.eval()
    out = {}
    for name, batches in evals.items():
        c = torch.zeros(4, device=device)
        for x, y, _ in batches.epoch(0, 0):
            with torch.autocast(**autocast):
                za, zb = nets[0](x), nets[1](x)
            pa, pb = F.softmax(za.float(), -1), F.softmax(zb.float(), -1)
            c += torch.stack([(pa.argmax(-1) == y).sum(), (pb.argmax(-1) == y).sum(),
                              ((pa + pb).argmax(-1) == y).sum(), torch.tensor(len(y), device=device)]).float()
        if world > 1:
            dist.all_reduce(c)
        a, b, e, n = c.tolist()
        prefix = "test" if not out else name  # the first test set is "the" test set of the tables
        out.update({f"{prefix}_acc_a": 100 * a / n, f"{prefix}_acc_b": 100 * b / n,
                    f"{prefix}_acc_mean": 50 * (a + b) / n, f"{prefix}_acc_ens": 100 * e / n})
    return out


def final_accuracies(row):
    return {k: v for k, v in row.items() if k.endswith(("_acc_a", "_acc_b", "_acc_mean", "_acc_ens"))}


def tensorboard(out):
    """A SummaryWriter into out/tensorboard, or None with a one-line hint when tensorboard is missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter
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
