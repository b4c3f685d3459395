"""sweep.py and plot.py: a smoke sweep end to end, resuming, a failing run, the table maths, the plots."""
import glob
import gzip
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tools import paper_tables, plot, stats, sweep
from training import config, runfiles, source
from training.presets import preset

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root


def cli(script, *args, timeout=300):
    """python -m tools.<script> ARGS from the repository root, as the README runs it."""
    return subprocess.run([sys.executable, "-m", f"tools.{script.removesuffix('.py')}", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=HERE)


def write(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(obj if isinstance(obj, str) else json.dumps(obj))


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """One real smoke sweep shared by the tests below: table1, 2 seeds, 4 train.py runs, two at a time.

    --gpus 2 exercises the pool that runs N at once; smoke runs pass --device cpu, so the
    CUDA_VISIBLE_DEVICES=i each gets is moot and this works on a CPU-only machine. The sweep
    with a failing run below goes the one-by-one way.
    """
    out = str(tmp_path_factory.mktemp("sweeps"))
    return out, cli("sweep.py", "table1", "--scale", "smoke", "--seeds", "2", "--out", out, "--gpus", "2")


def test_smoke_sweep_writes_the_table_and_says_it_ranks_nothing(smoke):
    out, res = smoke
    assert res.returncode == 0, res.stdout + res.stderr
    with open(os.path.join(out, "table1-smoke.md")) as f:
        md = f.read()
    assert md.split("\n")[2].startswith("A smoke run trains each row") and "say nothing about the methods" in md
    assert "seeds 2" in md and "CPU (" in md and "torch " in md
    assert re.search(r"`python -m tools.sweep table1 --scale smoke --seeds 2 --out \S+ --gpus 2`", md)
    assert len(re.findall(r"\| \d+\.\d\d ± \d+\.\d\d \|", md)) == 2  # the smoke grid: Zero/All x LS
    assert md.count("not run |") == 2 and "| CMD-P | not run |" in md  # LS: the column it runs
    assert "paper" not in md.split("## ")[1] and "Does selecting" not in md  # no paper number, no verdict
    assert "| | LS |\n" in md and "ProSelfLC" not in md  # a column the scale does not run is not shown
    accs = []
    for seed in (0, 1):
        with open(os.path.join(out, "table1-smoke", f"zero-ls-sym40-s{seed}", "summary.json")) as f:
            accs.append(json.load(f)["test_acc_mean"])
    mean, std = sum(accs) / 2, abs(accs[0] - accs[1]) / math.sqrt(2)  # sample std of two values
    assert f"| Zero | {mean:.2f} ± {std:.2f} |" in md


def test_packed_runs_render_the_same_table_and_only_runs_with_the_grids_flags_enter_it(smoke, tmp_path):
    out, _ = smoke
    raw = str(tmp_path / "raw" / "runs.jsonl.gz")
    res = cli("sweep.py", "table1", "--scale", "smoke", "--seeds", "2", "--out", out, "--pack", raw)
    assert res.returncode == 0 and res.stdout.splitlines()[-1].endswith(f"; packed 4 runs into {raw} (it holds 4)")
    runs = sweep.read_raw(raw)
    assert {r["name"] for r in runs} == {f"{m}-ls-sym40-s{s}" for m in ("zero", "all") for s in (0, 1)}
    one = next(r for r in runs if r["name"] == "zero-ls-sym40-s1")
    d = os.path.join(out, "table1-smoke", "zero-ls-sym40-s1")
    assert one["summary"] == json.load(open(os.path.join(d, "summary.json")))
    assert one["rows"] == [json.loads(line) for line in open(os.path.join(d, "metrics.jsonl"))]
    assert one["provenance"]["torch"] and one["key"] == json.load(open(os.path.join(d, "sweep.json")))
    res = cli("sweep.py", "table1", "--scale", "smoke", "--seeds", "2", "--out", str(tmp_path / "again"), "--from", raw)
    assert res.returncode == 0, res.stderr
    body = lambda path: [x for x in open(path).read().splitlines() if not x.startswith("scale ")]  # noqa: E731 (but
    # the line that says where the runs ran)
    assert body(os.path.join(tmp_path, "again", "table1-smoke.md")) == body(os.path.join(out, "table1-smoke.md"))
    assert "the runs of " + raw in open(os.path.join(tmp_path, "again", "table1-smoke.md")).read()
    other = [dict(r, key=[v if v != "ls" else "cp" for v in r["key"]]) if r["name"].startswith("zero") else r
             for r in runs]  # zero knowledge's runs as if trained with other flags: they leave the table
    with gzip.open(raw, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in other)
    res = cli("sweep.py", "table1", "--scale", "smoke", "--seeds", "2", "--out", str(tmp_path / "other"), "--from", raw)
    md = open(os.path.join(tmp_path, "other", "table1-smoke.md")).read()
    assert res.returncode == 0 and "| Zero | not run |" in md and "2 on " in md
    for bad, line in ((str(tmp_path / "none.gz"), "no such file"), (os.path.join(out, "table1-smoke.md"),
                                                                   "not raw data that --pack wrote")):
        res = cli("sweep.py", "table1", "--scale", "smoke", "--out", str(tmp_path / "bad"), "--from", bad)
        assert res.returncode == 2 and line in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr
        assert not (tmp_path / "bad").exists()


def refused(capsys, *argv):
    """sweep.main(argv) in this process: its one line on stderr, after exit code 2."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        sweep.main(list(argv))
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


def test_table3_on_fashion_mnist_in_the_docs_is_its_raw_data_rendered_again(tmp_path):
    """docs/table3-fmnist's table is the sweep's own rendering of its committed raw data, both columns of one code:
    no number by hand, and every one results.md and the README quote from it is in it."""
    docs = os.path.join(HERE, "docs", "table3-fmnist")
    raw = os.path.join(docs, "runs.jsonl.gz")
    assert sweep.main(["table3", "--scale", "fmnist", "--seeds", "5", "--out", str(tmp_path), "--from", raw]) == 0
    body = lambda path: "\n".join(x for x in open(path).read().splitlines() if not x.startswith("scale "))  # noqa: E731
    # (but the line that says where the runs ran)
    assert body(tmp_path / "table3-fmnist.md") == body(os.path.join(docs, "table3-fmnist.md"))
    runs = sweep.read_raw(raw)
    cols = [sum(f"--noise {k} --rate 0.4 " in " ".join(r["key"]) for r in runs) for k in ("sym", "idn")]
    assert cols == [20 * 5, 19 * 5] and len(runs) == sum(cols)  # 20 rows, 5 seeds; IDN has no true T for Forward
    assert len({r["provenance"]["code"] for r in runs}) == 1 and all(r["provenance"]["git_commit"] for r in runs)
    assert "(n=" not in body(tmp_path / "table3-fmnist.md")  # every cell has its 5 seeds (confident learning: not run)
    text = open(os.path.join(HERE, "docs", "results.md")).read()  # what results.md quotes of it is in it
    readme = open(os.path.join(HERE, "README.md")).read()  # and the README's bullet
    bullet = readme[readme.index("- **Table 3's methods"):readme.index("40% and Table 3")]
    assert len(re.findall(r"\d+\.\d\d ± \d+\.\d\d", bullet)) >= 3
    section = text[text.index("## Table 3 on Fashion-MNIST"):text.index("## The paper's tables")] + bullet
    table = body(tmp_path / "table3-fmnist.md").replace("-", "−")
    quoted = re.findall(r"\d+\.\d\d ± \d+\.\d\d", section) + re.findall(r"[+−]\d+\.\d\d \[[+−]\d+\.\d\d, [+−]\d+\.\d\d\]",
                                                                        section)
    assert len(quoted) >= 10
    for q in quoted:
        assert q in table, q


def test_table3_on_fashion_mnist_rerun_at_one_code_with_confident_learning_is_that_code_of_its_grid():
    """docs/table3-fmnist/rerun.jsonl.gz, the table running again whole at one code with confident learning's rows:
    every run it holds so far ran that code, at a commit, with its grid's flags; results.md says how many and which
    commit, and how to continue it."""
    raw = os.path.join(HERE, "docs", "table3-fmnist", "rerun.jsonl.gz")
    runs = sweep.read_raw(raw)
    grid = {j["name"]: j["key"] for j in paper_tables.jobs("table3", "fmnist", 5, "sweeps")}
    assert all(dict(zip(r["key"][::2], r["key"][1::2])) == dict(zip(grid[r["name"]][::2], grid[r["name"]][1::2]))
               for r in runs)
    (code, commit), = {(r["provenance"]["code"], r["provenance"]["git_commit"]) for r in runs}
    text = open(os.path.join(HERE, "docs", "results.md")).read()
    said = re.search(r"holds (\d+) of its (\d+) runs, commit ([0-9a-f]{7}) \(code ([0-9a-f]{16})\)", text)
    assert said and said.groups() == (str(len(runs)), str(len(grid)), commit[:7], code), said
    assert f"git worktree add ../table3-rerun {commit[:7]}" in text


def provenance(out):
    with open(os.path.join(out, "config.json")) as f:
        return json.load(f)["provenance"]


def checkout(where):
    """A git checkout at where holding this tree's source files, committed: its commit."""
    source.pin(str(where / "copy"))
    shutil.copytree(where / "copy", where / "repo", ignore=shutil.ignore_patterns(source.PINNED))
    git = ["git", "-C", str(where / "repo"), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "one"], check=True)
    return subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def test_a_sweep_whose_checkout_moves_on_runs_the_code_it_started_with(tmp_path, monkeypatch, capsys):
    """A commit lands in the checkout while the sweep runs: the runs it starts after it still run the code pinned when
    it started, and record that code and its commit; the same command again says the checkout has moved on and keeps
    to the pinned code; its table names the one code."""
    commit = checkout(tmp_path)
    repo = tmp_path / "repo"
    monkeypatch.setattr(source, "ROOT", str(repo))
    started = sweep.start

    def start(i, job, env, script):
        if i == 1:  # the checkout moves on before the second run starts
            (repo / "schedule.py").write_text((repo / "schedule.py").read_text() + "\nMOVED = True\n")
            subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam",
                            "two"], check=True)
        return started(i, job, env, script)
    monkeypatch.setattr(sweep, "start", start)
    out = str(tmp_path / "sweeps")
    pinned = source.digest(str(tmp_path / "copy"))
    assert sweep.main(["table1", "--scale", "smoke", "--out", out]) == 0
    runs = paper_tables.jobs("table1", "smoke", 1, os.path.join(out, "table1-smoke"))
    assert len(runs) == 2
    for job in runs:
        p = provenance(job["dir"])
        assert p["code"] == pinned and p["git_commit"] == commit and p["git_dirty"] is None, job["name"]
    assert source.digest(str(repo)) != pinned
    assert f"Code: {pinned} (commit {commit[:7]}), every run." in open(os.path.join(out, "table1-smoke.md")).read()
    capsys.readouterr()
    assert sweep.main(["table1", "--scale", "smoke", "--out", out]) == 0  # both finished: skipped
    said = capsys.readouterr().out
    assert f"runs run the code it started with, {pinned} (commit {commit[:7]})" in said
    assert f"this checkout is now code {source.digest(str(repo))}" in said


def test_a_sweep_packs_each_run_as_it_finishes_and_continues_from_its_pack(tmp_path, monkeypatch, capsys):
    """--pack holds each run once it finishes, so a sweep stopped midway keeps it; with the sweep's folder lost, the
    same command restores the pack's runs at its code and runs only the rest, to the table a sweep never stopped
    writes; a packed run of another code runs again."""
    out, raw = str(tmp_path / "sweeps"), str(tmp_path / "runs.jsonl.gz")
    argv, ran, stopped, started = ["table1", "--scale", "smoke", "--out", out, "--pack", raw], [], [], sweep.start
    first, second = [j["name"] for j in paper_tables.jobs("table1", "smoke", 1, out)]

    def start(i, job, env, folder):
        if i == 1 and not stopped:
            stopped.append(i)
            raise KeyboardInterrupt  # Ctrl-C once the first run has finished
        ran.append(job["name"])
        return started(i, job, env, folder)
    monkeypatch.setattr(sweep, "start", start)
    with pytest.raises(SystemExit):
        sweep.main(argv)
    packed, = sweep.read_raw(raw)
    assert packed["name"] == first and ran == [first]
    shutil.rmtree(out)
    assert sweep.main(argv) == 0
    assert ran == [first, second]  # the first from the pack
    assert "1 runs of" in capsys.readouterr().out
    runs = sweep.read_raw(raw)
    assert [r for r in runs if r["name"] == first] == [packed]  # its numbers, flags and provenance as they were
    table = open(os.path.join(out, "table1-smoke.md")).read()
    assert "every run" in table and f"| Zero | {packed['summary'][paper_tables.MEAN]:.2f} |" in table
    next(r for r in runs if r["name"] == first)["provenance"]["code"] = "another"
    with gzip.open(raw, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in runs)
    shutil.rmtree(out)
    del ran[:]
    assert sweep.main(argv) == 0 and ran == [first]  # the second's code is the sweep's
    assert len({r["provenance"]["code"] for r in sweep.read_raw(raw)}) == 1  # the first, run again, replaced


def test_a_run_another_reads_is_restored_from_a_pack_only_with_its_reader(tmp_path):
    """The pack keeps a run's numbers, not its files: a Joint step 1 whose step 2 is still to run runs again."""
    todo = paper_tables.jobs("table3", "smoke", 1, str(tmp_path / "table3-smoke"))
    reader = next(j for j in todo if j.get("after"))
    read = next(j for j in todo if j["dir"] == reader["after"])
    raw = str(tmp_path / "runs.jsonl.gz")
    for packed, restored in (([read], 0), ([read, reader], 2)):
        with gzip.open(raw, "wt") as f:
            f.writelines(json.dumps(dict(name=j["name"], key=j["key"], summary={"test_acc_mean": 1.0}, rows=[],
                                         provenance={"code": "c"})) + "\n" for j in packed)
        assert sweep.restore(todo, raw, "another") == 0  # runs of another code
        assert sweep.restore(todo, raw, "c") == restored
        assert sweep.restore(todo, raw, "c") == 0  # once restored, nothing twice
        assert all(runfiles.state(j["dir"]) == (runfiles.FINISHED if restored else runfiles.NEW) for j in packed)


def test_a_run_restored_from_a_pack_is_finished_only_once_every_file_is_written(tmp_path, monkeypatch):
    """unpack writes summary.json, which makes a folder a finished run, last: stopped before it, the folder is a run
    to start again."""
    run = dict(name="r-s0", key=["--seed", "0"], summary={"test_acc_mean": 1.0}, rows=[{"epoch": 1}],
               provenance={"code": "c"})
    written = runfiles.write_json

    def stop_at_the_summary(out, name, obj):
        if name == "summary.json":
            raise KeyboardInterrupt
        written(out, name, obj)
    monkeypatch.setattr(runfiles, "write_json", stop_at_the_summary)
    with pytest.raises(KeyboardInterrupt):
        sweep.unpack([run], str(tmp_path))
    assert runfiles.state(str(tmp_path / "r-s0")) != runfiles.FINISHED
    monkeypatch.setattr(runfiles, "write_json", written)
    sweep.unpack([run], str(tmp_path))
    assert runfiles.state(str(tmp_path / "r-s0")) == runfiles.FINISHED and sweep.metrics_rows(tmp_path / "r-s0") == \
        run["rows"] and sweep.provenance_of(tmp_path / "r-s0") == run["provenance"]


def test_a_sweep_cell_whose_runs_failed_reads_failed(tmp_path):
    todo = paper_tables.jobs("table1", "smoke", 1, str(tmp_path))
    md = sweep.render("table1", "smoke", 1, str(tmp_path), "header", failed={todo[0]["name"]: "train.py: error: x"})
    assert "| Zero | failed |" in md and "| All | not run |" in md


def test_a_sweep_starts_fresh_runs_without_resume_and_resumes_started_ones(tmp_path, monkeypatch):
    launched = []
    monkeypatch.setattr(sweep.subprocess, "Popen", lambda argv, **kw: launched.append(argv))
    job = paper_tables.jobs("table1", "smoke", 1, str(tmp_path))[0]
    for started in (False, True):
        if started:
            with open(os.path.join(job["dir"], "config.json"), "w") as f:
                f.write("{}")
        r = sweep.start(0, job, {}, "train.py")
        r["log"].close()
        r["err"].close()
    assert "--resume" not in launched[0] and launched[1][-1] == "--resume"


def test_every_lab_train_and_sweep_command_shown_in_the_readme_and_docs_is_accepted(capsys, tmp_path):
    """python lab/train.py ... and python -m tools.sweep ... in the README and docs: each takes its flags and values
    (a sweep's as a dry run, or its table from packed runs)."""
    from test_faults import readme_and_docs, shown_commands
    docs = readme_and_docs()
    trains = [c for text in docs.values() for c in shown_commands(text, "lab/train.py")]
    sweeps = [c for text in docs.values() for c in shown_commands(text, "-m tools.sweep")]
    assert any("--mode coteach" in c for c in trains) and any("--scale demo" in c for c in sweeps)
    for line in (c for c in trains if "--help" not in c):
        config.resolve(config.get_args(shlex.split(line)[2:]))  # refuses a flag or value that no longer exists
    for line in sweeps:
        argv = shlex.split(line)[3:]
        cut = argv.index("--") if "--" in argv else len(argv)
        if "--from" in argv:  # it runs nothing: its table is written, here into tmp_path
            assert sweep.main(argv[:argv.index("--out")] + ["--out", str(tmp_path)]) == 0, line
            continue
        # the grid and its extra flags; a Slurm command's too, which a dry run checks without a cluster
        assert sweep.main(argv[:cut] + ["--dry-run"] + argv[cut:]) == 0, line
    capsys.readouterr()


def test_a_table_of_runs_of_two_codes_is_refused_in_one_line_unless_asked_for(smoke, tmp_path, capsys):
    """Rendering a pack whose runs ran two codes: one line that names each code and its rows, exit 2, no table; with
    --mixed-code the table, which says under its title that it mixes them and names them."""
    out, _ = smoke
    raw = str(tmp_path / "runs.jsonl.gz")
    sweep.pack(paper_tables.jobs("table1", "smoke", 2, os.path.join(out, "table1-smoke")), raw)
    runs = sweep.read_raw(raw)
    code = runs[0]["provenance"]["code"]
    assert {r["provenance"]["code"] for r in runs} == {code}
    other = [dict(r, provenance=dict(r["provenance"], code="0123456789abcdef", git_commit="f" * 40, git_dirty=False))
             if r["name"].startswith("all-") else r for r in runs]
    with gzip.open(raw, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in other)
    again = ["table1", "--scale", "smoke", "--seeds", "2", "--out", str(tmp_path / "t"), "--from", raw]
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        sweep.main(again)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    assert "the runs are of 2 codes" in err and "0123456789abcdef (commit fffffff): 2 runs of all-ls-sym40" in err
    assert f"{code}" in err and "runs of zero-ls-sym40" in err and "--mixed-code" in err
    assert not (tmp_path / "t").exists()
    assert sweep.main(again + ["--mixed-code"]) == 0
    md = open(tmp_path / "t" / "table1-smoke.md").read()
    assert "**Mixed code: these runs ran 2 codes**" in md and "0123456789abcdef" in md
    with gzip.open(raw, "wt") as f:  # runs of before digests were recorded: a clean commit names their code
        f.writelines(json.dumps(dict(r, provenance={k: v for k, v in r["provenance"].items() if k != "code"} |
                                     dict(git_commit="a" * 40, git_dirty=False))) + "\n" for r in runs)
    assert sweep.main(again) == 0
    assert "Code: commit aaaaaaa, every run." in open(tmp_path / "t" / "table1-smoke.md").read()


def test_a_pack_that_is_not_one_is_refused_in_one_line_and_nothing_is_written_outside_the_table(smoke, tmp_path,
                                                                                                 capsys):
    out, _ = smoke
    raw = str(tmp_path / "runs.jsonl.gz")
    sweep.pack(paper_tables.jobs("table1", "smoke", 2, os.path.join(out, "table1-smoke")), raw)
    good = sweep.read_raw(raw)
    outside = tmp_path / "outside"

    def packed(*runs):
        with gzip.open(raw, "wt") as f:
            f.writelines(json.dumps(r) + "\n" for r in runs)
        return raw
    again = ["table1", "--scale", "smoke", "--seeds", "2", "--out", str(tmp_path / "t")]
    for name in (str(outside), "../outside", "..", "", "a/b"):  # a name is a folder's, never a path
        assert "line 2 is not a run as --pack writes it" in refused(capsys, *again, "--from", packed(
            good[0], dict(good[1], name=name)))
    for bad in ({"a": 1}, [1, 2], dict(good[0], summary=5), dict(good[0], rows=[1])):
        assert "line 1 is not a run as --pack writes it" in refused(capsys, *again, "--from", packed(bad))
    assert not outside.exists() and not (tmp_path / "t").exists()
    assert "lack numbers the table reads" in refused(capsys, *again, "--from", packed(
        *good, dict(good[0], summary=dict(good[0]["summary"], test_acc_mean="high"))))
    # packs joined by cat: of two runs of one name, the later; the table is then the same as the sweep's
    first = [dict(r, summary=dict(r["summary"], test_acc_mean=0.0)) for r in good]
    with open(raw, "wb") as f:
        for runs in (first, good):
            f.write(gzip.compress("".join(json.dumps(r) + "\n" for r in runs).encode()))
    assert sweep.main(again + ["--from", raw]) == 0
    body = lambda path: [x for x in open(path).read().splitlines() if not x.startswith("scale ")]  # noqa: E731
    assert body(tmp_path / "t" / "table1-smoke.md") == body(os.path.join(out, "table1-smoke.md"))
    for flags, line in ((["--from", raw, "--dry-run"], "--from runs nothing: leave out --dry-run"),
                        (["--from", raw, "--pack", raw], "--from runs nothing and packs nothing: leave out --pack"),
                        (["--from", str(tmp_path)], f"{tmp_path} is a folder; give the file a sweep's --pack wrote"),
                        (["--seeds", "1", "--from", packed(*[r for r in good if r["name"].endswith("s1")])],
                         "none of its 2 runs is one of table1 at --scale smoke with seeds 0..0")):
        assert line in refused(capsys, "table1", "--scale", "smoke", "--out", str(tmp_path / "u"), *flags)
    assert not (tmp_path / "u").exists()


def test_a_pack_or_data_that_cannot_be_had_stops_the_sweep_before_its_first_run(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    notes = tmp_path / "notes.gz"
    notes.write_text("not a pack")
    for pack, line in ((str(tmp_path / "file" / "runs.gz"), f"--pack {tmp_path / 'file' / 'runs.gz'}: no file can "
                                                            f"be written in {tmp_path / 'file'} ("),
                       (str(notes), f"{notes}: not raw data that --pack wrote")):
        assert refused(capsys, "table1", "--scale", "smoke", "--out", str(tmp_path / "s"), "--pack", pack).startswith(
            "sweep.py: error: " + line)
    (tmp_path / "empty").mkdir()  # no Fashion-MNIST there, and no server to download it from: train.py's line, once
    line = refused(capsys, "table1", "--scale", "fmnist", "--out", str(tmp_path / "s"), "--", "--data-dir",
                   str(tmp_path / "empty"), "--data-mirror", "http://127.0.0.1:9/")
    assert line.startswith("train.py: error: Fashion-MNIST files ") and "downloading it failed" in line, line
    assert not (tmp_path / "s").exists() and notes.read_text() == "not a pack"


def test_a_sigterm_stops_the_sweep_and_its_runs_at_their_checkpoints_in_one_line(tmp_path):
    """kill PID of a sweep started in the background (nohup, &, where Ctrl-C is ignored): each running run stops
    at its checkpoint, as train.py does on SIGTERM, rather than going on without it; the sweep says so in one line."""
    out = str(tmp_path / "sweeps")
    proc = subprocess.Popen([sys.executable, "-m", "tools.sweep", "table1", "--scale", "demo", "--out", out, "--jobs",
                             "2"], cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # as `nohup ... &`
    logs = [os.path.join(out, "table1-demo", f"{m}-mylc-sym40-s0", "train.log") for m in ("zero", "all")]
    deadline = time.time() + 240
    while not all(os.path.exists(f) and re.search(r"^epoch +1 ", open(f).read(), re.M) for f in logs):
        assert time.time() < deadline and proc.poll() is None, "the runs never reached epoch 1"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and err.splitlines() == [
        "sweep.py: stopped by SIGTERM; run the same command again to continue (finished runs are skipped, the others "
        "resume from their checkpoints; Slurm jobs go on and are not resubmitted)"], err
    for log in logs:  # each run stopped itself at once, as on SIGTERM, and said where to resume
        said = open(log.replace("train.log", "train.err")).read()
        assert re.search(r"^train.py: stopped by SIGTERM .*checkpoint.pt holds epoch \d+; resume with: ", said,
                         re.M), said
        assert not os.path.exists(log.replace("train.log", "summary.json"))
    assert not [p for p in os.listdir("/proc") if p.isdigit() and out in read_cmdline(p)]  # no run left behind


def read_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read()
    except OSError:  # gone meanwhile
        return ""


def test_a_second_sweep_skips_every_finished_run(smoke):
    out, _ = smoke
    summaries = sorted(glob.glob(os.path.join(out, "table1-smoke", "*", "summary.json")))
    assert len(summaries) == 4
    before = [os.stat(p).st_mtime_ns for p in summaries]
    res = cli("sweep.py", "table1", "--scale", "smoke", "--seeds", "2", "--out", out)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("skipped (summary.json exists)") == 4
    assert [os.stat(p).st_mtime_ns for p in summaries] == before


def test_a_failed_run_is_reported_and_the_rest_of_the_grid_runs(tmp_path):
    todo = paper_tables.jobs("table1", "smoke", 2, str(tmp_path / "table1-smoke"))
    assert [j["name"] for j in todo] == ["zero-ls-sym40-s0", "all-ls-sym40-s0", "zero-ls-sym40-s1", "all-ls-sym40-s1"]
    for job, acc in zip(todo[:2], (40.0, 42.0)):  # finished before, by this code: no training needed
        write(os.path.join(job["dir"], "summary.json"), {"test_acc_mean": acc, "seconds": 1.0})
        write(os.path.join(job["dir"], "config.json"), {"provenance": {"code": source.digest()}})
    write(os.path.join(todo[1]["dir"], "sweep.json"), todo[1]["key"] + ["--epochs", "2"])  # finished, other flags
    bad = todo[2]
    write(os.path.join(bad["dir"], "config.json"), "{}")
    write(os.path.join(bad["dir"], "checkpoint.pt"), "half a checkpoint")  # train.py --resume must refuse it
    res = cli("sweep.py", "table1", "--scale", "smoke", "--seeds", "2", "--out", str(tmp_path))
    assert res.returncode == 1
    assert re.search(r"zero-ls-sym40-s1: FAILED: train.py: error: cannot resume: .*corrupt", res.stdout), res.stdout
    assert "all-ls-sym40-s0: FAILED: " in res.stdout and "finished with other flags" in res.stdout
    assert os.path.exists(os.path.join(todo[3]["dir"], "summary.json"))  # the run after the failure still ran
    with open(tmp_path / "table1-smoke.md") as f:
        md = f.read()
    assert "| Zero | 40.00 (n=1) |" in md and "## Failed runs" in md and "`zero-ls-sym40-s1`" in md
    assert re.search(r"\| All \| \d+\.\d\d \(n=1\) \|", md)  # the stale 42.0 is left out


def fake_cell(sweep_dir, t, row, col, seed, acc):
    name = paper_tables.run_name(paper_tables.cell_flags(t, row, col, "demo"))
    write(os.path.join(sweep_dir, f"{name}-s{seed}", "summary.json"), {"test_acc_mean": acc})


def test_cells_are_mean_and_sample_std_over_the_asked_seeds(tmp_path):
    t = sweep.PRESETS["table1"][0]
    for seed, acc in enumerate([60.0, 62.0, 67.0]):
        fake_cell(tmp_path, t, "zero", "mylc", seed, acc)
    fake_cell(tmp_path, t, "zero", "mylc", 3, 0.0)  # seed 3 is outside --seeds 3: ignored
    fake_cell(tmp_path, t, "all", "mylc", 0, 50.0)
    fake_cell(tmp_path, t, "all", "mylc", 2, 54.0)  # seed 1 missing
    md = sweep.render("table1", "demo", 3, str(tmp_path), "header")
    # mean 63, sample std sqrt(26 / 2) = 3.61 (the population std, ddof=0, would be 2.94)
    assert "| Zero | 63.00 ± 3.61 (paper 65.04) |" in md  # the demo scale's column: MyLC
    assert "| 52.00 ± 2.83 (n=2) (paper 61.11) |" in md
    assert stats.mean_std([5.0]) == (5.0, None, 1)


def test_an_interval_over_any_number_of_seeds_takes_students_t_quantile():
    """11 and 31 seeds: t(0.975, 10) = 2.228 and t(0.975, 30) = 2.042 (printed tables), not the normal's 1.96,
    which would make the intervals 12% and 4% too narrow."""
    assert [round(stats.t975(df), 3) for df in (1, 4, 10, 30)] == [12.706, 2.776, 2.228, 2.042]
    for n, t in ((11, 2.228), (31, 2.042)):
        diffs = [float(i % 3) for i in range(n)]
        m, s, _ = stats.mean_std(diffs)
        mean, (lo, hi) = stats.interval(diffs)
        assert mean == m and abs((hi - lo) / 2 - t * s / n ** 0.5) < 1e-3 * s


def test_table1_verdict_compares_the_margin_with_the_spread(tmp_path):
    t = sweep.PRESETS["table1"][0]
    cells = {"zero": [58.0, 58.5, 57.5], "all": [57.0, 57.2, 57.4], "progressive": [61.2, 62.0, 62.8],
             "static": [57.5, 58.5, 59.5]}
    for row, accs in cells.items():
        for seed, acc in enumerate(accs):
            fake_cell(tmp_path, t, row, "mylc", seed, acc)
    md = sweep.render("table1", "demo", 3, str(tmp_path), "header")
    assert ("- MyLC: CMD-P 62.00 ± 0.80 > max(Zero 58.00 ± 0.50, All 57.20 ± 0.20) by 4.00 > spread 0.80: yes "
            "(paper: 69.09 vs 65.04, by 4.05)") in md
    assert "- MyLC: CMD-S 58.50 ± 1.00 > max(Zero 58.00 ± 0.50, All 57.20 ± 0.20) by 0.50 ≤ spread 1.00: no" in md


def test_paper_numbers_fit_their_tables():
    for tables in sweep.PRESETS.values():
        for t in tables:
            assert set(t["paper"]) <= {r[0] for r in t["rows"]} | {r[0] for r in t["missing"]}
            # the paper's numbers are the table's first columns; a column beyond the paper's comes after them
            assert len({len(v) for v in t["paper"].values()}) <= 1 and all(len(v) <= len(t["cols"])
                                                                            for v in t["paper"].values())
    t3 = sweep.PRESETS["table3"][0]
    assert sweep.paper_of(t3, "ce", "sym40") == 56.82 and sweep.paper_of(t3, "ce", "idn40") is None
    assert sweep.paper_of(sweep.PRESETS["table2"][0], "progressive-mylc", "sym40") == 69.09
    assert sweep.paper_of(sweep.PRESETS["table4"][0], "mkd", "shufflenetv2") == 47.72


@pytest.mark.parametrize("preset", sorted(sweep.PRESETS))
def test_every_command_passes_train_py_checks(preset):
    for scale in paper_tables.SCALES:
        if preset in paper_tables.PAPER_SCALE_ONLY and scale != "paper":
            continue  # refused: test_cifar100n_runs_only_at_paper_scale
        if preset in paper_tables.NOT_CPU_SCALES and scale not in paper_tables.AUTHORS_SCALES:
            continue  # refused: test_table3_runs_the_comparators_with_their_authors_cifar100_settings_beside_...
        todo = paper_tables.jobs(preset, scale, 2, "sweeps")
        assert len({j["dir"] for j in todo}) == len(todo)
        for job in todo:
            args = config.resolve(config.get_args(paper_tables.train_flags(job["argv"])))  # exits on a contradiction
            assert args.dataset == {"paper": "cifar100", "fmnist": "fashionmnist"}.get(scale, "synthetic")
            small = {"demo": "mlp", "benign": "cnn", "smoke": "cnn", "fmnist": "mlp"}
            assert args.arch == ",".join([small[scale]] * args.peers) if scale in small else "cnn" not in args.arch
            script, argv = paper_tables.entry_of(job["argv"])
            if script == paper_tables.CONFIDENT:  # and lab/confident.py's own checks
                from lab import confident
                assert confident.get_args(argv)[2].val_split == 0.1 and job["name"].startswith("cl-")
            else:
                assert script == paper_tables.TRAIN_ENTRY and job["name"].startswith(f"{args.mode}-")
            assert job["name"].endswith(f"-s{args.seed}")


def test_cifar100n_runs_only_at_paper_scale(tmp_path):
    todo = paper_tables.jobs("cifar100n", "paper", 1, "sweeps")
    assert [j["name"] for j in todo] == [f"{m}-{lc}-human-resnet34-s0" for m in ("zero", "progressive")
                                         for lc in ("proselflc", "mylc")]
    args = config.resolve(config.get_args(todo[3]["argv"]))
    assert (args.dataset, args.noise, args.mode, args.lc) == ("cifar100", "human", "progressive", "mylc")
    md = sweep.render("cifar100n", "paper", 3, str(tmp_path / "cifar100n-paper"), "header")
    assert "| Zero | not run | not run |" in md and "| CMD-P | not run | not run |" in md
    for scale in ("demo", "smoke"):  # synthetic data has no human labels: one line, exit 2, nothing written
        res = cli("sweep.py", "cifar100n", "--scale", scale, "--out", str(tmp_path / scale))
        assert res.returncode == 2 and res.stdout == "" and "Traceback" not in res.stderr
        assert res.stderr.strip() == f"sweep.py: error: preset cifar100n runs only at --scale paper: " \
                                     f"{paper_tables.PAPER_SCALE_ONLY['cifar100n']}"
        assert not (tmp_path / scale).exists()



def test_table3_runs_the_comparators_with_their_authors_cifar100_settings_beside_the_papers_numbers():
    t = sweep.PRESETS["table3"][0]
    todo = paper_tables.jobs("table3", "paper", 1, "sweeps")
    assert len(todo) == len(t["rows"]) * len(t["cols"]) - len(t["skip"])
    assert all(j["name"].endswith("-resnet50-s0") for j in todo)
    by_name = {j["name"]: config.resolve(config.get_args(paper_tables.train_flags(j["argv"]))) for j in todo}
    cp = by_name["coteach+-pair40-resnet50-s0"]
    assert (cp.mode, cp.lc, cp.forget_rate, cp.coteach_plus_init, cp.epochs) == ("coteach+", "ce", 0.4, 4, 200)
    assert by_name["jocor-sym20-resnet50-s0"].jocor_lambda == 0.85
    assert (by_name["apl-sym40-resnet50-s0"].apl_alpha, by_name["apl-sym40-resnet50-s0"].apl_beta) == (10, 0.1)
    assert by_name["gce-sym40-resnet50-s0"].mode == "gce"
    assert by_name["dmi-sym40-resnet50-s0"].warmup == 80 and by_name["cdr-pair20-resnet50-s0"].cdr_rate == 0.2
    for lc in ("trevision", "forward-anchor"):  # their CIFAR-100 code: T̂ after 15 epochs, each class's argmax
        a = by_name[f"{lc}-sym40-resnet50-s0"]
        assert (a.warmup, a.anchor_percentile) == (15, 100)
    assert by_name["trevision-sym40-resnet50-s0"].trevision_revise == 50
    assert {by_name[f"{lc}-sym20-resnet50-s0"].mode for lc in ("forward", "mentornet", "apl")} == {
        "forward", "mentornet", "apl"}
    # the copy guide's η at K = 100, per column's rate: 4 at 20%, 2.5 at 40%
    assert [by_name[f"progressive-mylc-{c}-eta{e}-resnet50-s0"].eta for c, e in (("sym20", 4), ("sym40", 2.5))] == [4, 2.5]
    # the true T of Forward has no instance-dependent counterpart: no such cell, every other row has one
    idn = {n for n in by_name if "-idn40-" in n}
    assert "forward-idn40-resnet50-s0" not in idn and len(idn) == len(t["rows"]) - 1
    # Joint's second step reads its first step's folder of the same column and seed, and starts after it
    step1, step2 = by_name["joint-pair40-resnet50-s0"], by_name["joint2-pair40-after-joint-1-resnet50-s0"]
    assert (step1.mode, step1.joint_begin, step1.joint_alpha, step1.joint_beta, step2.mode) == ("joint", 0.35, 1, 0.5,
                                                                                                "joint2")
    assert step2.labels_from == step1.out and {j["after"] for j in todo if j["after"]} == {
        by_name[n].out for n in by_name if n.startswith("joint-")}
    assert sweep.paper_of(t, "coteach+", "pair40") == 38.03 and sweep.paper_of(t, "gce", "sym40") == 57.97
    assert sweep.paper_of(t, "progressive-mylc", "sym40") == 64.30 and "jocor" not in t["paper"]
    assert sweep.paper_of(t, "cdr", "sym40") == 62.72 and sweep.paper_of(t, "joint", "pair20") == 67.35
    with pytest.raises(ValueError, match="runs only at --scale paper, fmnist, smoke"):
        paper_tables.jobs("table3", "demo", 1, "sweeps")


def test_a_run_that_reads_another_is_a_new_run_when_that_ones_flags_change(monkeypatch):
    """Joint's second step names its first step's folder; its key holds that step's flags, so that a sweep does not
    skip a second step that read labels of a first step run with other settings."""
    key = {j["name"]: j["key"] for j in paper_tables.jobs("table3", "fmnist", 1, "sweeps")}
    authors = dict(paper_tables.AUTHORS, **{"joint-1": {"k10": (["--joint-alpha", "1", "--joint-beta", "0.5"], "x")}})
    monkeypatch.setitem(paper_tables.PRESETS["table3"][0], "authors", authors)
    moved = {j["name"]: j["key"] for j in paper_tables.jobs("table3", "fmnist", 1, "sweeps")}
    step2 = "joint2-sym40-after-joint-1-s0"
    assert moved["joint-sym40-s0"] != key["joint-sym40-s0"] and moved[step2] != key[step2]
    assert moved["zero-ce-sym40-s0"] == key["zero-ce-sym40-s0"]


def lr_at(epoch, schedule, decay=0.1):
    """The lr in epoch `epoch` + 1 (train.py's epochs count from 1) as a power of the decay: milestones passed."""
    return decay ** sum(epoch >= m for m in schedule[1])


def test_the_table3_schedule_is_the_presets_and_same_point_keeps_the_phase_of_the_lr():
    p = preset("cifar100", "resnet50")
    assert paper_tables.R50_SCHEDULE == (p["epochs"], tuple(p["milestones"]))
    src, dst = paper_tables.R50_SCHEDULE, paper_tables.schedule_of(paper_tables.FMNIST_FLAGS)
    assert dst == (80, (40, 60))
    moved = [paper_tables.same_point(e, src, dst) for e in range(src[0] + 1)]
    assert moved[0] == 0 and moved[-1] == dst[0] and moved == sorted(moved)
    for e, m in zip(src[1], dst[1]):  # a milestone to the milestone
        assert paper_tables.same_point(e, src, dst) == m
    for e, d in enumerate(moved):  # the stage begins at the same lr in both, in units of each run's first lr
        assert lr_at(d, dst) == lr_at(e, src), e
    with pytest.raises(ValueError):
        paper_tables.same_point(201, src, dst)


def test_table3_at_fmnist_scale_is_its_sym40_and_idn40_columns_at_the_authors_ten_class_settings():
    t = paper_tables.PRESETS["table3"][0]
    todo = paper_tables.jobs("table3", "fmnist", 1, "sweeps")
    by_name = {j["name"]: config.resolve(config.get_args(paper_tables.train_flags(j["argv"]))) for j in todo}
    assert len(todo) == 2 * len(t["rows"]) - 1
    assert all(("-sym40" in n) != ("-idn40" in n) for n in by_name)
    paper = {j["name"].replace("-resnet50", ""): config.resolve(config.get_args(paper_tables.train_flags(j["argv"])))
             for j in paper_tables.jobs("table3", "paper", 1, "sweeps")}
    src, dst = paper_tables.R50_SCHEDULE, (80, (40, 60))
    ten = {r: dict(zip(f[::2], f[1::2])) for r, f in ((r, x["k10"][0]) for r, x in paper_tables.AUTHORS.items())}
    for name, a in by_name.items():
        assert (a.dataset, a.arch, a.lr, a.epochs, a.milestones, a.rate) == (
            "fashionmnist", "mlp,mlp", 0.05, 80, [40, 60], 0.4), name
        b = paper.get(name.replace("-eta2", "-eta2.5"))
        if b is None:
            continue
        assert (a.mode, a.lc, a.noise) == (b.mode, b.lc, b.noise), name
        # each stage begins in the same phase of the lr as its paper-scale counterpart would, DMI's after the
        # second decay
        assert lr_at(a.epochs - a.trevision_revise, dst) == lr_at(b.epochs - b.trevision_revise, src), name
        if b.mode == "dmi":
            assert lr_at(a.warmup, dst) == lr_at(b.warmup, src), name
    # the authors' ten-class (CIFAR-10) settings, where they differ from CIFAR-100's
    apl, cp, jo = by_name["apl-sym40-s0"], by_name["coteach+-idn40-s0"], by_name["jocor-sym40-s0"]
    assert (apl.apl_alpha, apl.apl_beta, cp.coteach_plus_init, jo.jocor_lambda) == (1, 1, 19, 0.9)
    for lc in ("trevision", "forward-anchor"):
        a = by_name[f"{lc}-idn40-s0"]
        assert (a.warmup, a.anchor_percentile) == (20, 97) == (int(ten[lc]["--warmup"]), 97)
    j = by_name["joint-sym40-s0"]
    assert (j.joint_alpha, j.joint_beta, j.joint_begin) == (1.2, 0.8, 0.6875)
    # CMD-P at η = 4 and at the copy guide's start for K = 10 and 40%, below the bound 2.7
    assert by_name["progressive-mylc-sym40-s0"].eta == 4 and by_name["progressive-mylc-idn40-eta2-s0"].eta == 2 < 2.7
    assert by_name["progressive-proselflc-sym40-eta2-s0"].eta == 2
    assert "forward-idn40-s0" not in by_name and by_name["forward-anchor-idn40-s0"].noise == "idn"
    labels = {r: paper_tables.row_label(t, r, "fmnist") for r, _, _ in t["rows"]}
    assert labels["apl"] == "APL (NCE+RCE, α 1, β 1) [their CIFAR-10 config]"
    assert labels["dmi"] == "DMI (after 60 epochs of CE)" and paper_tables.row_label(t, "dmi", "paper") == \
        "DMI (after 80 epochs of CE)"
    assert labels["progressive-mylc-start"] == "CMD-P+MyLC (η = 2, the copy guide's start for symmetric noise)"
    assert paper_tables.row_label(t, "progressive-mylc-start", "paper") == \
        "CMD-P+MyLC (η = 4/2.5/4/2.5/2.5, the copy guide's start for symmetric noise)"  # per column: pair 20, 40,
    # sym 20, 40, idn 40
    assert labels["trevision"].endswith("after 20 epochs of CE, anchors below the 97th percentile, reweighting, its ΔT "
                                        "in the last 9) [their CIFAR-10 settings]")


def test_table3_at_smoke_scale_runs_every_row_and_says_it_ranks_nothing(tmp_path, capsys):
    """Every row of Table 3 this project trains, one epoch each on synthetic data (three for a row with stages). A
    smoke run's numbers check that each row runs: the table says so first, and shows no paper number and no verdict.
    The runs train in this process, each as the sweep would start it (its folder claimed, its flags), and the sweep
    then finds every one finished, skips it and writes the table (starting each as a process is tested above)."""
    import train
    out = str(tmp_path / "sweeps")
    from lab import confident
    for job in paper_tables.jobs("table3", "smoke", 1, os.path.join(out, "table3-smoke")):  # a row that reads another
        paper_tables.claim(job)  # comes after it
        script, argv = paper_tables.entry_of(job["argv"])
        {paper_tables.TRAIN_ENTRY: train.main, paper_tables.CONFIDENT: confident.main}[script](argv)
    capsys.readouterr()
    assert sweep.main(["table3", "--scale", "smoke", "--out", out, "--jobs", "2"]) == 0
    assert "FAILED" not in capsys.readouterr().out
    md = open(os.path.join(out, "table3-smoke.md")).read()
    t = sweep.PRESETS["table3"][0]
    assert md.split("\n")[2] == paper_tables.CHECK_ONLY["smoke"][0].upper() + paper_tables.CHECK_ONLY["smoke"][1:] + "."
    for row, _, _ in t["rows"]:
        label = paper_tables.row_label(t, row, "smoke")
        line = next(ln for ln in md.splitlines() if ln.startswith(f"| {label} |"))
        assert re.fullmatch(r"\d+\.\d\d", line.split(" | ")[1].rstrip(" |")), line  # trained, nothing beside it
    assert "(paper " not in md.split("## Table 3")[1].split("###")[0] and "S2E" not in md
    assert "beat every other row" not in md and "Preconditions" not in md and "### Diagnostics" in md
    # confident learning's rows say what cleanlab flagged, from each run's confident.json, and the raw data keeps it
    cols = [c[0] for c in sweep.scale_cols(t, "smoke")]
    for row, name in (("cl", "cl-pbnr"), ("cl-pbc", "cl-pbc")):
        flags = json.load(open(os.path.join(out, "table3-smoke", f"{name}-{cols[0]}-s0", "confident.json")))
        assert (f"- {paper_tables.row_label(t, row, 'smoke')} (1 seeds): flagged {flags['flagged']} of "
                f"{flags['samples']} given labels, {flags['wrong']} of them wrong; precision "
                f"{flags['precision']:.3f}") in md
    raw = str(tmp_path / "runs.jsonl.gz")
    assert sweep.main(["table3", "--scale", "smoke", "--out", out, "--pack", raw]) == 0
    assert sum("confident" in r for r in sweep.read_raw(raw)) == 2 * len(cols)
    assert sweep.main(["table3", "--scale", "smoke", "--from", raw, "--out", str(tmp_path / "again")]) == 0
    again = open(tmp_path / "again" / "table3-smoke.md").read()
    assert again.split("### Diagnostics", 1)[1] == md.split("### Diagnostics", 1)[1]


@pytest.mark.parametrize("extra,error", [
    (["--weight-decay", "-1"], "train.py: error: --weight-decay -1.0: must be at least 0, and a number float32 holds"),
    (["--eta", "2"], "sweep.py: error: --eta after -- would override what the grid sets for its runs; leave it out"),
    (["--see", "3", "--out=x"], "sweep.py: error: --out --seed after -- would override what the grid sets"),
    (["--epochs", "9"], "sweep.py: error: --epochs after -- would override"),  # set by the scale
])
def test_flags_after_dashes_that_train_py_refuses_or_that_override_the_grid_stop_the_sweep(tmp_path, extra, error):
    out = tmp_path / "sweeps"
    res = cli("sweep.py", "table5", "--scale", "smoke", "--seeds", "2", "--out", str(out), "--", *extra)
    assert res.returncode == 2 and res.stdout == "" and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith(error), res.stderr
    assert not out.exists()  # nothing started, nothing written


def test_flags_after_dashes_that_add_to_the_runs_reach_every_run():
    res = cli("sweep.py", "table5", "--scale", "smoke", "--dry-run", "--", "--workers", "0")
    assert res.returncode == 0 and all(ln.endswith(" --workers 0") for ln in res.stdout.splitlines())


def test_a_sweep_out_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "f").write_text("mine")
    res = cli("sweep.py", "table5", "--scale", "smoke", "--out", str(tmp_path / "f"))
    assert res.returncode == 2 and res.stderr.strip().endswith("is a file; give a directory for the sweeps")
    assert (tmp_path / "f").read_text() == "mine"

@pytest.mark.parametrize("scale,flags", [("demo", paper_tables.DEMO_FLAGS), ("benign", paper_tables.BENIGN_FLAGS)])
def test_cpu_table1_is_the_knowledge_axis_with_mylc_and_dry_run_prints_it(scale, flags):
    res = cli("sweep.py", "table1", "--scale", scale, "--seeds", "3", "--dry-run")
    lines = res.stdout.splitlines()
    assert res.returncode == 0 and len(lines) == 12
    assert all(ln.startswith("python lab/train.py " + " ".join(flags)) and "--lc mylc" in ln for ln in lines)
    assert [ln.split("--mode ")[1].split()[0] for ln in lines[:4]] == ["zero", "all", "static", "progressive"]


def test_demo_preset_at_smoke_size_writes_entropy_histograms_the_table_and_its_diagnostics(tmp_path):
    """The demonstration's grid end to end at smoke size: histograms add up, the table has its diagnostics."""
    import numpy as np

    from training import datasets
    out = str(tmp_path)
    res = cli("sweep.py", "demo", "--scale", "smoke", "--seeds", "1", "--out", out, "--jobs", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    md = open(os.path.join(out, "demo-smoke.md")).read()
    assert "| CE, zero knowledge | " in md and "paper" not in md.split("## ")[1] and "### Diagnostics" in md
    assert "CPU (" in md and "2 runs at a time" in md and "Preconditions" not in md  # smoke: no verdict
    f = dict(zip(paper_tables.SMOKE_FLAGS[::2], paper_tables.SMOKE_FLAGS[1::2]))
    clean = datasets.load_dataset("synthetic", None, synthetic=datasets.Synthetic(
        size=int(f["--synthetic-size"]), test_size=int(f["--synthetic-test-size"]),
        classes=int(f["--synthetic-classes"]), seed=0)).train.labels
    for run in ("zero-ce-sym40-s0", "zero-mylc-sym40-s0"):
        d = os.path.join(out, "demo-smoke", run)
        noisy = np.load(os.path.join(d, "noisy_labels.npy"))
        with np.load(os.path.join(d, "entropy_hist.npz")) as h:
            counts = h["counts"]  # (epochs, model, clean/noisy, bins)
            assert bool(h["known_clean"]) and counts.shape[:3] == (1, 2, 2)
        assert (counts.sum(axis=(2, 3)) == len(noisy)).all()  # every training sample once per model
        assert (counts[:, :, 1].sum(-1) == (noisy != clean).sum()).all() and (noisy != clean).sum() > 0
    pytest.importorskip("matplotlib")
    run = os.path.join(out, "demo-smoke", "zero-mylc-sym40-s0")
    res = cli("plot.py", run, "--out", str(tmp_path / "png"), "--hist-epochs", "1,99")
    assert res.returncode == 0, res.stderr
    assert os.path.getsize(tmp_path / "png" / "entropy.png") > 1000
    assert "not 99;" in res.stderr and res.stderr.strip().endswith("shows 1")  # the run logged 1 epoch: says so


def fake_run(d, config, n_epochs=3):
    cfg = dict(dict(mode="progressive", lc="mylc", noise="sym", rate=0.4, eta=4.0, b=-5.0, arch="cnn,cnn", seed=0,
                    dataset="synthetic", epochs=n_epochs), **config)
    write(os.path.join(d, "config.json"), cfg)
    rows = [dict(epoch=e + 1, chi=1.0 / (e + 1), test_acc_a=50.0 + e, test_acc_b=49.0 + e, selected_b2a=0.5,
                 selected_a2b=0.6, precision_b2a=0.9, precision_a2b=None, memorized_a=0.1, memorized_b=0.2)
            for e in range(n_epochs)]
    write(os.path.join(d, "metrics.jsonl"), "".join(json.dumps(r) + "\n" for r in rows))


def test_plot_writes_every_png_for_runs(smoke, tmp_path):
    pytest.importorskip("matplotlib")
    runs = [os.path.join(smoke[0], "table1-smoke", n) for n in ("zero-ls-sym40-s0", "all-ls-sym40-s0")]
    fake_run(str(tmp_path / "fake"), {})
    res = cli("plot.py", *runs, str(tmp_path / "fake"), "--out", str(tmp_path / "png"))
    assert res.returncode == 0, res.stderr
    for name in ("accuracy.png", "chi.png", "selection.png", "memorization.png"):
        assert os.path.getsize(tmp_path / "png" / name) > 1000
    for run in runs:  # real runs have entropy histograms (the fake one does not): one figure each
        assert os.path.getsize(tmp_path / "png" / f"entropy-{os.path.basename(run)}.png") > 1000


def test_plot_of_a_sweep_is_accuracy_against_b(tmp_path):
    for rate, eta in ((0.2, 2.0), (0.6, 2.0), (0.6, 3.0)):
        for b in (-5.0, 0.0, 5.0):
            for seed in (0, 1):
                d = tmp_path / f"r{rate}-eta{eta}-b{b}-s{seed}"
                fake_run(str(d), dict(rate=rate, eta=eta, b=b, seed=seed))
                write(str(d / "summary.json"), {"test_acc_mean": 60 + b + seed})
    groups = plot.sweep_points(str(tmp_path))
    assert len(groups) == 3 and all(g == {-5.0: [55, 56], 0.0: [60, 61], 5.0: [65, 66]} for g in groups.values())
    pytest.importorskip("matplotlib")
    res = cli("plot.py", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert os.path.getsize(tmp_path / "b_sweep.png") > 1000


def test_plot_without_matplotlib_is_one_line_and_fails(tmp_path):
    fake_run(str(tmp_path), {})
    code = ("import sys, runpy; sys.modules['matplotlib'] = None; "
            f"sys.argv = ['plot.py', {str(tmp_path)!r}]; runpy.run_module('tools.plot', run_name='__main__')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=HERE)
    assert res.returncode != 0
    assert len(res.stderr.strip().splitlines()) == 1 and "pip install matplotlib" in res.stderr
    assert not list(tmp_path.glob("*.png"))


def test_plot_of_a_cohort_has_a_line_per_model_and_the_mean_over_pairs(tmp_path):
    d = str(tmp_path / "cohort")
    fake_run(d, dict(arch="cnn,cnn,cnn"))
    with open(os.path.join(d, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    pairs = [f"{s}2{t}" for t in "abc" for s in "abc" if s != t]
    for r in rows:
        r.update({"test_acc_c": 30.0, "memorized_c": 0.3})
        r.update({f"selected_{p}": 0.1 * i for i, p in enumerate(pairs)})
        r.update({f"precision_{p}": None if p == "b2c" else 1.0 for p in pairs})
    write(os.path.join(d, "metrics.jsonl"), "".join(json.dumps(r) + "\n" for r in rows))
    run = plot.load_run(d)
    assert plot.models_of(run) == ["a", "b", "c"]
    acc = plot.series(run, "test_acc")
    assert [(label, style) for label, style, _ in acc] == [("A", "-"), ("B", "--"), ("C", ":")]
    assert acc[2][2] == [(1, 30.0), (2, 30.0), (3, 30.0)]
    (label, _, pts), = plot.series(run, "selected")
    assert label == "mean of 6 pairs" and all(math.isclose(v, 0.25) for _, v in pts)  # mean of 0, .1, ..., .5
    (_, _, pts), = plot.series(run, "precision")
    assert all(v == 1.0 for _, v in pts)  # a pair that logged None (nothing selected) is left out of the mean
    fake_run(str(tmp_path / "pair"), {})
    pair = plot.load_run(str(tmp_path / "pair"))
    assert [(lb, st) for lb, st, _ in plot.series(pair, "selected")] == [("b2a", "-"), ("a2b", "--")]
    assert plot.series(pair, "precision")[1][2] == []  # a2b logged None every epoch: no line


def test_entropy_plots_of_runs_with_the_same_folder_name_do_not_overwrite_each_other(tmp_path):
    assert plot.unique_names(["sweeps/x/run-s0", "sweeps/y/run-s0", "other"]) == ["x-run-s0", "y-run-s0", "other"]
    assert plot.unique_names(["a", "b"]) == ["a", "b"]
    a, b = plot.unique_names(["same", "same"])
    assert a != b


def test_plot_refuses_bad_input_in_one_line_before_writing(tmp_path):
    fake_run(str(tmp_path / "run"), {})
    out = tmp_path / "png"
    (tmp_path / "empty").mkdir()
    for args, why in (([str(tmp_path / "nowhere")], "nowhere does not exist; check the path"),
                      ([str(tmp_path / "empty")], "holds neither metrics.jsonl"),
                      ([str(tmp_path / "run"), "--hist-epochs", "1,x"], "not a comma-separated list of epochs"),
                      ([str(tmp_path / "run"), "--hist-epochs", "0,3"], "numbered from 1")):
        res = cli("plot.py", *args, "--out", str(out))
        assert res.returncode == 2 and why in res.stderr and "Traceback" not in res.stderr, res.stderr
        assert not out.exists()
    (tmp_path / "afile").write_text("mine")
    for bad_out in ("afile", "afile/sub"):  # a file, a path through a file
        res = cli("plot.py", str(tmp_path / "run"), "--out", str(tmp_path / bad_out))
        assert res.returncode == 2 and "cannot be a folder" in res.stderr and "Traceback" not in res.stderr
    assert (tmp_path / "afile").read_text() == "mine"
    write(str(tmp_path / "run" / plot.HIST), "PK not really a zip")  # cut short: read before any png
    res = cli("plot.py", str(tmp_path / "run"), "--out", str(out))
    assert res.returncode == 2 and "cannot be read as a train.py run" in res.stderr and not out.exists()
    write(str(tmp_path / "run" / "config.json"), "{not json")
    res = cli("plot.py", str(tmp_path / "run"), "--out", str(out))
    assert res.returncode == 2 and "cannot be read as a train.py run" in res.stderr and not out.exists()
    assert len(res.stderr.strip().splitlines()) == 1


def test_plot_of_a_sweep_with_nothing_to_draw_leaves_no_folder(tmp_path):
    pytest.importorskip("matplotlib")
    d = tmp_path / "sweep" / "run-s0"
    fake_run(str(d), {})
    write(str(d / "summary.json"), {"test_acc_mean": 50.0})  # one b only: no line to draw
    res = cli("plot.py", str(tmp_path / "sweep"), "--out", str(tmp_path / "png"))
    assert res.returncode == 1 and "no runs that differ only in b" in res.stderr
    assert not (tmp_path / "png").exists()


def captured_figures(monkeypatch):
    """{png name: matplotlib Figure} of what plot.py saves from now on (the figures are still saved)."""
    figs, save = {}, plot.save

    def keep(plt, fig, path):
        figs[os.path.basename(path)] = fig
        return save(plt, fig, path)
    monkeypatch.setattr(plot, "save", keep)
    return figs


def legend_texts(fig):
    return [t.get_text() for lg in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
            for t in lg.get_texts()]


THRESHOLDS = dict(zero=("inf", 0.0), all=(1.0, 0.0), static=(4.0, 0.0), progressive=(4.0, -5.0), mkd=(None, None),
                  kdcl=(None, None))  # (eta, b) as config.json holds them


def plot_legends(tmp_path, monkeypatch, configs):
    pytest.importorskip("matplotlib")
    dirs = []
    for i, c in enumerate(configs):
        eta, b = THRESHOLDS[c.get("mode", "progressive")]
        dirs.append(str(tmp_path / f"run{i}"))
        fake_run(dirs[-1], dict(dict(eta=eta, b=b, lc="ce" if eta is None else "mylc"), **c))
    figs = captured_figures(monkeypatch)
    plot.plot_runs(plot.pyplot(), [plot.load_run(d) for d in dirs], str(tmp_path))
    return {name: legend_texts(fig) for name, fig in figs.items()}


def test_plot_legends_name_the_knowledge_modes_in_the_papers_words(tmp_path, monkeypatch):
    legends = plot_legends(tmp_path, monkeypatch, [dict(mode=m) for m in ("zero", "all", "static", "progressive")])
    names = ["Zero knowledge", "All knowledge (η=1)", "CMD-S (η=4)", "CMD-P (η=4, b=−5)"]  # −: a real minus sign
    assert legends["accuracy.png"] == [f"{n}, model {m}" for n in names for m in "AB"]
    assert legends["memorization.png"] == legends["accuracy.png"]
    assert legends["chi.png"] == names
    assert "CMD-P (η=4, b=−5), B→A" in legends["selection.png"] and "Zero knowledge, A→B" in legends["selection.png"]
    legends = plot_legends(tmp_path / "baselines", monkeypatch, [dict(mode="mkd"), dict(mode="kdcl")])
    assert legends["accuracy.png"] == ["MKD (Eq. 2), model A", "MKD (Eq. 2), model B", "KDCL, model A", "KDCL, model B"]


def test_plot_legends_add_the_label_correction_or_the_seed_only_where_the_runs_differ_by_it(tmp_path, monkeypatch):
    legends = plot_legends(tmp_path / "lc", monkeypatch, [dict(lc="mylc"), dict(lc="proselflc"), dict(mode="mkd")])
    assert legends["chi.png"] == ["CMD-P (η=4, b=−5) + MyLC", "CMD-P (η=4, b=−5) + ProSelfLC", "MKD (Eq. 2)"]
    assert legends["accuracy.png"][0] == "CMD-P (η=4, b=−5) + MyLC, model A"
    legends = plot_legends(tmp_path / "seed", monkeypatch, [dict(seed=0), dict(seed=1, mode="zero")])
    assert legends["accuracy.png"][::2] == ["CMD-P (η=4, b=−5), seed 0, model A", "Zero knowledge, seed 1, model A"]
    legends = plot_legends(tmp_path / "eta", monkeypatch, [dict(mode="static", eta=2.0), dict(mode="static")])
    assert legends["chi.png"] == ["CMD-S (η=2)", "CMD-S (η=4)"]  # nothing else told apart: the lc is not named
    legends = plot_legends(tmp_path / "one", monkeypatch, [dict(rate=0.2, seed=3)])
    assert legends["chi.png"] == ["CMD-P (η=4, b=−5) + MyLC, 20% symmetric noise, seed 3"]  # alone: what it is
    assert not any("eta" in t or "-5" in t for texts in legends.values() for t in texts)


def fake_hist(d, chi_start, chi_end, models=2, bins=4):
    import numpy as np
    epochs = len(chi_end)
    counts = np.arange(epochs * models * 2 * bins).reshape(epochs, models, 2, bins) % 7 + 1
    counts[:, 1] *= 10  # model B's bars ten times as tall as A's: a shared y-axis per row, not over the figure
    np.savez(os.path.join(d, plot.HIST), epoch=np.arange(1, epochs + 1), counts=counts,
             edges=np.linspace(0, math.log(4), bins + 1), known_clean=np.array(True),
             chi_start=np.array(chi_start, float), chi_end=np.array(chi_end, float))


def test_plot_of_entropy_shares_y_within_a_row_and_names_chi_at_the_start_and_end_of_the_epoch(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    d = str(tmp_path / "run")
    fake_run(d, {})
    fake_hist(d, chi_start=[0.9, 0.6, 0.3], chi_end=[0.6, 0.3, 0.1])  # CMD-P: χ falls during each epoch
    figs = captured_figures(monkeypatch)
    plot.plot_runs(plot.pyplot(), [plot.load_run(d)], str(tmp_path))
    fig = figs["entropy.png"]
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in axes] == [f"{m}, epoch {e}" for m in "AB" for e in (1, 2, 3)]
    a, b = axes[:3], axes[3:]
    for row in (a, b):
        assert all(row[0].get_shared_y_axes().joined(row[0], ax) for ax in row[1:])
        assert len({ax.get_ylim() for ax in row}) == 1
    assert not a[0].get_shared_y_axes().joined(a[0], b[0]) and a[0].get_ylim() != b[0].get_ylim()
    texts = legend_texts(fig)
    assert texts == ["clean given label", "noisy given label", "both groups (overlap)", "χ at the epoch's start",
                     "χ at the epoch's end"]
    styles = [h.get_linestyle() for h in fig.legends[0].legend_handles[3:]]
    assert styles == [":", "-"]  # as the lines are drawn: dotted at the start, solid at the end
    assert "CMD-P (η=4, b=−5) + MyLC" in fig._suptitle.get_text()
    fake_hist(d, chi_start=[0.5, 0.5], chi_end=[0.5, 0.5])  # CMD-S: χ stays put, one line where both are
    (tmp_path / "static").mkdir()
    plot.plot_runs(plot.pyplot(), [plot.load_run(d)], str(tmp_path / "static"))
    assert legend_texts(figs["entropy.png"])[3:] == ["χ, the same at the epoch's start and end"]


def test_sweep_table_note_on_missing_seeds_appears_only_when_a_cell_lacks_seeds():
    t = sweep.PRESETS["table1"][0]
    cols = [c[0] for c in t["cols"]]
    note = lambda cells, seeds: sweep.render_table(t, cells, seeds)[-2]  # noqa: E731
    assert note({("zero", cols[0]): (50.0, None, 1)}, 1).endswith("(final test accuracy, %), one seed.")
    full = {("zero", cols[0]): (50.0, 1.0, 3), ("all", cols[0]): "failed"}
    assert note(full, 3).endswith("(final test accuracy, %), mean ± sample std (ddof=1) over 3 seeds.")
    assert "(n=" not in "\n".join(sweep.render_table(t, full, 3))
    one_short = {**full, ("all", cols[1]): (50.0, 1.0, 2)}
    assert note(one_short, 3).endswith("over 3 seeds. (n=2) marks the cell where only 2 of the 3 seeds finished.")
    assert "| 50.00 ± 1.00 (n=2) (paper" in "\n".join(sweep.render_table(t, one_short, 3))
    several = {**one_short, ("all", cols[2]): (50.0, None, 1), ("static", cols[0]): (50.0, 1.0, 2)}
    assert note(several, 3).endswith("(n=1) and (n=2) mark the 3 cells where only 1 or 2 of the 3 seeds finished.")
    three = {("zero", cols[0]): (1.0, None, 1), ("all", cols[0]): (1.0, 1.0, 2), ("static", cols[0]): (1.0, 1.0, 3)}
    assert note(three, 4).endswith(
        "(n=1), (n=2) and (n=3) mark the 3 cells where only 1, 2 or 3 of the 4 seeds finished.")


def test_the_per_epoch_plots_mark_where_the_lr_falls(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    d = str(tmp_path / "run")
    fake_run(d, {}, n_epochs=4)
    rows = [dict(json.loads(line), lr=lr) for line, lr in zip(open(os.path.join(d, "metrics.jsonl")), (0.1, 0.1, 0.01, 0.01))]
    write(os.path.join(d, "metrics.jsonl"), "".join(json.dumps(r) + "\n" for r in rows))
    figs = captured_figures(monkeypatch)
    plot.plot_runs(plot.pyplot(), [plot.load_run(d)], str(tmp_path))
    ax = figs["accuracy.png"].axes[0]
    drops = [line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == ":"]
    assert drops == [2] and "lr drop (first run)" in legend_texts(figs["accuracy.png"])  # epoch 2 was the last at 0.1


def test_the_per_epoch_plots_name_the_data_in_their_titles(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    d = str(tmp_path / "run")
    fake_run(d, dict(dataset="fashionmnist", noise="sym", rate=0.4))
    figs = captured_figures(monkeypatch)
    plot.plot_runs(plot.pyplot(), [plot.load_run(d)], str(tmp_path))
    for name in ("accuracy.png", "chi.png", "memorization.png", "selection.png"):
        assert figs[name].axes[0].get_title().endswith("\nfashionmnist, symmetric noise 40%"), name


def test_two_sweeps_that_share_a_pack_write_it_one_at_a_time(tmp_path):
    """pack waits while another process holds the pack's lock (a second sweep packing its run), then adds its own
    runs to what that one wrote: none lost."""
    import threading
    raw = str(tmp_path / "runs.jsonl.gz")
    todo = paper_tables.jobs("table1", "smoke", 1, str(tmp_path / "table1-smoke"))
    sweep.unpack([dict(name=todo[0]["name"], key=todo[0]["key"], summary={paper_tables.MEAN: 1.0}, rows=[],
                       provenance={"code": "c"})], str(tmp_path / "table1-smoke"))
    other = subprocess.Popen([sys.executable, "-c", "import gzip, json, sys, time; from tools import sweep\n"
                              "with sweep.locked(sys.argv[1]):\n    print('held', flush=True); time.sleep(3)\n"
                              "    run = dict(name='other-s0', key=[], summary={}, rows=[], provenance={})\n"
                              "    with gzip.open(sys.argv[1], 'wt') as f:\n        f.write(json.dumps(run) + '\\n')",
                              raw], cwd=HERE, stdout=subprocess.PIPE, text=True)
    assert other.stdout.readline() == "held\n"
    done = threading.Event()
    t = threading.Thread(target=lambda: (sweep.pack(todo, raw), done.set()))
    t.start()
    assert not done.wait(1.5)  # still held by the other
    assert other.wait() == 0 and done.wait(30)
    t.join()
    assert sorted(r["name"] for r in sweep.read_raw(raw)) == sorted(["other-s0", todo[0]["name"]])
