"""studies/recipe.py: the paper's recipe wave by wave. The declaration's commands (each flag once, the appendix's SGD
for every row, the next unrun seeds, pair-flip after three symmetric seeds); a wave stopped by SIGTERM keeps its
finished runs and packs the others as cut short (real train.py runs on tiny Fashion-MNIST files in their real
format); the report's preconditions and its gated answer computed from the runs' own numbers. The GPU command
that runs a wave, and what comes back of it: tests/test_gpu_check.py."""
import gzip
import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
from test_mnist import write_idx

from studies import fmnist, recipe
from tools.stats import interval
from training import config

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dry_run(capsys, *argv):
    assert fmnist.main(["recipe", "wave", "--dry-run", *argv]) == 0
    return [shlex.split(line)[2:] for line in capsys.readouterr().out.strip().splitlines()]


def test_the_waves_commands_are_the_declaration_each_flag_once(tmp_path, capsys):
    commands = dry_run(capsys, "--from", str(tmp_path / "none.jsonl.gz"))
    assert len(commands) == 5
    rows = {}
    for argv in commands:
        flags = [a for a in argv if a.startswith("--")]
        assert len(flags) == len(set(flags)), argv  # each flag once
        a = config.resolve(config.get_args(argv))
        assert (a.dataset, a.arch, a.subset, a.subset_seed, a.val_split, a.augment) == (
            "fashionmnist", "resnet18,resnet18", 8000, 0, 0.1, "paper")
        assert (a.lr, a.momentum, a.weight_decay, a.batch_size, a.epochs, list(a.milestones), a.lr_decay) == (
            0.1, 0.9, 5e-4, 128, 60, [30, 48], 0.1)  # the appendix's SGD, the same for every row
        assert (a.noise, a.rate, a.seed, a.graph) == ("sym", 0.4, 0, "off")
        rows[os.path.basename(a.out)] = (a.mode, a.lc, a.eta, a.b)
    assert rows == {"ce-zero-s0": ("zero", "ce", float("inf"), 0.0), "mylc-zero-s0": ("zero", "mylc", float("inf"), 0.0),
                    "mylc-all-s0": ("all", "mylc", 1.0, 0.0), "mylc-cmds-s0": ("static", "mylc", 4.0, 0.0),
                    "mylc-cmdp-s0": ("progressive", "mylc", 4.0, -5.0)}  # the project's Table 1 eta and b


def packed(size, noise, seeds, rows=None, state="finished"):
    return [dict(wave="w", size=size, noise=noise, rate=0.4, row=row, seed=s, state=state, flags=[], rows=[])
            for s in seeds for row in rows or recipe.REGIMES[size].rows]


def test_each_wave_takes_the_lowest_unfinished_seeds_and_pair_noise_after_three_symmetric(tmp_path, capsys):
    lines = packed("gpu", "sym", (0, 2)) + packed("gpu", "sym", (1,), ("ce-zero",)) + packed("gpu", "sym", (1,),
                                                                                           state="cut short")
    rest = [(row, 1) for row in recipe.ORDER if row != "ce-zero"]  # seed 1 lacks four rows: only those run
    assert recipe.next_wave(lines, "gpu", "auto", 2) == ("sym", [1, 3], rest + [(row, 3) for row in recipe.ORDER])
    assert recipe.next_wave(lines + packed("gpu", "sym", (1,)), "gpu", "auto", 1)[:2] == ("pair", [0])
    assert recipe.next_wave(lines, "gpu", "pair", 1)[:2] == ("pair", [0])
    assert recipe.next_wave(packed("toy", "sym", (0, 1, 2)), "gpu", "auto", 1)[:2] == ("sym", [0])  # sizes apart
    path = tmp_path / "raw.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in lines)
    got = dry_run(capsys, "--from", str(path), "--seeds", "2")
    assert [(os.path.basename(a[a.index("--out") + 1])) for a in got] == [f"{r}-s{s}" for r, s in rest] + [
        f"{row}-s3" for row in recipe.ORDER]  # what matters most first


def test_a_wave_stopped_by_sigterm_keeps_its_finished_runs_and_packs_the_rest_as_cut_short(tmp_path, capsys):
    write_idx(tmp_path / "data", n_train=300, n_test=60)
    wave_dir = tmp_path / "wave"
    p = subprocess.Popen([sys.executable, "-m", "studies.fmnist", "recipe", "wave", "--size", "toy", "--device", "cpu",
                          "--jobs", "1", "--out", str(wave_dir), "--data-dir", str(tmp_path / "data"), "--from",
                          str(tmp_path / "none.jsonl.gz")], cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    deadline = time.time() + 300
    while not (wave_dir / "ce-zero-s0" / "summary.json").exists() and time.time() < deadline and p.poll() is None:
        time.sleep(0.2)
    p.send_signal(signal.SIGTERM)  # as `timeout` stops it; the second run has started, or is about to
    assert p.wait(timeout=120) == 1, p.stdout.read()
    runs = json.loads((wave_dir / "wave.json").read_text())["runs"]
    assert [runs[f"{row}-s0"]["state"] for row in ("ce-zero", "mylc-zero", "mylc-cmdp")] == [
        "finished", "cut short", "cut short"]  # the third never started
    raw = str(tmp_path / "raw.jsonl.gz")
    assert fmnist.main(["recipe", "pack", str(wave_dir), "--from", raw]) == 0
    assert sorted((r["row"], r["state"]) for r in recipe.read(raw)) == [
        ("ce-zero", "finished"), ("mylc-cmdp", "cut short"), ("mylc-zero", "cut short")]
    assert fmnist.main(["recipe", "report", "--size", "toy", "--from", raw]) == 0
    text = capsys.readouterr().out
    assert "| MyLC, CMD-P (η = 4, b = −5) | 0 | not run |" in text and "| CE, zero knowledge | 1 |" in text
    assert "Not in any table: mylc-cmdp-s0 (cut short after 0 epochs" in text and "mylc-zero-s0 (cut short" in text
    before = open(raw, "rb").read()
    with pytest.raises(SystemExit) as e:  # a wave packed twice: one line, the raw data unchanged
        fmnist.main(["recipe", "pack", str(wave_dir), "--from", raw])
    assert e.value.code == 2 and "is packed in" in capsys.readouterr().err and open(raw, "rb").read() == before
    with pytest.raises(SystemExit) as e:  # a folder that holds a wave takes no second one
        fmnist.main(["recipe", "wave", "--size", "toy", "--out", str(wave_dir), "--data-dir", str(tmp_path / "data")])
    assert e.value.code == 2 and "holds a wave already" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["pack", "{tmp}"], "no wave.json in {tmp} nor in {tmp}/wave"),
    (["report", "--from", "{tmp}/nowhere/raw.jsonl.gz"], "its folder does not exist"),
    (["wave", "--budget", "-5"], "--budget positive"),
    (["wave", "--batched"], "tools.batched refuses"),
    (["wave", "--out", "{tmp}/w", "--device", "cuda"], "--device cuda"),
    (["wave", "--out", "{tmp}/w", "--data-dir", "{tmp}/nothing"], "not found"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, message):
    if "cuda" in argv and __import__("torch").cuda.is_available():
        pytest.skip("a GPU is here")
    (tmp_path / "data").mkdir()
    argv = [a.format(tmp=tmp_path) for a in argv]
    argv += [] if "--from" in argv else ["--from", str(tmp_path / "raw.jsonl.gz")]
    argv += [] if "--data-dir" in argv or argv[0] != "wave" else ["--data-dir", str(tmp_path / "data")]
    with pytest.raises(SystemExit) as e:
        fmnist.main(["recipe", *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and message.format(tmp=tmp_path) in err, err
    assert sorted(os.listdir(tmp_path)) == ["data"]


def rows_of(val, test, memorised, epochs=4):
    """Metrics rows: validation accuracy `val` per epoch, the test accuracy `test` at the last."""
    return [dict(epoch=e + 1, val_acc_mean=v, test_acc_mean=test if e == epochs - 1 else 10.0 + e,
                 memorized_a=memorised, memorized_b=memorised, selected_a2b=0.1, selected_b2a=0.1,
                 precision_a2b=0.9, precision_b2a=0.9, recall_a2b=0.1, recall_b2a=0.1, confidence_a=0.5,
                 confidence_b=0.5) for e, v in enumerate(val)]


def run_line(row, seed, rows, noise="sym"):
    argv = recipe.command("gpu", noise, row, seed, "d", "o", "cuda", "capture")
    flags = [a for i, a in enumerate(argv) if "--out" not in argv[max(0, i - 1):i + 1]]
    return dict(wave="w", size="gpu", noise=noise, rate=0.4, row=row, seed=seed, state="finished", flags=flags,
                mps="on", graph="capture", provenance=dict(device_name="H100", torch="2.11"), rows=rows)


@pytest.mark.parametrize("holds", [True, False])
def test_the_report_reads_the_preconditions_first_and_gates_its_answer_on_them(tmp_path, capsys, holds):
    harm = 5.0 if holds else 1.0  # CE's validation accuracy falls this far from its best epoch to its last
    lines = []
    for seed, (cmdp, zero) in enumerate(((70.0, 66.0), (71.0, 66.5))):
        lines += [run_line("ce-zero", seed, rows_of([50, 60, 60 - harm, 60 - harm], 55.0, 0.4)),
                  run_line("mylc-zero", seed, rows_of([50, 60, 61, 62], zero, 0.2)),
                  run_line("mylc-cmdp", seed, rows_of([50, 60, 61, 63], cmdp, 0.1))]
    off = run_line("mylc-all", 0, rows_of([50, 60, 61, 62], 65.0, 0.2))
    off["flags"] = off["flags"][:-2] + ["--lr", "0.2"]  # not the declaration: left out of every table
    path = tmp_path / "raw.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in lines + [off])
    assert fmnist.main(["recipe", "report", "--from", str(path)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert text.index("**Preconditions**") < text.index("| row | n |")
    assert f"- seed 1: harm {harm:.2f} points" in text and "memorised at the end 0.400" in text
    assert f"Regime holds: {'yes' if holds else 'no'}." in text
    diffs = [70.0 - 66.0, 71.0 - 66.5]
    mean, ci = interval(diffs)
    line = f"{mean:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}]"
    assert f"| MyLC, CMD-P (η = 4, b = −5) − MyLC, zero knowledge | {line}" in text
    gate = "the preconditions hold" if holds else "the preconditions do not hold"
    answer = next(t for t in text.splitlines() if t.startswith("**Answer:**"))
    assert answer.startswith(f"**Answer:** CMD-P + MyLC − MyLC zero knowledge, final test accuracy: {line}")
    assert answer.endswith(f"(n = 2); {gate}" + ("." if holds else ", so this does not test the paper's claim yet."))
    assert "| MyLC, all knowledge (η = 1) | 0 | not run |" in text and "left out: 1 runs" in text
    assert "| 69.09 |" in text  # the paper's Table 1 MyLC CMD-P beside ours


def test_a_run_stopped_by_a_nan_loss_is_packed_as_diverged(tmp_path):
    # train.py as the wave starts it, its output in train.log, its lr pushed to 1e33 after epoch 1
    d = tmp_path / "wave" / "ce-zero-s0"
    d.mkdir(parents=True)
    argv = ["--dataset", "synthetic", "--arch", "cnn", "--synthetic-size", "96", "--synthetic-test-size", "48",
            "--batch-size", "32", "--device", "cpu", "--workers", "0", "--epochs", "3", "--lr", "0.01",
            "--milestones", "1", "--lr-decay", "1e35", "--out", str(d)]
    with open(d / "train.log", "w") as log:
        rc = subprocess.run([sys.executable, "train.py", *argv], cwd=HERE, stdout=log, stderr=subprocess.STDOUT).returncode
    assert rc == 2 and recipe.run_state(str(d)) == ("cut short", 1)  # one epoch on disk, no summary
    recipe.mark_diverged(str(d))
    assert recipe.run_state(str(d)) == ("diverged", 1)
    wave = dict(wave="nan", size="toy", noise="sym", rate=0.4, graph="off", mps="off", provenance={},
                runs={"ce-zero-s0": dict(row="ce-zero", seed=0, argv=argv)})
    (tmp_path / "wave" / "wave.json").write_text(json.dumps(wave))
    raw = str(tmp_path / "raw.jsonl.gz")
    recipe.pack(str(tmp_path / "wave"), raw)
    assert [(r["state"], len(r["rows"])) for r in recipe.read(raw)] == [("diverged", 1)]
    assert recipe.next_wave(recipe.read(raw), "toy", "sym", 1)[:2] == ("sym", [0])  # its seed is run again


def test_pack_refuses_a_wave_json_cut_short_and_a_toy_wave_into_the_studys_raw_data(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(HERE)  # recipe.RAW is relative to the repository root
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "wave.json").write_text('{"wave": "x", "size": "toy", "ru')
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "wave.json").write_text(json.dumps(dict(wave="t", size="toy", runs={})))
    before = open(recipe.RAW, "rb").read() if os.path.exists(recipe.RAW) else None
    for folder, message in (("w", "is cut short or not a wave's"), ("t", "takes the declared (gpu) size only")):
        with pytest.raises(SystemExit) as e:
            fmnist.main(["recipe", "pack", str(tmp_path / folder)])
        err = capsys.readouterr().err
        assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert (open(recipe.RAW, "rb").read() if os.path.exists(recipe.RAW) else None) == before


@pytest.mark.parametrize("budget", ["0.5", "0.001"])  # 0.001: cut while every run is still starting
def test_a_wave_past_its_budget_stops_its_runs_and_says_so(tmp_path, capsys, budget):
    """Even when the wave was started with SIGINT ignored and blocked (a script's `cmd &`, some launchers), which
    its runs would inherit and so lose the signal that stops them while they start."""
    write_idx(tmp_path / "data", n_train=300, n_test=60)
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        rc = fmnist.main(["recipe", "wave", "--size", "toy", "--device", "cpu", "--budget", budget, "--out",
                          str(tmp_path / "w"), "--data-dir", str(tmp_path / "data"), "--from",
                          str(tmp_path / "none.jsonl.gz")])  # 1: runs did not finish
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN and signal.SIGINT in signal.pthread_sigmask(
            signal.SIG_BLOCK, set())  # as the wave found them
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, handler)
    wave = json.loads((tmp_path / "w" / "wave.json").read_text())
    assert rc == 1 and wave["cut"] == "the budget ran out" and wave["budget_s"] == float(budget)
    assert {r["state"] for r in wave["runs"].values()} == {"cut short"}
    assert "0 of 3 finished" in capsys.readouterr().out


def test_pace_divides_each_epoch_by_the_runs_that_shared_the_gpu_and_skips_the_warm_up():
    pace = recipe.Pace(0.0)
    pace.running(0.0, 2)
    pace.running(10.0, 1)  # one of two runs stopped at 10 s
    assert pace.sharing(5.0, 15.0) == 1.5 and pace.sharing(0.0, 10.0) == 2 and pace.sharing(12.0, 14.0) == 1
    pace.epoch("a", 4.0, 4.0)  # 4 s shared by two: 2 s of the GPU alone (the first epoch, which warms up)
    assert pace.cost("a") == 2.0
    for end in (6.0, 8.0, 9.0):
        pace.epoch("a", end, 2.0 if end < 9 else 1.0)  # 1 s alone, then 0.5
    pace.epoch("a", 11.0, 2.0)  # [9, 11]: half of it shared by two, half alone
    assert pace.cost("a") == pytest.approx((1 + 0.5 + 2 / 1.5) / 3)  # the last three after the first
    assert pace.cost("b") == pace.cost("a")  # a run with no epoch yet: its peers' mean
    pace.startups.append(3.0)
    assert pace.work("b", 10, started=False) == pytest.approx(10 * pace.cost("a") + 3.0)


def test_keep_keeps_in_rank_order_what_fits_and_stops_the_rest():
    work = [("ce", 40.0), ("cmdp", 40.0), ("zero", 40.0), ("all", 40.0), ("cmds", 40.0)]
    assert recipe.keep(work, 200.0, margin=1.0) == ["ce", "cmdp", "zero", "all", "cmds"]
    assert recipe.keep(work, 130.0, margin=1.0) == ["ce", "cmdp", "zero"]  # the last in rank are stopped
    assert recipe.keep(work, 130.0, margin=1.1) == ["ce", "cmdp"]
    # a run that cannot fit even alone does not block the smaller ones after it
    assert recipe.keep([("ce", 500.0), ("cmdp", 40.0), ("zero", 40.0)], 100.0, margin=1.0) == ["cmdp", "zero"]
    assert recipe.keep(work, 10.0) == []


def simulate(runs, epochs, solo, budget, alpha, decide=True):
    """A wave on a simulated GPU, decided as recipe.wave decides: `runs` in rank order, each `epochs` epochs of
    `solo` seconds alone; n runs together each go at 1 / n**alpha of their solo speed (alpha 1: the GPU is full,
    0: each run has it to itself). Returns {run: epochs done} at the budget's end, and the runs stopped
    (decide=False: none is ever stopped)."""
    t, dt, done, stopped = 0.0, 0.01, dict.fromkeys(runs, 0.0), []
    pace, seen, start = recipe.Pace(0.0), dict.fromkeys(runs, 0), dict.fromkeys(runs, 0.0)
    while t < budget:
        live = [r for r in runs if r not in stopped and done[r] < epochs]
        if not live:
            break
        pace.running(t, len(live))
        t += dt
        came = False
        for r in live:
            done[r] = min(epochs, done[r] + dt / solo / len(live) ** alpha)
            if int(done[r]) > seen[r]:  # an epoch ended at t
                pace.epoch(r, t, t - start[r])
                start[r], seen[r], came = t, int(done[r]), True
        if decide and came and all(seen[r] for r in live):
            work = [(r, pace.work(r, epochs - seen[r], True)) for r in live]
            stopped += [r for r, _ in work if r not in recipe.keep(work, budget - t)]
    return {r: int(done[r]) for r in runs}, stopped


@pytest.mark.parametrize("alpha, budget", [(1.0, 200.0), (0.5, 100.0)])
def test_a_wave_too_big_for_its_budget_stops_the_last_in_rank_and_finishes_the_rest_whole(alpha, budget):
    # five runs of 60 epochs of 1 s alone, on a full GPU (alpha 1: 300 s for all five, in 200) and on one that
    # five runs fill only partly (alpha 0.5: 134 s, in 100), where a stop speeds the others up less than the
    # projection assumes, so a later epoch's projection stops one more
    got, stopped = simulate(list(recipe.ORDER), 60, 1.0, budget, alpha)
    kept = [r for r in recipe.ORDER if r not in stopped]
    assert sorted(stopped, key=recipe.ORDER.index) == list(recipe.ORDER[len(kept):]) and len(kept) >= 2, stopped
    assert all(got[r] == 60 for r in kept), got  # every run kept is whole
    assert all(got[r] < 10 for r in stopped), got  # stopped early, so that its share went to the others
    assert all(n < 60 for n in simulate(list(recipe.ORDER), 60, 1.0, budget, alpha, decide=False)[0].values())


def test_a_toy_wave_whose_budget_cannot_hold_all_its_runs_finishes_those_it_keeps_and_says_which_it_stopped(
        tmp_path, capsys, monkeypatch):
    # the toy regime's last row in rank (MyLC zero) made 100,000 epochs long: whatever the machine, it cannot
    # finish in 150 s, and the two runs before it in recipe.ORDER can
    rows = dict(recipe.ROWS, **{"mylc-zero": (recipe.ROWS["mylc-zero"][0], [*recipe.ROWS["mylc-zero"][1], "--epochs",
                                                                            "100000"])})
    monkeypatch.setattr(recipe, "ROWS", rows)
    write_idx(tmp_path / "data", n_train=300, n_test=60)
    t0 = time.time()
    rc = fmnist.main(["recipe", "wave", "--size", "toy", "--device", "cpu", "--budget", "150", "--out",
                      str(tmp_path / "w"), "--data-dir", str(tmp_path / "data"), "--from",
                      str(tmp_path / "none.jsonl.gz")])
    wave = json.loads((tmp_path / "w" / "wave.json").read_text())
    runs = wave["runs"]
    assert rc == 0 and wave["cut"] is None and time.time() - t0 < 150, capsys.readouterr().out
    assert {n: r["state"] for n, r in runs.items()} == {"ce-zero-s0": "finished", "mylc-cmdp-s0": "finished",
                                                       "mylc-zero-s0": "stopped"}
    assert runs["mylc-zero-s0"]["stopped"].startswith("would not finish: at ") and runs["mylc-zero-s0"]["epochs"] < 50
    assert "stopped after" in capsys.readouterr().out
    raw = str(tmp_path / "raw.jsonl.gz")
    recipe.pack(str(tmp_path / "w"), raw)
    assert sorted((r["row"], r["state"]) for r in recipe.read(raw)) == [
        ("ce-zero", "finished"), ("mylc-cmdp", "finished"), ("mylc-zero", "stopped")]
    assert fmnist.main(["recipe", "report", "--size", "toy", "--from", raw]) == 0
    text = capsys.readouterr().out
    assert "| MyLC, zero knowledge | 0 | not run |" in text and "| CE, zero knowledge | 1 |" in text
    assert "Not in any table: mylc-zero-s0 (stopped after" in text
    # the next wave runs the row still missing, alone
    assert recipe.next_wave(recipe.read(raw), "toy", "sym", 1)[2] == [("mylc-zero", 0)]
