"""How every entry point ends on bad input or Ctrl-C: train.py, evaluate.py and each python -m tools.NAME (and
studies.NAME).

UserError -- bad input (a flag, the data, a run directory); str(error) is one line that says what to do.
             Every refusal raises one: config.resolve's, images.DataError, rundir.RunError, each tool's own.
WriteError -- a file that could not be written (a full disk): the UserError of training/runfiles.py's write path
Parser    -- argparse's parser with a bad flag as a UserError: one line, not the usage and a line. The one
             parser of train.py, evaluate.py and every tool
one_line  -- around a main: a UserError becomes `PROG: error: <message>` on stderr and exit code 2, with no
             traceback; Ctrl-C a line and exit code 130 (128 + SIGINT, what a shell reports for it), SIGTERM
             (where stop_on_sigterm asked for it) the same line and 143. Any other exception is a bug, and keeps
             its traceback.
Terminated, stop_on_sigterm -- SIGTERM raised as Ctrl-C's KeyboardInterrupt is, so that it stops a run alike
stop_early -- before torch is imported: a Ctrl-C or SIGTERM then stops an entry point in its one line (EARLY)

Every input is checked before the first file is written, so a refused run leaves nothing behind.
No torch here: the tools that need none (plot, sweep) import this without it.
"""
import argparse
import contextlib
import os
import signal
import sys


class UserError(ValueError):
    """Bad input. str(error) is one line: what was wrong and what to do."""


class WriteError(UserError):
    """A file that could not be written (training/runfiles.py: its partial file already removed). str(error) is one
    line: the file, the cause and the free space there; `fix` says what to do before going on (free some space, ...).
    Where an entry point does not say more, one_line adds the fix and what to run again."""

    def __init__(self, message, fix="once it can be written again"):
        super().__init__(message)
        self.fix = fix


@contextlib.contextmanager
def one_line(prog, stopped="stopped by Ctrl-C", again="run the same command again"):
    """Report the project's own errors in one line (exit 2) and Ctrl-C in one line (exit 130, `stopped` says
    what is kept and how to go on); a file that could not be written says its fix, then `again`. A context manager,
    and a decorator of a main: @one_line("train.py")."""
    try:
        yield
    except WriteError as e:
        say(f"{named(prog)}: error: {' '.join(str(e).splitlines())}; {e.fix}, then {again}")
        raise SystemExit(2) from None
    except UserError as e:
        say(f"{named(prog)}: error: {' '.join(str(e).splitlines())}")
        raise SystemExit(2) from None
    except KeyboardInterrupt as e:
        say(f"{named(prog)}: {stopped.replace('by Ctrl-C', 'by ' + stopped_by(e), 1)}")
        raise SystemExit(exit_code(e)) from None


def named(prog):
    """prog as its lines name it: under torchrun with more than one process, with this process's rank."""
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE", "1")
    return prog if rank is None or world == "1" else f"{prog} (rank {rank} of {world})"


def say(line):
    """line on stderr, in one write: under PYTHONUNBUFFERED (set in many containers) print's two writes, the line and
    its newline, let another rank's line land between them in the same pipe. Where stderr cannot take it either (a
    sweep's train.err on the same full disk), the exit code still tells, and no traceback follows."""
    with contextlib.suppress(OSError):
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


class Terminated(KeyboardInterrupt):
    """SIGTERM (what `timeout`, `docker stop`, Kubernetes and systemd send before they kill), raised where a
    Ctrl-C raises KeyboardInterrupt: whatever handles a Ctrl-C handles it, and says SIGTERM, with exit code 143."""


def stopped_by(err):
    """What stopped the process, as a line says it: 'SIGTERM' or 'Ctrl-C'."""
    return "SIGTERM" if isinstance(err, Terminated) else "Ctrl-C"


def exit_code(err):
    """128 + the signal's number, what a shell reports for a process it stopped: 143 (SIGTERM) or 130 (SIGINT)."""
    return 128 + (signal.SIGTERM if isinstance(err, Terminated) else signal.SIGINT)


def terminated(signum, frame):
    raise Terminated()


EARLY = "stopped by Ctrl-C before training started; run the command again to start"


def stop_early(prog):
    """Before torch is imported: a Ctrl-C or SIGTERM while it imports stops as quietly as one later, in prog's line
    (train.py's, the lab's entry's), and exits at once by os._exit, since a SystemExit raised inside an import can be
    caught there, and lost. A SIGTERM the process ignores stays ignored (tools/slurm.py starts runs so)."""
    def stopped(signum, frame):
        print(f"{prog}: {EARLY.replace('Ctrl-C', 'SIGTERM' if signum == signal.SIGTERM else 'Ctrl-C')}",
              file=sys.stderr, flush=True)
        os._exit(128 + signum)
    signal.signal(signal.SIGINT, stopped)
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, stopped)


def stop_on_sigterm():
    """From now on SIGTERM raises Terminated in the main thread, unless SIGTERM is ignored: a process started
    with it ignored keeps it so (tools/slurm.py starts train.py that way, as submitit's jobs ignore it)."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, terminated)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose bad flag is a UserError, so that one_line reports it like any other bad input:
    one line, exit 2 (argparse's own error prints the usage too). command: how a user runs it, for the line's
    hint (python train.py); by default the tool being run, python -m tools.NAME."""

    def __init__(self, *args, command=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.command = command

    def error(self, message):
        script = os.path.abspath(sys.argv[0])  # python -m tools.NAME runs tools/NAME.py (studies.NAME alike)
        folder = os.path.basename(os.path.dirname(script))
        command = self.command or (f"python -m {folder}.{os.path.basename(script)[:-3]}"
                                   if folder in ("tools", "studies") else self.prog)
        raise UserError(f"{message} (see {command} --help)")
