"""tools.sweep's runs as Slurm jobs through submitit: one job per unfinished run (a job array for several),
requeued after a preemption or at its time limit, resumed from the run's checkpoint, gathered by tools.sweep.

    python -m tools.sweep table2 --scale paper --launcher slurm --slurm-partition gpu --slurm-account ACC \\
        --slurm-time 240 --wait

Each job runs the train.py command line that the local launcher runs, of the code the sweep pinned (tools.sweep's
CODE), in the same run folder, with the same train.log and train.err. submitit's own logs go to DIR/<preset>-<scale>/slurm/<job id>/, and the run folder
keeps the job's id in slurm.json, so that a later tools.sweep (either launcher) sees the run queued or
running and does not start it a second time, or sees why its job failed.

add_flags, check -- the --slurm-* flags, and the refusals made before anything is submitted
Train   -- one run as a submitit job: train.py in its run folder; at a preemption or near its time limit it
           stops train.py at its last checkpoint and requeues itself (submitit's checkpoint protocol), and the
           requeued job continues with --resume: no finished epoch is trained twice
submit  -- the runs that are neither finished nor queued, one job array; with --wait, poll until all ended
states  -- how each run with a job stands: queued, running, or ended (and why it failed)
"""
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

from tools.paper_tables import MEAN, claim, entry_of, finished_job
from training import runfiles, source
from training.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the code a job runs, unless the sweep pinned it
RECORD = "slurm.json"  # in a run folder: its job's id, where submitit keeps the job's files, the error if any
SIGNAL_DELAY_S = 90    # submitit's default: a job is signalled this long before its limit, to stop and requeue
MAX_TIMEOUTS = 10      # requeues at the time limit before a job gives up (preemptions do not count)
POLL_S = {"slurm": 60, "local": 0.5}  # --wait: how often to ask sacct (or, for tests, the local executor)
FLAGS = ("slurm_partition", "slurm_time", "slurm_gpus", "slurm_cpus", "slurm_mem", "slurm_account", "slurm_qos",
         "slurm_arg", "wait")
# sacct's states of a job that has not ended (submitit's own list, with the rest of Slurm's transient ones).
# UNKNOWN is sacct not knowing the job yet, right after submission.
QUEUED = {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "CONFIGURING", "READY", "PREEMPTED", "UNKNOWN"}
RUNNING = {"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT", "RESIZING", "SUSPENDED"}


# ---------------------------------------------------------------- flags
def add_flags(p):
    g = p.add_argument_group("--launcher slurm", "every unfinished run one Slurm job, submitted through submitit")
    g.add_argument("--slurm-partition", metavar="NAME", help="the partition (queue) the jobs go to")
    g.add_argument("--slurm-time", type=int, metavar="MINUTES",
                   help=f"each job's time limit (required); {SIGNAL_DELAY_S}s before it a job stops at its last "
                        f"checkpoint and requeues itself, up to {MAX_TIMEOUTS} times")
    g.add_argument("--slurm-gpus", type=int, metavar="N",
                   help="GPUs per job (default: 1, or 0 when the runs' flags say --device cpu); train.py uses one")
    g.add_argument("--slurm-cpus", type=int, metavar="N", help="CPUs per task (default: the cluster's)")
    g.add_argument("--slurm-mem", metavar="SIZE", help="memory per job in Slurm's syntax, e.g. 32G (default: the "
                                                       "cluster's)")
    g.add_argument("--slurm-account", metavar="NAME", help="the account the jobs are charged to")
    g.add_argument("--slurm-qos", metavar="NAME", help="the quality of service")
    g.add_argument("--slurm-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="any other sbatch option, e.g. constraint=a100 for --constraint=a100 (repeatable)")
    g.add_argument("--wait", action="store_true", help="poll until every job has ended, then write the table "
                                                       "(without it: print the job ids and return)")


def check(args, todo, cluster):
    """UserError, before anything is written or submitted: a Slurm flag without --launcher slurm; the local
    launcher's flags with it; no submitit or no Slurm; no time limit, or one that cannot hold the slowest epoch
    measured so far in the grid's runs (an earlier attempt, on any machine) with the time to stop and requeue."""
    given = [f"--{f.replace('_', '-')}" for f in FLAGS if getattr(args, f) is not None and getattr(args, f)
             is not False and getattr(args, f) != []]
    if args.launcher != "slurm":
        if given:
            raise UserError(f"{given[0]} is an option of --launcher slurm; add --launcher slurm or leave it out")
        return
    if args.gpus or args.jobs != 1:
        raise UserError("--gpus and --jobs are the local launcher's; a Slurm job asks for --slurm-gpus")
    try:
        import submitit  # noqa: F401  (optional: imported only where jobs are submitted or asked about)
    except ImportError:
        raise UserError("--launcher slurm needs submitit: pip install 'submitit>=1.5,<2'") from None
    if cluster == "slurm" and shutil.which("srun") is None and not args.dry_run:  # a dry run submits nothing
        raise UserError("--launcher slurm finds no Slurm here (no srun on PATH); run it on the cluster's login node")
    if args.slurm_time is None:
        raise UserError("--launcher slurm needs --slurm-time MINUTES, each job's time limit")
    if args.slurm_time < 1 or (args.slurm_cpus is not None and args.slurm_cpus < 1) or (args.slurm_gpus or 0) < 0:
        raise UserError("--slurm-time and --slurm-cpus must be >= 1 and --slurm-gpus >= 0")
    bad = [kv for kv in args.slurm_arg if "=" not in kv or kv.startswith("=")]
    if bad:
        raise UserError(f"--slurm-arg {bad[0]}: give KEY=VALUE, e.g. --slurm-arg constraint=a100")
    epochs = [(row["seconds"], job["dir"]) for job in todo for row in metrics(job["dir"])]
    if epochs:
        slowest, where = max(epochs)
        if slowest > 60 * args.slurm_time - SIGNAL_DELAY_S:
            raise UserError(f"--slurm-time {args.slurm_time} cannot hold one epoch: the slowest measured "
                             f"({where}) took {slowest:.0f}s, and a job stops {SIGNAL_DELAY_S}s before its limit "
                             f"to requeue; give at least --slurm-time {math.ceil((slowest + SIGNAL_DELAY_S) / 60)}")


def metrics(d):
    path = os.path.join(d, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# ---------------------------------------------------------------- one run as a job
class Train:
    """One run as a submitit job: `train.py ARGV` (with --resume once the run has started) writing into `out`,
    its output appended to out/train.log and out/train.err as under the local launcher.

    submitit calls `checkpoint` when the job is preempted or nears its time limit (the signal Slurm sends
    SIGNAL_DELAY_S before it), and requeues what it returns: a fresh Train of the same run. train.py
    checkpoints at every epoch's end, so the requeued one resumes after the last finished epoch. (submitit
    requeues any callable with a checkpoint method; submitit.helpers.Checkpointable is one such base.)"""

    def __init__(self, argv, out, root=ROOT, env=None):
        self.argv, self.out, self.root, self.env, self.proc = argv, out, root, env or {}, None

    def __call__(self):
        from submitit import JobEnvironment  # in the job: submitit runs it
        preempt = getattr(signal, "SIG" + JobEnvironment.USR_SIG)
        started = os.path.exists(os.path.join(self.out, "config.json"))  # train.py refuses --resume of nothing
        script, argv = entry_of(self.argv + (["--resume"] if started else []))
        argv = [sys.executable, os.path.join(self.root, script), *argv]
        with runfiles.open_log(os.path.join(self.out, "train.log")) as log, \
                runfiles.open_log(os.path.join(self.out, "train.err")) as err:
            at = err.tell()
            self.proc = subprocess.Popen(argv, stdout=log, stderr=err, env={**os.environ, **self.env},
                                         preexec_fn=lambda: leave_to_the_job(preempt))
            try:
                code = self.proc.wait()
            finally:  # also when the job itself is stopped (a cancel, a requeue): train.py keeps its checkpoint
                self.stop()
        if code != 0:
            error = last_line(err.name, at) or f"train.py exit code {code}"
            write_record(self.out, dict(read_record(self.out) or {}, error=error))
            raise RuntimeError(error)
        return code

    def stop(self):
        """Stop train.py as a Ctrl-C does (it keeps its checkpoint and adds the time of the epoch cut short)
        and wait for it. Called from submitit's signal handler, which may have interrupted Popen.wait while
        it holds its lock: hence os.waitpid, not Popen's own wait."""
        if self.proc is None or self.proc.returncode is not None:
            return
        try:
            os.kill(self.proc.pid, signal.SIGINT)
            os.waitpid(self.proc.pid, 0)
        except (ProcessLookupError, ChildProcessError):  # it had ended and been reaped
            pass

    def checkpoint(self):
        from submitit.helpers import DelayedSubmission  # in the job: submitit calls this
        self.stop()
        return DelayedSubmission(Train(self.argv, self.out, self.root, self.env))


def leave_to_the_job(preempt):
    """In train.py's process: Slurm signals every process of a job, so train.py ignores the preemption signal
    and SIGTERM, as submitit's job process does; that process stops it (Train.stop) when the job checkpoints."""
    for sig in (preempt, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def last_line(path, at=0):
    """The last non-empty line of a text file from offset `at` on ('' if none), leaving out srun's own
    notes ("srun: error: ...: task 0: Exited with exit code 1"), which follow a job's error in its log."""
    if not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        f.seek(at)
        lines = [ln.strip() for ln in f if ln.strip() and not ln.startswith("srun: ")]
    return lines[-1] if lines else ""


def read_record(d):
    path = os.path.join(d, RECORD)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def write_record(d, record):
    runfiles.write_json(d, RECORD, record)


# ---------------------------------------------------------------- where each job stands
def states(todo):
    """{name: (state, record)} for the unfinished runs that have a job: state "queued", "running" or "ended"."""
    records = {j["name"]: r for j in todo if runfiles.state(j["dir"]) != runfiles.FINISHED
               and (r := read_record(j["dir"])) is not None}
    if not records:
        return {}
    try:
        import submitit  # optional, and needed only once a run has a job
    except ImportError:  # a job was submitted from another environment: it may still run, so leave the run alone
        return {name: ("queued", r) for name, r in records.items()}
    out = {}
    slurm = {name: submitit.SlurmJob(r["folder"], r["job_id"]) for name, r in records.items()
             if r["cluster"] == "slurm"}  # registered together: one sacct call for all of them
    if slurm:
        submitit.SlurmJob.watcher.update()
    for name, r in records.items():
        if os.path.exists(submitit.core.utils.JobPaths(r["folder"], r["job_id"]).result_pickle):
            state = "ended"  # submitit's job process wrote its outcome: whatever sacct says, it has ended
        elif name in slurm:
            sacct = slurm[name].watcher.get_state(r["job_id"], mode="cache").split()[0].upper()
            state = "queued" if sacct in QUEUED else "running" if sacct in RUNNING else "ended"
            r = dict(r, sacct=sacct)
        else:  # submitit's local executor, in the tests: the job id is its controller's pid
            state = "running" if alive(int(r["job_id"])) else "ended"
        out[name] = (state, r)
    return out


def alive(pid):
    """Whether a process runs (not a zombie). Linux's /proc: only the tests' local executor needs it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def why_failed(record):
    """A failed job's reason: train.py's last line if it exited with an error, else the last line of submitit's
    log (e.g. 'Job not requeued because: timed-out too many times', or Slurm's own kill), else sacct's state."""
    import submitit  # optional: only where a job has been submitted
    log = submitit.core.utils.JobPaths(record["folder"], record["job_id"]).stderr
    return record.get("error") or last_line(log) or f"job {record['job_id']} ended {record.get('sacct', '')}".strip()


def waiting(todo):
    """{name: "queued" or "running"} of the runs whose job has not ended, which the local launcher leaves alone."""
    out = {name: s for name, (s, _) in states(todo).items() if s != "ended"}
    for name, state in out.items():
        print(f"{name}: {state} as a Slurm job (its folder's {RECORD}); left to it", flush=True)
    return out


def hardware(args, todo, cluster):
    import torch  # only here, as sweep.hardware: the tables' tests need no torch
    return f"Slurm jobs through submitit ({cluster}), {gpus_per_job(args, todo)} GPU each", torch.__version__


# ---------------------------------------------------------------- submitting
def executor(args, folder, cluster, name, gpus):
    import submitit  # optional: check() made sure it is there
    ex = submitit.AutoExecutor(folder, cluster=cluster, slurm_max_num_timeout=MAX_TIMEOUTS)
    ex.update_parameters(name=name, timeout_min=args.slurm_time, nodes=1, tasks_per_node=1, gpus_per_node=gpus,
                         cpus_per_task=args.slurm_cpus, slurm_partition=args.slurm_partition,
                         slurm_account=args.slurm_account, slurm_qos=args.slurm_qos, slurm_mem=args.slurm_mem,
                         slurm_signal_delay_s=SIGNAL_DELAY_S,
                         slurm_additional_parameters=dict(kv.split("=", 1) for kv in args.slurm_arg) or None)
    return ex


def gpus_per_job(args, todo):
    argv = todo[0]["argv"]
    cpu = "--device" in argv and argv[argv.index("--device") + 1] == "cpu"
    return args.slurm_gpus if args.slurm_gpus is not None else 0 if cpu else 1


def submit(todo, args, sweep_dir, cluster="slurm", code=None):
    """Submit every run that has no summary.json and no job queued or running, as one job array; print the job
    ids. With --wait, poll until every job of the grid has ended. Returns ({name: why it failed}, {name:
    "queued" or "running"}: the runs whose job has not ended) for the table."""
    import cloudpickle  # submitit's pickler, so there whenever submitit is
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the job needs no import of tools/ to unpickle Train
    failed, pending, new = {}, {}, []
    now = states(todo)
    for i, job in enumerate(todo):
        head = f"[{i + 1}/{len(todo)}] {job['name']}"
        if finished_job(job, head, failed):
            continue
        if job["name"] in now and now[job["name"]][0] != "ended":
            state, record = pending[job["name"]] = now[job["name"]]
            print(f"{head}: {state} as job {record['job_id']}; not submitted again", flush=True)
        else:
            if job["name"] in now:
                print(f"{head}: its job {now[job['name']][1]['job_id']} failed: {why_failed(now[job['name']][1])}; "
                      f"submitting it again", flush=True)
            new.append((i, job))
    folder = os.path.join(os.path.abspath(sweep_dir), "slurm", "%j")
    script_env = () if code is None else (os.path.abspath(code[0]), source.env(code[1]))
    if new:
        ex = executor(args, folder, cluster, os.path.basename(sweep_dir), gpus_per_job(args, todo))
        for _, job in new:
            claim(job)
        with ex.batch():  # one sbatch --array on Slurm
            handles = [ex.submit(Train(job["argv"], job["dir"], *script_env)) for _, job in new]
        for (i, job), h in zip(new, handles):
            record = dict(job_id=h.job_id, cluster=cluster, folder=folder)
            try:
                write_record(job["dir"], record)
            except runfiles.WriteError as e:  # the jobs run regardless: a second submission must not start them again
                ids = " ".join(h.job_id for h in handles)
                raise runfiles.WriteError(f"{e}; jobs {ids} were submitted and run", f"{e.fix}, wait for those jobs "
                                          f"to end (or scancel {ids})") from None
            pending[job["name"]] = ("queued", record)
            print(f"[{i + 1}/{len(todo)}] {job['name']}: submitted as job {h.job_id} "
                  f"(logs: {job['dir']}/train.err, {h.paths.folder}/)", flush=True)
    if not args.wait:
        return failed, {name: state for name, (state, _) in pending.items()}
    index = {job["name"]: i for i, job in enumerate(todo)}
    while pending:
        time.sleep(POLL_S[cluster])
        for name, (state, record) in states([todo[index[n]] for n in pending]).items():
            if state != "ended":
                continue
            head = f"[{index[name] + 1}/{len(todo)}] {name}"
            failed[name] = why_failed(record)
            print(f"{head}: FAILED: {failed[name]} (job {record['job_id']}; logs: {todo[index[name]]['dir']}/"
                  f"train.err, {os.path.dirname(record['folder'])}/{record['job_id']}/)", flush=True)
            del pending[name]
        for name in [n for n in pending if runfiles.state(todo[index[n]]["dir"]) == runfiles.FINISHED]:
            acc = runfiles.read_json(todo[index[name]]["dir"], "summary.json")[MEAN]
            print(f"[{index[name] + 1}/{len(todo)}] {name}: {MEAN} {acc:.2f} (job {pending.pop(name)[1]['job_id']})",
                  flush=True)
    return failed, {}
