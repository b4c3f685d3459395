"""The raw data of an experiment: one JSON line per run, gzipped (docs/fmnist/runs.jsonl.gz), from which its
tables render again without the run folders.

A line: rate, run (stage/name), flags (train.py's), diverged, provenance (config.json's: device, torch, ...),
rows (metrics.jsonl, every epoch).

read   -- {run: line} of one noise rate
merge  -- add lines to the file, a run of the same rate and name replaced; returns how many it holds
where  -- where the runs ran: 'n on DEVICE, torch V' per device and torch version
"""
import gzip
import json
import os


def read(path, rate):
    with gzip.open(path, "rt") as f:
        lines = [json.loads(line) for line in f]
    return {r["run"]: r for r in lines if r["rate"] == rate}


def merge(path, new):
    lines = {}
    if os.path.exists(path):
        with gzip.open(path, "rt") as f:
            lines = {(r["rate"], r["run"]): r for r in map(json.loads, f)}
    lines.update({(r["rate"], r["run"]): r for r in new})
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(lines[k], sort_keys=True) + "\n" for k in sorted(lines))
    return len(lines)


def where(runs):
    counts = {}
    for r in runs.values():
        p = r.get("provenance") or {}
        key = (p.get("device_name") or p.get("device") or "?", p.get("torch", "?"))
        counts[key] = counts.get(key, 0) + 1
    return "; ".join(f"{n} on {d}, torch {t}" for (d, t), n in sorted(counts.items()))
