"""tools.sweep --launcher slurm through submitit's own local executor, which forks each job's processes on this
machine as a cluster would: a preset end to end against the local launcher's table, a preempted job requeued and
resumed from its checkpoint, a failed job, and the refusals made before anything is submitted."""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

submitit = pytest.importorskip("submitit", reason="tools.sweep --launcher slurm needs submitit (requirements.txt)")
from tools import paper_tables, slurm, sweep  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
SMOKE = ["table1", "--scale", "smoke"]  # its grid: Zero and All under LS, one epoch of a small cnn each
SUBMIT = ["--launcher", "slurm", "--slurm-time", "10"]


def submit(capsys, *args):
    """python -m tools.sweep ARGS in this process, either launcher, submitit's local executor standing in for
    Slurm's: (exit code, stdout, stderr)."""
    try:
        rc = sweep.main(list(args), cluster="local")
    except SystemExit as e:  # training.errors.one_line: bad input is exit 2
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def read(path):
    with open(path) as f:
        return f.read()


def cells(md):
    """The markdown without its header line (wall time, hardware and command differ between launchers)."""
    return [line for line in md.splitlines() if not line.startswith("scale ")]


def job_ids(sweep_dir):
    return sorted(d for d in os.listdir(os.path.join(sweep_dir, "slurm")) if d.isdigit())


def test_a_preset_through_submitit_gives_the_local_launchers_table(tmp_path, capsys):
    out, sweep_dir = str(tmp_path / "slurm"), str(tmp_path / "slurm" / "table1-smoke")
    rc, text, _ = submit(capsys, *SMOKE, "--out", out, *SUBMIT)  # no --wait: returns with the job ids
    assert rc == 0 and text.count("submitted as job") == 2, text
    ids = job_ids(sweep_dir)
    assert len(ids) == 2 and all(f"job {i}" in text for i in ids)
    assert read(os.path.join(out, "table1-smoke.md")).count("| queued |") == 2  # a smoke table has no paper column
    # at once again: both jobs are running, so neither is submitted a second time
    rc, text, _ = submit(capsys, *SMOKE, "--out", out, *SUBMIT)
    assert rc == 0 and text.count("running as job") == 2 and "submitted as job" not in text, text
    assert job_ids(sweep_dir) == ids
    # the local launcher leaves them to their jobs too, and shows them running
    rc, text, _ = submit(capsys, *SMOKE, "--out", out)
    assert rc == 0 and text.count("running as a Slurm job") == 2, text
    assert read(os.path.join(out, "table1-smoke.md")).count("| running |") == 2
    # meanwhile the same grid through the local launcher, into another folder
    rc, text, _ = submit(capsys, *SMOKE, "--out", str(tmp_path / "local"), "--jobs", "2")
    assert rc == 0, text
    rc, text, _ = submit(capsys, *SMOKE, "--out", out, *SUBMIT, "--wait")
    assert rc == 0 and "submitted as job" not in text, text
    assert job_ids(sweep_dir) == ids
    md = read(os.path.join(out, "table1-smoke.md"))
    assert "Slurm jobs through submitit (local)" in md
    assert cells(md) == cells(read(tmp_path / "local" / "table1-smoke.md"))
    assert len(re.findall(r"\| \d+\.\d\d \|", md)) == 2
    for run in ("zero-ls-sym40-s0", "all-ls-sym40-s0"):  # train.py's own logs in the run folder, as locally
        assert "final: test_acc_mean" in read(os.path.join(sweep_dir, run, "train.log"))
        assert json.loads(read(os.path.join(sweep_dir, run, "slurm.json")))["job_id"] in ids
    rc, text, _ = submit(capsys, *SMOKE, "--out", out, *SUBMIT)  # finished: nothing is submitted again
    assert rc == 0 and text.count("skipped (summary.json exists)") == 2 and job_ids(sweep_dir) == ids


def descendants(pid):
    """Every process below pid (Linux /proc), as Slurm signals every process of a job."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except OSError:
        return []
    return kids + [d for k in kids for d in descendants(k)]


def options(**kw):
    """tools.sweep's --slurm-* flags as main parses them."""
    return argparse.Namespace(**{**dict(slurm_partition=None, slurm_time=10, slurm_gpus=None, slurm_cpus=None,
                                        slurm_mem=None, slurm_account=None, slurm_qos=None, slurm_arg=[],
                                        wait=False), **kw})


def test_a_preempted_job_requeues_and_resumes_from_its_checkpoint(tmp_path, capsys):
    sweep_dir = str(tmp_path / "table1-smoke")
    job = paper_tables.jobs("table1", "smoke", 1, sweep_dir)[0]
    todo = []
    for name in ("preempted", "uninterrupted"):  # the same run twice, three epochs each
        d = os.path.join(sweep_dir, name)
        key = [("3" if a == "1" and job["key"][i - 1] == "--epochs" else a) for i, a in enumerate(job["key"])]
        todo.append(dict(name=name, dir=d, key=key, argv=key + ["--out", d]))
    slurm.submit(todo, options(), sweep_dir, cluster="local")
    record = json.loads(read(os.path.join(todo[0]["dir"], "slurm.json")))
    log = os.path.join(todo[0]["dir"], "train.log")
    deadline = time.time() + 240
    while not (os.path.exists(log) and re.search(r"^epoch +1 ", read(log), re.M)):
        assert time.time() < deadline, "the first epoch never finished"
        time.sleep(0.02)
    for pid in descendants(int(record["job_id"])):  # submitit's job process and train.py, as Slurm does
        os.kill(pid, getattr(signal, "SIG" + submitit.JobEnvironment.USR_SIG))
    failed, waiting = slurm.submit(todo, options(wait=True), sweep_dir, cluster="local")  # waits, submits none
    assert failed == {} and waiting == {}
    text = capsys.readouterr().out
    assert "preempted: running as job" in text and text.count("submitted as job") == 2, text
    assert json.loads(read(os.path.join(todo[0]["dir"], "slurm.json")))["job_id"] == record["job_id"]
    notes = read(os.path.join(sweep_dir, "slurm", record["job_id"], f"{record['job_id']}_0_log.out"))
    assert "Calling checkpoint method" in notes and "Requeued job" in notes, notes  # submitit's requeue
    err = read(os.path.join(todo[0]["dir"], "train.err"))  # Train.stop: train.py stopped at its checkpoint
    kept = int(re.search(r"train.py: stopped by Ctrl-C .*checkpoint.pt holds epoch (\d)", err).group(1))
    resumed = read(log).split("settings: ")[-1]  # what the requeued job's train.py printed
    assert "resume=True" in resumed
    assert re.findall(r"^epoch +(\d+)", resumed, re.M) == [str(e) for e in range(kept + 1, 4)]
    rows = [[{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in
             read(os.path.join(j["dir"], "metrics.jsonl")).splitlines()] for j in todo]
    assert [r["epoch"] for r in rows[0]] == [1, 2, 3] and rows[0] == rows[1]  # no epoch twice, and the same numbers
    summaries = [{k: v for k, v in json.loads(read(os.path.join(j["dir"], "summary.json"))).items() if k != "seconds"}
                 for j in todo]
    assert summaries[0] == summaries[1]


def test_a_failed_job_shows_as_failed_with_its_logs_last_line(tmp_path, capsys):
    sweep_dir = tmp_path / "table1-smoke"
    zero, done = (sweep_dir / name for name in ("zero-ls-sym40-s0", "all-ls-sym40-s0"))
    os.makedirs(zero)
    os.makedirs(done)
    (done / "summary.json").write_text(json.dumps({"test_acc_mean": 42.0, "seconds": 1.0}))  # finished before
    (zero / "config.json").write_text("{}")
    (zero / "checkpoint.pt").write_text("half a checkpoint")  # train.py --resume refuses it
    rc, text, _ = submit(capsys, *SMOKE, "--out", str(tmp_path), *SUBMIT, "--wait")
    assert rc == 1, text
    assert re.search(r"zero-ls-sym40-s0: FAILED: train.py: error: cannot resume: .*corrupt.* \(job \d+; logs: ",
                     text), text
    md = read(tmp_path / "table1-smoke.md")
    assert "| Zero | failed |" in md and "| All | 42.00 |" in md
    assert re.search(r"- `zero-ls-sym40-s0`: train.py: error: cannot resume: .*corrupt", md), md
    last = [ln for ln in read(zero / "train.err").splitlines() if ln.strip()][-1]
    assert f"`zero-ls-sym40-s0`: {last}" in md


REFUSALS = {
    "local launcher, Slurm flag": (["--slurm-partition", "gpu"], "--slurm-partition is an option of --launcher slurm"),
    "--wait, local launcher": (["--wait"], "--wait is an option of --launcher slurm"),
    "--slurm-gpus 0, local launcher": (["--slurm-gpus", "0"], "--slurm-gpus is an option of --launcher slurm"),
    "no CPUs": (SUBMIT + ["--slurm-cpus", "0"], "--slurm-time and --slurm-cpus must be >= 1"),
    "no time limit": (["--launcher", "slurm"], "needs --slurm-time MINUTES"),
    "--gpus with slurm": (SUBMIT + ["--gpus", "2"], "--gpus and --jobs are the local launcher's"),
    "--slurm-arg without =": (SUBMIT + ["--slurm-arg", "constraint"], "--slurm-arg constraint: give KEY=VALUE"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_bad_input_is_refused_in_one_line_and_nothing_is_submitted(case, tmp_path, capsys):
    flags, message = REFUSALS[case]
    rc, text, err = submit(capsys, *SMOKE, "--out", str(tmp_path / "out"), *flags)
    assert rc == 2 and text == "" and err.count("\n") == 1 and message in err, err
    assert not os.path.exists(tmp_path / "out")


def test_without_submitit_the_slurm_launcher_is_refused(tmp_path):
    code = ("import sys; sys.modules['submitit'] = None; from tools import sweep; "  # as if not installed
            "sys.exit(sweep.main(sys.argv[1:], cluster='local'))")
    res = subprocess.run([sys.executable, "-c", code, *SMOKE, "--out", str(tmp_path / "out"), *SUBMIT],
                         capture_output=True, text=True, cwd=HERE, timeout=120)
    assert res.returncode == 2 and res.stdout == "", res.stdout + res.stderr
    assert res.stderr == "sweep.py: error: --launcher slurm needs submitit: pip install 'submitit>=1.5,<2'\n"
    assert not os.path.exists(tmp_path / "out")


def test_a_time_limit_must_hold_the_slowest_measured_epoch(tmp_path, capsys):
    """An earlier attempt of a run measured 550 s for an epoch: a job signalled 90 s before a 10-minute limit
    has 510 s, too few (without that margin 600 s would pass); 11 minutes give 570 s."""
    run = tmp_path / "table1-smoke" / "all-ls-sym40-s0"
    os.makedirs(run)
    (run / "metrics.jsonl").write_text(json.dumps({"epoch": 1, "seconds": 550.0}) + "\n")
    rc, text, err = submit(capsys, *SMOKE, "--out", str(tmp_path), "--launcher", "slurm", "--slurm-time", "10")
    assert rc == 2 and text == "" and err.count("\n") == 1, err
    assert "--slurm-time 10 cannot hold one epoch" in err and "550s" in err and "at least --slurm-time 11" in err
    assert sorted(os.listdir(tmp_path / "table1-smoke")) == ["all-ls-sym40-s0"]  # no job folder, no record
    assert os.listdir(run) == ["metrics.jsonl"]
    rc, text, err = submit(capsys, *SMOKE, "--out", str(tmp_path), "--launcher", "slurm", "--slurm-time", "11",
                           "--dry-run")
    assert rc == 0 and text.count("python lab/train.py") == 2, err


def test_a_run_that_reads_another_is_submitted_once_that_one_has_finished(tmp_path, capsys, monkeypatch):
    """Joint optimisation's second step (paper_tables.AFTER): the first call submits step 1 alone and shows step 2
    queued; once step 1 has finished, the same command submits step 2, which reads step 1's labels."""
    t = paper_tables.table("joint", "Joint, two steps", [], [
        ("joint-1", "step 1", paper_tables.method("joint") + ["--joint-begin", "0.35"]),
        ("joint", "step 2", paper_tables.method("joint2") + ["--labels-from", paper_tables.AFTER + "joint-1"])],
        [("pair20", "Pair 20%", ["--noise", "pair", "--rate", "0.2"], paper_tables.MEAN)], smoke_rows=None)
    monkeypatch.setitem(paper_tables.PRESETS, "joint", [t])
    out = str(tmp_path / "slurm")
    rc, text, _ = submit(capsys, "joint", "--scale", "smoke", "--out", out, *SUBMIT, "--wait")
    assert rc == 0 and text.count("submitted as job") == 1 and "starts once" in text, text
    assert "| step 2 | queued" in read(os.path.join(out, "joint-smoke.md"))
    rc, text, _ = submit(capsys, "joint", "--scale", "smoke", "--out", out, *SUBMIT, "--wait")
    assert rc == 0 and text.count("submitted as job") == 1 and "skipped (summary.json exists)" in text, text
    md = read(os.path.join(out, "joint-smoke.md"))
    assert re.search(r"\| step 1 \| \d+\.\d\d", md) and re.search(r"\| step 2 \| \d+\.\d\d", md), md
    step2 = json.load(open(os.path.join(out, "joint-smoke", "joint2-pair20-after-joint-1-s0", "config.json")))
    assert step2["labels_from"].endswith("joint-pair20-s0")
