"""Random command lines, from a fixed seed, to train.py and to python -m tools.batched: every one either trains
(summary.json, finite accuracies) or is refused in one line on stderr with exit code 2 and nothing written.

Each draw sets a few flags to values that are valid or not, on tiny synthetic data; whether a combination is
valid is not predicted: either outcome passes, a traceback, a second line or a file left behind does not.
The draws run in-process, main(argv), where an exception other than SystemExit fails the test with its
traceback; one command, bad data given to tools.batched, runs as a user runs it, in a subprocess.
"""
import collections
import json
import math
import os
import random
import subprocess
import sys

import pytest
import torch

import train
from tools import batched

N, SEED = 15, 34  # 15 command lines of each tool
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = ["--dataset", "synthetic", "--synthetic-size", "96", "--synthetic-test-size", "48", "--batch-size", "32",
        "--epochs", "1", "--arch", "mlp", "--device", "cpu", "--workers", "0"]
# flag: (valid values, invalid values); a combination of valid values may still be refused (--noise none --rate 0.2)
VALUES = {
    "--synthetic-classes": (["4", "3"], ["1", "0", "-3"]),
    "--synthetic-size": (["64"], ["0", "2"]),
    "--synthetic-test-size": (["20"], ["0"]),
    "--synthetic-shift": (["0"], ["-1"]),
    "--synthetic-difficulty": (["1.5"], ["nan", "-1"]),
    "--image-size": (["16"], ["4", "0"]),
    "--batch-size": (["20", "64"], ["0", "-4"]),
    "--epochs": (["1"], ["0"]),
    "--subset": (["50"], ["0", "1", "100000"]),
    "--val-split": (["0.25"], ["1", "0.99", "-0.1"]),
    "--noise": (["sym", "pair", "none"], ["human", "gauss"]),
    "--rate": (["0.2", "0.45"], ["1", "-0.2", "nan"]),
    "--mode": (["progressive", "static", "zero", "all", "cmd-s"], ["nope"]),
    "--eta": (["2", "inf"], ["0", "-1", "nan"]),
    "--b": (["-5", "0"], ["nan"]),
    "--lc": (["ce", "mylc"], ["nope"]),
    "--lr": (["0.05", "0.02"], ["0", "-1", "nan", "1e39"]),
    "--momentum": (["0.5"], ["1", "-0.1"]),
    "--weight-decay": (["0"], ["-1"]),
    "--milestones": (["1"], ["2,1", "x"]),
    "--lr-decay": (["0.5"], ["0"]),
    "--seed": (["1"], ["-1", "x"]),
    "--peers": (["3"], ["1", "30"]),
    "--arch": (["mlp,mlp"], ["nope", "mlp,mlp,mlp", "cnn"]),
}
# tools.batched's lists: every combination is one run
LISTS = {
    "--lr": (["0.05,0.02"], ["0.05,0.05", "0.05,", "0.05,-1"]),
    "--seed": (["0,1"], ["0,0", "-1,2"]),
    "--mode": (["zero,progressive", "all,static"], ["zero,nope"]),
    "--rate": (["0.2,0.4"], ["0.2,1.5"]),
    "--eta": (["2,3"], ["2,0"]),
}


def draw(rng, lists=False):
    """A few flags after BASE, each valid with probability 0.6; for tools.batched, one of them a list half the
    time, and --zip a fifth of the time."""
    names = rng.sample(sorted(VALUES), rng.randint(1, 4))
    listed = rng.choice(sorted(LISTS)) if lists and rng.random() < 0.5 else None
    flags = []
    for flag in names + ([listed] if listed and listed not in names else []):
        valid, invalid = LISTS[flag] if flag == listed else VALUES[flag]
        flags += [flag, rng.choice(valid if rng.random() < 0.6 else invalid)]
    return flags + (["--zip"] if lists and rng.random() < 0.2 else [])


def trained(run):
    """summary.json and every epoch's test accuracies are there and finite."""
    summary = json.load(open(os.path.join(run, "summary.json")))
    rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    accs = [v for r in [summary, *rows] for k, v in r.items() if "_acc_" in k]
    assert accs and all(math.isfinite(v) for v in accs), run


def refusal(err, prog):
    """stderr of a refused command: its one error line, after nothing but warnings about other flags."""
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith(f"{prog}: error: ") and "Traceback" not in err, err
    assert all(": warning: " in line for line in lines[:-1]), err
    return lines[-1]


def check(tool, argv, out, capsys):
    """main(argv) in-process: 'trained' (every run's files checked) or 'refused' (exit code 2, one line, nothing
    written); any other ending fails, an exception other than SystemExit with its traceback."""
    capsys.readouterr()
    try:
        rc = (train.main if tool == "train.py" else batched.main)(argv)
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    if rc == 2:
        refusal(err, tool if tool == "train.py" else "batched.py")
        assert not os.path.exists(out), (argv, "was refused, but wrote", os.listdir(out))
        return "refused"
    assert rc == 0 or isinstance(rc, dict), (argv, rc, err)  # train.main returns the summary
    runs = [out] if tool == "train.py" else [os.path.join(out, r) for r in os.listdir(out)]
    assert runs, argv
    for run in runs:
        trained(run)
    return "trained"


def draws(n, seed):
    """n command lines of each tool, [(tool, flags)], the same every time."""
    rng = random.Random(seed)
    return [(tool, BASE + draw(rng, lists=tool == "batched")) for _ in range(n) for tool in ("train.py", "batched")]


@pytest.fixture
def one_thread():
    """Tiny runs, one thread each: two threads spent over twice the CPU time (2 busy cores, torch 2.14)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield dict(os.environ, OMP_NUM_THREADS="1")
    torch.set_num_threads(threads)


@pytest.mark.filterwarnings("ignore::UserWarning")  # resolve's warnings about the flags drawn
def test_random_command_lines_train_or_are_refused_in_one_line(tmp_path, capsys, one_thread):
    # the issue's command as a user runs it, beside the draws: synthetic data of one class
    issue = subprocess.Popen([sys.executable, "-m", "tools.batched", *BASE, "--synthetic-classes", "1", "--out",
                              str(tmp_path / "issue")], cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, env=one_thread)
    seen = collections.Counter()
    for i, (tool, flags) in enumerate(draws(N, SEED)):
        out = str(tmp_path / str(i))
        seen[tool, check(tool, flags + ["--out", out], out, capsys)] += 1
    assert all(seen[tool, end] >= 3 for tool in ("train.py", "batched") for end in ("trained", "refused")), seen
    err = issue.communicate(timeout=120)[1]
    assert issue.returncode == 2 and len(err.splitlines()) == 1, err
    assert "needs >= 2 classes" in refusal(err, "batched.py") and not os.path.exists(tmp_path / "issue")
