"""studies/fmnist.py, the Fashion-MNIST pipeline and its two studies. The demo on fake finished runs: the choice is
the best mean validation accuracy of the declared grid, CE CMD-P takes MyLC CMD-P's eta and b, the report reads
choice.json and pairs seeds, the preconditions are computed as stated. The attribution: the edge and tie rules on
fake scores, then every stage end to end on tiny Fashion-MNIST files in their real format (real train.py runs),
the raw data packed and the tables rendered again from it alone. The published tables render unchanged."""
import gzip
import json
import math
import os
import re
import shlex
import shutil

import pytest
from test_faults import readme_and_docs, shown_commands
from test_mnist import write_idx

from studies import eta, fmnist
from tools import stats
from studies.fmnist import ATTRIBUTION, DEMO, KNOBS, SELECTED, Setting

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TUNED = SELECTED[:-1]  # the demo's rows with a declared grid; CE CMD-P follows MyLC CMD-P
TINY_BASE = ["--arch", "mlp", "--subset", "120", "--subset-seed", "0", "--val-split", "0.2", "--augment", "none",
             "--weight-decay", "0", "--epochs", "2", "--milestones", "1", "--batch-size", "32", "--noise", "sym",
             "--rate", "0.4"]


# ---------------------------------------------------------------- the demo, on fake finished runs
def plan(out):
    return fmnist.Plan(out, fmnist.data_flags() + fmnist.base(0.4), [])


def fake_rows(val, test, memorised=None, epochs=8, peers=2):
    """Metrics rows whose val and test accuracies are constant except the last epoch's (val, test)."""
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
    return rows


def fake_run(d, val, test, memorised=None, epochs=8, peers=2):
    """A finished run folder of fake_rows."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in fake_rows(val, test, memorised, epochs, peers))
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(dict(test_acc_mean=test), f)


def val_of(row, s, seed):
    """A validation landscape with one best setting per row, different between the seeds."""
    best = {"ce-zero": 0.035, "mylc-zero": 0.07, "mylc-all": 0.025, "mylc-cmds": 0.05, "mylc-cmdp": 0.1,
            "ce-cmdp": 0.035}[row]
    v = 80 - 100 * abs(s.lr - best) + (seed - 100) * 0.3
    if row == "mylc-cmdp":
        v += {(2.0, -2.0): 0, (2.0, -5.0): 1.0, (4.0, -2.0): 0.5, (4.0, -5.0): -1}[s.eta, s.b]
    if row == "mylc-cmds":
        v += 0.2 if s.eta == 4.0 else 0
    return v


def fake_cells(out, cells, val):
    for j, (row, s, seed) in zip(fmnist.cell_jobs(plan(out), DEMO, "select", cells), cells):
        fake_run(j["dir"], val(row, s, seed), 70)


def test_select_chooses_the_best_mean_validation_accuracy_and_ce_cmdp_follows_mylc_cmdp(tmp_path):
    out = str(tmp_path)
    fake_cells(out, [(row, s, seed) for row in TUNED for s in DEMO.grids[0.4][row] for seed in fmnist.SELECT_SEEDS],
               val_of)
    choice, todo = fmnist.choose(fmnist.load_dir(out), DEMO, 0.4, SELECTED)
    assert choice["ce-zero"]["lr"] == 0.035 and choice["mylc-zero"]["lr"] == 0.07
    assert (choice["mylc-cmds"]["eta"], choice["mylc-cmds"]["b"]) == (4.0, 0.0)
    assert (choice["mylc-cmdp"]["lr"], choice["mylc-cmdp"]["eta"], choice["mylc-cmdp"]["b"]) == (0.1, 2.0, -5.0)
    assert math.isclose(choice["mylc-cmdp"]["val"], 80 + 1.0 + 0.15)  # the mean over the two seeds
    assert set(choice["mylc-cmdp"]) == {"lr", "eta", "b", "val"}  # choice.json's form
    # CE CMD-P has not run: its cells are what is left, at MyLC CMD-P's eta and b
    assert "ce-cmdp" not in choice and {row for row, _ in todo} == {"ce-cmdp"} and len(todo) == len(fmnist.LRS)
    assert all((s.eta, s.b) == (2.0, -5.0) for _, s in todo)
    fake_cells(out, [(row, s, seed) for row, s in todo for seed in fmnist.SELECT_SEEDS], val_of)
    choice, todo = fmnist.choose(fmnist.load_dir(out), DEMO, 0.4, SELECTED)
    assert todo == [] and choice["ce-cmdp"]["lr"] == 0.035
    full = fmnist.derived(choice)
    assert full["control"]["lr"] == 2 * 0.07 and full["cohort"]["eta"] == 2.0 and full["clean"]["lr"] == fmnist.BASE_LR
    runs = fmnist.load_dir(out)
    assert "\n".join(fmnist.settings_table(runs, SELECTED, choice, ("η", "b"))).count("**✓**") == 6
    fmnist.heat_map(runs, str(tmp_path / "heat.png"))
    assert (tmp_path / "heat.png").stat().st_size > 1000


def test_the_demos_grids_are_the_declared_fifty_configurations():
    n = sum(len(DEMO.grids[0.4][r]) for r in TUNED) + len(fmnist.LRS)  # + CE CMD-P's lr
    assert n == 50 and fmnist.LRS == (0.025, 0.035, 0.05, 0.07, 0.1)
    assert all(b2 / b1 == pytest.approx(2 ** 0.5, rel=0.03) for b1, b2 in zip(fmnist.LRS, fmnist.LRS[1:]))
    assert all(b2 / b1 == pytest.approx(2 ** 0.5, rel=0.03) for b1, b2 in zip(fmnist.LADDER, fmnist.LADDER[1:]))
    assert not set(fmnist.SELECT_SEEDS) & set(fmnist.REPORT_SEEDS)


def test_memorisation_timing_and_the_preconditions():
    n = 8
    slow = [0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5]   # a quarter (epoch 2): 0.05; half of 0.5 first at epoch 6
    fast = [0.3, 0.4, 0.45, 0.5, 0.5, 0.5, 0.5, 0.5]     # half first at epoch 1
    assert fmnist.memorisation_timing([{"memorized_a": m, "memorized_b": m} for m in slow]) == (0.5, 0.05, 6, n)
    clean = [fake_rows(80, 85)] * 2
    runs = {"slow": fake_rows(70, 75, slow), "fast": fake_rows(70, 75, fast),
            "mild": fake_rows(78, 70, slow)}  # mild: harm read on validation (2 points), not test (15)
    for kind, ok in (("slow", True), ("fast", False), ("mild", False)):
        lines, holds = fmnist.preconditions({kind: [runs[kind]] * 2}, clean)
        assert holds == ok, lines


def test_the_report_pairs_seeds_and_calls_a_win_only_when_the_interval_is_above_zero(tmp_path):
    out = str(tmp_path)
    choice = fmnist.derived({r: dict(lr=0.05, eta=4.0 if "cmd" in r else None, b=-5.0 if "cmd" in r else None, val=1)
                             for r in SELECTED})
    cells = fmnist.report_cells(DEMO, choice, fmnist.REPORT_SEEDS)
    jobs = fmnist.cell_jobs(plan(out), DEMO, "report", cells)
    assert len(jobs) == (len(DEMO.rows) - len(KNOBS)) * 5  # without the comparators until compare chose them
    for j in jobs:
        row, seed = j["name"].rsplit("-s", 1)
        seed = int(seed)
        base = 70 + seed  # seeds differ a lot; paired differences remove it
        test = {"mylc-cmdp": base + 1 + 0.1 * seed, "mylc-all": base + (1 if seed % 2 else -1)}.get(row, base)
        fake_run(j["dir"], 60, test, peers=3 if row == "cohort" else 2)
    table = "\n".join(fmnist.report_table(fmnist.load_dir(out), DEMO, choice, fmnist.REPORT_SEEDS))
    cmdp = next(line for line in table.splitlines() if line.startswith("| MyLC, CMD-P |"))
    assert "+1.20 [" in cmdp and "**win**" in cmdp and "| 5/5 |" in cmdp
    assert "| +1.40 [" in cmdp  # against all knowledge, paired on the same seeds
    every = next(line for line in table.splitlines() if line.startswith("| MyLC, all knowledge"))
    assert "**win**" not in every and "| 2/5 |" in every
    m, (lo, hi) = stats.interval([1.0, 1.1, 1.2, 1.3, 1.4])
    assert m == pytest.approx(1.2) and hi - m == pytest.approx(2.776 * math.sqrt(0.025) / math.sqrt(5), rel=1e-3)


def test_early_stopping_reads_the_test_accuracy_at_the_best_validation_epoch():
    rows = [dict(val_acc_mean=v, test_acc_mean=t) for v, t in ((50, 60), (70, 65), (70, 66), (60, 80))]
    assert fmnist.early_stopped(rows) == 65


def test_the_readmes_fashion_mnist_numbers_are_the_raw_datas(tmp_path, capsys):
    """Every mean ± std and interval the README quotes for Fashion-MNIST is in the attribution's reports, the η
    rule's or Table 3's, as rendered from the committed raw data (docs/fmnist/runs.jsonl.gz, docs/eta/runs.jsonl.gz,
    docs/table3-fmnist/runs.jsonl.gz) alone."""
    readme = open(os.path.join(HERE, "README.md")).read()
    section = readme[:readme.index("## The paper's equations in code")]  # the bottom line, what the project has shown
    report = ""
    for rate in ("0.4", "0.6"):
        assert fmnist.main(["attribution", "tables", "--rate", rate, "--out", str(tmp_path)]) == 0
        report += open(os.path.join(tmp_path, "attribution", f"r{rate}", "report.md")).read()
    shutil.copy(eta.RAW, tmp_path / "eta.jsonl.gz")
    assert eta.main(["report", "--raw", str(tmp_path / "eta.jsonl.gz")]) == 0
    report += open(tmp_path / "report.md").read()
    report += open(os.path.join(HERE, "docs", "table3-fmnist", "table3-fmnist.md")).read()  # test_sweep renders it
    capsys.readouterr()
    report = report.replace("-", "−")  # the README prints −
    quoted = re.findall(r"\d+\.\d\d ± \d+\.\d\d", section) + re.findall(r"\[[+−]\d+\.\d\d, [+−]\d+\.\d\d\]",
                                                                         section)
    assert len(quoted) >= 8
    for q in quoted:
        assert q in report, q


def test_the_demonstrations_numbers_in_results_md_are_the_raw_datas(tmp_path, capsys):
    """The demonstration's section of docs/results.md quotes no retired run: every mean ± std and interval in it
    is in the 40% attribution report rendered here from docs/fmnist/runs.jsonl.gz, or is the raw data's zero
    knowledge at the demo's lr 0.025 (its cells, and each 40% report row against it, seed by seed)."""
    text = open(os.path.join(HERE, "docs", "results.md")).read()
    section = text[text.index("## Fashion-MNIST: CMD where memorisation is slow"):
                   text.index("## Where CMD has nothing to act on: fast memorisation")]
    assert fmnist.main(["attribution", "tables", "--rate", "0.4", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    known = [open(os.path.join(tmp_path, "attribution", "r0.4", "report.md")).read()]
    raw = fmnist.read_raw(os.path.join(HERE, "docs", "fmnist", "runs.jsonl.gz"), 0.4)
    rows = {}
    for name, line in raw.items():
        if name.startswith("report/"):
            row, seed = name.rsplit("-s", 1)
            rows.setdefault(row, {})[int(seed)] = line["rows"]
    zero = rows["report/zero-lr0.025"]
    known += fmnist.row_cells(zero, raw["report/zero-lr0.025-s0"]["flags"])
    known += [stats.paired(seeds, zero)[0] for seeds in rows.values()]
    known = " ".join(known).replace("-", "−")
    quoted = re.findall(r"\d+\.\d\d ± \d\.\d\d", section) + re.findall(r"\[[+−]\d\.\d\d, [+−]\d\.\d\d\]", section)
    assert len(quoted) >= 8
    for q in quoted:
        assert q in known, q


def test_compare_chooses_each_comparators_lr_and_knob_and_the_report_runs_them(tmp_path):
    out = str(tmp_path)
    cells = [(row, s, seed) for row in KNOBS for s in DEMO.grids[0.4][row] for seed in fmnist.SELECT_SEEDS]
    assert len(cells) == (4 * 3 + 1) * len(fmnist.LRS) * len(fmnist.SELECT_SEEDS)  # four knobs on 3 values, the oracle
    best = {"coteach": Setting(0.05, knob=("--forget-rate", 0.3)), "coteach+": Setting(0.07, knob=("--forget-rate", 0.5)),
            "jocor": Setting(0.1, knob=("--jocor-lambda", 0.85)), "gce-zero": Setting(0.025, knob=("--gce-q", 0.9)),
            "coteach-oracle": Setting(0.035)}
    fake_cells(out, cells, lambda row, s, seed: 80 if s == best[row] else 70)
    runs = fmnist.load_dir(out)
    picked, todo = fmnist.choose(runs, DEMO, 0.4, list(KNOBS))
    assert todo == [] and picked["coteach"]["lr"] == 0.05 and picked["coteach"]["knob"] == ("--forget-rate", 0.3)
    assert picked["jocor"]["knob"] == ("--jocor-lambda", 0.85) and picked["coteach-oracle"]["knob"] is None
    assert "\n".join(fmnist.settings_table(runs, list(KNOBS), picked, ("knob",))).count("**✓**") == 5
    choice = json.loads(json.dumps(picked))  # as choice.json holds it: the knob as a list
    jobs = fmnist.cell_jobs(plan(str(tmp_path / "r")), DEMO, "report", fmnist.report_cells(DEMO, choice, (0,)))
    gce = next(j for j in jobs if j["name"] == "gce-zero-s0")["argv"]
    assert gce[gce.index("--gce-q") + 1] == "0.9" and gce[gce.index("--mode") + 1] == "gce"
    oracle = next(j for j in jobs if j["name"] == "coteach-oracle-s0")["argv"]
    assert oracle[oracle.index("--forget-rate") + 1] == "0.4" and oracle[oracle.index("--lr") + 1] == "0.035"


def test_dry_run_prints_the_stages_train_py_commands_and_writes_nothing(tmp_path, capsys):
    from training import config  # train.py's parser, to check the commands
    out = str(tmp_path / "fm")
    assert fmnist.main(["demo", "select", "--out", out, "--dry-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == (sum(len(DEMO.grids[0.4][r]) for r in TUNED) + 1) * len(fmnist.SELECT_SEEDS)  # + clean
    for line in lines[:3]:
        config.resolve(config.get_args(shlex.split(line)[2:]))  # train.py accepts it
    flags = [[a for a in shlex.split(line) if a.startswith("--")] for line in lines]
    assert all(len(f) == len(set(f)) for f in flags)  # each flag once
    clean = shlex.split(next(line for line in lines if "/clean-" in line))
    assert clean[clean.index("--noise") + 1] == "none" and clean[clean.index("--rate") + 1] == "0"
    assert not os.path.exists(out)


def published_runs():
    """The demo's selection runs as docs/fmnist/select.md prints them (each seed's validation accuracy)."""
    label = {DEMO.rows[r][0]: r for r in SELECTED}
    runs = {}
    for line in open(os.path.join(HERE, "docs", "fmnist", "select.md")):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0] in label:
            number = lambda c: None if c == "–" else float(c)  # noqa: E731
            s = Setting(float(cells[1]), number(cells[2]), number(cells[3]))
            for seed, v in zip(fmnist.SELECT_SEEDS, cells[5].split()):
                runs[f"select/{s.name(label[cells[0]])}-s{seed}"] = dict(rows=[dict(val_acc_mean=float(v))],
                                                                         diverged=False)
    return runs


def test_the_published_selection_and_choice_render_again_from_its_seeds_values():
    """docs/fmnist/select.md's table and docs/fmnist/choice.json's settings, again from the per-seed values that
    table prints (the run folders themselves are not committed)."""
    runs = published_runs()
    choice, todo = fmnist.choose(runs, DEMO, 0.4, SELECTED)
    saved = json.load(open(os.path.join(HERE, "docs", "fmnist", "choice.json")))
    assert todo == [] and {r: fmnist.setting_of(c) for r, c in fmnist.derived(choice).items()} == {
        r: fmnist.setting_of(c) for r, c in saved.items() if r != "command"}
    table = fmnist.settings_table(runs, SELECTED, choice, ("η", "b"))
    published = open(os.path.join(HERE, "docs", "fmnist", "select.md")).read().splitlines()
    at = published.index(table[0])
    assert len(table) == 52 and table[:2] == published[at:at + 2]
    for line, was in zip(table[2:], published[at + 2:]):  # the mean of two rounded values may round the other way
        line, was = line.split(" | "), was.split(" | ")
        assert line[:4] + line[5:] == was[:4] + was[5:] and abs(float(line[4]) - float(was[4])) <= 0.0100001, was


# ---------------------------------------------------------------- the attribution: the edge and tie rules
def scored(values, diverged=()):
    """runs as load_dir gives them: {lr: validation accuracy, or a list of one per selection seed} of one row."""
    runs = {}
    for lr, v in values.items():
        for i, s in enumerate(fmnist.SELECT_SEEDS):
            runs[f"select/zero-lr{lr:g}-s{s}"] = dict(rows=[dict(val_acc_mean=v[i] if isinstance(v, list) else v)],
                                                       diverged=lr in diverged)
    return runs


def choose(runs, rate=0.6, rows=None):
    """The attribution's choice as its stages make it: the rows a report of `rows` needs (None: all)."""
    need = fmnist.needs(rows)
    return fmnist.choose(runs, ATTRIBUTION, rate, [r for r in ATTRIBUTION.grids[rate] if need is None or r in need])


@pytest.fixture
def one_row(monkeypatch):
    monkeypatch.setitem(ATTRIBUTION.grids, 0.6, {"zero": (0.05, 0.07, 0.1)})


def test_an_interior_choice_stands(one_row):
    choice, todo = choose(scored({0.05: 70, 0.07: 72, 0.1: 71}))
    assert todo == [] and choice["zero"]["lr"] == 0.07 and choice["zero"]["edge"] is None


def test_a_choice_on_an_edge_extends_the_grid_by_one_sqrt2_step_that_way(one_row):
    assert choose(scored({0.05: 70, 0.07: 71, 0.1: 72}))[1] == [("zero", Setting(0.14))]
    assert choose(scored({0.05: 73, 0.07: 71, 0.1: 72}))[1] == [("zero", Setting(0.035))]
    assert choose(scored({0.05: 70, 0.07: 71}))[1] == [("zero", Setting(0.1))]  # the declared grid first


def test_a_diverged_step_makes_the_choice_interior_and_the_cap_marks_an_edge(one_row):
    choice, todo = choose(scored({0.05: 70, 0.07: 71, 0.1: 72, 0.14: -1}, diverged={0.14}))
    assert todo == [] and choice["zero"]["lr"] == 0.1 and choice["zero"]["edge"] is None
    rising = {0.05: 70, 0.07: 71, 0.1: 72, 0.14: 73, 0.2: 74, 0.28: 75}  # EXTEND = 3 steps beyond 0.1
    choice, todo = choose(scored(rising))
    assert todo == [] and choice["zero"] == dict(lr=0.28, val=75, edge="top", es_lr=0.28, tie=None)


def test_the_best_two_within_one_standard_error_tie_and_the_lr_nearer_the_base_is_kept(monkeypatch):
    monkeypatch.setitem(ATTRIBUTION.grids, 0.6, {"zero": (0.05, 0.07, 0.1, 0.14)})
    base = {0.05: 60, 0.07: [70.5, 71], 0.14: 65}
    # 0.1 leads by 0.25, its paired differences 1.5 and -1: s.e. 1.25 > 0.25, a tie; 0.07 is nearer 0.05
    choice, todo = choose(scored({**base, 0.1: [72, 70]}))
    assert todo == [] and (choice["zero"]["lr"], choice["zero"]["tie"], choice["zero"]["val"]) == (0.07, 0.1, 70.75)
    # differences 1.5 and 0.5: a lead of 1 against an s.e. of 0.5, no tie
    choice, _ = choose(scored({**base, 0.1: [72, 71.5]}))
    assert (choice["zero"]["lr"], choice["zero"]["tie"]) == (0.1, None)
    # the best nearer the base lr stays, and names what it tied with
    choice, _ = choose(scored({**base, 0.07: [71, 70.5], 0.1: [70, 71]}))
    assert (choice["zero"]["lr"], choice["zero"]["tie"]) == (0.07, 0.1)
    runs = scored({**base, 0.1: [72, 70]})
    table = "\n".join(fmnist.select_table(runs, 0.6, choose(runs)[0]))
    assert "| 0.07 | 70.75 ± 0.25 | 70.50 71.00 | run | **✓** (a tie with 0.1: nearer the base lr) |" in table


def test_the_demos_selection_has_neither_the_edge_nor_the_tie_rule():
    # the attribution's rules would tie 0.1 (72, 70) with 0.07 (70.5, 71) and keep 0.07; the demo keeps the best
    runs = {k.replace("zero", "mylc-zero"): v for k, v in scored({0.025: 60, 0.035: 61, 0.05: 62, 0.07: [70.5, 71],
                                                                  0.1: [72, 70]}).items()}
    choice, todo = fmnist.choose(runs, DEMO, 0.4, ["mylc-zero"])
    assert todo == [] and choice["mylc-zero"] == dict(lr=0.1, eta=None, b=None, val=71.0)


def test_rows_select_only_what_their_report_needs():
    runs = {f"select/zero-lr{lr:g}-s{s}": dict(rows=[dict(val_acc_mean=70 - abs(lr - 0.14))], diverged=False)
            for lr in (0.05, 0.07, 0.1, 0.14, 0.2, 0.28) for s in fmnist.SELECT_SEEDS}
    runs.update({k.replace("zero", "cmdp"): v for k, v in runs.items()})
    choice, todo = choose(runs, 0.6, ["zero", "clean"])
    assert set(choice) == {"zero"} and choice["zero"]["lr"] == 0.14 and todo == []  # nothing of the other rows
    cells = fmnist.report_cells(ATTRIBUTION, {"zero": dict(lr=0.14)}, fmnist.REPORT_SEEDS, ["zero", "clean"])
    assert {(r, s.lr) for r, s, _ in cells} == {("zero", 0.14), ("clean", fmnist.BASE_LR)} and len(cells) == 7
    assert fmnist.needs(["step", "mean", "clean"]) == {"cmdp"}  # both follow CMD-P's lr
    choice, todo = choose(runs, 0.6, ["step"])
    assert set(choice) == {"cmdp"} and todo == []
    assert choose(runs, 0.6)[1][0] == ("all", Setting(0.05))  # without rows, every row's grid


def test_a_diverged_setting_scores_minus_infinity_and_reads_diverged(one_row):
    runs = scored({0.05: 70, 0.07: 71, 0.1: 72, 0.14: 0}, diverged={0.14})
    assert fmnist.val_scores(runs, ATTRIBUTION, 0.6, "zero", Setting(0.14))[0] == -math.inf
    choice, _ = choose(runs)
    assert any("| 0.14 | diverged |" in line for line in fmnist.select_table(runs, 0.6, choice))


def test_the_published_selection_counts_at_40_percent():
    got = fmnist.published()
    assert got["zero", 0.025] == [72.94, 70.88] and got["cmdp", 0.1] == [78.38, 77.62]  # docs/fmnist/select.md
    assert ("all", 0.1) in got and len([k for k in got if k[0] == "cmdp"]) == 5  # eta 2, b -5 only


@pytest.mark.parametrize("rate", ["0.4", "0.6"])
def test_the_published_attribution_tables_render_unchanged_from_the_raw_data(tmp_path, rate, capsys):
    out = str(tmp_path / "fm")
    assert fmnist.main(["attribution", "tables", "--rate", rate, "--out", out]) == 0
    capsys.readouterr()
    for name in ("select.md", "report.md"):
        got = open(os.path.join(out, "attribution", f"r{rate}", name)).read().replace(out, "docs/fmnist")
        assert got == open(os.path.join(HERE, "docs", "fmnist", "attribution", f"r{rate}", name)).read(), name


# ---------------------------------------------------------------- the pipeline end to end, on tiny real files
def test_every_stage_end_to_end_on_tiny_files_and_the_tables_from_the_raw_data_alone(tmp_path, monkeypatch):
    write_idx(tmp_path / "data", n_train=160, n_test=40)
    monkeypatch.setattr(fmnist, "BASE", TINY_BASE)
    monkeypatch.setitem(ATTRIBUTION.grids, 0.6, {row: (0.05,) for row in ("zero", "all", "cmdp", "shuffled")})
    monkeypatch.setattr(fmnist, "EXTEND", 0)
    monkeypatch.setattr(fmnist, "SELECT_SEEDS", (100,))
    monkeypatch.setattr(fmnist, "REPORT_SEEDS", (0, 1))
    out = str(tmp_path / "sweeps")
    base = ["--rate", "0.6", "--out", out, "--data-dir", str(tmp_path / "data"), "--batched"]
    assert fmnist.main(["attribution", "all", *base, "--", "--device", "cpu"]) == 0
    where = os.path.join(out, "attribution", "r0.6")
    choice = json.load(open(os.path.join(where, "choice.json")))
    assert {r: c["edge"] for r, c in choice.items() if r != "command"} == dict.fromkeys(choice.keys() - {"command"},
                                                                                         "top")  # no extension allowed
    report = open(os.path.join(where, "report.md")).read()
    for label in ("MyLC, CMD-P's count at random positions", "step-size control", "--peer-weight mean",
                  "| MyLC, CMD-P (η = 2, b = −5) − MyLC, CMD-P's count at random positions |", "Preconditions"):
        assert label in report
    runs = fmnist.load_dir(where)
    assert len(runs) == 4 + 6 * 2 + 2 and not any(r["diverged"] for r in runs.values())
    assert all(r["provenance"]["engine"] == "tools.batched" for r in runs.values())
    step = runs["report/step-lr0.1-s0"]["flags"]  # twice CMD-P's lr, zero knowledge
    assert step[step.index("--lr") + 1] == "0.1" and step[step.index("--mode") + 1] == "zero"
    shuffled = runs["report/shuffled-lr0.05-s1"]["flags"]
    assert shuffled[shuffled.index("--select") + 1] == "shuffled" and shuffled[shuffled.index("--rate") + 1] == "0.6"
    # a second invocation trains nothing and writes the same tables
    assert fmnist.main(["attribution", "all", *base, "--", "--device", "cpu"]) == 0
    assert open(os.path.join(where, "report.md")).read().split("`python")[0] == report.split("`python")[0]
    # the raw data: one line a run, and the tables again from it alone, the same
    packed = str(tmp_path / "runs.jsonl.gz")
    assert fmnist.main(["attribution", "pack", "--out", out, "--from", packed]) == 0
    assert fmnist.main(["attribution", "pack", "--out", out, "--from", packed]) == 0  # again: not twice
    with gzip.open(packed, "rt") as f:
        lines = [json.loads(line) for line in f]
    assert len(lines) == len(runs) and lines[0]["provenance"]["torch"] and len(lines[0]["rows"]) == 2
    again = str(tmp_path / "again")
    assert fmnist.main(["attribution", "tables", "--rate", "0.6", "--out", again, "--from", packed]) == 0
    rendered = open(os.path.join(again, "attribution", "r0.6", "report.md")).read()
    assert rendered.split("Rendered from")[0] == report.split("`python")[0]
    assert f": {len(runs)} on " in rendered and ", torch 2." in rendered  # where the runs ran, from their config.json


def test_the_demos_regime_runs_train_py_and_says_whether_the_preconditions_hold(tmp_path, monkeypatch):
    write_idx(tmp_path / "data", n_train=160, n_test=40)
    monkeypatch.setattr(fmnist, "BASE", TINY_BASE)
    monkeypatch.setattr(fmnist, "SELECT_SEEDS", (100,))
    out = str(tmp_path / "demo")
    argv = ["demo", "regime", "--out", out, "--data-dir", str(tmp_path / "data"), "--no-batched", "--device", "cpu"]
    assert fmnist.main(argv) == 0
    runs = fmnist.load_dir(out)
    assert len(runs) == 3  # CE and MyLC zero knowledge, clean labels, one seed
    assert all(r["provenance"].get("engine") != "tools.batched" for r in runs.values())  # train.py processes
    text = open(os.path.join(out, "regime.md")).read()
    assert "- CE, zero knowledge at lr 0.05 (n=1): harm" in text and "All hold: " in text


@pytest.mark.parametrize("argv,message", [
    (["attribution", "report", "--rate", "0.3"], "--rate 0.3: the declared grids are for 0.4, 0.5, 0.6"),
    (["attribution", "report", "--rows", "cmdp,nope"], "--rows: unknown nope"),
    (["attribution", "select", "--rate", "0.6", "--published-choice"], "--published-choice goes with attribution"),
    (["attribution", "report", "--jobs", "0"], "--jobs must be at least 1"),
    (["attribution", "regime"], "attribution has the stages select, report, all, pack, tables, agreement, not regime"),
    (["demo", "tables"], "demo has the stages regime, select, compare, report, not tables"),
    (["demo", "select", "--rate", "0.6"], "--rate 0.6: the declared grids are for 0.4"),
    (["demo", "report"], "choice.json not found"),
    (["demo", "select", "--noise", "pair"], "--noise pair: only the recipe declares pair-flip noise"),
    (["recipe", "select"], "recipe has the stages wave, pack, report, not select"),
    (["recipe", "wave", "--rate", "0.6"], "the recipe is declared in studies/recipe.py"),
    (["recipe", "report", "--noise", "pair"], "--noise is the wave's"),
    (["attribution", "select", "--mps"], "--mps: the recipe's flags"),
    (["recipe", "pack"], "recipe pack takes a wave's folder"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        fmnist.main(argv + ["--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and message in err
    assert not (tmp_path / "out").exists()


def test_every_fmnist_command_shown_in_the_docs_is_accepted(tmp_path, capsys):
    shown = [c for text in readme_and_docs().values() for c in shown_commands(text, "-m studies.fmnist")]
    assert any("--rate 0.6" in c for c in shown) and any("--published-choice" in c for c in shown)
    assert any(" demo report " in c for c in shown)
    fm = tmp_path / "fm"  # the demo's compare and report read choice.json: the published one
    fm.mkdir()
    (fm / "choice.json").write_text(open(os.path.join(HERE, "docs", "fmnist", "choice.json")).read())
    for line in shown:
        argv = shlex.split(line)[3:]
        if argv[1] in ("pack", "tables"):  # they write: their arguments only
            with pytest.raises(SystemExit) as e:
                fmnist.main(argv + ["--help"])
            assert e.value.code == 0
            continue
        cut = argv.index("--") if "--" in argv else len(argv)
        out = str(fm) if argv[0] == "demo" else "/nonexistent/never"
        assert fmnist.main(argv[:cut] + ["--dry-run", "--out", out] + argv[cut:]) == 0, line
    capsys.readouterr()


def test_the_perf_part_of_many_runs_trains_the_demonstrations_regime():
    from tools import perf  # torch's import: only this test needs the perf tool
    assert perf.REGIME == fmnist.BASE  # written twice, so that no tool imports a study
