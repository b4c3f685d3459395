"""tools/batched.py: R runs in one process equal train.py's runs (the contract in docs/performance.md), restart
after an interruption without losing a finished run, are deterministic, and refuse bad input in one line."""
import json
import os
import shlex

import numpy as np
import pytest
import torch
from test_cuda_config import has_cpp_compiler

import train
from losses import log_probs
from mutual import Clock, Precision, mutual_step, sum_names
from tools import batched
from training import build, graph

T = ["--dataset", "synthetic", "--arch", "mlp", "--synthetic-size", "96", "--synthetic-test-size", "48",
     "--synthetic-classes", "4", "--batch-size", "32", "--device", "cpu", "--workers", "0", "--epochs", "3"]
OFF = dict(device_type="cpu", dtype=torch.bfloat16, enabled=False)
ONE_SAMPLE = 100 / 48  # a test accuracy's step, in points


def rows(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def alone(tmp_path, flags):
    """train.py's run of the same flags, in-process."""
    out = str(tmp_path / ("alone-" + "-".join(flags).replace("--", "")))
    train.main(T + flags + ["--out", out])
    return out


def test_a_grid_equals_train_py_runs(tmp_path):
    out = str(tmp_path / "grid")
    assert batched.main(T + ["--mode", "zero,all", "--seed", "0,1", "--lr", "0.05", "--out", out]) == 0
    names = sorted(os.listdir(out))
    assert names == ["sym0.4-all-mylc-lr0.05-s0", "sym0.4-all-mylc-lr0.05-s1", "sym0.4-zero-mylc-lr0.05-s0",
                     "sym0.4-zero-mylc-lr0.05-s1"]  # train.py's names (config.run_name) of what the grid varies
    for name in names:
        mode, seed = name.split("-")[1], name[-1]
        ref = alone(tmp_path, ["--mode", mode, "--seed", seed, "--lr", "0.05"])
        got = os.path.join(out, name)
        assert np.array_equal(np.load(os.path.join(got, "noisy_labels.npy")), np.load(os.path.join(ref, "noisy_labels.npy")))
        a, b = rows(ref), rows(got)
        assert len(a) == len(b) == 3
        assert [(r["lr"], r["chi"]) for r in a] == [(r["lr"], r["chi"]) for r in b]  # bit-identical schedules
        for e, (ra, rb) in enumerate(zip(a, b)):
            losses = ("train_loss_a", "train_loss_b")
            if mode == "zero":  # no selection to flip: the runs stay together
                assert all(rb[k] == pytest.approx(ra[k], rel=1e-4) for k in losses)
                assert all(abs(rb[k] - ra[k]) <= ONE_SAMPLE + 1e-9 for k in ("test_acc_a", "test_acc_b"))
            elif e == 0:  # all knowledge: every sample distilled, each step its peer's term
                assert all(rb[k] == pytest.approx(ra[k], rel=1e-3) for k in losses)
                assert rb["selected_b2a"] == ra["selected_b2a"] == 1.0
        summary = json.load(open(os.path.join(got, "summary.json")))
        assert summary["test_acc_mean"] == b[-1]["test_acc_mean"] and summary["epochs"] == 3
        config = json.load(open(os.path.join(got, "config.json")))
        assert config["provenance"]["engine"] == "tools.batched" and config["lr"] == 0.05


def test_one_step_from_an_equal_state_matches_mutual_step():
    jobs = [dict(name=f"s{s}", dir=f"/nonexistent/s{s}", key=[], argv=T + ["--mode", "static", "--seed", str(s),
                                                                            "--lr", lr, "--out", "/nonexistent"])
            for s, lr in ((0, "0.05"), (1, "0.1"))]
    runs = [dict(j, args=batched.resolved(j["argv"])) for j in jobs]
    group = batched.Runs(runs, torch.device("cpu"))
    clock = Clock(0, 0, group.batches[0].steps(), 3, 0)
    batches = [next(b.epoch(r["args"].seed, 0)) for b, r in zip(group.batches, runs)]
    refs, chis = [], []
    for i, (run, batch) in enumerate(zip(runs, batches)):  # train.py's step on its own models
        a = run["args"]
        models = build.build_models(a, 4, build.load_data(a)[1], build.Setup.of(a))
        with torch.no_grad():
            h = torch.stack([log_probs(n(batch[0]))[1] for n in models.nets])  # (2, N) H(p) of A and B
        lo, hi = h.min(1).values.max(), h.max(1).values.min()  # chi in here: both directions select part
        inside = h.flatten().sort().values
        inside = inside[(inside >= lo) & (inside <= hi)]
        j = int((inside[1:] - inside[:-1]).argmax())
        chi = float(inside[j:j + 2].mean())  # in the widest gap between entropies there
        assert min(abs(h.flatten() - chi)) > 1e-4
        chis.append(chi)
        sums, _ = mutual_step(models.nets, models.opts, batch, group.methods[i], chi,
                              [torch.zeros(()), torch.zeros(())], clock,
                              Precision(OFF, torch.amp.GradScaler("cpu", enabled=False)))
        refs.append((sums, [n.state_dict() for n in models.nets]))
    sums, _ = batched.step(group, batches, torch.tensor(chis, dtype=torch.float64), clock, OFF)
    for o in group.opts:
        o.step()
    names = sum_names(2)
    for i, (ref_sums, states) in enumerate(refs):
        s, r = dict(zip(names, sums[i].tolist())), dict(zip(names, ref_sums.tolist()))
        assert 0 < r["selected_b2a"] < r["samples"] and 0 < r["selected_a2b"] < r["samples"]
        for key in names:
            assert s[key] == (pytest.approx(r[key], rel=1e-5) if key.startswith(("loss", "entropy")) else r[key])
        for j, state in enumerate(states):
            for name, p in state.items():
                assert torch.allclose(group.params()[j][name][i], p, rtol=1e-5, atol=1e-7)


def test_an_interrupted_grid_starts_again_keeps_finished_runs_and_is_deterministic(tmp_path, monkeypatch):
    out, grid = str(tmp_path / "g"), ["--mode", "progressive", "--lr", "0.05", "--seed", "0,1"]
    assert batched.main(T + ["--mode", "progressive", "--lr", "0.05", "--seed", "0", "--out", out]) == 0
    first = os.path.join(out, "sym0.4-progressive-mylc-lr0.05-s0")
    before = open(os.path.join(first, "summary.json")).read(), os.path.getmtime(os.path.join(first, "summary.json"))
    step, calls = batched.step, []

    def stop_in_epoch_2(*a, **k):
        calls.append(1)
        if len(calls) == 5:  # 3 steps an epoch
            raise KeyboardInterrupt
        return step(*a, **k)

    monkeypatch.setattr(batched, "step", stop_in_epoch_2)
    with pytest.raises(SystemExit) as e:
        batched.main(T + grid + ["--out", out])
    assert e.value.code == 130
    second = os.path.join(out, "sym0.4-progressive-mylc-lr0.05-s1")
    assert len(rows(second)) == 1 and not os.path.exists(os.path.join(second, "summary.json"))
    monkeypatch.undo()
    assert batched.main(T + grid + ["--out", out]) == 0
    after = open(os.path.join(first, "summary.json")).read(), os.path.getmtime(os.path.join(first, "summary.json"))
    assert after == before  # skipped, not trained again
    fresh = str(tmp_path / "fresh")
    assert batched.main(T + grid + ["--out", fresh]) == 0  # the same command in another folder: the same files
    for name in os.listdir(out):
        a, b = rows(os.path.join(out, name)), rows(os.path.join(fresh, name))
        assert [dict(r, seconds=0) for r in a] == [dict(r, seconds=0) for r in b]
        ha, hb = (np.load(os.path.join(d, name, "entropy_hist.npz")) for d in (out, fresh))
        assert np.array_equal(ha["counts"], hb["counts"])


def test_a_diverging_run_is_written_as_diverged_and_the_others_finish(tmp_path):
    out = str(tmp_path / "d")
    assert batched.main(T + ["--mode", "zero", "--lr", "0.05,1e9", "--out", out]) == 1
    ok, bad = (os.path.join(out, f"sym0.4-zero-mylc-lr{lr}-s0") for lr in ("0.05", "1e9"))
    assert os.path.exists(os.path.join(ok, "summary.json")) and len(rows(ok)) == 3
    diverged = json.load(open(os.path.join(bad, "diverged.json")))
    written = rows(bad) if os.path.exists(os.path.join(bad, "metrics.jsonl")) else []
    assert "NaN" in diverged["error"] and len(written) == diverged["epoch"] - 1
    assert not os.path.exists(os.path.join(bad, "summary.json"))


def test_a_finished_train_py_run_is_skipped_and_an_unfinished_one_refused(tmp_path, capsys):
    out = str(tmp_path / "grid")
    done = os.path.join(out, "sym0.4-zero-mylc-lr0.05-s0")
    train.main(T + ["--mode", "zero", "--seed", "0", "--lr", "0.05", "--out", done])
    assert os.path.exists(os.path.join(done, "checkpoint.pt"))  # train.py keeps its last checkpoint
    stamp = os.path.getmtime(os.path.join(done, "summary.json"))
    assert batched.main(T + ["--mode", "zero", "--seed", "0,1", "--lr", "0.05", "--out", out]) == 0
    assert os.path.getmtime(os.path.join(done, "summary.json")) == stamp and len(rows(done)) == 3
    assert os.path.exists(os.path.join(out, "sym0.4-zero-mylc-lr0.05-s1", "summary.json"))
    os.remove(os.path.join(done, "summary.json"))  # now a train.py run stopped before its end
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        batched.main(T + ["--mode", "zero", "--seed", "0,1", "--lr", "0.05", "--out", out])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "in progress" in err[0] and "--resume" in err[0]


@pytest.mark.parametrize("flags, says", [
    (["--zip", "--lr", "0.05,0.1", "--seed", "0,1,2"], "differ in length"),
    (["--arch", "cnn", "--lr", "0.05,0.1"], "BatchNorm"),
    (["--lr", "0.05,0.05"], "twice"),
    (["--resume"], "no --resume"),
    (["--train-indices", "kept.npy"], "--train-indices chooses the samples of one run"),
    (["--noise", "pair", "--rate", "1.5,0.2"], "rate"),
    (["--mode", "joint2", "--labels-from", "runs/any"], "--mode joint2 (Joint optimisation (step 2)): its labels are"),
])
def test_bad_input_is_one_line_rc_2_and_writes_nothing(tmp_path, capsys, flags, says):
    out = str(tmp_path / "bad")
    with pytest.raises(SystemExit) as e:
        batched.main(T + flags + ["--out", out])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and err[0].startswith("batched.py: error:"), err
    assert not os.path.exists(out)


def test_every_batched_command_shown_in_the_docs_is_accepted():
    from test_faults import readme_and_docs, shown_commands  # the docs' reader, shared with the other tools
    lines = [c for text in readme_and_docs().values() for c in shown_commands(text, "-m tools.batched")]
    assert lines
    for line in lines:
        argv = shlex.split(line)[3:]
        out = argv.index("--out")
        for _, run_argv in batched.expand(argv[:out] + argv[out + 2:], zipped=False):
            batched.check(dict(args=batched.resolved(run_argv + ["--out", "runs/x"]), dir="runs/x", key=run_argv))


# ---------------------------------------------------------------- the step replayed: --graph (training/graph.py)
GRID = ["--zip", "--lr", "0.0625,0.125,0.25", "--seed", "0,1,2", "--eta", "1.5,1.2,1.8", "--mode",
        "progressive,progressive,progressive", "--lc", "mylc", "--lr-decay", "0.125"]
# zipped: 3 runs, each its own lr, seed and chi; each lr a power of two, which the float32 tensor a compiled or
# captured step reads (graph.place_lr) holds exactly, as the eager step's float: the two read the same lr


def grid_rows(tmp_path, flags, how):
    out = str(tmp_path / how)
    assert batched.main(flags + GRID + ["--graph", how, "--out", out]) == 0
    names = sorted(os.listdir(out))
    assert len(names) == 3 and all(json.load(open(os.path.join(out, n, "config.json")))["graph"] == how for n in names)
    return [rows(os.path.join(out, n)) for n in names]


@pytest.mark.skipif(not has_cpp_compiler(), reason="torch.compile on CPU (inductor) needs a C++ compiler")
def test_the_compiled_batched_step_equals_the_eager_one(tmp_path, monkeypatch):
    # 3 runs with their own lr, seed and eta, CMD-P + MyLC, 5 epochs of 4 steps (the last one smaller: its own key):
    # chi and t/Γ move every step, each run's lr falls eightfold after epoch 2 (the tensor its SGD reads, filled in
    # place) and r after every epoch. aot_eager: the graphs inductor would compile, without generating code, to
    # keep the test short.
    monkeypatch.setitem(graph.COMPILE, "cpu", dict(backend="aot_eager"))
    torch._dynamo.reset()
    flags = T[:5] + ["128"] + T[6:-1] + ["5", "--milestones", "2"]
    eager = grid_rows(tmp_path, flags, "off")
    compiled = grid_rows(tmp_path, flags, "compile")
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0  # the step really ran compiled
    for a, b in zip(eager, compiled):
        assert len(a) == len(b) == 5 and [r["lr"] for r in a] == [r["lr"] for r in b]
        assert a[2]["lr"] == a[1]["lr"] / 8
        for ra, rb in zip(a, b):
            for k, v in ra.items():
                if k != "seconds" and isinstance(v, float):
                    assert rb[k] == pytest.approx(v, rel=0, abs=1e-5), (k, ra["epoch"])
    assert eager[0][-1]["train_loss_a"] != eager[1][-1]["train_loss_a"]  # the runs differ: each reads its own
    assert len({r["chi"] for a in eager for r in a[:1]}) == 3  # chi: one per run
    assert any(0 < r["selected_b2a"] < 1 for a in eager for r in a)  # chi decides: some samples taught, some not


@pytest.mark.cuda
def test_the_captured_batched_step_equals_the_eager_one_on_cuda(tmp_path, monkeypatch):
    monkeypatch.setattr(graph, "WARMUP", 1)  # the last, smaller batch is captured in epoch 2
    flags = ["--dataset", "synthetic", "--arch", "mlp", "--synthetic-size", "600", "--synthetic-test-size", "500",
             "--synthetic-classes", "10", "--batch-size", "64", "--epochs", "3", "--milestones", "1,2", "--device",
             "cuda", "--workers", "0", "--amp", "off"]
    eager, captured = grid_rows(tmp_path, flags, "off"), grid_rows(tmp_path, flags, "capture")
    for a, b in zip(eager, captured):
        assert max(abs(x[f"train_loss_{m}"] - y[f"train_loss_{m}"]) for x, y in zip(a, b) for m in "ab") <= 1e-4
        assert max(abs(x[f"test_acc_{m}"] - y[f"test_acc_{m}"]) for x, y in zip(a, b) for m in "ab") <= 100 / 500 + 1e-9
