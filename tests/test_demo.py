"""tools/demo.py: the Fashion-MNIST demonstration's selection and report, on fake finished runs (no training):
the choice is the best mean validation accuracy of the declared grid, CE CMD-P takes MyLC CMD-P's eta and b,
the report reads choice.json, pairs seeds, and the preconditions are computed as stated."""
import json
import math
import os

import pytest

from tools import demo_grid as demo
from tools import demo_tables, stats


def plan(out):
    return demo.Plan(out, demo.data_flags(), [])


def fake_run(d, val, test, memorised=None, epochs=8, peers=2):
    """A finished run whose val and test accuracies are constant except the last epoch's (val, test)."""
    os.makedirs(d, exist_ok=True)
    memorised = memorised or [0.0] * epochs
    rows = []
    for e in range(epochs):
        r = dict(epoch=e + 1, val_acc_mean=val if e == epochs - 1 else 50.0, test_acc_mean=test if e == epochs - 1
                 else 40.0 + e, test_acc_ens=test + 1)
        models = "abc"[:peers]
        r.update({f"memorized_{x}": memorised[e] for x in models})
        r.update({f"confidence_{x}": 0.5 for x in models})
        for j in models:
            for k in models:
                if j != k:
                    r.update({f"selected_{j}2{k}": 0.5, f"precision_{j}2{k}": 0.9, f"recall_{j}2{k}": 0.5})
        rows.append(r)
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(dict(test_acc_mean=test), f)


def val_of(row, lr, eta, b, seed):
    """A validation landscape with one best setting per row, different between the seeds."""
    best = {"ce-zero": 0.035, "mylc-zero": 0.07, "mylc-all": 0.025, "mylc-cmds": 0.05, "mylc-cmdp": 0.1,
            "ce-cmdp": 0.035}[row]
    v = 80 - 100 * abs(lr - best) + (seed - 100) * 0.3
    if row == "mylc-cmdp":
        v += {(2.0, -2.0): 0, (2.0, -5.0): 1.0, (4.0, -2.0): 0.5, (4.0, -5.0): -1}[eta, b]
    if row == "mylc-cmds":
        v += 0.2 if eta == 4.0 else 0
    return v


def test_select_chooses_the_best_mean_validation_accuracy_and_ce_cmdp_follows_mylc_cmdp(tmp_path):
    out = str(tmp_path)
    for job in demo.select_jobs(plan(out)):
        row = next(r for r in demo.GRID if job["name"].startswith(r + "-lr")) if "clean" not in job["name"] else None
        if row is None:
            continue
        lr = float(job["name"].split("-lr")[1].split("-")[0])
        eta = float(job["name"].split("-eta")[1].split("-")[0]) if "-eta" in job["name"] else None
        b = float(job["name"].split("-b")[-1].split("-s")[0]) if "-eta" in job["name"] else None
        fake_run(job["dir"], val_of(row, lr, eta, b, int(job["name"].rsplit("-s", 1)[1])), 70)
    choice = demo.choose(out, ["ce-zero", "mylc-zero", "mylc-all", "mylc-cmds", "mylc-cmdp"])
    assert choice["ce-zero"]["lr"] == 0.035 and choice["mylc-zero"]["lr"] == 0.07
    assert (choice["mylc-cmds"]["eta"], choice["mylc-cmds"]["b"]) == (4.0, 0.0)
    assert (choice["mylc-cmdp"]["lr"], choice["mylc-cmdp"]["eta"], choice["mylc-cmdp"]["b"]) == (0.1, 2.0, -5.0)
    assert math.isclose(choice["mylc-cmdp"]["val"], 80 + 1.0 + 0.15)  # the mean over the two seeds
    with pytest.raises(RuntimeError, match="ce-cmdp"):
        demo.choose(out, ["ce-cmdp"], choice)  # its runs have not finished
    extra = [j for j in demo.select_jobs(plan(out), choice) if j["name"].startswith("ce-cmdp")]
    assert len(extra) == len(demo.LRS) * len(demo.SELECT_SEEDS)
    assert all("--eta" in j["argv"] and j["argv"][j["argv"].index("--eta") + 1] == "2" and
               j["argv"][j["argv"].index("--b") + 1] == "-5" for j in extra)
    for j in extra:
        fake_run(j["dir"], val_of("ce-cmdp", float(j["name"].split("-lr")[1].split("-")[0]), 2.0, -5.0, 100), 70)
    choice.update(demo.choose(out, ["ce-cmdp"], choice))
    assert choice["ce-cmdp"]["lr"] == 0.035
    full = demo.derived(choice)
    assert full["control"]["lr"] == 2 * 0.07 and full["cohort"]["eta"] == 2.0 and full["clean"]["lr"] == demo.BASE_LR
    table = "\n".join(demo_tables.settings_table(out, list(demo.GRID) + ["ce-cmdp"], choice, ("η", "b")))
    assert table.count("**✓**") == 6
    demo_tables.heat_map(out, str(tmp_path / "heat.png"))
    assert (tmp_path / "heat.png").stat().st_size > 1000


def test_the_grids_are_the_declared_fifty_configurations():
    n = sum(len(g) for g in demo.GRID.values()) + len(demo.LRS)  # + CE CMD-P's lr
    assert n == 50 and demo.LRS == (0.025, 0.035, 0.05, 0.07, 0.1)
    assert all(b2 / b1 == pytest.approx(2 ** 0.5, rel=0.03) for b1, b2 in zip(demo.LRS, demo.LRS[1:]))
    assert not set(demo.SELECT_SEEDS) & set(demo.REPORT_SEEDS)


def test_memorisation_timing_and_the_preconditions(tmp_path):
    n = 8
    slow = [0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5]   # a quarter (epoch 2): 0.05; half of 0.5 first at epoch 6
    fast = [0.3, 0.4, 0.45, 0.5, 0.5, 0.5, 0.5, 0.5]     # half first at epoch 1
    assert demo_tables.memorisation_timing([{"memorized_a": m, "memorized_b": m} for m in slow]) == (0.5, 0.05, 6, n)
    for s in demo.SELECT_SEEDS:
        fake_run(str(tmp_path / f"clean-{s}"), 80, 85)
        fake_run(str(tmp_path / f"slow-{s}"), 70, 75, slow)
        fake_run(str(tmp_path / f"fast-{s}"), 70, 75, fast)
        fake_run(str(tmp_path / f"mild-{s}"), 78, 70, slow)  # harm read on validation (2 points), not test (15)
    clean = [str(tmp_path / f"clean-{s}") for s in demo.SELECT_SEEDS]
    for kind, ok in (("slow", True), ("fast", False), ("mild", False)):
        lines, holds = demo_tables.preconditions({kind: [str(tmp_path / f"{kind}-{s}") for s in demo.SELECT_SEEDS]}, clean)
        assert holds == ok, lines


def test_the_report_pairs_seeds_and_calls_a_win_only_when_the_interval_is_above_zero(tmp_path):
    out = str(tmp_path)
    choice = demo.derived({r: dict(lr=0.05, eta=4.0 if "cmd" in r else None, b=-5.0 if "cmd" in r else None, val=1)
                           for r in ("ce-zero", "mylc-zero", "mylc-all", "mylc-cmds", "mylc-cmdp", "ce-cmdp")})
    jobs = demo.report_jobs(plan(out), choice, demo.REPORT_SEEDS)
    assert len(jobs) == (len(demo.ROWS) - len(demo.KNOBS)) * 5  # without the comparators until compare chose them
    for j in jobs:
        row, seed = j["name"].rsplit("-s", 1)
        seed = int(seed)
        base = 70 + seed  # seeds differ a lot; paired differences remove it
        test = {"mylc-cmdp": base + 1 + 0.1 * seed, "mylc-all": base + (1 if seed % 2 else -1)}.get(row, base)
        fake_run(j["dir"], 60, test, peers=3 if row == "cohort" else 2)
    table = "\n".join(demo_tables.report_table(out, choice, demo.REPORT_SEEDS))
    cmdp = next(line for line in table.splitlines() if line.startswith("| MyLC, CMD-P |"))
    assert "+1.20 [" in cmdp and "**win**" in cmdp and "| 5/5 |" in cmdp
    assert "| +1.40 [" in cmdp  # against all knowledge, paired on the same seeds
    every = next(line for line in table.splitlines() if line.startswith("| MyLC, all knowledge"))
    assert "**win**" not in every and "| 2/5 |" in every
    m, (lo, hi) = stats.interval([1.0, 1.1, 1.2, 1.3, 1.4])
    assert m == pytest.approx(1.2) and hi - m == pytest.approx(2.776 * math.sqrt(0.025) / math.sqrt(5), rel=1e-3)


def test_early_stopping_reads_the_test_accuracy_at_the_best_validation_epoch():
    rows = [dict(val_acc_mean=v, test_acc_mean=t) for v, t in ((50, 60), (70, 65), (70, 66), (60, 80))]
    assert demo_tables.early_stopped(rows) == 65


def test_the_readmes_fashion_mnist_numbers_are_the_reports():
    """Every mean ± std and interval the README quotes for Fashion-MNIST is in the report the tool wrote."""
    import re
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    readme = open(os.path.join(here, "README.md")).read()
    section = readme[readme.index("## What the project has shown"):readme.index("## Layout")]
    reports = [os.path.join("docs", "fmnist", "report.md")] + [os.path.join("docs", "fmnist", "attribution", r, "report.md")
                                                               for r in ("r0.4", "r0.6")]
    report = "".join(open(os.path.join(here, r)).read() for r in reports if os.path.exists(os.path.join(here, r)))
    report = report.replace("-", "−")  # the README prints −
    quoted = re.findall(r"\d+\.\d\d ± \d\.\d\d", section) + re.findall(r"\[[+−]\d\.\d\d, [+−]\d\.\d\d\]", section)
    assert len(quoted) >= 8
    for q in quoted:
        assert q in report, q


def test_compare_chooses_each_comparators_lr_and_knob_and_the_report_runs_them(tmp_path):
    out = str(tmp_path)
    todo = demo.compare_jobs(plan(out))
    assert len(todo) == (4 * 3 + 1) * len(demo.LRS) * len(demo.SELECT_SEEDS)  # four knobs on 3 values, the oracle
    best = {"coteach": ("0.05", "forget-rate0.3"), "coteach+": ("0.07", "forget-rate0.5"),
            "jocor": ("0.1", "jocor-lambda0.85"), "gce-zero": ("0.025", "gce-q0.9"), "coteach-oracle": ("0.035", "")}
    for j in todo:
        row = next(r for r in sorted(demo.KNOBS, key=len, reverse=True) if j["name"].startswith(r + "-lr"))
        lr, knob = best[row]
        hit = f"-lr{lr}" in j["name"] and (knob in j["name"])
        fake_run(j["dir"], 80 if hit else 70, 70)
    picked = demo.choose(out, list(demo.KNOBS))
    assert picked["coteach"]["lr"] == 0.05 and picked["coteach"]["knob"] == ("--forget-rate", 0.3)
    assert picked["jocor"]["knob"] == ("--jocor-lambda", 0.85) and picked["coteach-oracle"]["knob"] is None
    assert "\n".join(demo_tables.settings_table(out, list(demo.KNOBS), picked, ("knob",))).count("**✓**") == 5
    choice = json.loads(json.dumps(picked))  # as choice.json holds it: the knob as a list
    jobs = demo.report_jobs(plan(str(tmp_path / "r")), choice, (0,))
    gce = next(j for j in jobs if j["name"] == "gce-zero-s0")["argv"]
    assert gce[gce.index("--gce-q") + 1] == "0.9" and gce[gce.index("--lc") + 1] == "gce"
    oracle = next(j for j in jobs if j["name"] == "coteach-oracle-s0")["argv"]
    assert oracle[oracle.index("--forget-rate") + 1] == "0.4" and oracle[oracle.index("--lr") + 1] == "0.035"


def test_dry_run_prints_the_stages_train_py_commands_and_writes_nothing(tmp_path, capsys):
    import shlex
    from tools import demo as stages  # the stage runner, beside the declaration imported as demo
    from training import config
    out = str(tmp_path / "fm")
    assert stages.main(["select", "--out", out, "--dry-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == (sum(len(g) for g in demo.GRID.values()) + 1) * len(demo.SELECT_SEEDS)  # + the clean row
    for line in lines[:3]:
        config.resolve(config.get_args(shlex.split(line)[2:]))  # train.py accepts it
    assert not os.path.exists(out)
