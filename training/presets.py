"""Appendix C's optimisation settings per dataset and architecture: one table that both config.resolve and
train.py --help read.

Preset, PRESETS  -- the table; the first row that matches the dataset and model A's arch's schedule wins
preset, preset_row -- the settings of a dataset and architecture, and the row they come from
scale_milestones -- a preset's milestones at the same fractions of a shorter or longer run
presets_help     -- the table as --help prints it
(each dataset's default architecture is its record's, datasets.DATASETS; each architecture's schedule is its
record's, models.ARCHS)
"""
import math
from typing import NamedTuple

from models import ARCHS
from training.errors import UserError


class Preset(NamedTuple):
    dataset: str | None            # None: any dataset
    schedule: str | None           # the schedule models.ARCHS names for model A's arch; None: any
    epochs: int
    batch_size: int
    lr: float
    milestones: tuple[int, ...]
    lr_decay: float
    momentum: float
    weight_decay: float
    why: str

    @property
    def name(self):
        """The row as --help and the settings' notes name it: its dataset and the architectures of its schedule."""
        archs = [a for a, arch in ARCHS.items() if arch.schedule == self.schedule]
        return f"{self.dataset or 'any dataset'} + {'/'.join(archs) if self.schedule else 'any arch'}"

    def flags(self):
        """The row's settings as {flag dest: value}."""
        return {k: list(v) if k == "milestones" else v for k, v in self._asdict().items() if k in PRESET_FLAGS}


# Appendix C's optimisation settings. The first row that matches the dataset and the schedule of model A's arch
# (models.ARCHS) wins; every flag given on the command line overrides its entry. Both preset() and --help read
# this table.
PRESETS = [
    Preset("food101", None, 100, 32, 0.01, (50, 80), 0.1, 0.9, 5e-4, "the paper's 90/10 split is --val-split 0.1"),
    Preset("webvision", None, 80, 32, 0.01, (40,), 0.1, 0.9, 5e-4,
           "'divided by 10 in each epoch after the 40th' read as one /10 at 40; "
           "--milestones 40,41,...,79 for the literal reading"),
    Preset(None, "resnet50", 200, 64, 0.01, (40, 80), 0.1, 0.9, 1e-3,
           "'the same settings as CDR' (Xia et al. 2021), from CDR's public code"),
    Preset(None, "resnet18", 200, 128, 0.1, (60, 120, 160), 0.2, 0.9, 5e-4,
           "'ShuffleNetV2 and ResNet28' read as ResNet18"),
    Preset(None, "cpu", 20, 128, 0.05, (10, 15), 0.1, 0.9, 5e-4, "not in the paper: a short schedule for CPU runs"),
    Preset(None, "resnet34", 100, 128, 0.1, (50, 80), 0.1, 0.9, 5e-4, "ResNet34, the paper's main setting"),
]
PRESET_FLAGS = ("epochs", "batch_size", "lr", "milestones", "lr_decay", "momentum", "weight_decay")


def rows():
    """PRESETS, then the rows the architectures the paper does not train bring (models.Arch.settings)."""
    return PRESETS + [Preset(None, a.schedule, **a.settings) for a in ARCHS.values() if a.settings]


def preset_row(dataset, arch):
    """The first row of rows() for this dataset and arch (models.ARCHS), a Preset."""
    schedule = ARCHS[arch].schedule
    row = next((p for p in rows() if p.dataset in (None, dataset) and p.schedule in (None, schedule)), None)
    if row is None:  # an architecture whose schedule has no row: said, never another's settings
        raise UserError(f"--arch {arch}: its schedule '{schedule}' (models.ARCHS) names no row of "
                        f"training/presets.py's PRESETS; add the row, or give the arch an existing schedule")
    return row


def preset(dataset, arch):
    """The first row of rows() for this dataset and arch (models.ARCHS), as {flag dest: value}, and its name under
    "name" (Preset.name)."""
    row = preset_row(dataset, arch)
    return dict(row.flags(), name=row.name)


def scale_milestones(milestones, preset_epochs, epochs):
    """The preset's milestones at the same fractions of `epochs`: rounded half up, kept strictly inside
    1..epochs-1 (a milestone at or after the last epoch never applies), without duplicates."""
    scaled = (math.floor(m * epochs / preset_epochs + 0.5) for m in milestones)
    return sorted({m for m in scaled if 1 <= m <= epochs - 1})


def presets_help():
    lines = ["optimisation presets (appendix C; the first matching row wins, any flag given overrides it):"]
    for p in rows():
        where = p.name
        decay = f"x{p.lr_decay:g} at {', '.join(map(str, p.milestones))}"
        lines.append(f"  {where:36s} {p.epochs} epochs, lr {p.lr:g} {decay}, batch {p.batch_size}, "
                     f"SGD momentum {p.momentum:g}, wd {p.weight_decay:g}\n  {'':36s} ({p.why})")
    return "\n".join(lines)
