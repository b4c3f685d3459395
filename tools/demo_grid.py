"""The Fashion-MNIST demonstration's declaration (tools/demo.py runs it): the data and schedule, the rows, the
grids declared before any run, the selection rule, and the jobs of each stage.

BASE, LRS, ETAS, ETA_B, GRID, KNOBS, ROWS -- the regime's train.py flags, the grids, what each row is
Setting     -- one point of a row's grid; setting_of reads one back from choice.json
Plan        -- where a stage's runs go and what every run is given (the data, flags after --)
grid_of, val_score, choose, derived -- a row's grid, its validation score, the choices
regime_jobs, select_jobs, compare_jobs, report_jobs -- each stage's train.py jobs
"""
import json
import os
from typing import NamedTuple

DATA_DIR = "/usr/share/datasets/fashion-mnist"  # Debian: apt-get install dataset-fashion-mnist
BASE = ["--arch", "mlp", "--subset", "8000", "--subset-seed", "0", "--val-split", "0.1", "--augment", "none",
        "--weight-decay", "0", "--epochs", "80", "--milestones", "40,60", "--batch-size", "128", "--noise", "sym",
        "--rate", "0.4"]
BASE_LR = 0.05
# The grids, declared before any run: lr in steps of sqrt(2) for every row; CMD-S's eta; CMD-P's (eta, b).
# chi <= ln K / eta: at K = 10, eta = 2 starts at 1.15 nats, the paper's eta = 4 at K = 100.
LRS = (0.025, 0.035, 0.05, 0.07, 0.1)
ETAS = (2.0, 4.0)
ETA_B = tuple((eta, b) for eta in (2.0, 4.0) for b in (-2.0, -5.0))
SELECT_SEEDS = (100, 101)
REPORT_SEEDS = (0, 1, 2, 3, 4)

# key: (label, train.py flags, the zero-knowledge row it is compared with on the same seed); the MyLC rows
# that select knowledge are also compared with all knowledge (VERSUS_ALL), the paper's Table 1 claim.
ROWS = {
    "clean": ("CE, clean labels (reference)", ["--mode", "zero", "--lc", "ce", "--noise", "none", "--rate", "0"], None),
    "ce-zero": ("CE, zero knowledge", ["--mode", "zero", "--lc", "ce"], None),
    "mylc-zero": ("MyLC, zero knowledge", ["--mode", "zero", "--lc", "mylc"], None),
    "control": ("MyLC, zero knowledge at 2x its lr (control)", ["--mode", "zero", "--lc", "mylc"], "mylc-zero"),
    "ce-cmdp": ("CE, CMD-P (selection alone)", ["--mode", "progressive", "--lc", "ce"], "ce-zero"),
    "mylc-all": ("MyLC, all knowledge (η = 1)", ["--mode", "all", "--lc", "mylc"], "mylc-zero"),
    "mylc-cmds": ("MyLC, CMD-S", ["--mode", "static", "--lc", "mylc"], "mylc-zero"),
    "mylc-cmdp": ("MyLC, CMD-P", ["--mode", "progressive", "--lc", "mylc"], "mylc-zero"),
    "cohort": ("MyLC, CMD-P, a cohort of 3", ["--mode", "progressive", "--lc", "mylc", "--peers", "3"], "mylc-zero"),
    # The comparators (baselines.py; GCE is a label correction), beside CMD on the same data, seeds and lr grid,
    # each with its own knob (KNOBS) on 3 values; Co-teaching also at the true noise rate, the authors' oracle
    # setting. `compare` chooses them on the same validation split; `report` then runs them with the other rows.
    "coteach-oracle": ("Co-teaching, τ = 0.4 (the true noise rate)", ["--mode", "coteach", "--forget-rate", "0.4"],
                       "ce-zero"),
    "coteach": ("Co-teaching, τ chosen on validation", ["--mode", "coteach"], "ce-zero"),
    "coteach+": ("Co-teaching+", ["--mode", "coteach+"], "ce-zero"),
    "jocor": ("JoCoR", ["--mode", "jocor"], "ce-zero"),
    "gce-zero": ("GCE, zero knowledge", ["--mode", "zero", "--lc", "gce"], "ce-zero"),
}
VERSUS_ALL = {"mylc-cmds": "mylc-all", "mylc-cmdp": "mylc-all", "cohort": "mylc-all"}


class Setting(NamedTuple):
    """One point of a row's grid: its lr, CMD's eta and b (None: the row's mode's), a comparator's (flag, value)."""
    lr: float
    eta: float | None = None
    b: float | None = None
    knob: tuple | None = None

    def flags(self, row):
        """train.py's flags of the row at this setting."""
        flags = ROWS[row][1] + ["--lr", f"{self.lr:g}"]
        flags += [] if self.eta is None else ["--eta", f"{self.eta:g}", "--b", f"{self.b:g}"]
        return flags + ([] if self.knob is None else [self.knob[0], f"{self.knob[1]:g}"])

    def name(self, row):
        return (f"{row}-lr{self.lr:g}" + ("" if self.eta is None else f"-eta{self.eta:g}-b{self.b:g}") +
                ("" if self.knob is None else f"-{self.knob[0][2:]}{self.knob[1]:g}"))


def setting_of(c):
    """The Setting of a choice ({lr, eta, b, val[, knob]}, choice.json's form: a knob may be a list)."""
    return Setting(c["lr"], c["eta"], c["b"], None if c.get("knob") is None else tuple(c["knob"]))


# What select tunes per row. clean runs at the base schedule; control, cohort and ce-cmdp derive from other
# rows' choices (see derived and grid_of).
GRID = {
    "ce-zero": [Setting(lr) for lr in LRS],
    "mylc-zero": [Setting(lr) for lr in LRS],
    "mylc-all": [Setting(lr) for lr in LRS],
    "mylc-cmds": [Setting(lr, eta, 0.0) for lr in LRS for eta in ETAS],
    "mylc-cmdp": [Setting(lr, eta, b) for lr in LRS for eta, b in ETA_B],
}
KNOBS = {"coteach-oracle": None, "coteach": ("--forget-rate", (0.3, 0.4, 0.5)),
         "coteach+": ("--forget-rate", (0.3, 0.4, 0.5)), "jocor": ("--jocor-lambda", (0.7, 0.85, 0.95)),
         "gce-zero": ("--gce-q", (0.5, 0.7, 0.9))}
PRECONDITIONS = ("harm: zero knowledge's final accuracy on the clean validation split >= 5 points below clean "
                 "labels; memorisation happens: >= 30% of the noisy labels memorised at the end; memorisation is "
                 "slow: < 25% memorised at a quarter of the run, and memorisation first reaches half its final value "
                 "after a third of it")


class Plan(NamedTuple):
    """Where a stage's runs go (out/<stage>/<name>-s<seed>), and what every run is given: the data's flags and
    the flags after -- (extra)."""
    out: str
    data: list
    extra: list

    def job(self, stage, name, flags, seed):
        d = os.path.join(self.out, stage, f"{name}-s{seed}")
        key = self.data + BASE + flags + ["--seed", str(seed)]
        return dict(name=f"{name}-s{seed}", dir=d, key=key, argv=key + ["--out", d, *self.extra])


def data_flags(data_dir=DATA_DIR):
    return ["--dataset", "fashionmnist", "--data-dir", data_dir]


def rows_of(path):
    with open(os.path.join(path, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def finished(d):
    return os.path.exists(os.path.join(d, "summary.json"))


def grid_of(row, choice):
    """A row's settings: GRID's; CE CMD-P's lrs at MyLC CMD-P's chosen eta and b; each comparator's lrs and knob."""
    if row in GRID:
        return GRID[row]
    if row == "ce-cmdp":
        return [Setting(lr, choice["mylc-cmdp"]["eta"], choice["mylc-cmdp"]["b"]) for lr in LRS]
    knob = KNOBS[row]
    return [Setting(lr, knob=None if knob is None else (knob[0], v)) for lr in LRS
            for v in ((None,) if knob is None else knob[1])]


def val_score(out, row, setting):
    """Mean over the selection seeds of the final epoch's val_acc_mean, and the seeds' values."""
    dirs = [os.path.join(out, "select", f"{setting.name(row)}-s{s}") for s in SELECT_SEEDS]
    vals = [rows_of(d)[-1]["val_acc_mean"] for d in dirs if finished(d)]
    return (sum(vals) / len(vals) if len(vals) == len(SELECT_SEEDS) else None), vals


def choose(out, rows, given=None):
    """{row: {lr, eta, b, val[, knob]}}: each row's setting of best mean validation accuracy (ties: the first).
    given: the choices made before (CE CMD-P's grid is MyLC CMD-P's eta and b)."""
    choice = dict(given or {})
    for row in rows:
        scored = [(val_score(out, row, s)[0], s) for s in grid_of(row, choice)]
        missing = sum(v is None for v, _ in scored)
        if missing:
            raise RuntimeError(f"{row}: {missing} of its {len(scored)} settings did not finish")
        v, s = max(scored, key=lambda x: x[0])
        choice[row] = dict(lr=s.lr, eta=s.eta, b=s.b, val=round(v, 3), **({"knob": s.knob} if row in KNOBS else {}))
    return {row: choice[row] for row in rows}


def derived(choice):
    """The rows whose settings follow from the tuned ones: clean, the control, the cohort."""
    c = dict(choice)
    c["clean"] = dict(lr=BASE_LR, eta=None, b=None, val=None)
    c["control"] = dict(lr=2 * choice["mylc-zero"]["lr"], eta=None, b=None, val=None)
    c["cohort"] = dict(choice["mylc-cmdp"], val=None)
    return c


def regime_jobs(plan):
    """CE and MyLC zero knowledge and CE on clean labels at BASE_LR: the selection's lr 0.05 cells, reused there."""
    return [plan.job("select", Setting(BASE_LR).name(row), Setting(BASE_LR).flags(row), s)
            for row in ("ce-zero", "mylc-zero", "clean") for s in SELECT_SEEDS]


def select_jobs(plan, choice=None):
    """The clean reference and GRID's rows; with MyLC CMD-P's choice, CE CMD-P's lrs at its eta and b."""
    rows = list(GRID) + (["ce-cmdp"] if choice is not None else [])
    return [plan.job("select", Setting(BASE_LR).name("clean"), Setting(BASE_LR).flags("clean"), s)
            for s in SELECT_SEEDS] + [plan.job("select", g.name(row), g.flags(row), s)
                                      for row in rows for g in grid_of(row, choice) for s in SELECT_SEEDS]


def compare_jobs(plan):
    return [plan.job("select", g.name(row), g.flags(row), s) for row in KNOBS for g in grid_of(row, {})
            for s in SELECT_SEEDS]


def report_jobs(plan, choice, seeds):
    """Every row at its choice, seed by seed: a report cut short still pairs every row."""
    return [plan.job("report", row, setting_of(c).flags(row), s) for s in seeds for row, c in choice.items()]
