"""Under torchrun, the ranks stop together: a full disk on rank 0, data that one rank cannot read, or a Ctrl-C or
SIGTERM sent to one rank stops every rank at the same point, within one training step, and each says one line
(train.py's stopped) and exits with the same code. Without torchrun all of this is a no-op.

begin, end -- from init_process_group to the end of train.py's main: the agreement's gloo group, and the signal
              handlers that hold a Ctrl-C or SIGTERM until the next agreement (a second one stops the rank at once)
held       -- a block whose DataError waits for the next agreement instead of leaving this rank alone
agree      -- every rank says whether it must stop, in one all-reduce over a gloo group on the host (it never waits
              for the device); where one must, every rank raises the same Stop-marked cause: the first such rank's
              exception, its message naming that rank
agreed     -- an epoch's batches with an agreement before each step (train.py's loop)
settled    -- the agreed cause of an exception this rank met alone (rank 0's full disk after its epoch's files)
share      -- rank 0's object on every rank: the line rank 0 composes, since only rank 0 knows what its files hold
said       -- the end of an agreed stop: every rank has said its line, and none exits before

Where the ranks agree: before each training step (train.py), before each test set's counts are summed
(training/report.py), and once the run is finished. Each of those comes before any other collective of its rank, so
a rank that has stopped never leaves another one waiting in DistributedDataParallel's all-reduce.
"""
import contextlib
import signal

import torch
import torch.distributed as dist

from training.errors import Terminated, WriteError
from training.images import DataError

_ranks = None  # this process's agreement under torchrun (begin), else None


class _Ranks:
    def __init__(self, rank, world):
        self.rank, self.world = rank, world
        self.group = dist.new_group(backend="gloo")  # on the host, whatever the training's backend (NCCL on GPUs)
        self.pending = None    # this rank's cause to stop, held until the next agreement
        self.stopping = False  # an agreed stop is under way: later signals change nothing
        self.previous = {s: signal.signal(s, self.hold) for s in (signal.SIGINT, signal.SIGTERM)
                         if signal.getsignal(s) not in (signal.SIG_IGN, None)}  # an ignored SIGTERM stays so (Slurm)

    def hold(self, signum, frame):
        if self.stopping:
            return
        if self.pending is not None:  # a second signal: this rank stops now, alone
            self.restore()
            raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        self.pending = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    def restore(self):
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        self.previous = {}


KINDS = (KeyboardInterrupt, Terminated, DataError, WriteError)  # a cause's code is its place here, plus 1


def kind(err):
    return 0 if err is None else max(i + 1 for i, k in enumerate(KINDS) if isinstance(err, k))


def begin(rank, world):
    """Start agreeing (after init_process_group, on every rank)."""
    global _ranks
    _ranks = _Ranks(rank, world)


def end():
    """Stop agreeing: the signal handlers of before are back."""
    global _ranks
    if _ranks is not None:
        _ranks.restore()
        _ranks = None


@contextlib.contextmanager
def held():
    """Under torchrun, a DataError raised in the block is held until the next agree(), where every rank learns of it;
    the block ends there. Without torchrun it goes up at once."""
    try:
        yield
    except DataError as err:
        if _ranks is None:
            raise
        _ranks.pending = _ranks.pending or err


def agree(err=None):
    """Every rank's word on whether to go on (err: this rank's own cause, if it has one). Where any rank must stop,
    raises on every rank the first such rank's cause, marked agreed and with .rank, its message prefixed by "on rank
    r: " for a data or write error. Without torchrun, returns (or raises err)."""
    if _ranks is None:
        if err is not None:
            raise err
        return
    r = _ranks
    r.pending = r.pending or err
    flags = torch.zeros(r.world, dtype=torch.int64)
    flags[r.rank] = kind(r.pending)
    dist.all_reduce(flags, group=r.group)
    if not flags.any():
        return
    r.stopping = True
    first = int(flags.nonzero()[0])
    said = [None] * r.world
    own = r.pending
    dist.all_gather_object(said, None if own is None else (str(own), getattr(own, "fix", None)), group=r.group)
    cause = KINDS[int(flags[first]) - 1]
    message, fix = said[first]
    if cause in (KeyboardInterrupt, Terminated):
        err = cause()
    elif cause is WriteError:
        err = WriteError(f"on rank {first}: {message}", fix)
    else:
        err = DataError(f"on rank {first}: {message}")
    err.rank, err.agreed = first, True
    raise err


def agreed(batches):
    """The batches of an epoch, each after an agreement (a DataError reading one is held for it)."""
    if _ranks is None:
        yield from batches
        return
    it = iter(batches)
    while True:
        with held():
            try:
                batch = next(it)
            except StopIteration:  # every rank has as many batches (training/batches.py shards each batch)
                return
        agree()
        yield batch


def settled(err):
    """The agreed cause to stop: err itself where it came from an agreement (or without torchrun), else the cause
    that the agreement this rank now joins gives (its own, unless a rank before it has one too)."""
    if _ranks is None or getattr(err, "agreed", False):
        return err
    try:
        agree(err)
    except KINDS as agreed_err:
        return agreed_err


def said():
    """After an agreed stop, once this rank has said its line: wait for every rank to have said theirs, then leave the
    process group. Signals stay held and change nothing: torchrun sends one to the ranks left once one exits."""
    if _ranks is not None:
        dist.barrier(group=_ranks.group)
        dist.destroy_process_group()


def share(obj):
    """Rank 0's obj, on every rank (obj as it is without torchrun)."""
    if _ranks is None:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=_ranks.group)
    return box[0]


def world():
    """(this rank, the number of ranks) while agreeing, else None."""
    return None if _ranks is None else (_ranks.rank, _ranks.world)
