"""Same seed, same numbers: run a fixed list of short CPU trainings in a checkout and digest their metrics.

    python tests/identity.py --repo . --json after.json
    python tests/identity.py --repo /tmp/before --json before.json --compare after.json

The check of a refactor: it compares two checkouts (git worktree add /tmp/before <commit>) and takes minutes on
two cores, so pytest does not collect it (no test_ prefix); the digests hold for one machine, torch and thread
count, so there is no stored digest to compare a single checkout with.

Each configuration is `python lab/train.py ...` (train.py with the lab's methods) on tiny synthetic data for 3 epochs
(every knowledge mode x label correction and every other mode, the lab's included, from the registries, a cohort,
pair noise, --val-split with --subset, a cnn/resnet18 pair, Co-teaching+ with an initial epoch, the shuffled-selection
and peer-mean controls, and the stages in full: T-revision's revision, DMI's warm-up, Joint's second step on its
first step's labels). The digest of a
run is the SHA-256 of its metrics.jsonl with each line's `seconds` removed, so a refactor that keeps every
number bit-identical keeps every digest. --compare prints the configurations whose digests differ.
"""
import argparse
import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the registries of this checkout
import lab  # noqa: E402
from label_correction import LABEL_CORRECTIONS  # noqa: E402
from mutual import CMD_MODES, MODES  # noqa: E402
from training import config  # noqa: E402

lab.register()  # every method of the comparison, as lab/train.py trains it

TINY = ["--dataset", "synthetic", "--arch", "cnn", "--epochs", "3", "--synthetic-size", "96",
        "--synthetic-test-size", "48", "--synthetic-classes", "4", "--batch-size", "32", "--device", "cpu",
        "--workers", "0", "--seed", "3"]


def runnable(flags):
    """flags, or with a warm-up epoch where train.py asks for one (a stage that estimates after a warm-up)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the notes resolve prints
            config.resolve(config.get_args(TINY + flags + ["--out", os.devnull]))
        return flags
    except config.UserError as e:
        if "--warmup" not in str(e):
            raise
        return flags + ["--warmup", "1"]


# every knowledge mode with every label correction, and every other mode, from their registries (a mode that needs a
# flag of its own to run at all, Joint's second step, below)
CONFIGS = {f"{mode}-{lc}": runnable(["--mode", mode, "--lc", lc]) for mode in CMD_MODES for lc in LABEL_CORRECTIONS}
CONFIGS.update({mode: runnable(["--mode", mode]) for mode in MODES if mode not in CMD_MODES and mode != "joint2"})
CONFIGS.update({  # the stages in full: a revision after the estimate, a warm-up, a second step on a first's labels
    "trevision-revise": ["--mode", "trevision", "--warmup", "1", "--trevision-revise", "1"],
    "dmi-warmup": ["--mode", "dmi", "--warmup", "1"],
    "joint-then-joint2": ["--mode", "joint", "--then", "--mode", "joint2", "--labels-from", "{first}"],
})
CONFIGS.update({
    "cohort3": ["--mode", "progressive", "--lc", "mylc", "--peers", "3"],
    "pair-eta1.5": ["--mode", "static", "--eta", "1.5", "--noise", "pair", "--rate", "0.3"],
    "val-subset": ["--mode", "progressive", "--val-split", "0.2", "--subset", "80"],
    "cnn+resnet18": ["--mode", "progressive", "--arch", "cnn,resnet18"],
    "coteach+init1": ["--mode", "coteach+", "--coteach-plus-init", "1", "--forget-rate", "0.6"],
    "shuffled": ["--mode", "progressive", "--select", "shuffled"],
    "cohort3-shuffled": ["--mode", "progressive", "--select", "shuffled", "--peers", "3"],
    "mean": ["--mode", "progressive", "--peer-weight", "mean"],
})


def digest(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    for r in rows:
        r.pop("seconds")
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


def run(repo, name, flags, tmp):
    """One configuration: its train.py runs in turn (--then separates them, {first} names the first's folder), the
    digest of the last."""
    steps, out = " ".join(flags).split(" --then "), None
    for i, step in enumerate(steps):
        first, out = out, os.path.join(tmp, f"{name}-{i}")
        argv = [a.replace("{first}", first or "") for a in step.split()]
        res = subprocess.run([sys.executable, "lab/train.py", *TINY, *argv, "--out", out], cwd=repo, capture_output=True,
                             text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if res.returncode != 0:
            return name, "failed: " + (res.stderr.strip().splitlines() or ["?"])[-1]
    return name, digest(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repo", default=".", help="the checkout whose train.py runs (default: .)")
    p.add_argument("--json", required=True, help="write {configuration: digest} here")
    p.add_argument("--compare", help="another run's --json: list the configurations that differ")
    p.add_argument("--jobs", type=int, default=2, help="trainings at a time, one thread each (default 2)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        got = dict(pool.map(lambda kv: run(os.path.abspath(args.repo), *kv, tmp), CONFIGS.items()))
    with open(args.json, "w") as f:
        json.dump(got, f, indent=1, sort_keys=True)
    print(f"{len(got)} configurations, {sum(v.startswith('failed') for v in got.values())} failed")
    if args.compare:
        with open(args.compare) as f:
            other = json.load(f)
        differ = sorted(k for k in got if got[k] != other.get(k))
        print(f"bit-identical metrics.jsonl (seconds aside): {len(got) - len(differ)}/{len(got)}")
        for k in differ:
            print(f"  differs: {k}: {got[k][:16]} vs {other.get(k, 'missing')[:16]}")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
