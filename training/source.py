"""The code a run ran: which files are its source, their digest, and a copy of them that a sweep pins.

A run's config.json names its code by `code`, the digest of its source files, beside the git commit where the code is
a checkout: the digest says what ran also in a copy of the tree without .git (a GPU machine's, a sweep's pinned copy),
and two runs of one digest ran the same source, whatever their commits say. No torch here: tools.sweep reads it.

files    -- the source files of the tree at root: the .py files of the root and of its packages, tests left out (in a
            checkout the tracked ones, with what the working tree holds)
digest   -- the first 16 hex digits of the SHA-256 of those files, path and contents, in the order of their paths
git      -- {git_commit, git_dirty} of the checkout, or the commit a caller names in CMD_COMMIT outside one
identity -- {code, git_commit, git_dirty}: what provenance records
pin      -- a copy of the source files in a folder (a sweep's .code/), once, with code.json naming what it copies
"""
import hashlib
import json
import os
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
PINNED = "code.json"  # in a pinned copy: the digest, commit and dirtiness of what it copies


def _is_source(path):
    """A .py file at the root or in a package of it (a folder with __init__.py, at any depth), tests aside."""
    parts = path.split("/")
    return path.endswith(".py") and "tests" not in parts[:-1] and not parts[-1].startswith("test_") \
        and parts[-1] != "conftest.py"


def _tracked(root, untracked=True):
    """The checkout's files (paths relative to root): its tracked ones and, with untracked, those it does not ignore
    (a new file not yet committed runs too); None outside a checkout."""
    try:
        more = ["--others", "--exclude-standard"] if untracked else []
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", *more], capture_output=True, timeout=10,
                             check=True).stdout
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if os.path.realpath(top) != os.path.realpath(root):  # root is a copy inside another repository's tree
        return None
    return [p for p in out.decode().split("\0") if p]


def files(root=None):
    """The source files of the tree at root, relative paths in sorted order: in a checkout those git tracks or does
    not ignore, every one present elsewhere. A package is a folder that holds an __init__.py, inside the root or inside
    a package (lab/methods/ in lab/)."""
    root = root or ROOT
    found = _tracked(root)
    if found is None:
        found = [os.path.relpath(os.path.join(d, name), root).replace(os.sep, "/")
                 for d, dirs, names in os.walk(root) for name in names if name.endswith(".py")]
    packages = {os.path.dirname(p) for p in found if p.endswith("/__init__.py")}

    def in_packages(p):  # every folder on its way down is a package
        parts = p.split("/")[:-1]
        return all("/".join(parts[:i + 1]) in packages for i in range(len(parts)))
    return sorted(p for p in found if _is_source(p) and in_packages(p) and os.path.isfile(os.path.join(root, p)))


def digest(root=None):
    """The first 16 hex digits of the SHA-256 over files(root): each path, a NUL, its bytes' length and its bytes."""
    root = root or ROOT
    h = hashlib.sha256()
    for p in files(root):
        with open(os.path.join(root, p), "rb") as f:
            data = f.read()
        h.update(p.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()[:16]


def git(root=None):
    """{git_commit, git_dirty} of the checkout at root (dirty: a tracked file differs from the commit, or a source file
    is not committed). Outside one (a copy of the tree without .git, as a GPU machine or a sweep's pinned copy has it),
    the commit its caller names in CMD_COMMIT, dirtiness unknown (None); else {}."""
    root = root or ROOT

    def run(*a):
        return subprocess.run(["git", "-C", root, *a], capture_output=True, text=True, timeout=10, check=True).stdout
    tracked = _tracked(root, untracked=False)
    if tracked is not None:
        try:
            changed = bool(run("status", "--porcelain", "--untracked-files=no").strip())
            return dict(git_commit=run("rev-parse", "HEAD").strip(),
                        git_dirty=changed or not set(files(root)) <= set(tracked))
        except (OSError, subprocess.SubprocessError):
            pass
    given = os.environ.get("CMD_COMMIT", "").strip()
    return dict(git_commit=given, git_dirty=None) if given else {}


def identity(root=None):
    """What provenance records of the code: {code: digest, git_commit, git_dirty} (the git keys where known)."""
    root = root or ROOT
    return dict(code=digest(root), **git(root))


def pin(folder, root=None):
    """The source files of root copied into folder, once: a sweep runs every run from there, so that a checkout that
    moves on while it runs changes none of them. Where folder already holds a copy, it is kept as it is. Returns its
    code.json: {code, git_commit, git_dirty}, as the copy's runs record it (their commit from CMD_COMMIT: env)."""
    root, record = root or ROOT, os.path.join(folder, PINNED)
    if os.path.exists(record):
        with open(record) as f:
            return json.load(f)
    tmp = folder.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for p in files(root):
        os.makedirs(os.path.join(tmp, os.path.dirname(p)), exist_ok=True)
        shutil.copy2(os.path.join(root, p), os.path.join(tmp, p))
    pinned = dict(code=digest(tmp), **git(root))  # the copy's digest: what its runs will record
    with open(os.path.join(tmp, PINNED), "w") as f:
        json.dump(pinned, f, sort_keys=True)
    if os.path.exists(folder):
        shutil.rmtree(folder)  # a copy cut short before its code.json
    os.replace(tmp, folder)
    return pinned


def env(pinned):
    """The environment a pinned copy's runs get: CMD_COMMIT the copy's commit where it is a clean one, so that their
    provenance names it, else empty (a dirty checkout's copy is named by its digest alone)."""
    clean = pinned.get("git_commit") and pinned.get("git_dirty") is False
    return {"CMD_COMMIT": pinned["git_commit"] if clean else ""}
