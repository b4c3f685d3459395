"""What a run's label correction learns between epochs (registry.Stage), run for train.py by one protocol, so that
the loop names no method: Forward's and T-revision's T̂, T-revision's slack ΔT and its optimiser, Joint
optimisation's label history, each a Stage of its entry (label_correction.py).

restore -- on resume: the stages' states from the checkpoint, and the optimisers a stage had brought by then
predictor -- each model's predictions on the training set, which a stage reads
act     -- what the stages due at an epoch's start make: the method's new states, rows, optimisers, lines
advance -- at the start of an epoch, before its first step: every stage that is due acts, from each model's
           predictions on the training set where it reads them; its rows reach the batches, an optimiser it brings
           replaces the run's, the method (Method.state) is made anew, and the step where the loss reads the state
           from the method; the first time it shows, it says its line
kept    -- after the last epoch: the rows a stage keeps as what the run ends with (labels.npz), acting once more

A stage reads every training sample's prediction in one process, and one that brings an optimiser cannot be
replayed: training/config.py refuses both before anything is written.
"""
import dataclasses
from typing import NamedTuple

import torch

from label_correction import LABEL_CORRECTIONS
from training import rundir
from training.report import predictions


def restore(models, method, run, args, device):
    """The models and method of a resumed run (run: a rundir.Run; args: its settings): Method.state the checkpoint's
    ({name: each model's state}, or None), and for each stage that had brought its optimiser by the last epoch done,
    that optimiser on each model and its learned state, before the checkpoint's optimiser states are loaded into them
    (rundir.restore)."""
    m = dataclasses.replace(method, state=run.states(device))
    for stage in LABEL_CORRECTIONS[m.lc].stages:
        start = stage.start(m, args.epochs)
        if stage.optimiser is not None and start is not None and run.epochs_done - 1 >= start:
            learned = tuple(s.clone().requires_grad_() for s in m.state[stage.name])
            m = dataclasses.replace(m, state={**m.state, stage.name: learned})
            models = with_optimiser(models, stage, learned, m, args.weight_decay)
    return models, m


def with_optimiser(models, stage, states, m, weight_decay):
    """models (rundir.Models) with the stage's optimiser on each model and its state, at a constant lr."""
    opts = [stage.optimiser(net, s, m, weight_decay) for net, s in zip(models.nets, states)]
    lr_scheds = [torch.optim.lr_scheduler.MultiStepLR(o, [], 1.0) for o in opts]  # a stage's lr is constant
    return rundir.Models(models.nets, opts, lr_scheds)


def acting(stage, m, epoch, epochs):
    """Whether the stage acts at the start of epoch (0-based): from its start on, every epoch or once."""
    start = stage.start(m, epochs)
    return start is not None and epoch >= start and (stage.every or stage.name not in (m.state or {}))


class Acted(NamedTuple):
    """What the stages due at an epoch's start made (act)."""
    method: object     # the method with every model's new states (Method.state)
    rows: object       # the rows the batches carry from now on, (M, n, K), or None: as they were
    optimisers: list   # [(stage, each model's state)] of the stages that bring their optimiser now
    remake: bool       # a stage whose state the loss reads from the method acted: the step is made anew
    lines: list        # the lines of the stages that show now


def act(m, epoch, epochs, predict, models, device):
    """The stages of m's label correction that are due at the start of epoch (0-based) of epochs, acted in order:
    predict() gives each of the models' predicted probabilities on the training set, (n, K) each, asked at most
    once. Returns an Acted."""
    probs, rows, optimisers, remake, lines = None, None, [], False, []
    for stage in LABEL_CORRECTIONS[m.lc].stages:
        if not acting(stage, m, epoch, epochs):
            continue
        if stage.predictions and probs is None:
            probs = [p.to(device) for p in predict()]
        old = (m.state or {}).get(stage.name, (None,) * models)
        new = tuple(stage.update(o, p, m).to(device) for o, p in zip(old, probs or (None,) * models))
        m = dataclasses.replace(m, state={**(m.state or {}), stage.name: new})
        shows = (stage.rows_from or stage.start)(m, epochs)
        if stage.rows is not None and epoch >= shows:
            rows = torch.stack([stage.rows(s) for s in new])  # each batch carries its samples' rows
        remake = remake or stage.rows is None  # the loss reads this state from the method: the step is made anew
        optimisers += [(stage, new)] if stage.optimiser is not None else []
        lines += [stage.line(m, epoch, probs and len(probs[0]), new)] if epoch == shows else []
    return Acted(m, rows, optimisers, remake, lines)


def predictor(loop):
    """() -> each model's predicted probabilities on the training set, in eval mode, its samples in order and without
    augmentation (Batches.in_order; report.predictions)."""
    return lambda: predictions(loop.fwd, loop.batches.in_order(), loop.precision.autocast)


def advance(loop, epoch, setup, weight_decay):
    """The loop (train.Loop) at the start of epoch, with every stage of its label correction that is due acted
    (act), from each model's predictions on the training set (predictor). setup: the run's training.build.Setup
    (its device, its log). Returns the loop."""
    done = act(loop.method, epoch, loop.epochs, predictor(loop), len(loop.fwd), setup.device)
    if done.rows is not None:
        loop.batches.rows = done.rows
    for stage, states in done.optimisers:
        loop = loop._replace(models=with_optimiser(loop.models, stage, states, done.method, weight_decay))
    for line in done.lines:
        setup.log(f"stage: {line}", flush=True)
    return loop.training_by(done.method, setup) if done.remake else loop._replace(method=done.method)


def kept(loop):
    """The rows a stage of the run's label correction keeps (registry.Stage.keep), after the last epoch: the stage
    acts once more on each model's final predictions on the training set, as the run's next epoch would have. (M, n,
    K), or None where no stage keeps any (Joint optimisation's labels, which --labels-from reads)."""
    m, device = loop.method, loop.batches.device
    for stage in (s for s in LABEL_CORRECTIONS[m.lc].stages if s.keep):
        old = (m.state or {}).get(stage.name, (None,) * len(loop.fwd))
        return torch.stack([stage.rows(stage.update(o, p.to(device), m).to(device))
                            for o, p in zip(old, predictor(loop)())])
    return None
