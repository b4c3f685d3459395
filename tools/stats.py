"""The statistics of every table the tools write: one place, so that the sweeps, the demonstration and the
attribution experiment compute a spread and an interval the same way.

mean_std     -- mean, sample std (ddof 1) and n
T975         -- Student's t quantile at 0.975 for df = 1..9 (larger df: 1.96)
interval     -- the mean of paired differences and its 95% t-interval
paired       -- a row's per-seed difference of final test accuracy against another row's, as table cells
fmt          -- "mean ± std" as the tables print it
"""
import math

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}  # t_{0.975, df}


def mean_std(values):
    """(mean, sample std with ddof=1, n); std is None for one value."""
    n = len(values)
    m = sum(values) / n
    return m, (math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1)) if n > 1 else None), n


def interval(diffs):
    """Mean of paired differences and its 95% t-interval (None for one seed)."""
    m, s, n = mean_std(diffs)
    if s is None:
        return m, None
    half = T975.get(n - 1, 1.96) * s / math.sqrt(n)
    return m, (m - half, m + half)


def final(rows):
    return rows[-1]["test_acc_mean"]


def paired(runs, base, value=final):
    """(the mean per-seed difference of final test accuracy (or another value of a run's metrics rows) with its
    95% t-interval, "ahead in k/n") of a row's runs {seed: metrics rows} against another row's on the same seeds;
    a **win** when the interval is above 0."""
    if not base:
        return "–", "–"
    pairs = [value(runs[s]) - value(base[s]) for s in runs if s in base]
    m, ci = interval(pairs)
    win = ci is not None and ci[0] > 0
    return (f"{m:+.2f}" + ("" if ci is None else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]") + (" **win**" if win else ""),
            f"{sum(p > 0 for p in pairs)}/{len(pairs)}")


def fmt(m, s, form="{:.2f}"):
    return form.format(m) + ("" if s is None else " ± " + form.format(s))
