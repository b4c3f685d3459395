"""studies/eta.py, the η rule in two regimes: end to end on tiny Fashion-MNIST files in their real format (real
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
    monkeypatch.setattr(eta, "ETAS", (2.0, 4.0))
    monkeypatch.setattr(eta, "SEEDS", (0, 1))
    monkeypatch.setattr(eta, "EPOCHS", (1, 2))
    out, raw = str(tmp_path / "runs"), str(tmp_path / "docs" / "runs.jsonl.gz")
    assert eta.main(["run", "--out", out, "--data-dir", str(tmp_path / "data")]) == 0
    assert eta.main(["pack", "--out", out, "--raw", raw]) == 0
    assert eta.main(["report", "--raw", raw]) == 0
    capsys.readouterr()
    with gzip.open(raw, "rt") as f:
        runs = [json.loads(line) for line in f]
    assert sorted((r["lr"], r["eta"], r["seed"]) for r in runs if r["eta"] is not None) == sorted(
        (lr, e, s) for lr in eta.REGIMES for e in (2.0, 4.0) for s in (0, 1))
    assert sum(r["eta"] is None for r in runs) == 2 * len(eta.REGIMES)  # zero knowledge beside each regime
    report = open(tmp_path / "docs" / "report.md").read()
    assert os.path.getsize(tmp_path / "docs" / "eta-regimes.png") > 10_000
    # a cell is the mean over seeds of the mean of b2a and a2b, as the runs' own metrics.jsonl logged it
    name = {2.0: "progressive-eta2", 4.0: "progressive"}
    for lr in eta.REGIMES:
        for e in (2.0, 4.0):
            taught = []
            for s in (0, 1):
                d = os.path.join(out, f"lr{lr:g}", f"sym0.4-{name[e]}-mylc-lr{lr:g}-s{s}")
                row = [json.loads(line) for line in open(os.path.join(d, "metrics.jsonl"))][1]
                taught.append((row["selected_b2a"] + row["selected_a2b"]) / 2)
            mean, _, _ = eta.mean_std(taught)
            line = next(ln for ln in report.splitlines() if ln.startswith(f"| {e:g} | 2 |") and
                        report.index(ln) > report.index(f"## lr {lr:g}"))
            assert line.split(" | ")[3].split(" ± ")[0] == f"{mean:.2f}", line


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
              for r in runs for row in r["rows"][1:10]]  # epochs 2-10: mean H = (1 - r) ln K, Eq. 8
    lo, hi = f"{min(ratios):.3f}", f"{max(ratios):.3f}"
    assert (lo, hi) == ("1.051", "1.274")
    assert f"{lo}–{hi} H_ν" in open(os.path.join(HERE, "docs", "copy.md")).read()
    assert f"{lo}-{hi} H_nu" in open(os.path.join(HERE, "schedule.py")).read()
