"""The code a run ran (training/source.py): config.json names it by the digest of its source files, in a checkout and
in a copy without .git alike. (A sweep pins its code when it starts, and renders a table of one code:
lab/tests/test_sweep.py.)"""
import json
import os
import shutil
import subprocess
import sys

import pytest


import train
from test_train import HERE, TINY
from training import source


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


def test_the_digest_is_of_the_source_files_alone_and_moves_with_any_of_them(tmp_path):
    """The digest covers the .py files of the root and its packages, not the tests; a copy made by pin has the same
    files and digest outside a checkout; changing one byte of any source file changes it, a test file does not."""
    names = source.files()
    assert "train.py" in names and "training/source.py" in names and "mutual.py" in names
    assert not any(n.startswith("tests/") or os.path.basename(n).startswith("test_") for n in names)
    pinned = source.pin(str(tmp_path / "copy"))
    assert pinned["code"] == source.digest() == source.digest(str(tmp_path / "copy"))
    assert source.files(str(tmp_path / "copy")) == names
    for name in ("schedule.py", "training/rundir.py"):
        path = tmp_path / "copy" / name
        text = path.read_bytes()
        path.write_bytes(text + b"\n")
        assert source.digest(str(tmp_path / "copy")) != pinned["code"], name
        path.write_bytes(text)
    (tmp_path / "copy" / "test_more.py").write_text("x = 1\n")
    assert source.digest(str(tmp_path / "copy")) == pinned["code"]
    assert source.pin(str(tmp_path / "copy")) == pinned  # a folder that holds a copy keeps it as it is


@pytest.mark.slow  # a process of its own: the second tier (python -m pytest -q -m slow lab tests)
def test_a_run_names_its_code_in_a_checkout_and_in_a_copy_without_git(tmp_path, monkeypatch):
    """config.json's provenance: the digest and the checkout's commit here; from a copy of the tree without .git, the
    same digest, and the commit only where its caller names it (CMD_COMMIT)."""
    train.main(TINY + ["--epochs", "1", "--out", str(tmp_path / "here")])
    here = provenance(tmp_path / "here")
    assert here["code"] == source.digest()
    head = subprocess.run(["git", "-C", HERE, "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert here["git_commit"] == head.stdout.strip() and isinstance(here["git_dirty"], bool)
    source.pin(str(tmp_path / "copy"))
    env = {k: v for k, v in os.environ.items() if k != "CMD_COMMIT"}
    for name, extra in (("bare", {}), ("named", {"CMD_COMMIT": "c0ffee"})):
        subprocess.run([sys.executable, str(tmp_path / "copy" / "train.py"), *TINY, "--epochs", "1", "--out",
                        str(tmp_path / name)], check=True, capture_output=True, env={**env, **extra})
    assert provenance(tmp_path / "bare")["code"] == here["code"] and "git_commit" not in provenance(tmp_path / "bare")
    named = provenance(tmp_path / "named")
    assert named["code"] == here["code"] and named["git_commit"] == "c0ffee" and named["git_dirty"] is None
