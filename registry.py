"""What an entry of the method's registries declares: a label correction (label_correction.LABEL_CORRECTIONS), the
stages it runs between epochs, and a training mode (mutual.MODES). One entry holds everything that differs between
methods, its settings too: train.py, tools.batched and the checks of training/config.py read the entries and name
no method, as timm's training script names no model.

knob       -- a setting of the method: its default, its flag's help (the paper's symbol first), the values it may take
Stage      -- what a label correction learns between epochs, for each model (training/stages.py runs it)
Correction -- one self label correction (--lc): its target or its own loss, the settings it reads, its stages (and
              as_they_are, the rule on the gradients of all but CDR)
stage_inputs, relabels -- what a correction's loss and the batches read of its stages
like_ce    -- whether a correction's step is CE's, which a warm-up of CE leaves as it is
Mode       -- one training mode (--mode): its objective, Eq. 7's (η, b) or none, what it needs of a run

A setting declared by an entry (`settings`) is a field of mutual.Comparators and train.py's flag of the same name; the
paper's own are fields of mutual.Method. An entry's `knobs` names the fields of either that it reads beyond its own.
"""
import math
from dataclasses import field
from typing import Callable, NamedTuple


def knob(default, help, check=None):
    """A setting: its default, its flag's help text (the paper's symbol first), and the values it may take as (test,
    what it must be). training/config.py makes every one a flag from these."""
    return field(default=default, metadata=dict(help=help, check=check))


def unit(v):
    return 0 <= v <= 1


def positive(v):
    return 0 < v < math.inf


class Stage(NamedTuple):
    """What a label correction learns between epochs, for each model: training/stages.py runs it at the start of an
    epoch, before the epoch's first step, and keeps each model's state in Method.state[name] (and the checkpoint).

    name    -- the state's name: Method.state[name], the checkpoint's state_<name>_<model>, what the loss reads
    start   -- (m, epochs) -> the first epoch (0-based) at whose start it acts; None: not in this run
    update  -- (state, probs, m) -> the model's new state (a tensor), from its state so far (None the first time) and
               its predicted probabilities on the training set (n, K; eval mode, no augmentation, the samples' order),
               or None where `predictions` is False
    line    -- (m, epoch, n, states) -> the stage line said where it first shows (at rows_from where it has rows): n
               the training samples the predictions covered (None where it read none), states each model's new one
    every   -- it acts at the start of every epoch from `start` on; False: once
    predictions -- update reads the predictions (a pass over the training set each time it acts)
    rows    -- (state) -> per-sample rows (n, K) the batches carry from rows_from on, each batch its samples' (M, N, K):
               the given labels q where `given` (what the loss and CMD's targets read in place of the one-hot), else
               the loss's own input, s[name]. None: the state is the model's alone (a T̂, a ΔT), which the loss reads
    rows_from -- (m, epochs) -> the epoch from whose start the batches carry the rows; None: from `start`
    given   -- the rows are each sample's given label
    optimiser -- (net, state, m, weight_decay) -> the optimiser of the model, with its state where that learns, from
               `start` on, at a constant lr; None: the run's own. The state learns where it requires grad
    keep    -- the rows after the last epoch are what the run ends with (labels.npz, which --labels-from reads)
    """
    name: str
    start: Callable
    update: Callable
    line: Callable
    every: bool = False
    predictions: bool = True
    rows: Callable | None = None
    rows_from: Callable | None = None
    given: bool = False
    optimiser: Callable | None = None
    keep: bool = False


def as_they_are(nets, m):
    """The gradients as backward left them: the grad_rule of every correction but CDR."""


class Correction(NamedTuple):
    """One self label correction, as train.py's --lc names it: the paper's (LS, CP, Boot-soft, ProSelfLC, MyLC) and
    the comparators' (label_correction.py's second half).

    title  -- its name in plots and tables
    target -- (q, p, h, r, progress, m) -> q~ (N, K), no gradient: q, p (N, K) the given labels and the model's own
              prediction, h (N,) H(p), r MyLC's confidence (Eq. 8), progress t/Γ, m the run's mutual.Method.
              None: the given label q (CE, and the corrections that are losses, whose models distil q)
    loss   -- (logits, logp, q, y, m, clock, s) -> a scalar, the model's L_selfKD when it is a loss of its own (CP);
              None: H(q~, p). logp: the logits' float32 log_softmax; y: (N,) the given labels as integers; clock: the
              step's mutual.Clock; s: what its stages made of this model (stage_inputs)
    knobs  -- the fields of mutual.Method or mutual.Comparators it reads beyond its settings: train.py refuses any
              other correction's knob given with this one
    """
    title: str
    target: Callable | None = None
    loss: Callable | None = None
    knobs: tuple = ()
    # ---- what the comparators' corrections declare beyond a target or a loss
    settings: dict = {}  # {name: knob(...)}: the settings it declares, each a field of mutual.Comparators and a flag
    stages: tuple = ()  # the Stages it runs between epochs, in the order they act
    grad_rule: Callable = as_they_are  # (nets, m): on the models' gradients before their step (CDR's)
    check: Callable | None = None  # (args) -> what the run lacks, in a line, or None: train.py refuses it at once
    unbatched: str = ""  # why tools.batched cannot train it ("" where it can)


def stage_inputs(correction, m, k, rows=None):
    """s, what model k's loss reads of the correction's stages: each stage's state of the model (Method.state), and
    for a stage whose rows are the loss's own, the batch's rows (M, N, K) of model k."""
    s = {name: states[k] for name, states in (m.state or {}).items()}
    own = [x for x in correction.stages if x.rows is not None and not x.given]
    if own and rows is not None:
        s[own[0].name] = rows[k]
    return s


def like_ce(correction):
    """Whether its step is CE's: no target, no loss, no rule on the gradients (CE itself, or a correction that
    only renews the given labels between epochs), so that a warm-up of CE changes nothing in it."""
    return correction.target is None and correction.loss is None and correction.grad_rule is as_they_are


def relabels(correction):
    """Whether the batches' rows, where a run has them, are its given labels: always, but for a correction whose
    stage rows are an input of its loss (a run given labels from --labels-from has no such stage)."""
    return not any(x.rows is not None and not x.given for x in correction.stages)


class Mode(NamedTuple):
    """One training mode, as train.py's --mode names it: the paper's four and the comparators' (baselines.py).

    title      -- its name in plots and tables (the paper's)
    objective  -- what it trains by: (z, y, method, chi, r, clock, draws, rows) -> losses.Objective
    thresholds -- (η, b) of Eq. 7 by default: a knowledge mode of Eqs. 3-7, where --lc, --select and --peer-weight
                  apply; None: no χ, and it trains on the given labels (--lc ce)
    tunable    -- --eta and --b may move its (η, b) (CMD-S, CMD-P); zero and all knowledge are defined by theirs
    aliases    -- the papers' names it is also called by
    knobs      -- the fields of mutual.Method or mutual.Comparators its objective reads beyond η and b and its
                  settings: train.py refuses any other mode's knob given with it
    """
    title: str
    objective: Callable
    thresholds: tuple | None = None
    tunable: bool = False
    aliases: tuple = ()
    knobs: tuple = ()
    # ---- what the comparators' modes declare beyond an objective
    settings: dict = {}  # {name: knob(...)}: the settings it declares, each a field of mutual.Comparators and a flag
    pair: bool = False  # defined for a pair of networks only, not a cohort (--peers)
    rule: Callable | None = None  # (method, clock) -> the host numbers its step takes now (R(t) of the small-loss
    # methods): a replayed step is recorded anew for each (training/graph.py); None: none
