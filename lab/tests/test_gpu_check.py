"""studies/gpu_check.sh and studies/outbox.py: the one command a lent GPU machine runs comes back whole. The whole
command at toy size on the CPU, its $OUT within the machine's return rules after every stage and its wave packed
from exactly what would come back; a run whose --graph capture dies before its first epoch trains again eager;
a Ctrl-C that train.py turns into exit 130 inside a test stops pytest with its JUnit XML written; the graph is
captured only where every graph test ran and passed and the perf stage's graphed epochs ran; the archive is
whole at every moment and holds no checkpoint."""
import io
import json
import os
import signal
import stat
import subprocess
import sys
import tarfile
import time
from xml.etree import ElementTree

import pytest
from test_mnist import write_idx

from studies import fmnist, outbox, recipe
from tools import perf
from training import graph

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOY_ROWS = ("ce-zero", "mylc-zero", "mylc-cmdp")


def test_the_whole_gpu_command_at_toy_size_comes_back_within_the_rules_and_packs_whole(tmp_path):
    # the CUDA tests skip, each with its reason; the perf suite runs its small sizes; the wave runs the recipe's
    # toy size on the CPU. PATH without python3: the script runs $PYTHON alone; the tree has a .git, COMMIT wins
    write_idx(tmp_path / "data", n_train=300, n_test=60)
    out, work = tmp_path / "out", tmp_path / "work"
    env = dict(os.environ, OUT=str(out), WORK=str(work), PYTHON=sys.executable, TEST_LIMIT="300", PATH="/usr/bin:/bin",
               FMNIST=str(tmp_path / "data"), WAVE_ARGS="--size toy --device cpu --mps", COMMIT="c0ffee",
               PERF_ARGS="--small --budget 60 --skip torchrun,step,throughput,graph,epochs,batched,graph_compile,compile,"
                         "epochs_compile,compile_modes")
    res = subprocess.run(["bash", "studies/gpu_check.sh"], env=env, capture_output=True, text=True, timeout=600,
                         cwd=HERE)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    log = (out / "gpu_check.log").read_text()
    for stage in ("1", "2", "3", "end"):  # $OUT checked by the script itself after each stage
        assert f"gpu_check: after stage {stage}, {out}: all 2 files come back" in log, log[-3000:]
    assert sorted(os.listdir(out)) == ["gpu-check.tar.gz", "gpu_check.log"] and outbox.breaks(str(out)) == []
    back = tmp_path / "back"  # exactly what the machine would bring back
    assert sorted(outbox.returned(str(out), str(back))) == ["gpu-check.tar.gz", "gpu_check.log"]
    opened = tmp_path / "opened"
    outbox.unpack(str(back / outbox.ARCHIVE), str(opened))
    manifest = json.loads((opened / "snapshot.json").read_text())
    assert {"env.txt", "cuda.xml", "cuda.log", "graph-cases.txt", "perf.json", "perf.log", "wave.log",
            "wave/wave.json"} <= set(manifest["files"])
    assert not [f for f in manifest["files"] if f.endswith((".pt", ".tmp"))]  # no checkpoint, weights or part file
    assert "commit c0ffee" in (opened / "env.txt").read_text()
    cases = {f"{c.get('classname')}.{c.get('name')}" for c in ElementTree.parse(opened / "cuda.xml").iter("testcase")}
    assert "tests.test_train.test_training_step_is_sync_free_on_cuda[coteach+-ce]" in cases
    assert any(n.startswith("tests.test_graph.") for n in cases) and len(cases) >= 15
    assert "device" in json.loads((opened / "perf.json").read_text())
    wave = json.loads((opened / "wave" / "wave.json").read_text())
    assert wave["mps"] == "off: not asked, or not on a GPU" and wave["graph"] == "off"  # graph tests skipped
    assert "off: " in log and f"--graph off: {recipe.graph_from(*(opened / f for f in ('cuda.xml', 'graph-cases.txt', 'perf.json')))[5:]}" in log
    assert {n: r["state"] for n, r in wave["runs"].items()} == {f"{row}-s0": "finished" for row in TOY_ROWS}
    raw = str(tmp_path / "recipe" / "runs.jsonl.gz")
    assert fmnist.main(["recipe", "pack", str(back / outbox.ARCHIVE), "--from", raw]) == 0
    lines = recipe.read(raw)
    assert {(r["row"], r["seed"], r["state"], len(r["rows"])) for r in lines} == {
        (row, 0, "finished", 2) for row in TOY_ROWS}
    assert all("--out" not in r["flags"] and recipe.declared(r) for r in lines)
    assert fmnist.main(["recipe", "report", "--size", "toy", "--from", raw]) == 0
    text = (tmp_path / "recipe" / "report.md").read_text()
    ce = next(r["rows"] for r in lines if r["row"] == "ce-zero")
    harm = max(r["val_acc_mean"] for r in ce) - ce[-1]["val_acc_mean"]
    assert f"- seed 0: harm {harm:.2f} points" in text
    assert f"| CE, zero knowledge | 1 | {ce[-1]['test_acc_mean']:.2f} |" in text
    assert "| MyLC, CMD-P (η = 4, b = −5) − CE, zero knowledge |" in text and "Not in any table: none." in text
    assert "**Answer:** CMD-P + MyLC − MyLC zero knowledge, final test accuracy: " in text and "(n = 1)" in text


def test_a_wave_under_graph_capture_on_the_cpu_trains_every_run_again_eager_and_says_why(tmp_path, capsys):
    # on the CPU train.py refuses --graph capture before its first epoch, as a capture that fails on a GPU dies
    write_idx(tmp_path / "data", n_train=300, n_test=60)
    w = tmp_path / "w"
    rc = fmnist.main(["recipe", "wave", "--size", "toy", "--device", "cpu", "--graph", "capture", "--out", str(w),
                      "--data-dir", str(tmp_path / "data"), "--from", str(tmp_path / "none.jsonl.gz")])
    runs = json.loads((w / "wave.json").read_text())["runs"]
    assert rc == 0 and {r["state"] for r in runs.values()} == {"finished"}, runs
    for name, r in runs.items():
        assert r["argv"][r["argv"].index("--graph") + 1] == "off" and r["epochs"] == 2
        assert r["restarted"].startswith("died before its first epoch under --graph capture (train.py: error: "
                                         "--graph capture records a CUDA graph and needs a CUDA device")
        assert "needs a CUDA device" in (w / name / "capture-failed.log").read_text()
        assert not (w / name / "checkpoint.pt").exists()  # --checkpoint none: the wave writes none
    assert capsys.readouterr().out.count("started again with --graph off") == 3
    raw = str(tmp_path / "raw.jsonl.gz")
    recipe.pack(str(w), raw)
    assert {(r["state"], r["graph"], r["restarted"][:10]) for r in recipe.read(raw)} == {("finished", "off", "died befor")}


STOPPED = """
import os, pathlib, train

def test_trains_until_stopped(tmp_path):
    train.main(["--dataset", "synthetic", "--arch", "mlp", "--epochs", "500", "--synthetic-size", "64",
                "--synthetic-test-size", "32", "--batch-size", "32", "--device", "cpu", "--workers", "0",
                "--out", os.environ["RUN"]])

def test_after():
    pathlib.Path(os.environ["RUN"], "..", "after").touch()
"""


def test_a_ctrl_c_inside_a_test_stops_pytest_and_its_junit_xml_is_written(tmp_path):
    # gpu_check.sh stops pytest -m cuda with SIGINT; train.py turns it into exit 130 inside the test, which pytest
    # alone would count as one failure before going on to the next test, until the SIGKILL that leaves no XML
    (tmp_path / "test_stopped.py").write_text(STOPPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    run, xml = tmp_path / "run", tmp_path / "x.xml"
    env = dict(os.environ, RUN=str(run), PYTHONPATH=os.pathsep.join([HERE, os.path.join(HERE, "tests")]))
    p = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "hooks", "-p", "no:cacheprovider", "-q",
                          "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), f"--junitxml={xml}",
                          str(tmp_path / "test_stopped.py")], cwd=HERE, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while not (run / "metrics.jsonl").exists() and time.time() < deadline and p.poll() is None:
        time.sleep(0.1)  # an epoch has finished: the loop is training
    p.send_signal(signal.SIGINT)
    output = p.communicate(timeout=60)[0]
    assert p.returncode == 2, output  # pytest's "interrupted"
    assert "stopped by Ctrl-C (SIGINT)" in output and not (tmp_path / "after").exists()  # the next test never ran
    cases = {c.get("name"): c for c in ElementTree.parse(xml).iter("testcase")}
    assert list(cases) == ["test_trains_until_stopped"] and cases["test_trains_until_stopped"].find("failure") is not None


def junit(tmp_path, cases):
    """A JUnit XML as pytest --junitxml writes it: a testsuite of testcases, each maybe skipped or failed (mod: a
    module of tests/, or a dotted path)."""
    body = "".join(f'<testcase classname="{mod if "." in mod else "tests." + mod}" name="{name}" time="0.1">' +
                   {"passed": "", "skipped": '<skipped type="pytest.skip" message="needs a CUDA device"/>',
                    "failed": '<failure message="assert False">x</failure>'}[how] + "</testcase>"
                   for mod, name, how in cases)
    path = tmp_path / f"cuda{len(list(tmp_path.iterdir()))}.xml"
    path.write_text(f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="{len(cases)}">'
                    f"{body}</testsuite></testsuites>")
    return str(path)


def test_the_wave_captures_the_graph_only_where_every_graph_test_passed_and_the_graphed_epochs_ran(tmp_path):
    graph_tests = ["test_capture[zero-ce]", "test_capture[progressive-mylc]", "test_bf16"]
    collected = tmp_path / "cases.txt"  # what pytest -m cuda --collect-only -q tests/test_graph.py prints
    collected.write_text("".join(f"tests/test_graph.py::{t}\n" for t in graph_tests) + "\n3 tests collected in 1s\n")
    ran = tmp_path / "perf.json"
    ran.write_text(json.dumps(dict(epoch_s_graph=[9.0, 4.0, 4.0])))
    other = ("test_train", "test_sync_free", "passed")
    passed = [other] + [("test_graph", t, "passed") for t in graph_tests]
    assert recipe.graph_from(junit(tmp_path, passed), collected, ran) == "capture"
    partial = junit(tmp_path, passed[:2])  # written by a run stopped before the last two
    assert recipe.graph_from(partial, collected, ran).startswith("off: 2 of the 3 graph tests never ran")
    failed = passed[:-1] + [("test_graph", graph_tests[-1], "failed")]
    assert recipe.graph_from(junit(tmp_path, failed), collected, ran).startswith("off: 1 of the 3 graph tests skipped")
    skipped = [other] + [("test_graph", t, "skipped") for t in graph_tests]
    assert recipe.graph_from(junit(tmp_path, skipped), collected, ran).startswith("off: 3 of the 3")
    assert recipe.graph_from(str(tmp_path / "never-written.xml"), collected, ran) == (
        "off: pytest -m cuda wrote no readable JUnit XML")
    (tmp_path / "cut.xml").write_text(open(junit(tmp_path, passed)).read()[:150])  # a file cut in the middle
    assert recipe.graph_from(str(tmp_path / "cut.xml"), collected, ran).startswith("off: pytest -m cuda wrote no")
    null = tmp_path / "null.json"
    null.write_text(json.dumps(dict(epoch_s_graph=None)))
    for perf_json in (null, tmp_path / "no-perf.json"):
        assert recipe.graph_from(junit(tmp_path, passed), collected, perf_json) == (
            "off: train.py's epochs under --graph capture did not run in the perf stage")
    assert recipe.graph_from(junit(tmp_path, passed), tmp_path / "none.txt", ran).startswith("off: no CUDA test")


def gpu_docs(folder, cases, step, graphed=True):
    """A docs/gpu as a lease leaves it once committed: cuda-x.xml with `cases` and perf-x.json for `step`."""
    folder.mkdir(exist_ok=True)
    os.replace(junit(folder, cases), folder / "cuda-x.xml")
    (folder / "perf-x.json").write_text(json.dumps(dict(step=step, epochs_100_min=27.4, epoch_s_graph=[9.0, 4.0, 4.0],
                                                        epochs_100_min_graph=7.1 if graphed else None)))
    return folder


def test_a_lease_runs_the_wave_alone_only_where_docs_gpu_holds_green_figures_of_this_step(tmp_path):
    graph_tests = ["test_capture[zero-ce]", "test_bf16"]
    collected = tmp_path / "cases.txt"
    collected.write_text("".join(f"tests/test_graph.py::{t}\n" for t in graph_tests))
    green = [("test_train", "test_sync_free", "passed")] + [("test_graph", t, "passed") for t in graph_tests]
    step = graph.step_id()
    said = recipe.evidence(str(gpu_docs(tmp_path / "ok", green, step)), collected)
    assert said.startswith(f"capture: {tmp_path / 'ok' / 'cuda-x.xml'} (every graph test passed) and ") and step in said
    for name, cases, got_step, graphed, why in [
            ("old", green, "0123456789ab", True, "no perf*.json with eager and graphed epochs_100_min for this step"),
            ("eager", green, step, False, "no perf*.json with eager and graphed"),
            ("red", [("test_train", "test_sync_free", "failed")] + green[1:], step, True, "no cuda*.xml in which"),
            ("few", green[:2], step, True, "no cuda*.xml in which every test and every graph test")]:
        said = recipe.evidence(str(gpu_docs(tmp_path / name, cases, got_step, graphed)), collected)
        assert said.startswith("no: ") and why in said, (name, said)
    assert recipe.evidence(str(tmp_path / "nothing"), collected).startswith("no: ")


def test_the_wave_alone_at_toy_size_gets_the_whole_limit_and_packs(tmp_path):
    # docs/gpu as a green lease left it for this step: stages 2 and 3 are skipped, and the wave captures the graph
    # (on the CPU each run's capture dies before its first epoch and it trains again eager, as on a GPU where it fails)
    collected = subprocess.run([sys.executable, "-m", "pytest", "-m", "cuda", "--collect-only", "-q", "-p",
                                "no:cacheprovider", "tests/test_graph.py", "lab/tests/test_graph_rules.py"], cwd=HERE,
                               capture_output=True, text=True)
    ids = [line.split("::", 1) for line in collected.stdout.splitlines() if "::" in line]
    docs = gpu_docs(tmp_path / "docs-gpu", [(path.removesuffix(".py").replace("/", "."), i, "passed")
                                            for path, i in ids], graph.step_id())
    write_idx(tmp_path / "data", n_train=300, n_test=60)
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), WORK=str(tmp_path / "work"), PYTHON=sys.executable, PATH="/usr/bin:/bin",
               FMNIST=str(tmp_path / "data"), WAVE_ARGS="--size toy --device cpu", WAVE_ONLY="1", GPU_DOCS=str(docs),
               LIMIT="400")
    res = subprocess.run(["bash", "studies/gpu_check.sh"], env=env, capture_output=True, text=True, timeout=600,
                         cwd=HERE)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    log = (out / "gpu_check.log").read_text()
    assert "stages 2 and 3 skipped" in log and "gpu_check 2/4" not in log and "gpu_check 3/4" not in log, log
    budget = int(log.split("--graph capture, budget ")[1].split()[0])
    assert budget > 400 - 40 - 100 - 170  # more than stages 2 and 3 (TEST_LIMIT, PERF_LIMIT) would have left it
    opened = tmp_path / "opened"
    outbox.unpack(str(out / outbox.ARCHIVE), str(opened))
    assert not (opened / "cuda.xml").exists() and not (opened / "perf.json").exists()
    raw = str(tmp_path / "raw.jsonl.gz")
    assert fmnist.main(["recipe", "pack", str(out), "--from", raw]) == 0
    assert {(r["row"], r["state"], r["graph"]) for r in recipe.read(raw)} == {
        (row, "finished", "off") for row in TOY_ROWS}  # each restarted eager, whole


def test_the_suites_json_holds_each_part_before_the_next_and_the_graphed_epochs_come_first(tmp_path, monkeypatch):
    path, seen = tmp_path / "perf.json", {}

    def graph_part(res, sizes, device, budget):  # reads the file as a kill at this moment would leave it
        seen.update(json.loads(path.read_text()))
    monkeypatch.setitem(perf.PARTS, "graph", graph_part)
    order = list(perf.PARTS)
    assert order.index("epochs_graph") < order.index("epochs") < order.index("graph")
    res = perf.main(["suite", "--device", "cpu", "--small", "--skip", "sync,torchrun,step,throughput,batched,"
                     "graph_compile,compile,epochs_compile,compile_modes", "--json", str(path)])
    assert seen["epoch_s"] == res["epoch_s"] and len(seen["epoch_s"]) == 3  # on disk before the next part began
    assert seen["graph_step_ms"] is None and "CUDA only" in seen["reasons"]["epoch_s_graph"]
    assert not list(tmp_path.glob("*.tmp"))


def test_the_return_rules_name_what_would_stay_behind(tmp_path):
    out = tmp_path / "out"
    (out / "a" / "b" / "c").mkdir(parents=True)
    for i in range(8):
        (out / f"f{i}.txt").write_text("x")
    assert outbox.breaks(str(out)) == []
    (out / "a" / "b" / "c" / "deep.txt").write_text("x")
    (out / "a" / "b" / "name with space").write_text("x")
    with open(out / "big.bin", "wb") as f:
        f.truncate(outbox.RULES["file_bytes"] + 1)
    os.symlink(out / "f0.txt", out / "link")
    why = outbox.breaks(str(out))
    assert why[0].startswith("12 files, more than 8") and len(why) == 5
    assert {w.split(":")[0] for w in why[1:]} == {os.path.join("a", "b", "c", "deep.txt"),
                                                  os.path.join("a", "b", "name with space"), "big.bin", "link"}
    kept = outbox.returned(str(out), str(tmp_path / "back"))
    assert len(kept) == 8 and "big.bin" not in kept and "link" not in kept


def test_the_archive_is_whole_at_every_moment_and_leaves_out_what_never_comes_back(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "wave" / "run").mkdir(parents=True)
    (work / "wave" / "run" / "metrics.jsonl").write_text('{"epoch": 1}\n{"epo')  # a line being written
    (work / "wave" / "run" / "checkpoint.pt").write_bytes(b"\0" * 1000)
    (work / "wave" / "run" / "checkpoint.pt.tmp").write_bytes(b"\0" * 1000)
    with open(work / "huge.log", "wb") as f:
        f.truncate(outbox.RULES["file_bytes"] + 1)
    m = outbox.snapshot(str(work), str(out))
    assert sorted(os.listdir(out)) == [outbox.ARCHIVE] and outbox.breaks(str(out)) == []
    assert set(m["files"]) == {os.path.join("wave", "run", "metrics.jsonl")}
    assert set(m["left_out"]) == {"huge.log", os.path.join("wave", "run", "checkpoint.pt"),
                                  os.path.join("wave", "run", "checkpoint.pt.tmp")}
    with tarfile.open(out / outbox.ARCHIVE) as tar:
        assert sorted(tar.getnames()) == ["snapshot.json", os.path.join("wave", "run", "metrics.jsonl")]
    # a snapshot killed while it writes leaves the last archive as it was
    before = (out / outbox.ARCHIVE).read_bytes()
    (work / "more.txt").write_text("y" * 10 ** 6)
    p = subprocess.Popen([sys.executable, "-m", "studies.outbox", "snapshot", str(work), str(out), "--every", "0.01"],
                         cwd=HERE)
    time.sleep(1.5)
    p.send_signal(signal.SIGTERM)  # waits for a snapshot under way
    assert p.wait(timeout=30) == 0
    with tarfile.open(out / outbox.ARCHIVE) as tar:
        assert "more.txt" in tar.getnames()
    assert [f for f in os.listdir(out) if f != outbox.ARCHIVE] == [] and before != (out / outbox.ARCHIVE).read_bytes()
    p = subprocess.Popen([sys.executable, "-m", "studies.outbox", "snapshot", str(work), str(out), "--every", "0.01"],
                         cwd=HERE)
    time.sleep(1.5)
    p.kill()  # SIGKILL, at whatever moment: at most a part file beside a whole archive
    p.wait()
    with tarfile.open(out / outbox.ARCHIVE) as tar:
        assert "more.txt" in tar.getnames()
    assert len(os.listdir(out)) <= 2 and outbox.breaks(str(out)) == []


def test_pack_reads_the_archive_and_refuses_one_that_is_not_whole(tmp_path, capsys):
    archive = tmp_path / outbox.ARCHIVE
    with tarfile.open(archive, "w:gz") as tar:  # a member that would land outside the folder it is unpacked into
        info = tarfile.TarInfo("../wave.json")
        data = json.dumps(dict(wave="x", size="toy", runs={})).encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    cut = tmp_path / "cut" / outbox.ARCHIVE
    cut.parent.mkdir()
    cut.write_bytes((tmp_path / outbox.ARCHIVE).read_bytes()[:40])
    for given in (archive, cut.parent):
        with pytest.raises(SystemExit) as e:
            fmnist.main(["recipe", "pack", str(given), "--from", str(tmp_path / "raw.jsonl.gz")])
        err = capsys.readouterr().err
        assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "not an archive that can be read" in err
    assert not (tmp_path / "raw.jsonl.gz").exists()


def test_a_copy_without_git_records_the_commit_its_caller_names(tmp_path, monkeypatch):
    from training import source
    monkeypatch.delenv("CMD_COMMIT", raising=False)  # tmp_path: a tree copied without .git, as a GPU machine gets it
    assert source.git(str(tmp_path)) == {}
    monkeypatch.setenv("CMD_COMMIT", "c0ffee")
    assert source.git(str(tmp_path)) == dict(git_commit="c0ffee", git_dirty=None)


CONTROL = """#!/bin/sh
# stands in for NVIDIA's nvidia-cuda-mps-control, which this machine lacks: records what it is told
if [ -z "$1" ]; then cat >> "{log}"; exit 0; fi  # a command on stdin, as recipe.mps sends "quit"
echo "$1" >> "{log}"
[ -d "$CUDA_MPS_PIPE_DIRECTORY" ] && [ -d "$CUDA_MPS_LOG_DIRECTORY" ]  # -d: the daemon needs its folders
"""


@pytest.mark.parametrize("probe_s, said", [(180, "off: a CUDA client could not connect; time-slicing"),
                                           (0.001, "off: the probe took more than 0.001 s; time-slicing")])
def test_mps_falls_back_to_time_slicing_and_always_quits_the_daemon_it_started(tmp_path, monkeypatch, probe_s, said):
    if __import__("torch").cuda.is_available():
        pytest.skip("a GPU is here: the probe would connect")
    log = tmp_path / "calls"
    (tmp_path / "bin").mkdir()
    ctl = tmp_path / "bin" / "nvidia-cuda-mps-control"
    ctl.write_text(CONTROL.format(log=log))
    ctl.chmod(ctl.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    env = {"PATH": os.environ["PATH"]}
    with recipe.mps(True, env, probe_s=probe_s) as got:  # the daemon starts (its folders made); no CUDA client
        assert "CUDA_MPS_PIPE_DIRECTORY" not in env
    assert got == said and log.read_text().split("\n")[:2] == ["-d", "quit"] and env == {"PATH": os.environ["PATH"]}


def test_mps_without_the_control_binary_says_so():
    env = {}
    with recipe.mps(True, env) as said:  # this machine has no nvidia-cuda-mps-control
        assert env == {}
    assert said == "off: nvidia-cuda-mps-control not found; the runs time-slice the GPU"
