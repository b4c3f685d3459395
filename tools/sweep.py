"""Run the paper's tables as grids of train.py runs and write each beside the paper's numbers (§4).

    python -m tools.sweep table1 --scale demo --seeds 3      # CPU: CMD-S/P vs zero/all knowledge, 12 runs
    python -m tools.sweep table2 --scale paper --gpus 4      # CIFAR-100 + ResNet34, four runs at a time
    python -m tools.sweep fig3 --scale smoke --dry-run       # only print the train.py commands
    python -m tools.sweep table3 --scale fmnist --seeds 5 --jobs 2 -- --data-dir /usr/share/datasets/fashion-mnist
    python -m tools.sweep table1 --scale paper -- --data-dir /data   # flags after -- go to every train.py
    python -m tools.sweep table2 --scale paper --launcher slurm --slurm-partition gpu --slurm-time 240

Presets: table1 (knowledge x label correction), table2 (noise types and rates), table4 (self KD and
MKD baselines, two architectures), table3 (CMD-P against every method of the paper's Table 3 but S2E,
ResNet50: at paper, fmnist or smoke scale), table5 (CMD-S eta), fig3 (b under noise rates, and under eta);
beyond the paper, demo (the CPU demonstration of the mechanism) and cifar100n (zero knowledge and
CMD-P under CIFAR-100N's human labels, paper scale only).
Each run is a subprocess `lab/train.py ...` (train.py with the lab's methods, which the tables' rows include) writing
DIR/<preset>-<scale>/<run>-s<seed>/ with the code the sweep pinned in DIR/<preset>-<scale>/code/, with --resume
when that folder already holds a started run; a run whose summary.json exists is skipped, so an
interrupted sweep continues where it stopped (inside a run too, from its checkpoint). The tables go
to DIR/<preset>-<scale>.md: the scale is in the name so that smoke, demo and paper tables never
overwrite each other. A cell reads "failed" when its runs failed, "not run" when none was tried,
"queued" or "running" while a Slurm job holds one of its runs (--launcher slurm submits each run as a job
through submitit: tools/slurm.py; either launcher leaves such runs to their jobs).

run_jobs     -- run a preset's train.py command lines (paper_tables.jobs) one after another, or N at a time
                on N GPUs or on the CPU's cores
render       -- markdown: mean ± sample std over seeds per cell, the paper's number beside it; for the
                demo, each row's diagnostics and whether its preconditions hold

The presets, the paper's numbers, what each --scale adds to every run and the grid of runs are
paper_tables.py.
"""
import argparse
import contextlib
import fcntl
import gzip
import io
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import warnings

from tools import slurm
from tools.paper_tables import (CHECK_ONLY, KNOWLEDGE, MEAN, PRESETS, SCALES, TRAIN_ENTRY, as_today, cell_flags, claim,
                                entry_of, finished_job, grid, jobs, row_label, run_key, run_name, same_run, train_flags)
from tools.stats import final, mean_std, paired
from training import runfiles, source
from training.errors import Parser, Terminated, UserError, one_line, stop_on_sigterm

CONFIDENT = "confident.json"  # a confident-learning run's flags (lab/confident.py), packed with its run
CODE = "code"  # a sweep's pinned copy of the source, in its folder: every run it starts runs that code (source.pin)
ENTRY = TRAIN_ENTRY  # what runs a row: train.py with the comparison's methods registered (or the row's --entry)


# ---------------------------------------------------------------- running
def pin_code(sweep_dir):
    """The code this sweep's runs run: the source as it was when the sweep started in this folder, copied there once
    (source.pin), so that a checkout that moves on while it runs changes none of its runs. Says so where the checkout
    has moved on since. Returns (the copy's folder, its code.json)."""
    folder = os.path.join(sweep_dir, CODE)
    pinned = source.pin(folder)
    now = source.digest()
    if pinned["code"] != now:
        print(f"sweep.py: note: {sweep_dir}'s runs run the code it started with, {code_label(pinned)}, pinned in "
              f"{folder}; this checkout is now code {now}: for runs of it, give another --out", flush=True)
    return folder, pinned


def run_jobs(todo, gpus=0, jobs=1, code=None, finished=None):
    """Run the unfinished jobs, `gpus` at a time (each sees one GPU), else `jobs` at a time on the CPU (each
    with an equal share of its cores as torch threads), each `lab/train.py` of code (pin_code's: its folder and
    code.json; None: this checkout's); finished() after each run that finishes. Returns {name: error}."""
    pending, failed, running = [], {}, {}
    for i, job in enumerate(todo):
        if not finished_job(job, f"[{i + 1}/{len(todo)}] {job['name']}", failed):
            pending.append((i, job))
    if gpus:
        slots = {i: dict(CUDA_VISIBLE_DEVICES=str(i)) for i in range(gpus)}
    else:
        threads = str(max(1, (os.cpu_count() or 1) // jobs))
        slots = {i: dict(OMP_NUM_THREADS=threads) if jobs > 1 else {} for i in range(jobs)}
    folder, pinned = code or (source.ROOT, None)
    slots = {i: {**env, **(source.env(pinned) if pinned else {})} for i, env in slots.items()}
    try:
        while pending or running:
            for slot in slots:
                ready = next((p for p in pending if blocked(p[1], todo, failed) is None), None)
                if slot not in running and ready is not None:
                    pending.remove(ready)
                    running[slot] = start(*ready, slots[slot], folder)
            stuck = not running and all(blocked(job, todo, failed) for _, job in pending)  # its run is elsewhere
            for i, job in [p for p in pending if stuck or blocked(p[1], todo, failed) == "failed"]:
                pending.remove((i, job))
                failed[job["name"]] = f"the run it reads, {job['after']}, {'failed' if not stuck else 'has not finished'}"
                print(f"[{i + 1}/{len(todo)}] {job['name']}: FAILED: {failed[job['name']]}", flush=True)
            time.sleep(0.1)
            for slot, r in list(running.items()):
                if r["proc"].poll() is None:
                    continue
                del running[slot]
                r["log"].close()
                r["err"].close()
                head = f"[{r['i'] + 1}/{len(todo)}] {r['job']['name']}"
                if r["proc"].returncode == 0:
                    with open(os.path.join(r["job"]["dir"], "summary.json")) as f:
                        acc = json.load(f)[MEAN]
                    print(f"{head}: {MEAN} {acc:.2f} ({time.time() - r['t0']:.0f}s)", flush=True)
                    if finished:
                        finished()
                    continue
                with open(r["err"].name) as f:  # only what this attempt wrote
                    f.seek(r["err_at"])
                    lines = [ln.strip() for ln in f if ln.strip()]
                failed[r["job"]["name"]] = lines[-1] if lines else f"exit code {r['proc'].returncode}"
                print(f"{head}: FAILED: {failed[r['job']['name']]} (log: {r['err'].name})", flush=True)
    except BaseException as e:  # Ctrl-C, SIGTERM, a full disk: each run stops at its checkpoint as on the same signal
        for r in running.values():  # (SIGINT but for SIGTERM); a next sweep resumes it
            r["proc"].send_signal(signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT)
        for r in running.values():
            try:
                r["proc"].wait(timeout=60)
            except subprocess.TimeoutExpired:
                r["proc"].terminate()
                r["proc"].wait()
        raise
    return failed


def blocked(job, todo, failed):
    """None where job can start: it reads no other run (paper_tables.AFTER), or that run has finished; "waits" while
    that run has yet to finish, "failed" where it failed."""
    if job.get("after") is None or runfiles.state(job["after"]) == runfiles.FINISHED:
        return None
    return "failed" if any(j["dir"] == job["after"] and j["name"] in failed for j in todo) else "waits"


def start(i, job, env, folder):
    claim(job)
    log = runfiles.open_log(os.path.join(job["dir"], "train.log"))
    err = runfiles.open_log(os.path.join(job["dir"], "train.err"))
    started = os.path.exists(os.path.join(job["dir"], "config.json"))  # train.py refuses --resume of nothing
    script, argv = entry_of(job["argv"] + (["--resume"] if started else []))
    proc = subprocess.Popen([sys.executable, os.path.join(folder, script), *argv], stdout=log, stderr=err,
                            env={**os.environ, **env})
    return dict(i=i, job=job, proc=proc, log=log, err=err, err_at=err.tell(), t0=time.time())


# ---------------------------------------------------------------- raw data
def pack(todo, path):
    """Every finished run of todo into the raw data at path, one JSON line per run, gzipped: its name, key (the
    flags that make it what it is), summary, rows (metrics.jsonl) and provenance (config.json's); a run of the same
    name already there is replaced; one sweep at a time (locked), so that two sharing a pack lose none of each
    other's runs. Returns (runs packed, how many the file holds)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with locked(path):
        return packed(todo, path)


@contextlib.contextmanager
def locked(path):
    """Held by one process of this machine at a time: an exclusive flock on the folder of path (no file beside it)."""
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # and the lock with it


def packed(todo, path):
    lines = {r["name"]: r for r in read_raw(path)}
    new = [dict(name=j["name"], key=j["key"], summary=runfiles.read_json(j["dir"], "summary.json"),
                rows=metrics_rows(j["dir"]), provenance=runfiles.read_json(j["dir"], "config.json").get("provenance"),
                **flags_of(j["dir"]))
           for j in todo if runfiles.state(j["dir"]) == runfiles.FINISHED and same_run(j["dir"], j["key"])]
    lines.update((r["name"], r) for r in new)
    with runfiles.replacing(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as z:
        z.write("".join(json.dumps(lines[k], sort_keys=True) + "\n" for k in sorted(lines)).encode())
    return len(new), len(lines)


def flags_of(d):
    """{"confident": confident.json} of a confident-learning run (lab/confident.py: what cleanlab flagged); {} of
    any other."""
    return {"confident": runfiles.read_json(d, CONFIDENT)} if os.path.exists(os.path.join(d, CONFIDENT)) else {}


def read_raw(path):
    """The runs packed at path ([] where there is no file yet); of two runs of one name (packs joined by cat), the
    later. UserError where a line is not a run as pack writes it: its name must be a folder's name, nothing more."""
    if not os.path.exists(path):
        return []
    if os.path.isdir(path):
        raise UserError(f"{path} is a folder; give the file a sweep's --pack wrote, e.g. {path}/runs.jsonl.gz")
    try:
        with gzip.open(path, "rt") as f:
            lines = [json.loads(line) for line in f]
    except (OSError, EOFError, ValueError) as e:
        raise UserError(f"{path}: not raw data that --pack wrote ({type(e).__name__}); give the runs.jsonl.gz "
                        f"a sweep packed") from None
    runs = {}
    for i, r in enumerate(lines, 1):
        shape = isinstance(r, dict) and isinstance(r.get("key"), list) and isinstance(r.get("rows"), list) and \
            isinstance(r.get("summary"), dict) and all(isinstance(row, dict) for row in r["rows"])
        name = r.get("name") if shape else None
        if not (isinstance(name, str) and name not in ("", ".", "..") and os.path.basename(name) == name and
                "\\" not in name and "\0" not in name):
            raise UserError(f"{path}: line {i} is not a run as --pack writes it (a name that is a folder's, its "
                            f"key, summary and rows); give the runs.jsonl.gz a sweep packed")
        key, name = as_today(r["key"], name)  # a run made when the comparison's methods were corrections
        runs[name] = dict(r, key=key, name=name)
    return list(runs.values())


def unpack(runs, sweep_dir):
    """Packed runs (read_raw's, so each name a folder's) as finished run folders under sweep_dir: the files render
    and pack read (config.json holds the provenance alone), summary.json last: a folder stopped before it is no
    finished run."""
    for r in runs:
        d = os.path.join(sweep_dir, r["name"])
        os.makedirs(d, exist_ok=True)
        with runfiles.replacing(os.path.join(d, "metrics.jsonl")) as f:
            f.writelines(json.dumps(row) + "\n" for row in r["rows"])
        provenance = {"provenance": r["provenance"]} if r.get("provenance") else None
        for name, obj in (("sweep.json", r["key"]), (CONFIDENT, r.get("confident")), ("config.json", provenance),
                          ("summary.json", r["summary"])):
            if obj is not None:
                runfiles.write_json(d, name, obj)


def restore(todo, path, code):
    """--pack FILE's runs of todo at code (the sweep's pinned digest) as finished folders where theirs hold nothing
    but a sweep.json, which a claim writes before its run starts (a run under way, a Slurm job's, holds more): a
    sweep whose folder was lost continues from its pack, running only the rest. A run that another reads (its
    --labels-from) is left to run again unless its reader is packed too: the pack keeps numbers, not files. Returns
    how many it restored."""
    packed = {r["name"]: r for r in read_raw(path) if code_key(r.get("provenance")) == code}
    ok = {j["name"] for j in todo if j["name"] in packed and set(listed(j["dir"])) <= {"sweep.json"}
          and dict(zip(j["key"][::2], j["key"][1::2])) == dict(zip(packed[j["name"]]["key"][::2],
                                                                   packed[j["name"]]["key"][1::2]))}
    read = {j["after"] for j in todo if j.get("after") and j["name"] not in ok}
    ok = [j for j in todo if j["name"] in ok and j["dir"] not in read]
    for j in ok:
        unpack([packed[j["name"]]], os.path.dirname(j["dir"]))
    return len(ok)


def listed(d):
    """The names in folder d; none where there is no such folder."""
    return os.listdir(d) if os.path.isdir(d) else []


def provenance_of(d):
    """The provenance a run's config.json records (None where it has none)."""
    try:
        return runfiles.read_json(d, "config.json").get("provenance")
    except (OSError, ValueError, AttributeError):
        return None


def code_key(provenance):
    """The code a run ran, as its provenance names it: its digest (training/source.py); for a run made before runs
    recorded one, its commit where the checkout was clean; else "unknown"."""
    p = provenance or {}
    if p.get("code"):
        return p["code"]
    return f"commit {p['git_commit'][:7]}" if p.get("git_commit") and p.get("git_dirty") is False else "unknown"


def code_label(provenance):
    """A run's code in words: its digest, and its commit where known."""
    p, key = provenance or {}, code_key(provenance)
    if key == "unknown":
        return "unknown (the runs recorded no digest, and no commit of a clean checkout)"
    commit = f"commit {p['git_commit'][:7]}{' with changes' if p.get('git_dirty') else ''}" if p.get("git_commit") else ""
    return f"{key} ({commit})" if p.get("code") and commit else key


def one_code(runs, mixed=False):
    """The line under a table's title that names the code of its runs ({name: provenance}): one code. Runs of several
    are a UserError that names each code and its rows (run names less their seed), unless mixed (--mixed-code): then
    the line says the table mixes them, and names them alike."""
    codes = {}
    for name, p in sorted(runs.items()):
        codes.setdefault(code_key(p), []).append((name, p))
    if len(codes) <= 1:
        return "".join(f"Code: {code_label(v[0][1])}, every run." for v in codes.values())
    each = "; ".join(f"{code_label(v[0][1])}: {len(v)} run{'s' * (len(v) > 1)} of "
                     f"{', '.join(sorted({re.sub(r'-s[0-9]+$', '', n) for n, _ in v}))}"
                     for v in sorted(codes.values(), key=len, reverse=True))
    if not mixed:
        raise UserError(f"the runs are of {len(codes)} codes, {each}; a table shows one code: run the rows of the others "
                        f"again with one, or pass --mixed-code for a table that says it mixes them")
    return f"**Mixed code: these runs ran {len(codes)} codes**, {each}."


def where(runs):
    """Where runs ran (each with the provenance of its config.json): 'n on DEVICE, torch V' per device and torch
    version."""
    counts = {}
    for r in runs:
        p = r.get("provenance") or {}
        key = (p.get("device_name") or p.get("device") or "?", p.get("torch", "?"))
        counts[key] = counts.get(key, 0) + 1
    return "; ".join(f"{n} on {d}, torch {t}" for (d, t), n in sorted(counts.items()))


# ---------------------------------------------------------------- tables
def finished_runs(t, row, col, scale, seeds, sweep_dir):
    """{seed: run folder} of one cell's runs that finished (runfiles.state) and ran with this scale's flags."""
    flags = cell_flags(t, row, col, scale)
    dirs = {seed: os.path.join(sweep_dir, f"{run_name(flags)}-s{seed}") for seed in range(seeds)}
    return {seed: d for seed, d in dirs.items() if runfiles.state(d) == runfiles.FINISHED
            and same_run(d, run_key(scale, flags, seed))}


def load_cells(t, scale, seeds, sweep_dir, failed=(), waiting=None):
    """{(row, col): (mean, std, n)} over the seeds whose summary.json exists (and was run with these
    flags); a cell with none is "running" or "queued" when one of its runs' Slurm job is (`waiting`: {run name:
    state}), else "failed" when one of its runs is in `failed` (run names), else absent."""
    cells = {}
    for row in t["rows"]:
        for col in t["cols"]:
            if (row[0], col[0]) in t["skip"]:
                continue
            values = []
            for d in finished_runs(t, row[0], col[0], scale, seeds, sweep_dir).values():
                with open(os.path.join(d, "summary.json")) as f:
                    values.append(json.load(f)[col[3]])
            names = [f"{run_name(cell_flags(t, row[0], col[0], scale))}-s{seed}" for seed in range(seeds)]
            states = [waiting[n] for n in names if n in (waiting or ())]
            if values:
                cells[row[0], col[0]] = mean_std(values)
            elif states:
                cells[row[0], col[0]] = "running" if "running" in states else "queued"
            elif any(n in failed for n in names):
                cells[row[0], col[0]] = "failed"
    return cells


def print_commands(argvs):
    """--dry-run: each train.py command on a line, as a shell takes it."""
    try:
        for argv in argvs:
            script, argv = entry_of(argv)
            print(shlex.join(["python", script, *argv]))
        sys.stdout.flush()
    except BrokenPipeError:  # | head: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def metrics_rows(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def run_diagnostics(d):
    """What one run's metrics.jsonl says about memorisation and selection: diagnostics of its rows."""
    return diagnostics(metrics_rows(d))


def diagnostics(rows):
    """What a run's metrics rows say about memorisation and selection (means over its models and over
    the ordered pairs of models: b2a and a2b for A and B)."""
    models = [k[len("memorized_"):] for k in rows[-1] if k.startswith("memorized_")]
    pairs = [f"{j}2{k}" for j in models for k in models if j != k]
    per_model = lambda r, key: sum(r[f"{key}_{x}"] for x in models) / len(models)  # noqa: E731
    per_pair = lambda key: [(r[f"selected_{p}"], r[f"{key}_{p}"]) for r in rows for p in pairs]  # noqa: E731
    weighted = [(s, v) for s, v in per_pair("precision") if v is not None]
    accs = [r["test_acc_mean"] for r in rows]
    return dict(best=max(accs), drop=max(accs) - accs[-1], memorized=per_model(rows[-1], "memorized"),
                selected=sum(s for s, _ in per_pair("precision")) / (len(pairs) * len(rows)),
                precision=sum(s * v for s, v in weighted) / sum(s for s, _ in weighted) if weighted else None,
                recall=sum(v for _, v in per_pair("recall") if v is not None) / (len(pairs) * len(rows)),
                r_end=per_model(rows[-1], "confidence"))


def early_stopped(rows):
    """Test accuracy at the epoch with the best validation accuracy (the first such epoch)."""
    best = max(range(len(rows)), key=lambda i: (rows[i]["val_acc_mean"], -i))
    return rows[best]["test_acc_mean"]


DIAGNOSTICS = [("best", "best epoch's test acc", "{:.1f}"), ("drop", "best - final", "{:.1f}"),
               ("early", "test acc at the best val epoch (early stopping; runs with a val split)", "{:.1f}"),
               ("memorized", "noisy labels memorised at the end", "{:.2f}"),
               ("selected", "taught", "{:.3f}"), ("precision", "precision of the taught targets", "{:.2f}"),
               ("recall", "recall of clean-labelled samples", "{:.3f}"), ("r_end", "MyLC's r at the end", "{:.2f}")]


def render_diagnostics(t, scale, seeds, sweep_dir):
    """Per row, mean ± std over seeds of run_diagnostics; and whether the demo's preconditions hold on zero
    knowledge: at least 30% of the noisy labels memorised at the end, final accuracy below the best epoch."""
    return sum((diagnostics_of(t, scale, seeds, sweep_dir, col) for col in scale_cols(t, scale)), [])


def diagnostics_of(t, scale, seeds, sweep_dir, col):
    """render_diagnostics' table of one column: col, a column of t (key, label, flags, number)."""
    many = len(scale_cols(t, scale)) > 1
    lines = [f"### Diagnostics{', ' + col[1] if many else ''} (means over epochs and over A and B; mean ± std over "
             f"seeds)", "",
             "| | " + " | ".join(label for _, label, _ in DIAGNOSTICS) + " |", "|---" * (len(DIAGNOSTICS) + 1) + "|"]
    col, got = col[0], {}
    for row, _, _ in t["rows"]:
        if (row, col) in t["skip"]:
            continue
        label = row_label(t, row, scale)
        rows = [metrics_rows(d) for d in finished_runs(t, row, col, scale, seeds, sweep_dir).values()]
        runs = [dict(diagnostics(r), early=early_stopped(r) if "val_acc_mean" in r[0] else None) for r in rows]
        if not runs:
            continue
        got[row] = {k: mean_std([r[k] for r in runs if r[k] is not None] or [math.nan]) for k, _, _ in DIAGNOSTICS}
        cells = []
        for key, _, form in DIAGNOSTICS:
            m, s, _ = got[row][key]
            cells.append("–" if math.isnan(m) else form.format(m) + ("" if s is None else " ± " + form.format(s)))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += flagged_lines(t, scale, seeds, sweep_dir, col)
    zero = [r for r in ("ce", "zero") if r in got]
    if zero and scale not in CHECK_ONLY:
        lines += ["", "Preconditions, on the zero-knowledge rows (measured before any CMD row is looked at): "
                  "at least 30% of the noisy labels memorised at the end, and final accuracy clearly below "
                  "the best epoch's."]
        for r in zero:
            mem, drop = got[r]["memorized"], got[r]["drop"]
            holds = mem[0] >= 0.3 and drop[0] > 2 * (drop[1] or 0) and drop[0] >= 1
            lines.append(f"- {row_label(t, r, scale)}: memorised {mem[0]:.2f}, "
                         f"best - final {drop[0]:.1f} points: {'hold' if holds else 'do not hold'}")
    return lines + [""]


def flagged_lines(t, scale, seeds, sweep_dir, col):
    """What confident learning flagged, per row that ran it (its runs' confident.json): of the given labels, how many
    it flagged, their precision and recall against the clean labels, and the noise left in what it kept."""
    lines = []
    for row, _, _ in t["rows"]:
        runs = [runfiles.read_json(d, CONFIDENT) for d in finished_runs(t, row, col, scale, seeds, sweep_dir).values()
                if os.path.exists(os.path.join(d, CONFIDENT))]
        if runs:
            cell = lambda k, form, x=1: spread([x * r[k] for r in runs], form)  # noqa: E731
            lines.append(f"- {row_label(t, row, scale)} ({len(runs)} seeds): flagged {cell('flagged', '{:.0f}')} of "
                         f"{runs[0]['samples']} given labels, {cell('wrong', '{:.0f}')} of them wrong; precision "
                         f"{cell('precision', '{:.3f}')}, recall {cell('recall', '{:.3f}')}; of the samples it kept, "
                         f"{cell('kept_noise', '{:.1f}', 100)}% wrong")
    return ["", "What confident learning flagged (mean ± std over seeds):", "", *lines] if lines else []


def spread(values, form):
    """mean ± std of values, each in form."""
    m, s, _ = mean_std(values)
    return form.format(m) + ("" if s is None else " ± " + form.format(s))


def fmt(stat, seeds):
    if isinstance(stat, str):  # failed, running, queued
        return stat
    m, s, n = stat
    text = f"{m:.2f}" if s is None else f"{m:.2f} ± {s:.2f}"
    return text + (f" (n={n})" if n < seeds else "")


def paper_of(t, row, col):
    """The paper's number of a cell; None where the paper has no such row, or no such column (its lists follow the
    table's columns, and a column beyond the paper's comes after them)."""
    values, i = t["paper"].get(row), [c[0] for c in t["cols"]].index(col)
    return None if values is None or i >= len(values) else values[i]


SCALE_DATA = {"fmnist": "Fashion-MNIST, an mlp pair"}  # what a table's title names at a scale below paper


def scale_cols(t, scale):
    """The columns of t that this scale runs, in the table's order."""
    return [c for c in t["cols"] if c[0] in {col for _, col in grid(t, scale)}]


def render_table(t, cells, seeds, scale="paper"):
    """The table's columns that this scale runs, each cell beside the paper's number."""
    cols = scale_cols(t, scale)
    here = "" if scale == "paper" else f", here at {scale} scale: {SCALE_DATA.get(scale, 'synthetic data')}"
    beside = scale not in CHECK_ONLY  # a scale that ranks nothing shows no paper number to compare with
    lines = [f"## {t['title']}{here}", "", "| | " + " | ".join(c[1] for c in cols) + " |",
             "|---" * (len(cols) + 1) + "|"]
    for row, _, _ in t["rows"]:
        label = row_label(t, row, scale)
        out = []
        for col in cols:
            p = paper_of(t, row, col[0]) if beside else None
            out.append(("–" if (row, col[0]) in t["skip"] else fmt(cells[row, col[0]], seeds)
                        if (row, col[0]) in cells else "not run") + ("" if p is None else f" (paper {p:.2f})"))
        lines.append(f"| {label} | " + " | ".join(out) + " |")
    for row, label, why in t["missing"] if beside else ():  # the paper's rows not trained here: their numbers, why
        lines.append(f"| {label} ({why}) | " + " | ".join(
            "–" if paper_of(t, row, c[0]) is None else f"– (paper {paper_of(t, row, c[0]):.2f})" for c in cols)
                     + " |")
    skipped = [(r, c) for r, c in t["skip"] if c in {col[0] for col in cols}]
    notes = [f"{row_label(t, r, scale)} has no {dict((c[0], c[1]) for c in cols)[col]} cell: {t['skip'][r, col]}."
             for r, col in skipped]
    keys = sorted({c[3] for c in cols})
    what = f"mean ± sample std (ddof=1) over {seeds} seeds" if seeds > 1 else "one seed"
    short = [v[2] for v in cells.values() if not isinstance(v, str) and v[2] < seeds]  # the cells fmt marks (n=k)
    note = ""
    if short:  # "(n=1) and (n=2) mark the 3 cells where only 1 or 2 of the 3 seeds finished."
        ks = sorted(set(short))
        join = lambda items, last: ", ".join(items[:-1]) + f" {last} " * (len(items) > 1) + items[-1]  # noqa: E731
        note = (f" {join([f'(n={k})' for k in ks], 'and')} {'marks' if len(ks) == 1 else 'mark'} "
                f"{'the cell' if len(short) == 1 else f'the {len(short)} cells'} where only "
                f"{join([str(k) for k in ks], 'or')} of the {seeds} seeds finished.")
    return lines + ["", f"Cell: `{'`, `'.join(keys)}` of summary.json (final test accuracy, %), {what}.{note}"
                    + "".join(" " + n for n in notes), ""]


def render_paired(t, scale, seeds, sweep_dir, p):
    """The table's claim, that its proposed row p beats every other: per column the scale runs, p's final test
    accuracy minus each other row's, paired by seed (tools.stats.paired)."""
    cols = scale_cols(t, scale)
    label = {r[0]: row_label(t, r[0], scale) for r in t["rows"]}
    runs = {(row, col[0]): {s: metrics_rows(d) for s, d in finished_runs(t, row, col[0], scale, seeds,
                                                                          sweep_dir).items()}
            for row in label for col in cols}
    val = any("val_acc_mean" in r[0] for cell in runs.values() for r in cell.values())
    ways = [(c, "", final) for c in cols] + [(c, ", early-stopped", early_stopped) for c in cols if val]
    lines = [f"### Does {label[p]} beat every other row?", "",
             f"{label[p]} − the row: the mean of the per-seed differences of final test accuracy (`{MEAN}`, "
             f"points), its 95% t-interval, **win** where the interval is above 0; then the seeds where "
             f"{label[p]} is ahead." + (" Early-stopped: the test accuracy at each run's best epoch on the clean "
                                        "validation split." if val else ""), "",
             "| | " + " | ".join(c[1] + how for c, how, _ in ways) + " |", "|---" * (len(ways) + 1) + "|"]
    for row in label:
        if row != p:
            lines.append(f"| {label[row]} | " + " | ".join(
                "{}, ahead in {}".format(*paired(runs[p, c[0]], runs[row, c[0]], value))
                if runs[p, c[0]] and runs[row, c[0]] else "–" for c, _, value in ways) + " |")
    return lines + [""]


def knowledge_verdicts(t, cells):
    """Table 1's claim per lc column: do CMD-S and CMD-P beat max(Zero, All) by more than the spread?"""
    lines = ["### Does selecting confident knowledge beat zero and all knowledge?", "",
             "Margin = CMD mean - max(Zero mean, All mean); spread = the largest std of the three cells.", ""]
    for col, label, _, _ in t["cols"]:
        got = {k: cells.get((k, col)) for k, _ in KNOWLEDGE}
        got = {k: None if isinstance(v, str) else v for k, v in got.items()}
        if not any(got.values()):
            continue
        if not got["zero"] or not got["all"]:
            lines.append(f"- {label}: Zero or All has no result")
            continue
        best = max(("zero", "all"), key=lambda k: got[k][0])
        base = ", ".join(f"{lab} {fmt(got[k], 0)}" for k, lab in KNOWLEDGE[:2])
        for k, name in KNOWLEDGE[2:]:
            if not got[k]:
                lines.append(f"- {label}: {name} has no result")
                continue
            margin = got[k][0] - got[best][0]
            stds = [got[j][1] for j in ("zero", "all", k)]
            text = f"- {label}: {name} {fmt(got[k], 0)} {'>' if margin > 0 else '≤'} max({base}) by {margin:.2f}"
            if None in stds:
                text += ", spread unknown (one seed): run --seeds 3 to decide"
            else:
                spread = max(stds)
                beats = margin > spread
                text += f" {'>' if beats else '≤'} spread {spread:.2f}: {'yes' if beats else 'no'}"
            p, pz, pa = (paper_of(t, j, col) for j in (k, "zero", "all"))
            lines.append(text + f" (paper: {p:.2f} vs {max(pz, pa):.2f}, by {p - max(pz, pa):.2f})")
    return lines + ([] if len(lines) > 4 else ["No column has run yet."]) + [""]


def render(preset, scale, seeds, sweep_dir, header, failed=None, waiting=None):
    """The whole markdown file: header, one table per subtable, Table 1's verdicts, failed runs."""
    lines = [f"# {preset} at {scale} scale", "", *([CHECK_ONLY[scale][0].upper() + CHECK_ONLY[scale][1:] + ".", ""]
                                                   if scale in CHECK_ONLY else []), header, "",
             f"train.py flags of every run at this scale: `{shlex.join(SCALES[scale])}`" +
             {"paper": "", "fmnist": "; Fashion-MNIST's real images and labels, and every network the scale's mlp "
                                     "(Table 4's columns are then one pair's A, B and mean), every row at the same "
                                     "lr, a stage (a warm-up, a revision) at the same point of this schedule as at "
                                     "paper scale (paper_tables.same_point): the measured numbers are not "
                                     "comparable to the paper's, only their order is"}.get(
                 scale, "; synthetic data and every network the scale's small one (Table 4's columns are then one "
                        "pair's A, B and mean), so the measured numbers are not comparable to the paper's, only "
                        "their order is"), ""]
    for t in PRESETS[preset]:
        cells = load_cells(t, scale, seeds, sweep_dir, failed or (), waiting)
        lines += render_table(t, cells, seeds, scale)
        if t["key"] == "table1" and scale not in CHECK_ONLY:  # a verdict, where the scale can rank
            lines += knowledge_verdicts(t, cells)
        for p in t["proposed"] if scale not in CHECK_ONLY else ():
            lines += render_paired(t, scale, seeds, sweep_dir, p)
        if t["key"] == "demo" or t["proposed"]:
            lines += render_diagnostics(t, scale, seeds, sweep_dir)
    if failed:
        lines += ["## Failed runs", ""] + [f"- `{k}`: {v}" for k, v in sorted(failed.items())] + [""]
    return "\n".join(lines)


def check_flags(todo, extra):
    """Flags after -- may add to the runs (--data-dir, --workers) but not change what the grid sets for each
    (its rows, columns, scale, --seed, --out): the table would then label runs with settings they did not
    have. UserError naming them. Each run is given only the knobs after -- that its mode and label correction
    read (config.knobs_for; its argv changed in place). Then every run's train.py flags go through train.py's own
    checks (config.resolve): one that train.py would refuse ends the sweep with train.py's one-line error, exit 2."""
    import lab  # imports torch: only here, so the tables' tests need none
    from training import config  # likewise
    lab.register()  # the tables' rows include the comparison's methods, the lab's modes
    set_by_grid = set().union(*(config.given(train_flags(job["key"])) for job in todo)) | {"out"}
    clash = sorted(config.given(extra) & set_by_grid)
    if clash:
        raise UserError(f"{' '.join('--' + d.replace('_', '-') for d in clash)} after -- would override what the "
                         f"grid sets for its runs; leave {'them' if len(clash) > 1 else 'it'} out (the presets "
                         f"and scales are in paper_tables.py)")
    for job in todo:
        job["argv"] = job["argv"][:len(job["argv"]) - len(extra)] + config.knobs_for(train_flags(job["key"]), extra)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), one_line("train.py"):
        warnings.simplefilter("ignore")  # what resolve tells a run (its scaled milestones) each run tells again
        return [config.resolve(config.get_args(train_flags(job["argv"]))) for job in todo]  # train.py's line


def check_data(todo, resolved):
    """Before any run: each downloadable dataset that a run still to do reads is there, or is downloaded now, once,
    as that run would; else train.py's one line, so that a wrong --data-dir stops the sweep before its first run
    rather than failing every run alike. Datasets that are not downloaded are looked for by each run."""
    from training import datasets  # imports torch: only here, so the tables' tests need none
    seen = set()
    with one_line("train.py"):
        for job, a in zip(todo, resolved):
            where = (a.dataset, a.data_dir, a.data_mirror)
            if where in seen or runfiles.state(job["dir"]) == runfiles.FINISHED or \
                    a.dataset == "synthetic" or datasets.DATASETS[a.dataset].source is None:
                continue
            seen.add(where)
            datasets.load_dataset(a.dataset, a.data_dir, image_size=a.image_size, mirror=a.data_mirror)


def hardware(argv, gpus, jobs):
    import torch  # only here: --dry-run and the tests of the tables need no torch
    cpu = "--device" in argv and argv[argv.index("--device") + 1] == "cpu"
    if torch.cuda.is_available() and not cpu:
        return f"{max(gpus, 1)} x {torch.cuda.get_device_name(0)}", torch.__version__
    cores = os.cpu_count() or 1
    return f"CPU ({cores} cores, {jobs} run{'s' if jobs > 1 else ''} at a time)", torch.__version__


def kept_going(err, sweep_dir):
    """The one line of a sweep stopped by a file it could not write (runfiles.WriteError: a full disk)."""
    return UserError(f"{err}; the runs so far are kept in {sweep_dir}; {err.fix}, then run the same command again "
                     f"(finished runs are skipped, the others resume from their checkpoints)")


@one_line("sweep.py", stopped="stopped by Ctrl-C; run the same command again to continue (finished runs are skipped, "
                             "the others resume from their checkpoints; Slurm jobs go on and are not resubmitted)")
def main(argv=None, cluster="slurm"):
    """cluster: submitit's executor for --launcher slurm; the tests pass "local", submitit's LocalExecutor,
    which runs each job as real processes on this machine."""
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("preset", choices=sorted(PRESETS))
    p.add_argument("--scale", choices=tuple(SCALES), default="paper",
                   help="paper: CIFAR-100 and the paper's networks (GPU); fmnist: Fashion-MNIST (real data) and "
                        "an mlp pair that memorises the noisy labels, 2 minutes a run on a CPU core, each table's "
                        "Sym 40%% and IDN 40%% columns; demo: synthetic data where an mlp memorises the noisy "
                        "labels, minutes on a CPU; benign: synthetic data where a cnn does not, and noise does little harm; smoke: "
                        "seconds, for tests (default: paper)")
    p.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1; cells show mean ± sample std")
    p.add_argument("--out", default="sweeps", metavar="DIR",
                   help="runs go in DIR/<preset>-<scale>/, the table in DIR/<preset>-<scale>.md")
    p.add_argument("--gpus", type=int, default=0, help="run N at a time, run i with CUDA_VISIBLE_DEVICES=i")
    p.add_argument("--jobs", type=int, default=1, help="without --gpus: run N at a time on the CPU, each with "
                                                        "an equal share of the cores")
    p.add_argument("--cols", metavar="KEY[,KEY]", help="run only these columns of the preset (their keys, e.g. sym40; "
                                                        "the scale's are listed where one is unknown); the table "
                                                        "shows the others' cells from runs already there")
    p.add_argument("--dry-run", action="store_true", help="print the train.py commands and exit")
    p.add_argument("--pack", metavar="FILE", help="every finished run's numbers into FILE (gzipped JSON lines: flags, "
                                                  "metrics, summary, provenance), as each finishes (--launcher "
                                                  "slurm: once its jobs have), to keep or share; "
                                                  "runs already in FILE are kept, one of the same name replaced; "
                                                  "its runs at the sweep's code are not run again")
    p.add_argument("--from", dest="raw", metavar="FILE", help="run nothing: the table from the runs --pack wrote "
                                                              "into FILE (those of this preset, scale and seeds)")
    p.add_argument("--launcher", choices=("local", "slurm"), default="local",
                   help="local: run here (--gpus, --jobs); slurm: submit each run as a Slurm job through submitit "
                        "(--slurm-*; tools/slurm.py) (default: local)")
    p.add_argument("--mixed-code", action="store_true",
                   help="write the table even where its runs ran different code (each run's config.json names its "
                        "code), saying so under its title; without it such a table is refused, naming the codes")
    slurm.add_flags(p)
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.seeds < 1 or args.gpus < 0 or args.jobs < 1:
        p.error("--seeds and --jobs must be >= 1 and --gpus >= 0")
    t0 = time.time()
    sweep_dir = os.path.join(args.out, f"{args.preset}-{args.scale}")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UserError(f"--out {args.out} is a file; give a directory for the sweeps")
    if args.raw:
        if args.dry_run or args.pack:
            raise UserError(f"--from runs nothing{' and packs nothing' if args.pack else ''}: leave out "
                            f"{'--dry-run' if args.dry_run else '--pack'}")
        return from_raw(args, argv, sweep_dir)
    todo = jobs(args.preset, args.scale, args.seeds, sweep_dir, extra)  # bad input: one line, before any write
    if args.cols:
        todo = only_cols(todo, args.cols.split(","), args.preset, args.scale)
    if args.pack and not args.dry_run:
        check_pack(args.pack)
    slurm.check(args, todo, cluster)  # before check_flags imports torch
    resolved = check_flags(todo, extra)  # a flag train.py would refuse stops the sweep here, before any run starts
    if args.dry_run:
        print_commands(job["argv"] for job in todo)
        return 0
    if args.launcher == "local":  # a Slurm job's node has its own files
        check_data(todo, resolved)
    try:
        code = pin_code(sweep_dir)  # every run of this folder runs the code it started with
    except OSError as e:
        raise UserError(f"{os.path.join(sweep_dir, CODE)}: the copy of the code the sweep's runs run cannot be written "
                        f"({e.strerror or e}); free some space or choose another --out") from None
    if args.pack and os.path.exists(args.pack):
        n = restore(todo, args.pack, code[1]["code"])
        if n:
            print(f"sweep.py: {n} runs of {args.pack} at this code restored into {sweep_dir}: skipped", flush=True)
    done = (lambda: pack(todo, args.pack)) if args.pack else None  # as each run finishes: a stopped sweep keeps them
    try:
        if args.launcher == "slurm":  # a run that reads another's waits for it: the same command again submits it
            later = {job["name"]: "queued" for job in todo if blocked(job, todo, {}) is not None}
            for job in todo:
                if job["name"] in later:
                    print(f"{job['name']}: starts once {job['after']} has finished; the same command then submits it")
            failed, waiting = slurm.submit([job for job in todo if job["name"] not in later], args, sweep_dir, cluster,
                                           code)
            waiting.update(later)
        else:
            waiting = slurm.waiting(todo)  # runs whose Slurm job is queued or running are left to it
            failed = run_jobs([job for job in todo if job["name"] not in waiting], args.gpus, args.jobs, code, done)
    except runfiles.WriteError as e:  # a run's sweep.json or logs, a job's record: the runs under way have stopped
        raise kept_going(e, sweep_dir) from None  # at their checkpoints (a Slurm job goes on)
    hw, version = slurm.hardware(args, todo, cluster) if args.launcher == "slurm" else \
        hardware(SCALES[args.scale] + extra, args.gpus, args.jobs)
    trained, ran = 0.0, {}
    for job in todo:
        if runfiles.state(job["dir"]) == runfiles.FINISHED and same_run(job["dir"], job["key"]):
            trained += runfiles.read_json(job["dir"], "summary.json").get("seconds", 0)
            ran[job["name"]] = provenance_of(job["dir"])
    header = (f"scale {args.scale} | seeds {args.seeds} (0..{args.seeds - 1}) | {hw} | torch {version} | "
              f"wall {time.time() - t0:.0f}s this invocation, {trained:.0f}s of training in all runs | "
              f"`{shlex.join(['python', '-m', 'tools.sweep', *argv])}`\n\n{one_code(ran, args.mixed_code)}")
    path = sweep_dir + ".md"
    os.makedirs(args.out, exist_ok=True)
    try:
        with runfiles.replacing(path) as f:  # a full disk: the table as it was, and one line
            f.write(render(args.preset, args.scale, args.seeds, sweep_dir, header, failed, waiting))
    except runfiles.WriteError as e:
        raise kept_going(e, sweep_dir) from None
    packed = ""
    if args.pack:
        try:
            n, total = pack(todo, args.pack)
        except runfiles.WriteError as e:
            raise kept_going(e, sweep_dir) from None
        packed = f"; packed {n} runs into {args.pack} (it holds {total})"
    print(f"{len(todo)} runs, {len(failed)} failed" + (f", {len(waiting)} queued or running (the same command "
                                                       f"again, or with --wait, writes them in)" if waiting else "") +
          f"; table: {path}{packed}")
    return 1 if failed else 0


def only_cols(todo, cols, preset, scale):
    """The jobs of the columns cols (keys) alone; UserError naming the scale's columns where one is not among them."""
    have = list(dict.fromkeys(job["col"] for job in todo))
    unknown = [c for c in cols if c not in have]
    if unknown:
        raise UserError(f"--cols {','.join(cols)}: {preset} at --scale {scale} has no column {unknown[0]}; its columns "
                        f"are {', '.join(have)}")
    return [job for job in todo if job["col"] in cols]


def check_pack(path):
    """Before any run: --pack's file can be written where it is asked for, and holds raw data if it exists."""
    read_raw(path)  # a folder, or a file that is not raw data: its line
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    try:  # the folder's own answer: permissions, a read-only or virtual file system
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as e:
        raise UserError(f"--pack {path}: no file can be written in {parent} ({e.strerror or type(e).__name__}); "
                        f"give a path in a folder you can write") from None


def from_raw(args, argv, sweep_dir):
    """--from FILE: the table of FILE's runs (those of the grid, with its flags), to where the sweep writes it."""
    if not os.path.exists(args.raw):
        raise UserError(f"--from {args.raw}: no such file; give the file a sweep's --pack wrote")
    runs = read_raw(args.raw)
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, os.path.basename(sweep_dir))
        todo = jobs(args.preset, args.scale, args.seeds, folder)
        names = {j["name"]: j["key"] for j in todo}
        unpack([r for r in runs if r["name"] in names], folder)  # nothing outside the grid is written
        got = [r for r in runs if r["name"] in names and same_run(os.path.join(folder, r["name"]), names[r["name"]])]
        if not got:  # a run packed with other flags is not the grid's
            raise UserError(f"--from {args.raw}: none of its {len(runs)} runs is one of {args.preset} at --scale "
                            f"{args.scale} with seeds 0..{args.seeds - 1} and these flags"
                            + (f" (it holds {runs[0]['name']}, ...)" if runs else "") +
                            "; give the preset, scale and seeds it was packed from")
        trained = sum(r["summary"].get("seconds", 0) for r in got)
        header = (f"scale {args.scale} | seeds {args.seeds} (0..{args.seeds - 1}) | the runs of {args.raw}: "
                  f"{where(got)} | {trained:.0f}s of training in all runs | "
                  f"`{shlex.join(['python', '-m', 'tools.sweep', *argv])}`\n\n"
                  f"{one_code({r['name']: r.get('provenance') for r in got}, args.mixed_code)}")
        try:
            text = render(args.preset, args.scale, args.seeds, folder, header)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
            raise UserError(f"--from {args.raw}: its runs lack numbers the table reads ({type(e).__name__}: {e}); "
                            f"give the runs.jsonl.gz a sweep packed") from None
    path = sweep_dir + ".md"
    os.makedirs(args.out, exist_ok=True)
    with runfiles.replacing(path) as f:
        f.write(text)
    print(f"{len(got)} of the {len(todo)} runs from {args.raw}; table: {path}")
    return 0


if __name__ == "__main__":
    stop_on_sigterm()  # a sweep in the background (nohup, &) ignores Ctrl-C: SIGTERM stops it and its runs alike
    sys.exit(main())
