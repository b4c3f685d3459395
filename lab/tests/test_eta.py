"""studies/eta.py, the η rule in three regimes: end to end on tiny Fashion-MNIST files in their real format (real
tools.batched runs), its raw data and report; the committed report renders unchanged from the committed raw data."""
import gzip
import json
import os
import shutil

import pytest
from test_fmnist import TINY_BASE
from test_mnist import write_idx

from studies import eta, fmnist

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_study_runs_packs_and_reports_what_its_runs_logged(tmp_path, monkeypatch, capsys):
    write_idx(tmp_path / "data", n_train=160, n_test=40)
    monkeypatch.setattr(fmnist, "BASE", TINY_BASE)  # 2 epochs
    monkeypatch.setattr(eta, "ETAS", {"sym": (2.0, 4.0), "pair": (2.0, 4.5)})
    monkeypatch.setattr(eta, "SEEDS", (0, 1))
    monkeypatch.setattr(eta, "EPOCHS", (1, 2))
    out, raw = str(tmp_path / "runs"), str(tmp_path / "docs" / "runs.jsonl.gz")
    data = ["--out", out, "--data-dir", str(tmp_path / "data")]
    assert eta.main(["run", *data, "--rows", "baselines"]) == 0  # the baselines first, which fix the regimes
    assert not any("progressive" in name for _, _, names in os.walk(out) for name in names + _)
    assert eta.main(["run", *data, "--rows", "cmd"]) == 0
    assert eta.main(["pack", "--out", out, "--raw", raw]) == 0
    with gzip.open(raw, "rt") as f:
        first = f.read()
    sym = [os.path.join(out, eta.folder(regime)) for regime in eta.REGIMES if regime[0] == "sym"]
    for d in sym:  # a regime run again on its own: packing it keeps the others' runs as they were
        os.rename(d, d + ".aside")
    assert eta.main(["pack", "--out", out, "--raw", raw]) == 0
    with gzip.open(raw, "rt") as f:
        assert f.read() == first
    for d in sym:
        os.rename(d + ".aside", d)
    assert eta.main(["report", "--raw", raw]) == 0
    capsys.readouterr()
    with gzip.open(raw, "rt") as f:
        runs = [json.loads(line) for line in f]
    assert all(len(r["provenance"]["code"]) == 16 for r in runs)  # each run names its code, and the report each regime's
    assert sorted((r.get("noise", "sym"), r["lr"], r["eta"], r["seed"]) for r in runs if r["eta"] is not None) == sorted(
        (noise, lr, e, s) for noise, lr in eta.REGIMES for e in eta.ETAS[noise] for s in (0, 1))
    assert sorted((r.get("noise", "sym"), r["lr"], r.get("lc", "mylc")) for r in runs if r["eta"] is None) == sorted(
        (noise, lr, lc) for noise, lr in eta.REGIMES for lc in eta.BASELINES[noise] for _ in (0, 1))
    report = open(tmp_path / "docs" / "report.md").read()
    assert os.path.getsize(tmp_path / "docs" / "eta-regimes.png") > 10_000
    # a cell is the mean over seeds of the mean of b2a and a2b, as the runs' own metrics.jsonl logged it
    for (noise, lr), name in eta.REGIMES.items():
        for e in eta.ETAS[noise]:
            taught = []
            for s in (0, 1):
                d = os.path.join(out, eta.folder((noise, lr)), f"{noise}0.4-progressive{'' if e == 4.0 else f'-eta{e:g}'}"
                                 f"-mylc-lr{lr:g}-s{s}")
                row = [json.loads(line) for line in open(os.path.join(d, "metrics.jsonl"))][1]
                taught.append((row["selected_b2a"] + row["selected_a2b"]) / 2)
            mean, _, _ = eta.mean_std(taught)
            head = f"## {'' if noise == 'sym' else f'{noise} noise, '}lr {lr:g}: {name}"
            section = report[report.index(head):]
            line = next(ln for ln in section.splitlines() if ln.startswith(f"| {e:g} | 2 |"))
            assert line.split(" | ")[3].split(" ± ")[0] == f"{mean:.2f}", line
    pair = report[report.index("## pair noise"):]
    assert "0.71 with this noise's H_ν = 0.67 and 0.33 with symmetric noise's, 1.55" in pair  # the onset's thresholds
    assert "| CE |" in pair and "final − CE's" in pair
    code = runs[0]["provenance"]["code"]
    assert f"memorising, pair noise (lr 0.05): code {code} (commit" in report


def test_the_committed_report_renders_unchanged_from_the_committed_raw_data(tmp_path, capsys):
    raw = tmp_path / "runs.jsonl.gz"
    shutil.copy(os.path.join(HERE, "docs", "eta", "runs.jsonl.gz"), raw)
    assert eta.main(["report", "--raw", str(raw)]) == 0
    capsys.readouterr()
    got, kept = (open(p).read().split("\nRendered from")[0] for p in (tmp_path / "report.md",
                                                                     os.path.join(HERE, "docs", "eta", "report.md")))
    assert got == kept


@pytest.mark.parametrize("k,rate,want", [(10, 0.4, 2.7), (100, 0.4, 3.4), (10, 0.2, 4.5)])
def test_the_bound_is_the_guides(k, rate, want):
    assert round(eta.bound(k, rate), 1) == want


def test_the_copy_guides_table_of_the_two_regimes_is_the_raw_datas():
    guide = open(os.path.join(HERE, "docs", "copy.md")).read()
    table = "\n".join(eta.guide_table(eta.read(eta.RAW)))
    assert table in guide, "docs/copy.md's table of the two regimes differs from studies/eta.py's guide_table"
    report = open(os.path.join(HERE, "docs", "eta", "report.md")).read()
    for quoted in ("+2.68 [+0.96, +4.39]", "-1.21 [-1.86, -0.56]", "-0.86 [-1.44, -0.28]", "80.70 ± 0.58",
                   "79.00 ± 0.77"):  # the intervals and accuracies the guide quotes, in the report rendered above
        assert quoted in report, quoted
    assert "+2.68\n  [+0.96, +4.39]" in guide and "+1.21 [+0.56, +1.86]" in guide and "0.86 [0.28, 1.44]" in guide


def test_the_guides_entropy_range_is_its_raw_data_divided_by_the_exact_noise_entropy():
    """docs/copy.md and schedule.py quote the networks' mean entropy in epochs 2-10 of the η study's runs (F) in units
    of H_ν: the least and the most over its raw data, H_ν = schedule.noise_entropy at K = 10 and 40% (not H_ν rounded
    to 1.55, which gave 1.28)."""
    import math

    import schedule
    with gzip.open(os.path.join(HERE, "docs", "eta", "runs.jsonl.gz"), "rt") as f:
        runs = [json.loads(line) for line in f]
    h_nu = schedule.noise_entropy(0.4, 10)
    ratios = [sum(1 - row[f"confidence_{x}"] for x in "ab") / 2 * math.log(10) / h_nu
              for r in runs if "noise" not in r for row in r["rows"][1:10]]  # symmetric noise's; epochs 2-10:
    # mean H = (1 - r) ln K, Eq. 8
    lo, hi = f"{min(ratios):.3f}", f"{max(ratios):.3f}"
    assert (lo, hi) == ("1.051", "1.274")
    assert f"{lo}–{hi} H_ν" in open(os.path.join(HERE, "docs", "copy.md")).read()
    assert f"{lo}-{hi} H_nu" in open(os.path.join(HERE, "schedule.py")).read()


def test_the_guides_pair_noise_numbers_are_the_raw_datas():
    """docs/copy.md's rules under pair noise, (P): CMD-P against zero knowledge and CE (paired over seeds), CE's early
    memorised and its rise, r's path, the epochs the pair onset threshold fires and what is memorised then, and the
    taught targets' precision, each from the committed raw data."""
    from tools.stats import interval
    guide = " ".join(open(os.path.join(HERE, "docs", "copy.md")).read().split())  # its lines joined
    runs = [r for r in eta.read(eta.RAW) if r.get("noise") == "pair"]
    assert len(runs) == 12 and len({r["provenance"]["code"] for r in runs}) == 1  # one code, 4 rows x 3 seeds

    def both(row, key):
        return sum(row[f"{key}_{x}"] for x in ("a", "b") if f"{key}_a" in row) / 2 if f"{key}_a" in row else \
            (row[f"{key}_b2a"] + row[f"{key}_a2b"]) / 2

    def row(e, lc="mylc"):
        return {r["seed"]: r for r in runs if r["eta"] == e and r.get("lc", "mylc") == lc}

    def diff(x, y):
        d = [x[s]["rows"][-1]["test_acc_mean"] - y[s]["rows"][-1]["test_acc_mean"] for s in sorted(x)]
        m, (lo, hi) = interval(d)
        return f"{m:+.2f} [{lo:+.2f}, {hi:+.2f}]".replace("-", "−")

    zero, ce = row(None), row(None, "ce")
    assert f"η = 2 − zero knowledge {diff(row(2.0), zero)}" in guide
    assert f"η = 4.5 − zero knowledge {diff(row(4.5), zero)}" in guide
    assert f"above CE ({diff(row(2.0), ce)}, {diff(row(4.5), ce)} and {diff(zero, ce)})" in guide
    early = [both(r["rows"][e], "memorized") for r in ce.values() for e in range(3)]
    assert f"CE's memorised was {min(early):.2f}–{max(early):.2f} in epochs 1–3" in guide
    onsets = [eta.onset(r, eta.h_noise(kind="pair")) for r in runs]
    at_onset = [both(r["rows"][o - 1], "memorized") for r, o in zip(runs, onsets)]
    best = [eta.best_epoch(r) for r in runs]
    assert f"fired at epochs {min(onsets)}–{max(onsets)} of every run" in guide and max(best) < min(onsets)
    assert f"validation epoch ({min(best)}–{max(best)}) and as memorised passed 0.5 ({min(at_onset):.2f}–" \
           f"{max(at_onset):.2f})" in guide and min(at_onset) > 0.5
    means = {e: [sum(both(r["rows"][e - 1], "confidence") for r in rows.values()) / 3
                 for rows in (row(2.0), row(4.5), zero, ce)] for e in (1, 3, 10)}
    assert "In (P) r was {:.2f}–{:.2f} in epoch 1, {:.2f}–{:.2f} in epoch 3 and {:.2f}–{:.2f} in epoch 10".format(
        *(f(means[e]) for e in (1, 3, 10) for f in (min, max))) in guide
    precision = [sum(both(r["rows"][e - 1], "precision") for r in row(2.0).values()) / 3 for e in range(1, 41)]
    assert f"at η = 2 the taught targets' precision stayed at {min(precision):.2f}–{max(precision):.2f} through epoch 40" in guide
