"""train.py's command line (paper §4 and appendix C): every flag with its paper symbol, and the presets.

(appendix C's optimisation presets, which both resolve and --help read, are presets.py)
get_args        -- the flags
settings        -- train.py's first step: the flags resolved and checked, and the method they make (a Settings)
resolve         -- fill every unset flag from the mode and the presets; refuse contradictions and bad values:
                   the method, the label noise, the models, the optimiser, what the mode needs, the run directory
method_of       -- the mutual.Method (with its Comparators) of the resolved flags

The method's own hyperparameters become a mutual.Method (method_of); nothing
below train.py sees these flags.
"""
import argparse
import math
import os
import warnings
from dataclasses import fields
from typing import NamedTuple

import models
import schedule
from label_correction import LABEL_CORRECTIONS
import mutual
from mutual import ALIASES, CMD_MODES, MODES, NAMES, THRESHOLDS, Method, knobs_read
from noise import NOISE
from training import cifar_n, datasets
from training.errors import Parser, UserError
from training.presets import preset, presets_help, scale_milestones
from training.synthetic import Synthetic

class Help(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    def _get_help_string(self, action):  # show "(default: x)" only where the default is fixed
        if action.default is None or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def note(message):
    """A resolved setting worth a line of its own, printed once (rank 0 under torchrun)."""
    if os.environ.get("RANK", "0") == "0":
        print(message, flush=True)


RATE = 0.4  # --rate's default for the synthetic noise kinds, the paper's main setting
SYNTHETIC = "/".join(k for k, n in NOISE.items() if n.takes_rate)  # the kinds drawn at a rate of the user's: sym/pair


def add_device_flag(p):
    """--device, the same in train.py, evaluate.py and the tools (read by training.build.pick_device)."""
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="auto: CUDA when torch sees a GPU, else CPU")


def ints(text):
    return [int(v) for v in text.split(",") if v]


def canonical(names):
    """An argparse type: the name in lower case, the paper's names (CMD-S, CMD-P) mapped to the modes', so that
    run folders, config.json, sweeps and --resume only ever see the canonical name."""
    return lambda text: ALIASES.get(text.lower(), text.lower()) if text.lower() in (*names, *ALIASES) else text


def knobs_of(kind):
    """The fields of mutual.Method or mutual.Comparators that are flags (Method.comparators, .noise and .state are
    not)."""
    return [f for f in fields(kind) if "help" in f.metadata]


def knobs():
    """Every knob: the fields of Method, then of Comparators as the modes registered now declare them."""
    return knobs_of(Method) + knobs_of(mutual.Comparators)


def method_flags(p):
    """One flag per field of mutual.Method and of mutual.Comparators, each in a group of its own, with the field's
    default and help text: they are their one source. --mode, --lc, --eta and --b default per --mode (resolve),
    the rest to the field's value."""
    for kind, title in ((Method, "method (mutual.py's Method; defaults: CMD-P + MyLC)"),
                        (mutual.Comparators, "settings of the modes (mutual.py's Comparators: MKD's, and those of the "
                                             "modes python lab/train.py adds)")):
        g = p.add_argument_group(title)
        for f in knobs_of(kind):
            flag, help = "--" + f.name.replace("_", "-"), f.metadata["help"]
            if f.name == "mode":
                g.add_argument(flag, type=canonical(MODES), choices=tuple(MODES), default=f.default, help=help)
            elif f.name == "lc":
                g.add_argument(flag, type=canonical(LABEL_CORRECTIONS), choices=tuple(LABEL_CORRECTIONS),
                               help=f"{help} (default {f.default}; ce for "
                                    f"{', '.join(m for m, x in MODES.items() if x.thresholds is None)})")
            elif f.name in ("eta", "b"):
                per_mode = ", ".join(f"{m} {eta_b[f.name == 'b']:g}" for m, eta_b in THRESHOLDS.items())
                g.add_argument(flag, type=float, help=f"{help} (default per --mode: {per_mode})")
            else:  # a knob whose default is None (forget_rate) takes a number, unless it says otherwise
                kind = f.metadata.get("kind") or (float if f.default is None else type(f.default))
                g.add_argument(flag, type=kind, default=f.default, help=help,
                               metavar="DIR" if kind is str and f.default is None else None)


def method_of(args):
    """The mutual.Method of resolved flags, with the comparators' settings in its Comparators."""
    comparators = mutual.Comparators(**{f.name: getattr(args, f.name) for f in knobs_of(mutual.Comparators)})
    noise = (args.noise, args.rate) if NOISE[args.noise].takes_rate else None  # synthetic: its T is known
    return Method(**{f.name: getattr(args, f.name) for f in knobs_of(Method)}, comparators=comparators, noise=noise)


def get_args(argv):
    return parser().parse_args(argv)


def given(argv):
    """The dests of the flags argv sets (abbreviations resolved): how sweep.py tells which flags after -- would
    override the ones its grid sets."""
    p = parser()
    for action in p._actions:
        action.default = argparse.SUPPRESS
    return set(vars(p.parse_args(argv)))


def parser():
    p = Parser(command="python train.py", description=__doc__.split("\n")[0], formatter_class=Help,
               epilog=presets_help())
    g = p.add_argument_group("data and noise")
    published = [n for n, d in datasets.DATASETS.items() if d.source and d.form]  # the downloads
    human = {n: d.human for n, d in datasets.DATASETS.items() if d.human}            # CIFAR-N's label files
    g.add_argument("--dataset", choices=tuple(datasets.DATASETS), default="cifar100",
                   help="; ".join(f"{n}: " + ", ".join(t for t in (d.title, d.about) if t and t.lower() != n) +
                                  (f" ({d.human.name} with --noise human)" if d.human else "")
                                  for n, d in datasets.DATASETS.items()) + " (training/datasets.py: DATASETS)")
    g.add_argument("--data-dir", default="data",
                   help="dataset root; " + ", ".join(published) + " download here on first use")
    g.add_argument("--data-mirror", metavar="URL",
                   help="download from URL (http://, https://, file://), which holds the published files under their "
                        "own names (docs/training.md: --data-dir), instead of each dataset's site; md5-checked alike")
    g.add_argument("--image-size", type=int, help="resize/crop size (default: the dataset's own, 32/28/224/299)")
    g.add_argument("--subset", type=int, help="train on N samples drawn with --subset-seed (default: --seed)")
    g.add_argument("--subset-seed", type=int,
                   help="draws --subset and the --val-split, so that every --seed trains on the same samples (paired "
                        "comparisons); --seed still draws the noise, the initialisation and the batch order "
                        "(default: --seed)")
    g.add_argument("--train-indices", metavar="FILE",
                   help="train on these samples alone: a .npy of indices into the dataset's training set, each among "
                        "those --subset and --val-split keep; their labels are drawn over all of those first, so a "
                        "sample's given label is the same whichever others train (k folds, or the samples a cleaning "
                        "tool keeps); the run records them in train_indices.npy")
    g.add_argument("--check-images", action="store_true",
                   help="decode every image of a dataset read from files before training, and list all that "
                        "cannot be read (otherwise the first bad one stops the run when a batch reaches it)")
    g.add_argument("--noise", choices=tuple(NOISE),
                   help=f"label noise: {SYNTHETIC}, drawn here (sym and pair: §4.1; idn: instance-dependent, Xia et al. "
                        f"2020); human: the CIFAR-N labels of {'/'.join(human)} "
                        "(default: sym, or none for the datasets whose labels are noisy: "
                        f"{', '.join(n for n, d in datasets.DATASETS.items() if d.real_noise)})")
    g.add_argument("--rate", type=float, help=f"noise rate r in [0, 1) (default {RATE} with --noise {SYNTHETIC})")
    g.add_argument("--noise-file", help="--noise human: the CIFAR-N label file, from " + cifar_n.CIFAR_N_URL +
                                        " (folder data/) (default " + ", ".join(f"<data-dir>/{h.file} for {n}" for n, h
                                                                                in human.items()) + ")")
    g.add_argument("--noise-key", choices=tuple(dict.fromkeys(k for h in human.values() for k in h.keys if k)),
                   help="--noise human: which label set, of " + "; ".join(
                       f"{n}'s {h.name} ({', '.join(h.keys)}; default {h.default})" for n, h in human.items()
                       if None not in h.keys) + " (CIFAR-10N's worst is about 40%% wrong; aggre: majority vote of "
                                                "three; random1-3: one annotator each)")
    g.add_argument("--augment", choices=("paper", "none"), default="paper",
                   help="training augmentation: the paper's crops and flips (appendix; mnist: crops only, a flipped "
                        "digit is another digit), or none")
    g.add_argument("--val-split", type=float, default=0.0,
                   help="hold out this clean fraction of the training set as 'val' (the paper searches with 0.1)")
    synthetic = Synthetic._field_defaults  # the data set's own defaults, written once in training/synthetic.py
    g.add_argument("--synthetic-size", type=int, default=synthetic["size"], help="synthetic: training images")
    g.add_argument("--synthetic-test-size", type=int, default=synthetic["test_size"], help="synthetic: test images")
    g.add_argument("--synthetic-classes", type=int, default=synthetic["classes"],
                   help="synthetic: number of classes K")
    g.add_argument("--synthetic-shift", type=int, default=synthetic["shift"],
                   help="synthetic: each image's patterns are shifted by up to this many pixels (0: none)")
    g.add_argument("--synthetic-difficulty", type=float, default=synthetic["difficulty"],
                   help="synthetic: clutter std over class-signal std (2: a small CNN reaches ~80%% clean)")

    method_flags(p)

    g = p.add_argument_group("models and optimisation (defaults: the presets below, per dataset and arch)")
    g.add_argument("--peers", type=int, default=2,
                   help="models trained together: 2 is the paper's A and B; N > 2 a cohort, where each model learns "
                        "the mean of what its peers' confident knowledge teaches it")
    g.add_argument("--arch", help=f"NAME, or one NAME per model (NAME_A,NAME_B), from {', '.join(models.ARCHS)} "
                                  "(default per dataset: " + ", ".join(f"{d.arch} on {n}" for n, d in
                                                                       datasets.DATASETS.items()) + ")")
    g.add_argument("--pretrained", action=argparse.BooleanOptionalAction,
                   help="ImageNet weights for " + ", ".join(a for a, arch in models.ARCHS.items() if arch.pretrained) +
                        " (default: on for " + ", ".join(n for n, d in datasets.DATASETS.items() if d.pretrained) + ")")
    g.add_argument("--epochs", type=int, help="Γ in Eq. 7: the total number of epochs (given without --milestones, "
                                              "it scales the preset's milestones to the same fractions of the run)")
    g.add_argument("--batch-size", type=int, help="global batch size N (all ranks together)")
    g.add_argument("--lr", type=float, help="initial learning rate of SGD")
    g.add_argument("--milestones", type=ints, help="epochs after which the lr is multiplied by --lr-decay, e.g. 50,80")
    g.add_argument("--lr-decay", type=float, help="factor applied to the lr at each milestone, e.g. 0.1")
    g.add_argument("--momentum", type=float, help="SGD momentum")
    g.add_argument("--weight-decay", type=float, help="SGD weight decay (L2)")

    g = p.add_argument_group("run control")
    g.add_argument("--seed", type=int, default=0, help="seeds noise, split, init, batch order, augmentation")
    add_device_flag(g)
    g.add_argument("--amp", choices=("auto", "bf16", "fp16", "off"), default="auto",
                   help="autocast precision (auto: bf16 on CUDA, off on CPU); losses are always float32")
    g.add_argument("--channels-last", choices=("auto", "on", "off"), default="auto",
                   help="channels_last memory format for models and batches (auto: on for CUDA, off on CPU); "
                        "a layout, not a setting of the method: a run may resume with the other one")
    g.add_argument("--compile", action="store_true", help="torch.compile both models")
    g.add_argument("--graph", choices=("auto", "capture", "compile", "off"), default="auto",
                   help="the whole training step recorded once and replayed (training/graph.py): capture = one CUDA "
                        "graph; compile = torch.compile of the step (reduce-overhead on CUDA, default mode on CPU); "
                        "off = eager; auto: eager until the capture has passed its CUDA tests on a device "
                        "(graph.CAPTURE_BY_DEFAULT), then capture on CUDA, off on CPU and where a replay cannot do "
                        "what the eager step does (--amp fp16, --select shuffled, torchrun, --compile)")
    g.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                   help="DataLoader workers for datasets read from disk")
    g.add_argument("--out", help="run directory (default runs/<dataset>-<noise><rate>-<mode>[-eta<η>][-b<b>]-<lc>-<arch>"
                                 "-s<seed>)")
    g.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    g.add_argument("--checkpoint", choices=("epoch", "none"), default="epoch",
                   help="epoch: checkpoint.pt after every epoch, for --resume; none: no checkpoint, so a stopped run "
                        "cannot resume (metrics.jsonl still keeps every finished epoch; the recipe's waves, whose "
                        "checkpoints never come back from the GPU machine)")
    g.add_argument("--log-every", type=int, default=0,
                   help="progress line every N steps (0: on a terminal, one line updated in place about twice a "
                        "second; in a log, a line about every 30 s)")
    g.add_argument("--tensorboard", action="store_true",
                   help="also write each epoch's metrics as TensorBoard scalars to --out/tensorboard (needs the "
                        "tensorboard package; metrics.jsonl stays the record)")
    return p


F32 = 3.4028234663852886e38  # the largest float32: the optimiser applies lr and weight decay in the parameters' dtype
# Each numeric flag's allowed values, checked once every flag has its value and before anything is
# read or written: {flag dest: (test, what the flag must be)}. NaN fails every test.
LIMITS = {
    "epochs": (lambda v: v >= 1, "at least 1"), "batch_size": (lambda v: v >= 1, "at least 1"),
    "lr": (lambda v: 0 < v < F32, "a positive number that float32 holds"),
    "lr_decay": (lambda v: 0 < v < F32, "a positive factor (0.1 divides the lr by 10)"),
    "momentum": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "weight_decay": (lambda v: 0 <= v < F32, "at least 0, and a number float32 holds"),
    "val_split": (lambda v: 0 <= v < 1, "in [0, 1)"), "subset": (lambda v: v >= 1, "at least 1"),
    "image_size": (lambda v: v >= 1, "at least 1"), "seed": (lambda v: 0 <= v < 2 ** 32, "in [0, 2^32)"),
    "subset_seed": (lambda v: 0 <= v < 2 ** 32, "in [0, 2^32)"),
    "workers": (lambda v: v >= 0, "at least 0"), "log_every": (lambda v: v >= 0, "at least 0 (0: automatic)"),
    "synthetic_difficulty": (lambda v: 0 <= v < math.inf, "at least 0"),
    "synthetic_shift": (lambda v: v >= 0, "at least 0 pixels"),
}


def check_values(args, read):
    """Refuse values no run can use, naming the flag and what it must be: every flag the run reads (a knob of the
    method that its mode and label correction do not read (not in read), refuse_unread has refused at any other
    value)."""
    names = set(knob_flags().values())
    limits = {**LIMITS, **{f.name: f.metadata["check"] for f in knobs() if f.metadata["check"]}}
    for dest, (test, what) in limits.items():
        v = getattr(args, dest)
        if v is not None and (dest in read or dest not in names) and not test(v):
            raise UserError(f"--{dest.replace('_', '-')} {v}: must be {what}")
    if any(m < 1 for m in args.milestones):
        raise UserError(f"--milestones {','.join(map(str, args.milestones))}: each is the epoch after which the lr "
                        f"changes, so at least 1")
    if any(a >= b for a, b in zip(args.milestones, args.milestones[1:])):
        raise UserError(f"--milestones {','.join(map(str, args.milestones))}: give them in increasing order, each once "
                        f"(a repeated one would apply --lr-decay twice)")
    kind = NOISE[args.noise]
    if args.rate is not None and args.rate >= kind.max_rate:
        raise UserError(f"--noise {args.noise} --rate {args.rate}: {kind.why_max}; use a rate below {kind.max_rate:g}")


def resolve(args):
    """Fill every unset flag from the mode and the presets; refuse contradictions instead of overwriting them.
    One concern at a time: the method, the label noise, the models, the optimiser, the run directory."""
    if not 2 <= args.peers <= len(NAMES):
        raise UserError(f"--peers {args.peers}: must be between 2 (the paper's pair) and {len(NAMES)}")
    read = resolve_method(args)  # the knobs of Method and Comparators the run reads (mutual.knobs_read)
    resolve_noise(args, read)
    archs = resolve_models(args)
    resolve_optimiser(args, archs[0], read)
    check = MODES[args.mode].check
    why = check(args, method_of(args)) if check else None  # what a mode beyond the paper needs of the run (lab/)
    if why:
        raise UserError(why)
    resolve_out(args)
    return args


class Settings(NamedTuple):
    """A run's settings, resolved and checked: its flags, and the method they make."""
    args: argparse.Namespace  # every flag with its value
    method: Method            # the paper's hyperparameters, the comparators' settings, the noise (method_of)


def settings(argv):
    """train.py's first step: argv's flags, each unset one filled from the mode and the presets and each checked
    (resolve), and the method they make (method_of). Bad input: a UserError, one line."""
    args = resolve(get_args(argv))
    return Settings(args, method_of(args))


def resolve_method(args):
    """--mode, --eta, --b, --lc and the two controls: refuse what the mode contradicts, fill eta and b from
    THRESHOLDS and lc. Returns the knobs the run reads (mutual.knobs_read)."""
    if args.eta is not None and math.isnan(args.eta):
        raise UserError("--eta nan is not a number; give a positive eta, or inf for zero knowledge")
    if args.eta is not None:
        try:  # Eq. 7 itself refuses an eta it cannot use (0)
            schedule.chi(0, 1, 2, args.eta, 0.0)
        except ValueError as e:
            raise UserError(f"--eta {args.eta:g}: {e}")
    tunable = [m for m, x in MODES.items() if x.tunable]
    if MODES[args.mode].thresholds is not None and not MODES[args.mode].tunable and (args.eta is not None or
                                                                                       args.b is not None):
        raise UserError(f"--mode {args.mode} sets eta itself; use --mode {' or '.join(tunable)} to choose --eta/--b")
    if MODES[args.mode].pair and args.peers != 2:
        raise UserError(f"--mode {args.mode} is defined for a pair of networks, not --peers {args.peers}; drop --peers")
    if MODES[args.mode].thresholds is None:  # no χ: the mode trains on the given labels
        if args.lc not in (None, "ce") or args.eta is not None or args.b is not None:
            raise UserError(f"--mode {args.mode} trains on the given labels (no --lc, --eta, --b); "
                            f"use {'/'.join(CMD_MODES)} for those")
        args.lc = "ce"
    if args.peer_weight == "mean" and args.peers != 2:
        raise UserError(f"--peer-weight mean averages a sample's own term with its one peer's: a pair, not "
                        f"--peers {args.peers}")
    if args.peer_weight == "mean" and args.lc is not None and LABEL_CORRECTIONS[args.lc].loss is not None:
        targets = [lc for lc, c in LABEL_CORRECTIONS.items() if c.loss is None]
        raise UserError(f"--peer-weight mean averages two cross-entropies with targets, and --lc {args.lc}'s own "
                        f"term is a loss of its own; use --lc {', '.join(targets[:-1])} or {targets[-1]}")
    eta, b = THRESHOLDS.get(args.mode, (None, None))
    args.eta = eta if args.eta is None else args.eta
    args.b = b if args.b is None else args.b
    args.lc = args.lc or Method().lc
    read = knobs_read(args.mode, args.lc)
    refuse_unread(args, read)
    return read


def knob_flags():
    """{--flag: the field} of every knob of Method and Comparators."""
    return {"--" + f.name.replace("_", "-"): f.name for f in knobs()}


def refuse_unread(args, read):
    """A knob of Method or Comparators set to a value other than its default that neither --mode nor --lc reads
    (mutual.knobs_read): refused in one line, so that no run carries, or is named by, a setting that changed
    nothing. η and b are resolve_method's own. read: the knobs the run reads."""
    for f in knobs():
        if f.name in read or f.name in ("eta", "b") or getattr(args, f.name) == f.default:
            continue
        by = [f"--mode {m}" for m, x in MODES.items() if f.name in (*x.knobs, *x.settings)] + [
            f"--lc {c}" for c, x in LABEL_CORRECTIONS.items() if f.name in x.knobs]
        raise UserError(f"--{f.name.replace('_', '-')} {getattr(args, f.name)}: --mode {args.mode} with --lc {args.lc} "
                        f"does not read it (only {', '.join(by)} {'do' if len(by) > 1 else 'does'}); drop it")


def knobs_for(key, extra):
    """extra, flags a grid adds to each of its runs, without the knobs that the run whose own flags are key does
    not read (mutual.knobs_read): a sweep or a preset passes each run only the knobs its mode and label correction
    read."""
    a = get_args(key)
    lc = a.lc or (Method().lc if MODES[a.mode].thresholds is not None else "ce")
    read, flags, out, i = knobs_read(a.mode, lc), knob_flags(), [], 0
    while i < len(extra):
        flag = extra[i].split("=", 1)[0]
        if flag in flags and flags[flag] not in read:
            i += 1 if "=" in extra[i] else 2
            continue
        out.append(extra[i])
        i += 1
    return out


def resolve_noise(args, read):
    """--noise, --rate, CIFAR-N's --noise-file and --noise-key, and the comparators' τ (--forget-rate), which
    defaults to the rate of synthetic noise."""
    if args.rate is not None and not 0 <= args.rate < 1:
        raise UserError(f"--rate must be in [0, 1), got {args.rate}")
    if args.noise == "human":  # CIFAR-N: the labels and so the rate come from the file
        human = datasets.DATASETS[args.dataset].human  # the record names the human labels its training set has
        if human is None:
            with_human = [n for n, d in datasets.DATASETS.items() if d.human]
            raise UserError(f"--noise human reads the CIFAR-N labels of {' or '.join(with_human)}, not {args.dataset}; "
                            f"choose --dataset {'/'.join(with_human)} or --noise {SYNTHETIC}")
        if args.rate is not None:
            raise UserError(f"--rate {args.rate} given with --noise human, whose rate is the file's; drop --rate")
        if args.noise_key is not None and args.noise_key not in human.keys:
            raise UserError(f"--noise-key picks one of {human.name}'s label sets ({', '.join(human.keys)}), not "
                            f"{args.noise_key}" if None not in human.keys else
                            f"--noise-key picks one of several label sets; {human.name} has one: drop --noise-key")
        args.noise_key = args.noise_key or human.default
        args.noise_file = args.noise_file or os.path.join(args.data_dir, human.file)
    elif args.noise_file is not None or args.noise_key is not None:
        raise UserError("--noise-file and --noise-key go with --noise human (CIFAR-N)")
    real_noise = datasets.DATASETS[args.dataset].real_noise
    if args.noise is None:
        args.noise = "none" if real_noise else "sym"
    elif NOISE[args.noise].rows is not None and datasets.DATASETS[args.dataset].files:
        raise UserError(datasets.from_files(args.noise, args.dataset))
    elif args.noise != "none" and real_noise:
        warnings.warn(f"{args.dataset} labels are already noisy; adding {args.noise} noise on top", stacklevel=3)
    if args.rate is None and args.noise != "human":
        args.rate = RATE if NOISE[args.noise].takes_rate else 0.0
    if args.noise == "none" and args.rate > 0:
        raise UserError(f"--rate {args.rate} given with --noise none; choose --noise {SYNTHETIC.replace('/', ' or ')}")
    for name in rate_defaults(args, read):  # a comparator's τ: the noise rate, as their authors' code sets it
        if not NOISE[args.noise].takes_rate:
            by = f"--mode {args.mode}" if name in (*MODES[args.mode].knobs, *MODES[args.mode].settings) else \
                f"--lc {args.lc}"
            raise UserError(f"{by} needs --{name.replace('_', '-')} τ with --noise {args.noise}: it defaults to the "
                            f"noise rate only for synthetic noise (--noise {SYNTHETIC})")
        setattr(args, name, args.rate)


def rate_defaults(args, read):
    """The settings the run reads (read) whose default is the noise rate (a None default: --forget-rate, --cdr-rate)
    and that it is not given."""
    return [f.name for f in knobs_of(mutual.Comparators) if f.default is None and f.name in read and
            getattr(args, f.name) is None and (f.metadata.get("kind") or float) is float]


def resolve_models(args):
    """--arch, one per model (the dataset's default, or one given for all), and --pretrained. Returns the list."""
    args.arch = datasets.DATASETS[args.dataset].arch if args.arch is None else args.arch
    archs = args.arch.split(",")
    if len(archs) not in (1, args.peers):  # one for all the models, or one per model
        raise UserError(f"--arch takes 1 architecture or one per model (--peers {args.peers}), got {len(archs)}: "
                        f"{args.arch}")
    for a in archs:
        if a not in models.ARCHS:
            raise UserError(f"unknown architecture '{a}' in --arch {args.arch}; choose NAME or one NAME per model from "
                            f"{', '.join(models.ARCHS)}")
    archs = archs * (args.peers // len(archs))
    if args.pretrained and not all(models.ARCHS[a].pretrained for a in archs):
        with_weights = [a for a, arch in models.ARCHS.items() if arch.pretrained]
        raise UserError(f"--pretrained loads ImageNet weights into {', '.join(with_weights)} only, not {args.arch}; "
                        f"drop --pretrained")
    args.arch = ",".join(archs)
    if args.pretrained is None:
        args.pretrained = datasets.DATASETS[args.dataset].pretrained and all(models.ARCHS[a].pretrained for a in archs)
    return archs


def resolve_optimiser(args, arch, read):
    """The epochs, batch size and SGD's flags from appendix C's preset (presets.py) for the dataset and arch;
    then every flag's value is checked, and --epochs given alone scales the preset's milestones."""
    row = preset(args.dataset, arch)
    name = row.pop("name")
    epochs_only = args.epochs is not None and args.milestones is None
    for k, v in row.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    check_values(args, read)  # every flag has its value now
    if epochs_only and args.epochs != row["epochs"]:
        args.milestones = scale_milestones(row["milestones"], row["epochs"], args.epochs)
        now = ", ".join(map(str, args.milestones)) if args.milestones else "none (the lr stays constant)"
        note(f"milestones: preset '{name}' (training/presets.py) has {', '.join(map(str, row['milestones']))} of "
             f"{row['epochs']} epochs; scaled to --epochs {args.epochs}: {now}")
    late = [m for m in args.milestones if m >= args.epochs]
    if late:
        warnings.warn(f"--milestones {', '.join(map(str, late))} at or after --epochs {args.epochs} never "
                      f"apply; " + (f"the lr changes only after epochs 1..{args.epochs - 1}" if args.epochs > 1 else
                                    "a 1-epoch run keeps its lr"), stacklevel=3)


def resolve_out(args):
    """--out, or runs/<run_name>."""
    if args.out is not None and not args.out.strip():
        raise UserError("--out is empty; give the run directory, or leave --out out for runs/<name>")
    if args.out is None:
        args.out = os.path.join("runs", run_name(args))


def run_name(args, omit=(), lr=None):
    """A run's folder name from its resolved flags, built here alone: train.py's default --out (runs/<name>) and
    tools.batched's runs (OUT/<name>, without the parts its grid shares, and with each run's lr). In order: the
    dataset, the noise, the mode with every knob of Method and Comparators that is not its default (η and b
    against the mode's, τ against the noise rate), the label correction, the architectures, the seed; so two runs
    that differ in any knob never share a folder. omit: parts to leave out ("dataset", "arch")."""
    noise = "none" if args.noise == "none" else "human" if args.noise == "human" else f"{args.noise}{args.rate:g}"
    noise += f"-{args.noise_key}" if args.noise_key else ""  # CIFAR-10N's label set
    archs = args.arch.split(",")
    arch = (archs[0] if len(set(archs)) == 1 else "+".join(archs)) + ("" if args.peers == 2 else f"-x{args.peers}")
    eta, b = THRESHOLDS.get(args.mode, (None, None))
    read, rate = knobs_read(args.mode, args.lc), args.rate if NOISE[args.noise].takes_rate else None
    default = {**vars(Method()), **vars(mutual.Comparators()), "eta": eta, "b": b}
    default.update({f.name: rate for f in knobs_of(mutual.Comparators) if f.default is None and f.name in read})
    names = [f.name for f in knobs() if f.name not in ("mode", "lc")]
    method = args.mode + "".join(  # a string knob by its value (a folder's by its last part), a number by its name too
        f"-{os.path.basename(os.path.normpath(getattr(args, k)))}" if isinstance(getattr(args, k), str) else
        f"-{k.replace('_', '-')}{getattr(args, k):g}" for k in names if getattr(args, k) != default[k])
    parts = dict(dataset=args.dataset, noise=noise, method=method, lc=args.lc, arch=arch,
                 lr=None if lr is None else f"lr{lr}", seed=f"s{args.seed}")
    return "-".join(v for k, v in parts.items() if v is not None and k not in omit)
