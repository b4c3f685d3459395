"""The statistics of every table the tools write: one place, so that the sweeps, the demonstration and the
attribution experiment compute a spread and an interval the same way.

mean_std     -- mean, sample std (ddof 1) and n
t975         -- Student's t quantile at 0.975 for any df (scipy.stats.t)
interval     -- the mean of paired differences and its 95% t-interval
paired       -- a row's per-seed difference of final test accuracy against another row's, as table cells
fmt          -- "mean ± std" as the tables print it
"""
import math

from scipy import stats


def t975(df):
    """Student's t quantile at 0.975 with df degrees of freedom: the half-width of a 95% interval in standard errors
    (12.706 at df 1, 2.228 at df 10, 2.042 at df 30; 1.96 only in the limit)."""
    return float(stats.t.ppf(0.975, df))


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
    half = t975(n - 1) * s / math.sqrt(n)
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
