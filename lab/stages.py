"""What a method of the lab learns between epochs (registry.Mode.between): its stages, run through the protocol train.py
exposes at an epoch's start, at a resume and after the last epoch: Forward's and T-revision's T̂, T-revision's slack ΔT
and its optimiser, Joint optimisation's label history, ELR's running targets (each a Stage of its method's file).

Stage   -- one thing a method learns between epochs, for each model, from its predictions on the training set
Stages  -- a mode's stages, as registry.Mode.between: start (on resume, what they had made), advance at an epoch's
           start, finish after the last epoch, and check what a run needs of them
act     -- what the stages due at an epoch's start make: the method's new states, rows, optimisers, lines
predictor -- each model's predictions on the training set, which a stage reads
save_labels -- the rows a stage keeps after the last epoch (labels.npz, which Joint's second step reads)

A stage reads every training sample's prediction in one process, and one that brings an optimiser cannot be
replayed: check refuses both before anything is written.
"""
import dataclasses
import os
from typing import Callable, NamedTuple

import numpy as np
import torch

from mutual import NAMES
from training import rundir, runfiles
from training.report import predictions


class Stage(NamedTuple):
    """What a method learns between epochs, for each model: Stages runs it at the start of an epoch, before the
    epoch's first step, and keeps each model's state in Method.state[name] (and the checkpoint).

    name    -- the state's name: Method.state[name], the checkpoint's state_<name>_<model>, what the loss reads
    start   -- (m, epochs) -> the first epoch (0-based) at whose start it acts; None: not in this run
    update  -- (state, probs, m) -> the model's new state (a tensor), from its state so far (None the first time) and
               its predicted probabilities on the training set (n, K; eval mode, no augmentation, the samples' order),
               or None where `predictions` is False
    line    -- (m, epoch, n, states) -> the stage line said where it first shows (at rows_from where it has rows): n
               the training samples the predictions covered (None where it read none), states each model's new one
    every   -- it acts at the start of every epoch from `start` on; False: once
    predictions -- update reads the predictions (a pass over the training set each time it acts)
    rows    -- (state) -> per-sample rows (n, K) the batches carry from rows_from on, each batch its samples' (M, N, K),
               which the mode's objective reads (its rows). None: the state is the model's alone (a T̂, a ΔT), which
               the objective reads from Method.state
    rows_from -- (m, epochs) -> the epoch from whose start the batches carry the rows; None: from `start`
    optimiser -- (net, state, m, weight_decay) -> the optimiser of the model, with its state where that learns, from
               `start` on, at a constant lr; None: the run's own. The state learns where it requires grad
    keep    -- the rows after the last epoch are what the run ends with (labels.npz, which Joint's second step reads)
    """
    name: str
    start: Callable
    update: Callable
    line: Callable
    every: bool = False
    predictions: bool = True
    rows: Callable | None = None
    rows_from: Callable | None = None
    optimiser: Callable | None = None
    keep: bool = False


class Acted(NamedTuple):
    """What the stages due at an epoch's start made (act)."""
    method: object     # the method with every model's new states (Method.state)
    rows: object       # the rows the batches carry from now on, (M, n, K), or None: as they were
    optimisers: list   # [(stage, each model's state)] of the stages that bring their optimiser now
    remake: bool       # a stage whose state the objective reads from the method acted: the step is made anew
    lines: list        # the lines of the stages that show now


class Stages:
    """A mode's stages, acted in order: what registry.Mode.between is for the lab's methods that learn between
    epochs. train.py calls start before anything is written, advance at the start of every epoch and finish after the
    last."""

    def __init__(self, *stages):
        self.stages = stages

    def start(self, models, method, run, args, setup, given, k):
        """(models, method, None) of a run (run: a rundir.Run; args: its settings): on resume Method.state the
        checkpoint's ({name: each model's state}, or None), and for each stage that had brought its optimiser by the
        last epoch done, that optimiser on each model and its learned state, before the checkpoint's optimiser states
        are loaded into them (rundir.restore); the batches' rows come from the stages as they act (advance)."""
        m = dataclasses.replace(method, state=run.states(setup.device))
        for stage in self.stages:
            start = stage.start(m, args.epochs)
            if stage.optimiser is not None and start is not None and run.epochs_done - 1 >= start:
                learned = tuple(s.clone().requires_grad_() for s in m.state[stage.name])
                m = dataclasses.replace(m, state={**m.state, stage.name: learned})
                models = with_optimiser(models, stage, learned, m, args.weight_decay)
        return models, m, None

    def advance(self, loop, epoch, setup, args, k):
        """The loop (train.Loop) at the start of epoch, with every stage that is due acted (act), from each model's
        predictions on the training set (predictor): its rows reach the batches, an optimiser it brings replaces the
        run's, the method (Method.state) is made anew, and the step where the objective reads the state from the
        method; the first time it shows, it says its line. setup: the run's training.build.Setup; k: K."""
        done = act(self.stages, loop.method, epoch, loop.epochs, predictor(loop), len(loop.fwd), setup.device)
        if done.rows is not None:
            loop.batches.rows = done.rows
        for stage, states in done.optimisers:
            loop = loop._replace(models=with_optimiser(loop.models, stage, states, done.method, args.weight_decay))
        for line in done.lines:
            setup.log(f"stage: {line}", flush=True)
        return loop.training_by(done.method, setup) if done.remake else loop._replace(method=done.method)

    def finish(self, loop, out):
        """After the last epoch: the rows a stage keeps (Stage.keep) as what the run ends with, labels.npz in out
        (save_labels), the stage acting once more on each model's final predictions, as the run's next epoch would
        have. Nothing where no stage keeps any."""
        m, device = loop.method, loop.batches.device
        for stage in (s for s in self.stages if s.keep):
            old = (m.state or {}).get(stage.name, (None,) * len(loop.fwd))
            save_labels(out, torch.stack([stage.rows(stage.update(o, p.to(device), m).to(device))
                                          for o, p in zip(old, predictor(loop)())]))

    def check(self, args, method):
        """What the stages that act in this run need of it, in a line, or None: one process, for a stage reads every
        training sample's prediction; and a step that is not replayed, where a stage brings its optimiser."""
        for stage in self.stages:
            start = stage.start(method, args.epochs)
            if start is not None and stage.predictions and "RANK" in os.environ:
                return (f"--mode {args.mode}'s {stage.name} stage reads every training sample's prediction in one "
                        f"process: not under torchrun")
            if start is not None and stage.optimiser is not None and args.graph in ("capture", "compile"):
                return (f"--mode {args.mode}'s {stage.name} stage changes each model's optimiser from epoch "
                        f"{start + 1}, which a replayed step (--graph {args.graph}) cannot follow; use --graph off")
        return None


def with_optimiser(models, stage, states, m, weight_decay):
    """models (rundir.Models) with the stage's optimiser on each model and its state, at a constant lr."""
    opts = [stage.optimiser(net, s, m, weight_decay) for net, s in zip(models.nets, states)]
    lr_scheds = [torch.optim.lr_scheduler.MultiStepLR(o, [], 1.0) for o in opts]  # a stage's lr is constant
    return rundir.Models(models.nets, opts, lr_scheds)


def acting(stage, m, epoch, epochs):
    """Whether the stage acts at the start of epoch (0-based): from its start on, every epoch or once."""
    start = stage.start(m, epochs)
    return start is not None and epoch >= start and (stage.every or stage.name not in (m.state or {}))


def act(stages, m, epoch, epochs, predict, models, device):
    """The stages that are due at the start of epoch (0-based) of epochs, acted in order: predict() gives each of the
    models' predicted probabilities on the training set, (n, K) each, asked at most once. Returns an Acted."""
    probs, rows, optimisers, remake, lines = None, None, [], False, []
    for stage in stages:
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
        remake = remake or stage.rows is None  # the objective reads this state from the method: the step is made anew
        optimisers += [(stage, new)] if stage.optimiser is not None else []
        lines += [stage.line(m, epoch, probs and len(probs[0]), new)] if epoch == shows else []
    return Acted(m, rows, optimisers, remake, lines)


def predictor(loop):
    """() -> each model's predicted probabilities on the training set, in eval mode, its samples in order and without
    augmentation (Batches.in_order; report.predictions)."""
    return lambda: predictions(loop.fwd, loop.batches.in_order(), loop.precision.autocast)


LABELS = "labels.npz"  # the rows a run's stage keeps after its last epoch (Joint optimisation's labels): one (n, K)
# array per model, named by NAMES


def save_labels(out, rows):
    """The rows a run's stage kept after its last epoch (Stages.finish: Joint optimisation's labels): (M, n, K), model
    k's under NAMES[k], into out/labels.npz."""
    with runfiles.replacing(os.path.join(out, LABELS), "wb") as f:
        np.savez(f, **{k: r.detach().cpu().numpy() for k, r in zip(NAMES, rows)})
