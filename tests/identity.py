"""Same seed, same numbers: run a fixed list of short CPU trainings in a checkout and digest their metrics.

    python tests/identity.py --repo . --json after.json
    python tests/identity.py --repo /tmp/before --json before.json --compare after.json

The check of a refactor: it compares two checkouts (git worktree add /tmp/before <commit>) and takes minutes on
two cores, so pytest does not collect it (no test_ prefix); the digests hold for one machine, torch and thread
count, so there is no stored digest to compare a single checkout with.

Each configuration is `python train.py ...` on tiny synthetic data for 3 epochs (every knowledge mode x label
correction, from the registries, mkd, kdcl, a cohort, pair noise, --val-split with --subset, a cnn/resnet18
pair, Co-teaching, Co-teaching+
with and without its initial epoch, JoCoR, and the shuffled-selection and peer-mean controls). The digest of a
run is the SHA-256 of its metrics.jsonl with each line's `seconds` removed, so a refactor that keeps every
number bit-identical keeps every digest. --compare prints the configurations whose digests differ.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the registries of this checkout
from label_correction import LABEL_CORRECTIONS  # noqa: E402
from mutual import CMD_MODES  # noqa: E402

TINY = ["--dataset", "synthetic", "--arch", "cnn", "--epochs", "3", "--synthetic-size", "96",
        "--synthetic-test-size", "48", "--synthetic-classes", "4", "--batch-size", "32", "--device", "cpu",
        "--workers", "0", "--seed", "3"]
# every knowledge mode with every label correction, from their registries (one whose stage estimates after a warm-up
# gets one epoch of it)
CONFIGS = {f"{mode}-{lc}": ["--mode", mode, "--lc", lc] + (["--warmup", "1"] if c.estimate else [])
           for mode in CMD_MODES for lc, c in LABEL_CORRECTIONS.items()}
CONFIGS.update({
    "mkd": ["--mode", "mkd"], "kdcl": ["--mode", "kdcl"],
    "cohort3": ["--mode", "progressive", "--lc", "mylc", "--peers", "3"],
    "pair-eta1.5": ["--mode", "static", "--eta", "1.5", "--noise", "pair", "--rate", "0.3"],
    "val-subset": ["--mode", "progressive", "--val-split", "0.2", "--subset", "80"],
    "cnn+resnet18": ["--mode", "progressive", "--arch", "cnn,resnet18"],
    "coteach": ["--mode", "coteach"], "coteach+": ["--mode", "coteach+"], "jocor": ["--mode", "jocor"],
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
    out = os.path.join(tmp, name)
    res = subprocess.run([sys.executable, "train.py", *TINY, *flags, "--out", out], cwd=repo, capture_output=True,
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
