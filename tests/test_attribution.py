"""tools/attribution.py: the edge rule on fake scores, then every stage end to end on tiny Fashion-MNIST files in
their real format (real train.py runs), the raw data packed and the tables rendered again from it alone."""
import argparse
import gzip
import json
import math
import os
import shlex

import pytest
from test_faults import readme_and_docs, shown_commands
from test_mnist import write_idx

from tools import attribution, attribution_grid, demo, demo_grid


def scored(values, diverged=()):
    """runs as load_dir gives them: {lr: validation accuracy, or a list of one per selection seed} of one row."""
    runs = {}
    for lr, v in values.items():
        for i, s in enumerate(attribution_grid.SELECT_SEEDS):
            runs[f"select/zero-lr{lr:g}-s{s}"] = dict(rows=[dict(val_acc_mean=v[i] if isinstance(v, list) else v)],
                                                       diverged=lr in diverged)
    return runs


@pytest.fixture
def one_row(monkeypatch):
    monkeypatch.setitem(attribution.GRIDS, 0.6, {"zero": (0.05, 0.07, 0.1)})


def test_an_interior_choice_stands(one_row):
    choice, todo = attribution.choose(scored({0.05: 70, 0.07: 72, 0.1: 71}), 0.6)
    assert todo == [] and choice["zero"]["lr"] == 0.07 and choice["zero"]["edge"] is None


def test_a_choice_on_an_edge_extends_the_grid_by_one_sqrt2_step_that_way(one_row):
    assert attribution.choose(scored({0.05: 70, 0.07: 71, 0.1: 72}), 0.6)[1] == [("zero", 0.14)]
    assert attribution.choose(scored({0.05: 73, 0.07: 71, 0.1: 72}), 0.6)[1] == [("zero", 0.035)]
    assert attribution.choose(scored({0.05: 70, 0.07: 71}), 0.6)[1] == [("zero", 0.1)]  # the declared grid first


def test_a_diverged_step_makes_the_choice_interior_and_the_cap_marks_an_edge(one_row):
    choice, todo = attribution.choose(scored({0.05: 70, 0.07: 71, 0.1: 72, 0.14: -1}, diverged={0.14}), 0.6)
    assert todo == [] and choice["zero"]["lr"] == 0.1 and choice["zero"]["edge"] is None
    rising = {0.05: 70, 0.07: 71, 0.1: 72, 0.14: 73, 0.2: 74, 0.28: 75}  # EXTEND = 3 steps beyond 0.1
    choice, todo = attribution.choose(scored(rising), 0.6)
    assert todo == [] and choice["zero"] == dict(lr=0.28, val=75, edge="top", es_lr=0.28, tie=None)


def test_the_best_two_within_one_standard_error_tie_and_the_lr_nearer_the_base_is_kept(monkeypatch):
    monkeypatch.setitem(attribution.GRIDS, 0.6, {"zero": (0.05, 0.07, 0.1, 0.14)})
    base = {0.05: 60, 0.07: [70.5, 71], 0.14: 65}
    # 0.1 leads by 0.25, its paired differences 1.5 and -1: s.e. 1.25 > 0.25, a tie; 0.07 is nearer 0.05
    choice, todo = attribution.choose(scored({**base, 0.1: [72, 70]}), 0.6)
    assert todo == [] and (choice["zero"]["lr"], choice["zero"]["tie"], choice["zero"]["val"]) == (0.07, 0.1, 70.75)
    # differences 1.5 and 0.5: a lead of 1 against an s.e. of 0.5, no tie
    choice, _ = attribution.choose(scored({**base, 0.1: [72, 71.5]}), 0.6)
    assert (choice["zero"]["lr"], choice["zero"]["tie"]) == (0.1, None)
    # the best nearer the base lr stays, and names what it tied with
    choice, _ = attribution.choose(scored({**base, 0.07: [71, 70.5], 0.1: [70, 71]}), 0.6)
    assert (choice["zero"]["lr"], choice["zero"]["tie"]) == (0.07, 0.1)
    table = "\n".join(attribution.select_table(scored({**base, 0.1: [72, 70]}), 0.6,
                                                attribution.choose(scored({**base, 0.1: [72, 70]}), 0.6)[0]))
    assert "| 0.07 | 70.75 ± 0.25 | 70.50 71.00 | run | **✓** (a tie with 0.1: nearer the base lr) |" in table


def test_rows_select_only_what_their_report_needs():
    runs = {f"select/zero-lr{lr:g}-s{s}": dict(rows=[dict(val_acc_mean=70 - abs(lr - 0.14))], diverged=False)
            for lr in (0.05, 0.07, 0.1, 0.14, 0.2, 0.28) for s in attribution_grid.SELECT_SEEDS}
    runs.update({k.replace("zero", "cmdp"): v for k, v in runs.items()})
    choice, todo = attribution.choose(runs, 0.6, attribution_grid.needs(["zero", "clean"]))
    assert set(choice) == {"zero"} and choice["zero"]["lr"] == 0.14 and todo == []  # nothing of the other rows
    cells = attribution.report_cells(0.6, {"zero": dict(lr=0.14)}, ["zero", "clean"])
    assert {(r, lr) for r, lr, _ in cells} == {("zero", 0.14), ("clean", demo_grid.BASE_LR)} and len(cells) == 7
    assert attribution_grid.needs(["step", "mean", "clean"]) == {"cmdp"}  # both follow CMD-P's lr
    choice, todo = attribution.choose(runs, 0.6, attribution_grid.needs(["step"]))
    assert set(choice) == {"cmdp"} and todo == []
    assert attribution.choose(runs, 0.6)[1][0] == ("all", 0.05)  # without rows, every row's grid


def test_a_diverged_setting_scores_minus_infinity_and_reads_diverged(one_row):
    runs = scored({0.05: 70, 0.07: 71, 0.1: 72, 0.14: 0}, diverged={0.14})
    assert attribution.val_scores(runs, 0.6, "zero", 0.14)[0] == -math.inf
    choice, _ = attribution.choose(runs, 0.6)
    assert any("| 0.14 | diverged |" in line for line in attribution.select_table(runs, 0.6, choice))


def test_the_published_selection_counts_at_40_percent():
    got = attribution_grid.published()
    assert got["zero", 0.025] == [72.94, 70.88] and got["cmdp", 0.1] == [78.38, 77.62]  # docs/fmnist/select.md
    assert ("all", 0.1) in got and len([k for k in got if k[0] == "cmdp"]) == 5  # eta 2, b -5 only


def test_every_stage_end_to_end_on_tiny_files_and_the_tables_from_the_raw_data_alone(tmp_path, monkeypatch):
    write_idx(tmp_path / "data", n_train=160, n_test=40)
    monkeypatch.setattr(demo_grid, "BASE", ["--arch", "mlp", "--subset", "120", "--subset-seed", "0", "--val-split", "0.2",
                                       "--augment", "none", "--weight-decay", "0", "--epochs", "2", "--milestones", "1",
                                       "--batch-size", "32", "--noise", "sym", "--rate", "0.4"])
    monkeypatch.setitem(attribution.GRIDS, 0.6, {row: (0.05,) for row in ("zero", "all", "cmdp", "shuffled")})
    monkeypatch.setattr(attribution_grid, "EXTEND", 0)
    monkeypatch.setattr(attribution_grid, "SELECT_SEEDS", (100,))
    monkeypatch.setattr(attribution_grid, "REPORT_SEEDS", (0, 1))
    out = str(tmp_path / "sweeps")
    base = ["--rate", "0.6", "--out", out, "--data-dir", str(tmp_path / "data")]
    assert attribution.main(["all", *base, "--", "--device", "cpu"]) == 0
    where = os.path.join(out, "attribution", "r0.6")
    choice = json.load(open(os.path.join(where, "choice.json")))
    assert {r: c["edge"] for r, c in choice.items() if r != "command"} == dict.fromkeys(choice.keys() - {"command"},
                                                                                         "top")  # no extension allowed
    report = open(os.path.join(where, "report.md")).read()
    for label in ("MyLC, CMD-P's count at random positions", "step-size control", "--peer-weight mean",
                  "| MyLC, CMD-P (η = 2, b = −5) − MyLC, CMD-P's count at random positions |", "Preconditions"):
        assert label in report
    runs = attribution.load_dir(out, 0.6)
    assert len(runs) == 4 + 6 * 2 + 2 and not any(r["diverged"] for r in runs.values())
    step = runs["report/step-lr0.1-s0"]["flags"]  # twice CMD-P's lr, zero knowledge
    assert step[step.index("--lr") + 1] == "0.1" and step[step.index("--mode") + 1] == "zero"
    shuffled = runs["report/shuffled-lr0.05-s1"]["flags"]
    assert shuffled[shuffled.index("--select") + 1] == "shuffled" and shuffled[shuffled.index("--rate") + 1] == "0.6"
    # a second invocation trains nothing and writes the same tables
    assert attribution.main(["all", *base, "--", "--device", "cpu"]) == 0
    assert open(os.path.join(where, "report.md")).read().split("`python")[0] == report.split("`python")[0]
    # the raw data: one line a run, and the tables again from it alone, the same
    packed = str(tmp_path / "runs.jsonl.gz")
    assert attribution.main(["pack", "--out", out, "--from", packed]) == 0
    assert attribution.main(["pack", "--out", out, "--from", packed]) == 0  # again: the same runs, not twice
    with gzip.open(packed, "rt") as f:
        lines = [json.loads(line) for line in f]
    assert len(lines) == len(runs) and lines[0]["provenance"]["torch"] and len(lines[0]["rows"]) == 2
    again = str(tmp_path / "again")
    assert attribution.main(["tables", "--rate", "0.6", "--out", again, "--from", packed]) == 0
    rendered = open(os.path.join(again, "attribution", "r0.6", "report.md")).read()
    assert rendered.split("Rendered from")[0] == report.split("`python")[0]
    assert f": {len(runs)} on " in rendered and ", torch 2." in rendered  # where the runs ran, from their config.json


@pytest.mark.parametrize("argv,message", [
    (["report", "--rate", "0.3"], "--rate 0.3: the declared grids are for 0.4, 0.5, 0.6"),
    (["report", "--rows", "cmdp,nope"], "--rows: unknown nope"),
    (["select", "--rate", "0.6", "--published-choice"], "--published-choice goes with report or tables --rate 0.4"),
    (["report", "--jobs", "0"], "--jobs must be at least 1"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        attribution.main(argv + ["--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and message in err
    assert not (tmp_path / "out").exists()


def test_every_attribution_command_shown_in_the_docs_is_accepted(capsys):
    shown = [c for text in readme_and_docs().values() for c in shown_commands(text, "-m tools.attribution")]
    assert any("--rate 0.6" in c for c in shown) and any("--published-choice" in c for c in shown)
    for line in shown:
        argv = shlex.split(line)[3:]
        if argv[0] in ("pack", "tables"):  # they write: their arguments only
            with pytest.raises(SystemExit) as e:
                attribution.main(argv + ["--help"])
            assert e.value.code == 0
            continue
        cut = argv.index("--") if "--" in argv else len(argv)
        assert attribution.main(argv[:cut] + ["--dry-run", "--out", "/nonexistent/never"] + argv[cut:]) == 0, line
    capsys.readouterr()


def test_the_stages_run_through_tools_batched(tmp_path, monkeypatch):
    write_idx(tmp_path / "data", n_train=160, n_test=40)
    monkeypatch.setattr(demo_grid, "BASE", ["--arch", "mlp", "--subset", "120", "--subset-seed", "0", "--val-split", "0.2",
                                       "--augment", "none", "--weight-decay", "0", "--epochs", "2", "--milestones", "1",
                                       "--batch-size", "32", "--noise", "sym", "--rate", "0.4"])
    monkeypatch.setitem(attribution.GRIDS, 0.6, {row: (0.05,) for row in ("zero", "cmdp")})
    monkeypatch.setattr(attribution_grid, "EXTEND", 0)
    monkeypatch.setattr(attribution_grid, "SELECT_SEEDS", (100, 101))
    out = str(tmp_path / "sweeps")
    argv = ["select", "--rate", "0.6", "--out", out, "--data-dir", str(tmp_path / "data"), "--batched"]
    assert attribution.main([*argv, "--", "--device", "cpu"]) == 0
    runs = attribution.load_dir(out, 0.6)
    assert len(runs) == 4 and all(r["provenance"]["engine"] == "tools.batched" for r in runs.values())
    # tools.demo's stages take the same runner
    plan = demo_grid.Plan(os.path.join(out, "demo"), demo_grid.data_flags(str(tmp_path / "data")),
                          ["--device", "cpu", "--workers", "0"])
    todo = [plan.job("select", "zero", ["--mode", "zero", "--lr", "0.05"], s) for s in (0, 1)]
    assert demo.run(todo, argparse.Namespace(jobs=1, device="cpu", batched=True)) == ({}, 2)
    assert all(json.load(open(os.path.join(j["dir"], "config.json")))["provenance"]["engine"] == "tools.batched"
               for j in todo)
