"""Every method of the lab, whatever it is, by the reference's own tests of its registries run over the lab's entries:
it trains through train.py (tests/test_train.py), on a dataset read from its files, and each of its settings changes
what its step computes exactly where its mode declares it read, its stages acting between epochs as in a run
(tests/test_registries.py). A method added to lab/methods/ is tested here without a line of its own."""
import pytest
import test_registries
import test_train
import torch

import lab
from lab import stages
from mutual import MODES
from training.errors import UserError


def runs_alone(mode):
    """Whether the mode trains with no flag of its own but a warm-up (Joint's second step reads another run)."""
    try:
        test_train.runnable(test_train.TINY + ["--epochs", "1", "--mode", mode, "--out", "unused"])
        return True
    except UserError:
        return False


RUNNABLE = [m for m in sorted(lab.METHODS) if runs_alone(m)]
PLAIN = [m for m in RUNNABLE if not MODES[m].check]  # those that need no flag at all


@pytest.mark.parametrize("mode", RUNNABLE)
def test_every_method_trains_one_epoch(tmp_path, mode):
    test_train.test_every_mode_and_lc_trains(tmp_path, mode, None)


@pytest.mark.parametrize("mode", PLAIN)
def test_every_method_trains_on_a_dataset_read_from_its_files(tmp_path, mode):
    test_train.check_every_mode_trains_on(tmp_path, "fashionmnist", mode)


def between_epochs(method, models, epoch, predict):
    """What the method's mode does at the start of epoch in a run (lab/stages.py), for test_registries.step_of."""
    between = MODES[method.mode].between
    if not isinstance(between, stages.Stages):
        return method, models, None
    done = stages.act(between.stages, method, epoch, test_registries.EPOCHS, predict, len(models.nets),
                      torch.device("cpu"))
    for stage, states in done.optimisers:
        models = stages.with_optimiser(models, stage, states, done.method, 5e-4)
    return done.method, models, done.rows


def stage_epochs(*methods):
    """The epochs where a stage of these methods starts or starts to show: where a knob that moves a stage changes a
    step."""
    out = set()
    for m in methods:
        between = MODES[m.mode].between
        for s in between.stages if isinstance(between, stages.Stages) else ():
            out |= {f(m, test_registries.EPOCHS) for f in (s.start, s.rows_from) if f is not None}
    return out - {None}


def base_method(mode, lc):
    """test_registries.base_method with τ = 0.2 (no noise rate to default to in a step) and T-revision's last 2 of 10
    epochs revising."""
    return test_registries.base_method(mode, lc, forget_rate=0.2, trevision_revise=2)


# every setting a method of the lab declares, but --labels-from, which names a folder (lab/tests/test_robust.py)
SETTINGS = [(kind, f) for kind, f in test_registries.knobs()
            if f.name in {n for x in lab.METHODS.values() for n in x.settings} and f.name != "labels_from"]


@pytest.mark.parametrize("kind,f", SETTINGS, ids=[f.name for _, f in SETTINGS])
def test_every_setting_changes_a_step_exactly_where_its_method_reads_it(kind, f):
    test_registries.check_knob(kind, f, base_method, between_epochs, lambda base, changed: stage_epochs(base, changed))


def test_a_method_carries_its_own_recipe_an_optimiser_an_lr_schedule_and_gradient_clipping(tmp_path, monkeypatch):
    """A mode's entry may hold its authors' recipe (registry.Mode.optimiser and .schedule): here SGD at lr 0.01 and
    weight decay 1e-4 whose gradients a step pre-hook clips at norm 5, and a cosine schedule. The run's lr follows the
    schedule epoch by epoch, and the clipping acts at every step."""
    import math

    import train
    clipped = []

    def optimiser(params, args, method):
        params = list(params)
        opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)
        opt.register_step_pre_hook(lambda o, a, kw: clipped.append(float(torch.nn.utils.clip_grad_norm_(params, 5.0))))
        return opt
    monkeypatch.setitem(MODES, "gce-recipe", MODES["gce"]._replace(
        optimiser=optimiser, schedule=lambda opt, args, method: torch.optim.lr_scheduler.CosineAnnealingLR(
            opt, T_max=args.epochs)))
    out = str(tmp_path / "run")
    train.main(test_train.TINY + ["--epochs", "3", "--mode", "gce-recipe", "--out", out])
    lrs = [r["lr"] for r in test_train.metrics(out)]
    assert lrs == pytest.approx([0.01 * (1 + math.cos(math.pi * e / 3)) / 2 for e in range(3)])
    assert len(clipped) == 3 * 3 * 2  # every step of each model: 96 samples in batches of 32, 3 epochs, 2 models
