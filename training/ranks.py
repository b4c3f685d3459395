"""Under torchrun, the ranks stop together: a full disk on rank 0, data that one rank cannot read, or a Ctrl-C or
SIGTERM sent to one rank stops every rank at the same point, within one training step, and each says one line
(train.py's stopped) and exits with the same code. A process alone (no torchrun) goes through the same calls, which
then do nothing.

Ranks -- this process's place among torchrun's, held by training/build.py's Setup (ALONE: a process alone):
  held     -- a block whose DataError waits for the next agreement instead of leaving this rank alone
  agree    -- every rank says whether it must stop, in one all-reduce over a gloo group on the host (it never waits
              for the device); where one must, every rank raises the same cause: the first such rank's, marked
              agreed, its message naming that rank
  agreed   -- an epoch's batches with an agreement before each step (train.py's loop)
  settled  -- the agreed cause of an exception this rank met alone (rank 0's full disk after its epoch's files)
  share    -- rank 0's object on every rank: the line rank 0 composes, since only rank 0 knows what its files hold
  said     -- the end of an agreed stop: every rank has said its line, and none exits before; then all exit
  end      -- the signal handlers of before are back (a run that finished)

Where the ranks agree: before each training step (train.py), before each test set's counts are summed
(training/report.py), and once the run is finished. Each of those comes before any other collective of its rank, so
a rank that has stopped never leaves another one waiting in DistributedDataParallel's all-reduce. A Ctrl-C or
SIGTERM is held until the next agreement; a second one stops its rank at once, alone.
"""
import contextlib
import os
import signal
import sys

import torch
import torch.distributed as dist

from training.errors import Terminated, WriteError
from training.images import DataError

KINDS = (KeyboardInterrupt, Terminated, DataError, WriteError)  # a cause's code is its place here, plus 1


def kind(err):
    """err's code for the agreement: 0 for none, else its place in KINDS plus 1 (Terminated, not KeyboardInterrupt)."""
    return 0 if err is None else max(i + 1 for i, k in enumerate(KINDS) if isinstance(err, k))


class Ranks:
    """rank of world; distributed: under torchrun, after init_process_group, on every rank (it makes the gloo group
    and holds SIGINT and SIGTERM from here on, where they are not ignored: an ignored SIGTERM stays so)."""

    def __init__(self, rank=0, world=1, distributed=False):
        self.rank, self.world = rank, world
        self.group = dist.new_group(backend="gloo") if distributed else None  # the host's, whatever trains (NCCL)
        self.pending = None    # this rank's cause to stop, held until the next agreement
        self.stopping = False  # an agreed stop is under way: later signals change nothing
        self.previous = {} if not distributed else {
            s: signal.signal(s, self.hold) for s in (signal.SIGINT, signal.SIGTERM)
            if signal.getsignal(s) not in (signal.SIG_IGN, None)}

    def hold(self, signum, frame):
        if self.stopping:
            return
        if self.pending is not None:  # a second signal: this rank stops now, alone
            self.end()
            raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        self.pending = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    def end(self):
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        self.previous = {}

    @contextlib.contextmanager
    def held(self):
        """Under torchrun, a DataError raised in the block is held until the next agree(), where every rank learns
        of it; the block ends there. Alone, it goes up at once."""
        try:
            yield
        except DataError as err:
            if self.group is None:
                raise
            self.pending = self.pending or err

    def agree(self, err=None):
        """Every rank's word on whether to go on (err: this rank's own cause, if it has one). Where any rank must
        stop, raises on every rank the first such rank's cause, marked agreed and with .rank, its message prefixed
        by "on rank r: " for a data or write error. Alone: raises err, if given."""
        if self.group is None:
            if err is not None:
                raise err
            return
        self.pending = self.pending or err
        flags = torch.zeros(self.world, dtype=torch.int64)
        flags[self.rank] = kind(self.pending)
        dist.all_reduce(flags, group=self.group)
        if not flags.any():
            return
        self.stopping = True
        first = int(flags.nonzero()[0])
        said = [None] * self.world
        own = None if self.pending is None else (str(self.pending), getattr(self.pending, "fix", None))
        dist.all_gather_object(said, own, group=self.group)
        cause, (message, fix) = KINDS[int(flags[first]) - 1], said[first]
        err = (cause() if cause in (KeyboardInterrupt, Terminated) else
               WriteError(f"on rank {first}: {message}", fix) if cause is WriteError else
               DataError(f"on rank {first}: {message}"))
        err.rank, err.agreed = first, True
        raise err

    def agreed(self, batches):
        """The batches of an epoch, each after an agreement (a DataError reading one is held for it)."""
        if self.group is None:
            yield from batches
            return
        it = iter(batches)
        while True:
            with self.held():
                try:
                    batch = next(it)
                except StopIteration:  # every rank has as many batches (training/batches.py shards each batch)
                    return
            self.agree()
            yield batch

    def settled(self, err):
        """The agreed cause to stop: err itself where it came from an agreement (or alone), else the cause that the
        agreement this rank now joins gives (its own, unless a rank before it has one too)."""
        if self.group is None or getattr(err, "agreed", False):
            return err
        try:
            self.agree(err)
        except KINDS as agreed_err:
            return agreed_err

    def share(self, obj):
        """Rank 0's obj, on every rank (obj itself, alone)."""
        if self.group is None:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def said(self, code):
        """After an agreed stop, once this rank has said its line: wait for every rank to have said theirs, then
        exit with code at once. Signals stay held and change nothing: torchrun signals the ranks left once one
        exits. The exit skips the interpreter's teardown, whose destructors of the process groups and of
        DistributedDataParallel's reducer can abort (SIGABRT) when a peer has already gone; every file of the run is
        written by then. Alone, it returns."""
        if self.group is not None:
            dist.barrier(group=self.group)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


ALONE = Ranks()  # a process without torchrun: every call does nothing, or lets its error through
