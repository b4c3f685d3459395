"""What a lent GPU machine brings back from its $OUT, and one archive of a work folder that always fits
(studies/gpu_check.sh writes its stages into a work folder and keeps $OUT to this archive and its own log).

RULES    -- the return rules: at most 8 files, each at most 16 MiB and 64 MiB together, none deeper than
            $OUT/a/b/file, names of letters, digits, '.', '_' and '-' only, plain files only; the rest stays behind
breaks   -- what in a folder breaks the rules, a line each (none: all of it comes back)
returned -- copy what would come back from a folder into another, as the machine would
snapshot -- a work folder as one .tar.gz in $OUT, written beside the last one and renamed over it, so that a
            kill at any moment leaves the previous one whole; checkpoints, partial files and anything that
            would not fit are left out and listed in the archive's snapshot.json
every    -- snapshot every N seconds until SIGTERM, which waits for a snapshot under way to finish
unpack   -- an archive into a folder, its members checked by tarfile's "data" filter

    python -m studies.outbox snapshot WORK OUT              # OUT/gpu-check.tar.gz, once
    python -m studies.outbox snapshot WORK OUT --every 30   # again every 30 s, until SIGTERM
    python -m studies.outbox check OUT                      # a line per rule broken; exit 1 if any
"""
import fcntl
import io
import json
import os
import re
import shutil
import signal
import sys
import tarfile
import time

from training.errors import Parser, one_line

MiB = 2 ** 20
RULES = dict(files=8, file_bytes=16 * MiB, total_bytes=64 * MiB, depth=3, name=re.compile(r"[A-Za-z0-9._-]+"))
ARCHIVE = "gpu-check.tar.gz"
LEFT_OUT = (".pt", ".tmp")  # checkpoints and weights (never needed back), files still being written
LOCK = ".snapshot.lock"  # in the work folder: one snapshot at a time


def walk(out):
    """(path relative to out, its full path) of everything under out, folders excluded, sorted."""
    found = []
    for root, dirs, files in os.walk(out):
        dirs.sort()
        found += [(os.path.relpath(os.path.join(root, f), out), os.path.join(root, f)) for f in sorted(files)]
    return found


def breaks(out):
    """The return rules that the folder out breaks, a line each: [] when all of it would come back."""
    found, why, total = walk(out), [], 0
    if len(found) > RULES["files"]:
        why.append(f"{len(found)} files, more than {RULES['files']}: " + ", ".join(rel for rel, _ in found))
    for rel, path in found:
        parts = rel.split(os.sep)
        if os.path.islink(path) or not os.path.isfile(path):
            why.append(f"{rel}: not a plain file")
            continue
        size = os.path.getsize(path)
        total += size
        if size > RULES["file_bytes"]:
            why.append(f"{rel}: {size / MiB:.1f} MiB, more than {RULES['file_bytes'] // MiB} MiB")
        if len(parts) > RULES["depth"]:
            why.append(f"{rel}: deeper than $OUT/a/b/file")
        if not all(RULES["name"].fullmatch(p) for p in parts):
            why.append(f"{rel}: a name with other characters than letters, digits, '.', '_' and '-'")
    if total > RULES["total_bytes"]:
        why.append(f"{total / MiB:.1f} MiB in all, more than {RULES['total_bytes'] // MiB} MiB")
    return why


def returned(out, dest):
    """Copy into dest the files of out that the machine brings back: each within the per-file rules, and the
    first RULES["files"] of them (in sorted order) where there are more. Returns their relative paths."""
    kept = []
    for rel, path in walk(out):
        parts = rel.split(os.sep)
        if (len(kept) < RULES["files"] and os.path.isfile(path) and not os.path.islink(path) and
                os.path.getsize(path) <= RULES["file_bytes"] and len(parts) <= RULES["depth"] and
                all(RULES["name"].fullmatch(p) for p in parts)):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copyfile(path, os.path.join(dest, rel))
            kept.append(rel)
    return kept


def _size(path):
    """The size of a file now, or None where it has gone (a run folder cleaned meanwhile)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def _write(work, path, leave, manifest):
    """One .tar.gz of work at path, without the relative paths in leave, with the manifest as snapshot.json.
    Each file is read whole first, so that one growing or rewritten meanwhile goes in as it was at that moment."""
    with tarfile.open(path, "w:gz") as tar:
        for rel, full in walk(work):
            if rel in leave:
                continue
            try:
                with open(full, "rb") as f:
                    data = f.read(RULES["file_bytes"] + 1)
            except OSError as e:  # gone while being read
                manifest["left_out"][rel] = f"unreadable now ({type(e).__name__})"
                continue
            if len(data) > RULES["file_bytes"]:  # it grew past the limit since the snapshot began
                manifest["left_out"][rel] = f"over {RULES['file_bytes'] // MiB} MiB"
                continue
            manifest["files"][rel] = len(data)
            info = tarfile.TarInfo(rel)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(data))
        text = json.dumps(manifest, indent=1).encode()
        info = tarfile.TarInfo("snapshot.json")
        info.size, info.mtime, info.mode = len(text), int(time.time()), 0o644
        tar.addfile(info, io.BytesIO(text))


def snapshot(work, out, name=ARCHIVE):
    """work as one archive out/name, within the return rules; rewritten whole, never in place. Returns the
    archive's manifest (snapshot.json inside it): when, each file's size, and what was left out and why."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(work, LOCK), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # snapshots of one work folder one at a time, in the order they began
        leave = {rel: "a checkpoint or weights file, or a file still being written" for rel, _ in walk(work)
                 if rel.endswith(LEFT_OUT)}
        leave[LOCK] = "the snapshots' lock"
        leave.update({rel: f"over {RULES['file_bytes'] // MiB} MiB" for rel, full in walk(work)
                      if rel not in leave and (_size(full) or 0) > RULES["file_bytes"]})
        tmp = os.path.join(out, f"{name}.{os.getpid()}.tmp")
        while True:
            manifest = dict(written=time.strftime("%Y-%m-%dT%H:%M:%S%z"), files={},
                            left_out={k: v for k, v in leave.items() if k != LOCK})
            _write(work, tmp, leave, manifest)
            if os.path.getsize(tmp) <= RULES["file_bytes"] or not manifest["files"]:
                break
            largest = max(manifest["files"], key=manifest["files"].get)  # too big together: drop the largest
            leave[largest] = f"left out so that the archive fits in {RULES['file_bytes'] // MiB} MiB"
        os.replace(tmp, os.path.join(out, name))
    return manifest


def every(work, out, seconds):
    """snapshot(work, out) every `seconds` until SIGTERM; a SIGTERM during a snapshot waits for it to finish."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(seconds)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            snapshot(work, out)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def unpack(archive, dest):
    """The archive's files into dest (links, absolute paths and paths leaving dest are refused)."""
    with tarfile.open(archive, "r:*") as tar:
        tar.extractall(dest, filter="data")


@one_line("studies.outbox")
def main(argv=None):
    p = Parser(command="python -m studies.outbox", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="part", required=True)
    s = sub.add_parser("snapshot", help="a work folder as OUT/" + ARCHIVE)
    s.add_argument("work", help="the folder to archive")
    s.add_argument("out", help="the folder the machine brings back ($OUT)")
    s.add_argument("--every", type=float, help="again every N seconds, until SIGTERM")
    c = sub.add_parser("check", help="what in OUT breaks the return rules")
    c.add_argument("out")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    folder = args.work if args.part == "snapshot" else args.out
    if not os.path.isdir(folder):
        p.error(f"{folder}: no such folder")
    if args.part == "check":
        why = breaks(args.out)
        print("\n".join(why) if why else f"{args.out}: all {len(walk(args.out))} files come back")
        return 1 if why else 0
    if args.every is not None:
        if not args.every > 0:
            p.error(f"--every {args.every}: give a positive number of seconds")
        every(args.work, args.out, args.every)
    m = snapshot(args.work, args.out)
    print(f"{os.path.join(args.out, ARCHIVE)}: {len(m['files'])} files" +
          (f", {len(m['left_out'])} left out" if m["left_out"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
