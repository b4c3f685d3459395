"""The paper's tables as data (§4): their numbers, each table's rows and columns as train.py flags, the runs.

PAPER   -- the paper's numbers, transcribed from Tables 1-5 (Fig. 3 is an image: none)
PRESETS -- each table's rows and columns as train.py flags; sweep.py runs them
PAPER_SCALE_ONLY -- presets that need their real data, so run only at sweep.py's --scale paper
NOT_CPU_SCALES -- presets whose rows carry their authors' settings: --scale paper, fmnist (their stages moved to
           the same points of its schedule), or smoke to check they run
MEAN    -- the summary.json key the paper reports: the mean of the two models' final test accuracies

AUTHORS -- Table 3's rows at their authors' settings, per dataset family (FAMILY: CIFAR-100 at paper scale, their
           K = 10 setting below it), each cited to the file it is read from
SCALES  -- what each sweep.py --scale adds to every run (paper, fmnist, demo, benign, smoke)
CHECK_ONLY -- the scales whose numbers only check that every row runs: their tables rank nothing
same_point -- an epoch of one lr schedule at the same point of another (a stage's start at --scale fmnist)
as_today -- the key and name of a run packed before the comparison's methods were modes of their own, as today's
grid, cell_flags, row_label, run_name, jobs, claim, same_run -- which cells a scale runs, a cell's train.py flags,
           a row's label at a scale and a cell's folder name, the command lines of a preset, a run's folder and
           flags kept before it starts, and whether a finished folder ran with the same flags
finished_job -- whether a job's run has finished (runfiles.state), said as skipped or, with other flags, failed

A table is a dict: key, title, base flags, rows (key, label, flags), cols (key,
label, flags, the summary.json number a cell shows) and the paper's numbers.
"""
import json
import os
import re

import schedule
from mutual import THRESHOLDS
from training import runfiles
from training.errors import UserError

ETA_START = "@eta-start"  # --eta's value in a row at the copy guide's η for symmetric noise: schedule.eta_start
# for the scale's K and the column's noise rate, from symmetric noise's H_ν in every column (2 at K = 10 and 40%); the
# rule of each column's own noise kind gives 4.5 for IDN and pair noise at K = 10 and 40%, about the η = 4 row
AFTER = "@row:"  # a flag's value that names another row of its table: the folder of that row's run of the same
# column and seed, which the run reads (Joint optimisation's second step, --labels-from its first); it starts after
# it. In a run's key (sweep.json) the value also holds that row's flags (cell_flags, after "|"), so that a run whose
# first step changed is a run of other flags, never one a sweep skips as finished

# ---------------------------------------------------------------- the paper's numbers
# Mean final test accuracy (%) of the two models, one list per row in the column order of PRESETS.
# The paper disagrees with itself in places: Table 1's zero-knowledge CP and ProSelfLC (50.06, 62.75)
# are Table 2's CP and ProSelfLC at sym 40% (51.09, 64.07) in other runs. Both are kept as printed.
PAPER = {
    "table1": {  # LS, CP, ProSelfLC, MyLC
        "zero": [51.53, 50.06, 62.75, 65.04], "all": [53.63, 53.18, 59.26, 61.11],
        "static": [55.10, 53.86, 67.26, 68.45], "progressive": [56.73, 56.47, 68.29, 69.09]},
    "table2": {  # pair 20%, pair 40%, sym 20%, sym 40%, clean
        "ce": [63.52, 45.40, 63.31, 47.20, 75.58], "ls": [65.15, 50.02, 67.45, 51.53, 76.33],
        "cp": [64.97, 49.01, 65.97, 51.09, 75.29], "bootsoft": [64.04, 48.85, 63.25, 48.41, 75.37],
        "proselflc": [74.13, 69.49, 71.49, 64.07, 75.73], "static-proselflc": [75.68, 74.22, 72.11, 67.26, 76.25],
        "progressive-proselflc": [75.76, 74.55, 72.58, 68.29, 77.32], "mylc": [73.12, 62.29, 71.04, 65.04, 75.20],
        "static-mylc": [75.39, 74.32, 72.20, 68.45, 75.92], "progressive-mylc": [75.89, 74.72, 73.22, 69.09, 76.42]},
    # Table 3's CIFAR-100 columns (ResNet50): pair 20%, pair 40%, sym 20%, sym 40%. Its Food-101 and WebVision
    # columns are other datasets, and its Joint, Forward, MentorNet, T-revision, DMI, S2E, APL and CDR rows
    # other methods, none of them here. JoCoR is not in the paper: no number.
    "table3": {
        "ce": [64.10, 52.77, 63.93, 56.82], "gce": [62.32, 55.03, 65.62, 57.97],
        "coteach": [58.11, 48.46, 61.47, 53.44], "coteach+": [56.31, 38.03, 64.13, 55.92],
        "joint": [67.35, 52.22, 54.88, 45.64], "forward": [58.37, 39.82, 66.12, 59.45],
        "mentornet": [54.73, 45.31, 57.27, 49.01], "trevision": [62.69, 52.31, 64.67, 57.15],
        "dmi": [58.77, 42.89, 62.77, 57.42], "s2e": [58.21, 41.74, 64.21, 43.12],
        "apl": [59.77, 53.25, 59.37, 51.03], "cdr": [71.93, 56.94, 68.68, 62.72],
        "proselflc": [73.11, 69.49, 71.17, 60.38], "progressive-proselflc": [75.16, 73.36, 73.25, 64.09],
        "mylc": [72.25, 70.84, 69.92, 62.80], "progressive-mylc": [74.38, 73.86, 72.23, 64.30]},
    "table4": {  # ResNet18 and ShuffleNetV2 (trained as a pair), ResNet34 (a pair of two)
        "ce": [50.63, 44.06, 47.20], "tfkd": [51.05, 44.70, 47.39], "proselflc": [58.51, 58.89, 64.07],
        "mylc": [55.94, 61.21, 65.04], "mkd": [60.38, 47.72, 51.42], "kdcl": [55.45, 46.10, 51.20],
        "progressive-mylc": [68.10, 64.37, 69.09]},
    # The demonstration's rows are Table 2's CE and Table 1's MyLC column at sym 40%: beside it for the order.
    "demo": {"ce": [47.20], "zero": [65.04], "all": [61.11], "static": [68.45], "progressive": [69.09]},
    "table5": {  # sym 20%, 40%, 60%, 80%
        "eta1": [70.37, 59.26, 36.18, 16.17], "eta2": [72.11, 65.04, 46.15, 18.62],
        "eta3": [72.83, 66.42, 51.34, 19.84], "eta4": [73.25, 67.26, 54.34, 22.45]},
}

# ---------------------------------------------------------------- presets
MEAN = "test_acc_mean"  # the paper's number: the mean of the two models' final test accuracies


def noise(kind, pct):
    return ["--noise", "none"] if kind == "none" else ["--noise", kind, "--rate", f"{pct / 100:g}"]


def method(mode, lc=None):
    return ["--mode", mode] + (["--lc", lc] if lc else [])


# A row another entry runs than lab/train.py names it in its flags, "--entry PATH" (relative to the code's folder),
# with that entry's own flags (ENTRY_FLAGS) beside train.py's: lab/confident.py, confident learning through cleanlab,
# whose last run is the row's.
TRAIN_ENTRY, CONFIDENT = os.path.join("lab", "train.py"), os.path.join("lab", "confident.py")
ENTRY_FLAGS = {CONFIDENT: ("--filter-by", "--folds", "--fold-epochs")}


def confident(filter_by):
    """A confident-learning row: cleanlab's find_label_issues(filter_by=...) on the out-of-fold probabilities of 5
    folds of 20 epochs, each fold's epoch chosen on a clean 10% held out (at every scale: the method needs it), then
    CE on the rest."""
    return ["--entry", CONFIDENT, "--filter-by", filter_by, "--folds", "5", "--fold-epochs", "20", "--val-split",
            "0.1"] + method("zero", "ce")


def entry_of(argv):
    """(the script that runs a run, relative to the code's folder; the argv it takes) of a run's flags."""
    if "--entry" not in argv:
        return TRAIN_ENTRY, list(argv)
    i = argv.index("--entry")
    return argv[i + 1], list(argv[:i]) + list(argv[i + 2:])


def train_flags(argv):
    """A run's flags as train.py reads them: without --entry and the entry's own flags."""
    script, rest = entry_of(argv)
    own, out, i = ENTRY_FLAGS.get(script, ()), [], 0
    while i < len(rest):
        if rest[i] in own:
            i += 2
            continue
        out.append(rest[i])
        i += 1
    return out


def sym(*pcts):
    """Symmetric-noise columns."""
    return [(f"sym{p}", f"Sym {p}%", noise("sym", p), MEAN) for p in pcts]


# Table 3's rows at their authors' settings for the dataset family a scale runs (FAMILY): "cifar100" is the paper's
# Table 3 (CIFAR-100, paper scale); "k10" the ten-class setting of the same code, for Fashion-MNIST (fmnist scale) and
# the smoke runs. For K = 10 the authors' CIFAR-10 settings: none of them gives one for a 10-class Fashion-MNIST, and
# CIFAR-10 is the 10-class data set every one of them ran with a network that memorises (their MNIST settings are
# tuned where CE reaches 99%: APL's β = 10 with weight decay 1e-2, Co-teaching+'s 0 epochs of Co-teaching). Stage
# lengths are epochs of the paper scale's 200 (their CIFAR runs are 200 epochs), moved by same_point below it. The
# files: HanxunH/Active-Passive-Losses, xingruiyu/coteaching_plus, hongxin001/JoCoR, giorgiop/loss-correction,
# xiaoboxia/T-Revision, DaikiTanaka-UT/JointOptimization. Where a row is absent, its settings are one for every
# family: GCE's q = 0.7 (their paper's, for CIFAR and Fashion-MNIST), CDR's τ = the noise rate (main.py), MentorNet
# PD's percentile 0.7 (their flag's default, which their CIFAR commands end up running), DMI's CE warm-up to the
# last lr phase (their CIFAR-10 code: CE for its whole schedule, then L_DMI).
FAMILY = {"paper": "cifar100", "fmnist": "k10", "smoke": "k10"}
FAMILY_NAME = {"cifar100": "CIFAR-100", "k10": "CIFAR-10"}
AUTHORS = {
    # configs/cifar100/sym/nce+rce.yaml: alpha 10.0, beta 0.1; configs/cifar10/sym/nce+rce.yaml: alpha 1.0, beta 1.0
    "apl": {"cifar100": (["--apl-alpha", "10", "--apl-beta", "0.1"], "their CIFAR-100 config"),
            "k10": (["--apl-alpha", "1", "--apl-beta", "1"], "their CIFAR-10 config")},
    # main.py: init_epoch = 5 (cifar100), 20 (cifar10); their epochs count from 1, so 4 and 19 of Co-teaching
    "coteach+": {"cifar100": (["--coteach-plus-init", "4"], "their CIFAR-100 init_epoch"),
                 "k10": (["--coteach-plus-init", "19"], "their CIFAR-10 init_epoch")},
    # README, "About Lambda": "the best lambda for CIFAR10 with 20%,50% and asym 40% noise is 0.9", "For Cifar100
    # ... 0.85"
    "jocor": {"cifar100": (["--jocor-lambda", "0.85"], "their CIFAR-100 λ"),
              "k10": (["--jocor-lambda", "0.9"], "their CIFAR-10 λ")},
    # loss-correction experiment.py: filter_outlier False for cifar100 (the argmax), True elsewhere (97th percentile);
    # the warm-up T-revision estimates T̂ after (below)
    "forward-anchor": {"cifar100": (["--warmup", "15", "--anchor-percentile", "100"], "their CIFAR-100 anchors"),
                       "k10": (["--warmup", "20", "--anchor-percentile", "97"], "their CIFAR-10 anchors")},
    # T-Revision main.py: n_epoch_estimate 15 and estimate_state False (the argmax) for cifar100; 20 and True (97th
    # percentile, tools.fit) for cifar10
    "trevision": {"cifar100": (["--warmup", "15", "--anchor-percentile", "100"], "their CIFAR-100 settings"),
                  "k10": (["--warmup", "20", "--anchor-percentile", "97"], "their CIFAR-10 settings")},
    # first_step_train.py's defaults alpha 1.0, beta 0.5 (no CIFAR-100 setting); README, CIFAR-10 symmetric noise
    # (their one symmetric command, at 70%): --alpha 1.2 --beta 0.8
    "joint-1": {"cifar100": (["--joint-alpha", "1", "--joint-beta", "0.5"], "their code's defaults"),
                "k10": (["--joint-alpha", "1.2", "--joint-beta", "0.8"], "their CIFAR-10 symmetric setting")},
}


def table(key, title, base, rows, cols, missing=(), smoke_rows=2, proposed=(), schedule=None, authors=None,
          skip=None):
    """A table: a cell (row, col) is one train.py run with flags base + row flags + col flags.

    rows: (key, label, flags). cols: (key, label, flags, the summary.json number a cell shows). missing: (key,
    label, why) of the paper's rows this project does not train, shown with the paper's numbers alone.
    smoke_rows: how many rows --scale smoke runs (None: every row). proposed: the rows of the paper's method, which
    the table claims beat every other row (sweep.py pairs each with every other). schedule: (epochs, milestones) of
    the paper-scale runs, in whose epochs the rows' stages (STAGE_FLAGS) count. authors: {row: {family: (flags,
    whose setting)}}, each row's authors' settings per dataset family (FAMILY), added to its flags. skip: {(row,
    col): why} the cells that cannot run, shown with why.
    """
    return dict(key=key, title=title, base=base, rows=rows, cols=cols, paper=PAPER.get(key, {}), missing=missing,
                smoke_rows=smoke_rows, proposed=tuple(proposed), schedule=schedule, authors=authors or {},
                skip=skip or {})


R34, PAIR = ["--arch", "resnet34"], ["--arch", "resnet18,shufflenetv2"]
R50 = ["--arch", "resnet50"]  # Table 3; its preset row (training/config.py) is CDR's optimiser settings
R50_SCHEDULE = (200, (40, 80))  # that row's epochs and milestones (training/presets.py; a test holds the two equal)
PAIR_NOISE = [("pair20", "Pair 20%", noise("pair", 20), MEAN), ("pair40", "Pair 40%", noise("pair", 40), MEAN)]
KNOWLEDGE = [("zero", "Zero"), ("all", "All"), ("static", "CMD-S"), ("progressive", "CMD-P")]
# Fig. 3 gives no b values: these span chi falling (b < 0), constant (0) and rising (b > 0).
B_VALUES = [-10, -5, -2, 0, 2, 5, 10]
B_ROWS = [(f"b{b}", f"b = {b}", ["--b", str(b)]) for b in B_VALUES]

PRESETS = {
    "table1": [table("table1", "Table 1: distilled knowledge x label correction (ResNet34, CIFAR-100, sym 40%)",
                     R34 + noise("sym", 40),
                     [(m, label, method(m)) for m, label in KNOWLEDGE],
                     [(lc, label, ["--lc", lc], MEAN) for lc, label in
                      [("ls", "LS"), ("cp", "CP"), ("proselflc", "ProSelfLC"), ("mylc", "MyLC")]])],
    "table2": [table("table2", "Table 2: noise types and rates (ResNet34, CIFAR-100)", R34,
                     [("ce", "CE", method("zero", "ce")),
                      ("ls", "LS", method("zero", "ls")),
                      ("cp", "CP", method("zero", "cp")),
                      ("bootsoft", "Boot-soft", method("zero", "bootsoft")),
                      ("proselflc", "ProSelfLC", method("zero", "proselflc")),
                      ("static-proselflc", "CMD-S+ProSelfLC", method("static", "proselflc")),
                      ("progressive-proselflc", "CMD-P+ProSelfLC", method("progressive", "proselflc")),
                      ("mylc", "MyLC", method("zero", "mylc")),
                      ("static-mylc", "CMD-S+MyLC", method("static", "mylc")),
                      ("progressive-mylc", "CMD-P+MyLC", method("progressive", "mylc"))],
                     [*PAIR_NOISE, *sym(20, 40), ("clean", "Clean", noise("none", 0), MEAN)])],
    # The methods CMD is compared with are the lab's modes (lab/methods/), on the given labels, the small-loss ones
    # with tau = the noise rate (the authors' code); each row takes its authors' settings for the scale's data
    # (AUTHORS). The IDN column is not the paper's: the
    # instance-dependent noise of CDR's and T-revision's experiments. CMD-P's rows run at the project's η = 4 and
    # at the copy guide's (ETA_START).
    "table3": [table("table3", "Table 3: learning-with-noisy-labels methods (ResNet50, CIFAR-100)", R50,
                     [("ce", "CE", method("zero", "ce")),
                      ("gce", "GCE", method("gce")),
                      ("coteach", "Co-teaching", method("coteach")),
                      ("coteach+", "Co-teaching+ (Co-teaching in its first {--coteach-plus-init} epochs)",
                       method("coteach+")),
                      ("forward", "Forward (the true T)", method("forward")),
                      ("forward-anchor", "Forward (T̂ after {--warmup} epochs of CE, anchors below the "
                                         "{--anchor-percentile}th percentile)", method("forward-anchor")),
                      ("mentornet", "MentorNet PD (self-paced, no clean data)", method("mentornet")),
                      ("dmi", "DMI (after {--warmup} epochs of CE)", method("dmi") + ["--warmup", "80"]),
                      ("apl", "APL (NCE+RCE, α {--apl-alpha}, β {--apl-beta})", method("apl")),
                      ("cdr", "CDR", method("cdr")),
                      ("trevision", "T-revision (T̂ after {--warmup} epochs of CE, anchors below the "
                                    "{--anchor-percentile}th percentile, reweighting, its ΔT in the last "
                                    "{--trevision-revise})", method("trevision") + ["--trevision-revise", "50"]),
                      ("proselflc", "ProSelfLC", method("zero", "proselflc")),
                      ("progressive-proselflc", "CMD-P+ProSelfLC (η = 4)", method("progressive", "proselflc")),
                      ("progressive-proselflc-start",
                       "CMD-P+ProSelfLC (η = {--eta}, the copy guide's start for symmetric noise)",
                       method("progressive", "proselflc") + ["--eta", ETA_START]),
                      ("mylc", "MyLC", method("zero", "mylc")),
                      ("progressive-mylc", "CMD-P+MyLC (η = 4)", method("progressive", "mylc")),
                      ("progressive-mylc-start",
                       "CMD-P+MyLC (η = {--eta}, the copy guide's start for symmetric noise)",
                       method("progressive", "mylc") + ["--eta", ETA_START]),
                      ("joint-1", "Joint, step 1 (α {--joint-alpha}, β {--joint-beta}, relabelled from "
                                  "{--joint-begin} of the run)", method("joint") + ["--joint-begin", "0.35"]),
                      ("joint", "Joint (step 2: new networks on step 1's labels)",
                       method("joint2") + ["--labels-from", AFTER + "joint-1"]),
                      ("jocor", "JoCoR (λ {--jocor-lambda}; not in the paper)", method("jocor")),
                      ("cl", "Confident learning (cleanlab: find_label_issues on 5 folds, its defaults; CE on the "
                             "rest; not in the paper)", confident("prune_by_noise_rate")),
                      ("cl-pbc", "Confident learning (prune_by_class)", confident("prune_by_class"))],
                     [*PAIR_NOISE, *sym(20, 40), ("idn40", "IDN 40%", noise("idn", 40), MEAN)],
                     missing=[("s2e", "S2E", "not built: a search over Co-teaching's R(t), 40-60 whole trainings "
                                             "rewarded on clean test labels (docs/lab.md)")],
                     smoke_rows=None, proposed=("progressive-mylc", "progressive-mylc-start"), schedule=R50_SCHEDULE,
                     authors=AUTHORS, skip={("forward", "idn40"): "instance-dependent noise has no class-level T to "
                                                                  "give it: see Forward (T̂)"})],
    # Self KD rows train each model alone: zero knowledge. "Different" is one run of a ResNet18 (A)
    # beside a ShuffleNetV2 (B), so its two columns are that run's test_acc_a and test_acc_b.
    "table4": [table("table4", "Table 4: self KD and MKD methods on different and same architectures "
                     "(CIFAR-100, sym 40%)", noise("sym", 40),
                     [("ce", "CE (baseline)", method("zero", "ce")),
                      ("tfkd", "Tf-KD_reg (self KD)", method("tfkd")),
                      ("proselflc", "ProSelfLC (self KD)", method("zero", "proselflc")),
                      ("mylc", "MyLC (self KD)", method("zero", "mylc")),
                      ("mkd", "MKD", method("mkd")),
                      ("kdcl", "KDCL", method("kdcl")),
                      ("progressive-mylc", "CMD-P+MyLC", method("progressive", "mylc"))],
                     [("resnet18", "ResNet18 (different)", PAIR, "test_acc_a"),
                      ("shufflenetv2", "ShuffleNetV2 (different)", PAIR, "test_acc_b"),
                      ("resnet34", "ResNet34 (same)", R34, MEAN)])],
    # Table 5 does not name its lc. Its eta = 1 and eta = 4 cells at 40% (59.26, 67.26) are Table 1's
    # All and CMD-S with ProSelfLC, so ProSelfLC it is.
    "table5": [table("table5", "Table 5: CMD-S with threshold H(u)/eta (ResNet34, CIFAR-100, ProSelfLC)",
                     R34 + method("static", "proselflc"),
                     [(f"eta{e}", f"H(u)/{e} (eta = {e})", ["--eta", str(e)]) for e in (1, 2, 3, 4)],
                     sym(20, 40, 60, 80))],
    # Not a table of the paper: its mechanism where noisy labels are memorised (sweep.py's demo scale is
    # the CPU-sized version). CE shows what the noise costs; MyLC with zero, all and selected knowledge
    # shows what distilling adds and what selecting it changes.
    "demo": [table("demo", "CMD where noisy labels are memorised: CE, then MyLC with zero, all, CMD-S and CMD-P "
                   "knowledge (sym 40%)", R34 + noise("sym", 40),
                   [("ce", "CE, zero knowledge", method("zero", "ce")),
                    ("zero", "MyLC, zero knowledge", method("zero", "mylc")),
                    ("all", "MyLC, all knowledge (η = 1)", method("all", "mylc")),
                    ("static", "MyLC, CMD-S (η = 4)", method("static", "mylc")),
                    ("progressive", "MyLC, CMD-P (η = 4, b = −5)", method("progressive", "mylc")),
                    ("cohort", "MyLC, CMD-P, a cohort of 3 models", method("progressive", "mylc") + ["--peers", "3"])],
                   [("sym40", "Sym 40%", [], MEAN)])],
    "fig3": [table("fig3a", "Figure 3(a): b at different noise rates, eta = 2 (ResNet34, CIFAR-100, CMD-P+MyLC)",
                   R34 + method("progressive", "mylc") + ["--eta", "2"], B_ROWS, sym(20, 40, 60, 80)),
             table("fig3b", "Figure 3(b): b at different eta, sym 60% (ResNet34, CIFAR-100, CMD-P+MyLC)",
                   R34 + method("progressive", "mylc") + noise("sym", 60), B_ROWS,
                   [(f"eta{e}", f"eta = {e}", ["--eta", str(e)], MEAN) for e in (2, 3, 4)])],
    # Beyond the paper: CMD under human label noise, CIFAR-100N (Wei et al. 2022). No paper numbers.
    "cifar100n": [table("cifar100n", "CIFAR-100N: human label noise (ResNet34, CIFAR-100 with CIFAR-100N's labels)",
                        R34 + ["--noise", "human"],
                        [("zero", "Zero", method("zero")), ("progressive", "CMD-P", method("progressive"))],
                        [(lc, label, ["--lc", lc], MEAN)
                         for lc, label in [("proselflc", "ProSelfLC"), ("mylc", "MyLC")]])],
}
# Synthetic data has no human labels: at demo or smoke scale these presets would measure nothing of theirs.
PAPER_SCALE_ONLY = {"cifar100n": "it trains on CIFAR-100 with the CIFAR-100N label file (--noise human), which "
                                 "no other scale's data has a counterpart of; run it with --scale paper"}
# Presets whose rows carry their authors' CIFAR-100 settings: a CPU scale's numbers would mean nothing of theirs, so
# only --scale paper, and smoke, which checks that every row runs.
NOT_CPU_SCALES = {"table3": "its rows carry their authors' settings for CIFAR-100 or a ten-class data set "
                            "(Co-teaching+'s initial epochs, JoCoR's λ, APL's α and β: paper_tables.AUTHORS), which "
                            "mean nothing on synthetic data; run it with --scale paper, --scale fmnist (real data), or "
                            "--scale smoke to check that every row runs"}
AUTHORS_SCALES = ("paper", "fmnist", "smoke")  # the scales NOT_CPU_SCALES's presets run at


# ---------------------------------------------------------------- scales
# demo: the CPU-sized regime the paper is about, where a network fits its noisy training labels. 2,000
# synthetic 16x16 images of 10 classes, not shifted, with clutter of 3x the class signal; the mlp (an MLP
# has no translation invariance, so its images are not shifted), no augmentation, 40 epochs at lr 0.05
# divided by 10 at 20 and 30, the paper's weight decay. Fixed from zero knowledge alone before any CMD row
# ran: CE learns the clean classes first (best test accuracy 91-94% at epoch 2, seeds 0-2), then memorises
# every noisy label and ends 26-27 points lower.
DEMO_FLAGS = ["--dataset", "synthetic", "--arch", "mlp", "--synthetic-size", "2000", "--synthetic-test-size", "1000",
              "--synthetic-difficulty", "3", "--synthetic-shift", "0", "--image-size", "16", "--augment", "none",
              "--epochs", "40", "--lr", "0.05", "--milestones", "20,30", "--device", "cpu"]
# benign: the earlier CPU demonstration, where noise does little harm and CMD has nothing to act on: a cnn
# with the paper's augmentation on 500 images at difficulty 1 (memorises 4-10% of the noisy labels).
BENIGN_FLAGS = ["--dataset", "synthetic", "--arch", "cnn", "--synthetic-size", "500", "--synthetic-test-size", "500",
                "--synthetic-difficulty", "1.0", "--epochs", "36", "--milestones", "24,32", "--device", "cpu"]
SMOKE_FLAGS = ["--dataset", "synthetic", "--arch", "cnn", "--epochs", "1", "--synthetic-size", "128",
               "--synthetic-test-size", "64", "--synthetic-classes", "4", "--batch-size", "32", "--device", "cpu"]
# fmnist: real data where the pair memorises its noisy labels, minutes a run on a CPU: the regime of studies/fmnist.py,
# fixed from zero knowledge before any CMD row ran (docs/fmnist-regime.md): a fixed 8,000 of Fashion-MNIST's training
# images (--subset-seed 0), a clean 10% of them kept for validation, the mlp, no augmentation, no weight decay, 80
# epochs at lr 0.05 divided by 10 at 40 and 60 (zero knowledge memorises 0.82 of the noisy labels there at 40%).
# Each table's Sym 40% and IDN 40% columns run (FMNIST_COLS; a table with neither: all its columns). Fashion-MNIST's
# files: train.py's --data-dir (after --), else downloaded.
FMNIST_REGIME = ["--arch", "mlp", "--subset", "8000", "--subset-seed", "0", "--val-split", "0.1", "--augment", "none",
                 "--weight-decay", "0", "--epochs", "80", "--milestones", "40,60", "--batch-size", "128"]
FMNIST_FLAGS = ["--dataset", "fashionmnist", *FMNIST_REGIME, "--lr", "0.05"]
FMNIST_COLS = ("sym40", "idn40")
SCALES = {"paper": ["--dataset", "cifar100"], "fmnist": FMNIST_FLAGS, "demo": DEMO_FLAGS, "benign": BENIGN_FLAGS,
          "smoke": SMOKE_FLAGS}
CHECK_ONLY = {"smoke": "a smoke run trains each row for an epoch or three on 128 synthetic images: its numbers check "
                       "that every row runs, and say nothing about the methods"}
CLASSES = {"cifar100": 100, "fashionmnist": 10}  # K of the scales' data sets; synthetic: --synthetic-classes


def scale_classes(scale):
    """K, the number of classes of the scale's data."""
    f = dict(zip(SCALES[scale][::2], SCALES[scale][1::2]))
    return CLASSES.get(f["--dataset"]) or int(f.get("--synthetic-classes", 10))
# Cells the CPU scales run, {table key: (row keys or None for all, col keys or None)}; others: the whole grid.
DEMO_GRID = {"table1": (None, ["mylc"]), "table2": (None, ["sym40"])}


def grid(t, scale):
    """The (row key, col key) cells this scale runs. Smoke: the first 2 rows of the first column, so that
    a 2-seed smoke sweep is 4 runs, 20-40 s on 2 CPU cores (torch's import is most of each run)."""
    rows, cols = [r[0] for r in t["rows"]], [c[0] for c in t["cols"]]
    if scale == "smoke":
        rows, cols = rows[:t["smoke_rows"]], cols[:1]
    elif scale == "fmnist":
        cols = [c for c in cols if c in FMNIST_COLS] or cols
    elif scale in ("demo", "benign"):
        want_rows, want_cols = DEMO_GRID.get(t["key"], (None, None))
        rows, cols = want_rows or rows, want_cols or cols
    return [(r, c) for r in rows for c in cols if (r, c) not in t["skip"]]


STAGES = {"--warmup": "1", "--trevision-revise": "1", "--joint-begin": None, "--fold-epochs": "1"}  # a row's
# stages (confident learning's folds too): at smoke scale each
SMOKE_STAGED = "3"  # gets one epoch of its own (None: a fraction, kept), in runs of 3 epochs, so that each one runs
# How each stage flag counts: epochs from the start, the last epochs, or a fraction of the run. At --scale fmnist
# each moves to the same point of the scale's schedule (same_point), so that a stage starts in the same phase
# of the lr as it does at paper scale: DMI's L_DMI after the second lr decay, T-revision's T̂ early on.
STAGE_FLAGS = {"--warmup": "first", "--coteach-plus-init": "first", "--trevision-revise": "last",
               "--joint-begin": "fraction"}


def schedule_of(flags):
    """(epochs, milestones) that train.py flags set."""
    f = dict(zip(flags[::2], flags[1::2]))
    return int(f["--epochs"]), tuple(int(m) for m in f["--milestones"].split(","))


def same_point(epoch, src, dst):
    """Epoch `epoch` of schedule src, (epochs, milestones), at the same point of dst: in the same phase of the lr
    (between the same two milestones) and at the same fraction of that phase, rounded down so that it stays in the
    phase. src and dst have as many milestones. A milestone goes to the milestone, the end to the end."""
    a, b = (0, *src[1], src[0]), (0, *dst[1], dst[0])
    if len(a) != len(b) or not 0 <= epoch <= src[0]:
        raise ValueError(f"epoch {epoch} of {src} has no same point in {dst}")
    k = next((k for k in range(len(a) - 1) if epoch < a[k + 1]), len(a) - 2)  # the end: the last phase's
    return b[k] + (epoch - a[k]) * (b[k + 1] - b[k]) // (a[k + 1] - a[k])


def moved_stages(flags, src, dst):
    """flags with each STAGE_FLAGS value moved from schedule src to the same point of dst."""
    out = list(flags)
    for i in range(len(out) - 1):
        how = STAGE_FLAGS.get(out[i])
        if how == "first":
            out[i + 1] = str(same_point(int(out[i + 1]), src, dst))
        elif how == "last":
            out[i + 1] = str(dst[0] - same_point(src[0] - int(out[i + 1]), src, dst))
        elif how == "fraction":
            out[i + 1] = f"{same_point(round(float(out[i + 1]) * src[0]), src, dst) / dst[0]:g}"
    return out


def row_label(t, row, scale):
    """A row's label at this scale: each {--flag} in it the value the row's runs are given (a stage moves with the
    scale: DMI "after {--warmup} epochs of CE" reads 80 at paper scale, 60 at fmnist; where the columns give it
    different values, each in the columns' order, joined by /), then whose settings it runs (AUTHORS)."""
    given = [dict(zip(f[::2], f[1::2])) for f in (cell_flags(t, row, c, scale) for r, c in grid(t, scale) if r == row)]

    def value(m):
        values = [g[m.group(1)] for g in given]
        return values[0] if len(set(values)) == 1 else "/".join(values)

    label = re.sub(r"\{(--[a-z-]+)\}", value, dict((r[0], r[1]) for r in t["rows"])[row])
    whose = t["authors"].get(row, {}).get(FAMILY.get(scale))
    return label + (f" [{whose[1]}]" if whose else "")


def run_key(scale, flags, seed):
    """The train.py flags of one run: the scale's, less those the cell sets itself (a staged row's --epochs), then
    the cell's, then the seed."""
    own = set(flags[::2])
    base = [f for pair in zip(SCALES[scale][::2], SCALES[scale][1::2]) if pair[0] not in own for f in pair]
    return base + flags + ["--seed", str(seed)]


def cell_flags(t, row, col, scale):
    """train.py flags of one cell: the table's, the row's, its authors' settings for the scale's data (AUTHORS),
    the column's; below paper scale every --arch gives way to the scale's network; at smoke scale a row with
    stages (STAGES) runs SMOKE_STAGED epochs, a stage one epoch each."""
    whose = t["authors"].get(row, {}).get(FAMILY.get(scale), ([],))
    col_flags = dict((c[0], c[2]) for c in t["cols"])[col]
    flags = t["base"] + dict((r[0], r[2]) for r in t["rows"])[row] + whose[0] + col_flags
    if ETA_START in flags:  # the copy guide's η for the scale's K and the column's noise rate
        rate = float(dict(zip(col_flags[::2], col_flags[1::2])).get("--rate", 0))
        start = schedule.eta_start(scale_classes(scale), rate, THRESHOLDS["progressive"][1], "sym")  # CMD-P's b
        flags = [f"{start:g}" if f == ETA_START else f for f in flags]
    if scale != "paper":
        i = flags.index("--arch") if "--arch" in flags else None
        flags = flags if i is None else flags[:i] + flags[i + 2:]
    if scale == "smoke" and any(f in STAGES for f in flags):
        flags = [STAGES.get(flags[i - 1]) or f if i and flags[i - 1] in STAGES else f for i, f in enumerate(flags)]
        flags += ["--epochs", SMOKE_STAGED]
    if scale == "fmnist" and t["schedule"]:
        flags = moved_stages(flags, t["schedule"], schedule_of(FMNIST_FLAGS))
    return [f"{f}|{' '.join(cell_flags(t, f[len(AFTER):], col, scale))}" if isinstance(f, str) and
            f.startswith(AFTER) else f for f in flags]


def after_row(value):
    """The row an AFTER value names (cell_flags adds that row's flags after "|")."""
    return value[len(AFTER):].split("|")[0]


def after(t, flags, col, scale, seed, sweep_dir):
    """(flags with each AFTER value replaced by that row's run folder, the folder or None)."""
    out, dep = list(flags), None
    for i, v in enumerate(out):
        if isinstance(v, str) and v.startswith(AFTER):
            dep = out[i] = os.path.join(sweep_dir, f"{run_name(cell_flags(t, after_row(v), col, scale))}-s{seed}")
    return out, dep


def run_name(flags):
    """A run's directory name from its flags, so that cells with the same flags share one run."""
    f = dict(zip(flags[::2], flags[1::2]))
    parts = [f["--mode"]] + ([f["--lc"]] if "--lc" in f else [])
    if f.get("--entry") == CONFIDENT:
        parts = ["cl", "".join(w[0] for w in f["--filter-by"].split("_"))]  # prune_by_class: cl-pbc
    if f["--noise"] == "human":  # CIFAR-N: the labels come from a file, with no rate to set
        parts.append("-".join(["human"] + ([f["--noise-key"]] if "--noise-key" in f else [])))
    else:
        parts.append("clean" if f["--noise"] == "none" else f"{f['--noise']}{round(100 * float(f['--rate']))}")
    parts += [f"{k[2:]}{f[k]}" for k in ("--eta", "--b", "--peers") if k in f]
    parts += [f"after-{after_row(f['--labels-from'])}"] if f.get("--labels-from", "").startswith(AFTER) else []
    return "-".join(parts + ([f["--arch"].replace(",", "+")] if "--arch" in f else []))


# Runs made before the comparison's single-network methods were modes of their own (lab/methods/) name one as a label
# correction trained with zero knowledge, --mode zero --lc NAME, and Joint's second step --mode zero --lc ce
# --labels-from DIR: the same computation (tests/identity.py), which today's flags name --mode NAME and --mode joint2
# (docs/table3-fmnist's runs were made so). as_today reads such a run's key and name as today's.
CORRECTIONS_THEN = ("forward-anchor", "apl", "cdr", "dmi", "elr", "forward", "gce", "joint", "mentornet", "tfkd",
                    "trevision")


def as_today(key, name):
    """(key, name) of a packed run in today's flags: a run made when the comparison's single-network methods were
    corrections (CORRECTIONS_THEN) as the mode it is now; any other as it is."""
    f = dict(zip(key[::2], key[1::2]))
    then = f.get("--lc") if f.get("--mode") == "zero" else None
    mode = then if then in CORRECTIONS_THEN else "joint2" if then == "ce" and "--labels-from" in f else None
    if mode is None:
        return key, name
    out = []
    for k, v in zip(key[::2], key[1::2]):
        if k == "--lc":
            continue
        if k == "--labels-from" and isinstance(v, str) and v.startswith(AFTER) and "|" in v:
            row, flags = v.split("|", 1)
            v = row + "|" + " ".join(as_today(flags.split(" "), "")[0])
        out += [k, mode if k == "--mode" else v]
    return out, f"{mode}-{name[len(f'zero-{then}-'):]}" if name.startswith(f"zero-{then}-") else name


def jobs(preset, scale, seeds, sweep_dir, extra=()):
    """Every (run, seed) of the preset at this scale: dicts of name, dir, train.py argv, key (the
    flags that make the run what it is, kept in its folder as sweep.json), after (the folder of the run it
    reads and starts after, or None: AFTER) and col (its column's key). UserError for a preset
    of PAPER_SCALE_ONLY below paper scale."""
    if scale != "paper" and preset in PAPER_SCALE_ONLY:
        raise UserError(f"preset {preset} runs only at --scale paper: {PAPER_SCALE_ONLY[preset]}")
    if scale not in AUTHORS_SCALES and preset in NOT_CPU_SCALES:
        raise UserError(f"preset {preset} runs only at --scale {', '.join(AUTHORS_SCALES)}: {NOT_CPU_SCALES[preset]}")
    out, seen = [], set()
    for seed in range(seeds):  # seed 0 of every cell first: a sweep cut short still fills the table
        for t in PRESETS[preset]:
            for row, col in grid(t, scale):
                flags = cell_flags(t, row, col, scale)
                name = f"{run_name(flags)}-s{seed}"
                if name not in seen:
                    seen.add(name)
                    d = os.path.join(sweep_dir, name)
                    key = run_key(scale, flags, seed)
                    resolved, dep = after(t, key, col, scale, seed, sweep_dir)
                    out.append(dict(name=name, dir=d, key=key, argv=resolved + ["--out", d, *extra], after=dep,
                                    col=col))
    return out


def claim(job):
    """Make a run's folder and keep there the flags that make the run what it is (sweep.json: same_run reads
    it), before its train.py starts."""
    os.makedirs(job["dir"], exist_ok=True)  # train.py only refuses dirs holding config/metrics/checkpoint
    with runfiles.replacing(os.path.join(job["dir"], "sweep.json")) as f:
        json.dump(job["key"], f)


def same_run(d, key):
    """False when d's sweep.json says it ran with other flags (order aside); True when it has none."""
    path = os.path.join(d, "sweep.json")
    if not os.path.exists(path):
        return True
    with open(path) as f:
        saved = json.load(f)
    return dict(zip(saved[::2], saved[1::2])) == dict(zip(key[::2], key[1::2]))


def finished_job(job, head, failed):
    """Whether job's run has finished (runfiles.state), so that no launcher starts it again; said on a line that
    begins with head ([i/n] name) as skipped, or, when its folder ran with other flags, as FAILED into failed."""
    if runfiles.state(job["dir"]) != runfiles.FINISHED:
        return False
    if same_run(job["dir"], job["key"]):  # else e.g. DEMO_FLAGS changed since
        print(f"{head}: skipped (summary.json exists)", flush=True)
    else:
        failed[job["name"]] = f"{job['dir']} finished with other flags; delete it or choose another --out"
        print(f"{head}: FAILED: {failed[job['name']]}", flush=True)
    return True
