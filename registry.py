"""What an entry of the method's registries declares: a label correction (label_correction.LABEL_CORRECTIONS) and a
training mode (mutual.MODES). One entry holds everything that differs between methods, its settings too: train.py and
the checks of training/config.py read the entries and name no method, as timm's training script names no model.

knob       -- a setting of the method: its default, its flag's help (the paper's symbol first), the values it may take
Correction -- one self label correction (--lc): its target or its own loss, and the settings of Method it reads
Mode       -- one training mode (--mode): its objective, Eq. 7's (η, b) or none, what it needs of a run; and, for a
              mode beyond the paper (the comparison's, lab/), what it does between epochs and its own optimiser and lr
              schedule, its recipe

A setting declared by a mode (`settings`) is a field of mutual.Comparators and train.py's flag of the same name; the
paper's own are fields of mutual.Method. An entry's `knobs` names the fields of either that it reads beyond its own.
"""
import math
from dataclasses import field
from typing import Callable, NamedTuple


def knob(default, help, check=None, kind=None, choices=()):
    """A setting: its default, its flag's help text (the paper's symbol first), the values it may take as (test,
    what it must be) or as the words it may be (choices), and its type where the default does not say it (a None
    default: float unless kind says). training/config.py makes every one a flag from these."""
    if choices:
        check = (lambda v: v in choices, " or ".join(choices))
    return field(default=default, metadata=dict(help=help, check=check, kind=kind, choices=choices))


def unit(v):
    return 0 <= v <= 1


def positive(v):
    return 0 < v < math.inf


class Correction(NamedTuple):
    """One self label correction, as train.py's --lc names it: the paper's LS, CP, Boot-soft, ProSelfLC and MyLC.

    title  -- its name in plots and tables
    target -- (q, p, h, r, progress, m) -> q~ (N, K), no gradient: q, p (N, K) the given labels and the model's own
              prediction, h (N,) H(p), r MyLC's confidence (Eq. 8), progress t/Γ, m the run's mutual.Method.
              None: the given label q (CE, and the corrections that are losses, whose models distil q)
    loss   -- (logits, logp, q, y, m, clock) -> a scalar, the model's L_selfKD when it is a loss of its own (CP);
              None: H(q~, p). logp: the logits' float32 log_softmax; y: (N,) the given labels as integers; clock: the
              step's mutual.Clock
    knobs  -- the fields of mutual.Method it reads: train.py refuses any other correction's knob given with this one
    """
    title: str
    target: Callable | None = None
    loss: Callable | None = None
    knobs: tuple = ()


class Mode(NamedTuple):
    """One training mode, as train.py's --mode names it: the paper's (mutual.MODES), or one of the comparison's that
    python lab/train.py registers (mutual.register).

    title      -- its name in plots and tables (the paper's)
    objective  -- what it trains by: (z, y, method, chi, r, clock, draws, rows) -> losses.Objective
    thresholds -- (η, b) of Eq. 7 by default: a knowledge mode of Eqs. 3-7, where --lc, --select and --peer-weight
                  apply; None: no χ, and it trains on the given labels (--lc ce)
    tunable    -- --eta and --b may move its (η, b) (CMD-S, CMD-P); zero and all knowledge are defined by theirs
    aliases    -- the papers' names it is also called by
    knobs      -- the fields of mutual.Method or mutual.Comparators its objective reads beyond η and b and its
                  settings: train.py refuses any other mode's knob given with it
    settings   -- {name: knob(...)}: the settings it declares, each a field of mutual.Comparators and a flag
    pair       -- defined for a pair of networks only, not a cohort (--peers)
    rule       -- (method, clock) -> the host numbers its step takes now (R(t) of the small-loss methods, whether a
                  warm-up is on): a replayed step is recorded anew for each (training/graph.py); None: none
    """
    title: str
    objective: Callable
    thresholds: tuple | None = None
    tunable: bool = False
    aliases: tuple = ()
    knobs: tuple = ()
    settings: dict = {}
    pair: bool = False
    rule: Callable | None = None
    # ---- what a mode beyond the paper may declare (the comparison's, lab/); the paper's declare none of it
    between: object = None  # what it does between epochs (lab/stages.py's Stages): start(models, method, run, args,
    # setup, given labels, K) -> (models, method, rows) before anything is written (on resume, what it had made; the
    # batches' per-sample rows or None), advance(loop, epoch, setup, args, K) -> loop at each epoch's start, and
    # finish(loop, out) after the last
    optimiser: Callable | None = None  # (params, args, method) -> each model's optimiser (gradient clipping, a rule on
    # the gradients: a step pre-hook); None: SGD at the run's flags
    schedule: Callable | None = None  # (optimiser, args, method) -> its lr schedule; None: MultiStepLR at the run's flags
    check: Callable | None = None  # (args, method) -> what the run lacks, in a line, or None: train.py refuses it
    unbatched: str = ""  # why tools.batched cannot train it ("" where it can)
