"""Confident learning (Northcutt et al., 2021) through cleanlab, as a row of the comparison: out-of-fold
probabilities of the noisy training set, cleanlab's find_label_issues on them, and the pair trained again by CE on
the samples it does not flag. It is the tool a user with noisy labels reaches for first.

    python lab/confident.py --dataset fashionmnist --arch mlp --val-split 0.1 --out runs/cl
    python lab/confident.py --filter-by prune_by_class --folds 5 --fold-epochs 20 ... --out runs/cl-pbc

Every flag but this tool's own is train.py's, for every run it makes; each run trains the pair by CE on the given
labels (--mode zero --lc ce), the classifier confident learning reads. Under --out:
  folds/settings.json -- --folds, --fold-epochs, --filter-by: the same command continues the run, another is refused
  folds/<i>/search  -- fold i held out (stratified by the given labels, seeded by --seed), --fold-epochs epochs: its
                       clean validation split (--val-split, needed) chooses the epoch
  folds/<i>/chosen  -- the same run to that epoch (its milestones pinned, so its epochs are search's); probs.npz is
                       evaluate.py --probs of it, whose held-out rows are the fold's out-of-sample probabilities
  kept_indices.npy  -- the samples find_label_issues does not flag (the pair's mean probability, at its filter_by);
                       to train another method on them, give train.py --train-indices with the same data and noise
                       flags (confident.json's labels_from, printed at the end): they draw the labels cleanlab saw
  confident.json    -- the chosen epochs, what was flagged, and its precision and recall against the clean labels
  the run itself    -- train.py --train-indices kept_indices.npy --out OUT: its metrics.jsonl and summary.json are
                       the row's, as every row's are
--val-split is needed; --out defaults to train.py's (runs/<dataset>-<noise>...). Run the same command again to
continue: finished runs are kept, stopped ones resume. Bad input: one line, exit 2.
"""
import json
import os
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__":
    sys.path[0] = ROOT
    from training.errors import stop_early
    stop_early("lab/confident.py")

import numpy as np  # noqa: E402

import evaluate  # noqa: E402
import train  # noqa: E402
from training import build, config, runfiles  # noqa: E402
from training.errors import Parser, UserError, one_line  # noqa: E402

FILTERS = ("prune_by_noise_rate", "prune_by_class", "both", "confident_learning", "predicted_neq_given")
CE = ["--mode", "zero", "--lc", "ce"]
LABELS = ("dataset", "image_size", "subset", "subset_seed", "val_split", "seed", "noise", "rate", "noise_file",
          "noise_key", "synthetic_size", "synthetic_test_size", "synthetic_classes", "synthetic_difficulty",
          "synthetic_shift")  # what
# draws the kept samples and their given labels (build.load_data, build.given_labels): a retrain on kept_indices.npy
# needs the same, or its labels are not the ones cleanlab saw


def get_args(argv):
    p = Parser(command="python lab/confident.py", description=__doc__.split("\n")[0], add_help=True,
               usage="python lab/confident.py [--folds K] [--fold-epochs E] [--filter-by F] [train.py flags] --out DIR")
    p.add_argument("--folds", type=int, default=5, help="k of the out-of-fold probabilities (default 5); every "
                                                         "run needs train.py's --val-split, which chooses each fold's "
                                                         "epoch")
    p.add_argument("--fold-epochs", type=int, default=20, help="epochs each fold trains, its best chosen (default 20)")
    p.add_argument("--filter-by", choices=FILTERS, default="prune_by_noise_rate",
                   help="cleanlab.filter.find_label_issues' filter_by (default: its own default)")
    args, rest = p.parse_known_args(argv)
    rest = [a for a in rest if a != "--resume"]  # each run resumes by itself (a sweep adds --resume)
    flags, _ = config.settings(rest + CE)  # train.py's own checks, one line each
    if flags.val_split <= 0:
        raise UserError("lab/confident.py needs --val-split above 0: each fold's epoch is chosen on the clean "
                        "validation split")
    if args.folds < 2 or args.fold_epochs < 1:
        raise UserError(f"--folds {args.folds} --fold-epochs {args.fold_epochs}: give at least 2 folds of 1 epoch")
    return args, rest, flags


def folds(given, k, seed):
    """Stratified folds of the kept training samples by their given labels: fold of each sample, 0..k-1."""
    from sklearn.model_selection import StratifiedKFold
    counts = np.bincount(given)
    if counts[counts > 0].min() < k:
        raise UserError(f"--folds {k}: a class has {counts[counts > 0].min()} training samples, fewer than the "
                        "folds; give fewer --folds")
    fold = np.empty(len(given), np.int64)
    for i, (_, held) in enumerate(StratifiedKFold(k, shuffle=True, random_state=seed).split(given, given)):
        fold[held] = i
    return fold


def run(argv):
    """train.main(argv), resumed where its --out, the last (argv ends with it; the user's comes first), holds a run (a
    finished one does nothing); summary.json's numbers."""
    out = argv[-1]
    assert argv[-2] == "--out", argv[-2:]
    with warnings.catch_warnings():  # a chosen run's milestones pinned after its last epoch: meant
        warnings.filterwarnings("ignore", message="--milestones .* never apply")
        summary = train.main(argv + (["--resume"] if runfiles.state(out) != runfiles.NEW else []))
    if summary is None:
        raise UserError(f"{out} did not finish; run the same command again")
    return summary


def out_of_fold(rest, flags, keep, fold, k, fold_epochs):
    """Each fold's run to its best validation epoch: (mean probability of the pair on every kept sample from the
    fold that held it out, (N, K), the chosen epochs)."""
    probs, chosen = None, []
    for i in range(k):
        where = os.path.join(flags.out, "folds", str(i))
        os.makedirs(where, exist_ok=True)
        indices = os.path.join(where, "train_indices.npy")
        if not os.path.exists(indices):
            with runfiles.replacing(indices, "wb") as f:
                np.save(f, keep[fold != i])
        fold_flags = rest + CE + ["--train-indices", indices]
        search = os.path.join(where, "search")
        run(fold_flags + ["--epochs", str(fold_epochs), "--out", search])
        rows = [json.loads(line) for line in runfiles.lines_of(search, "metrics.jsonl")]
        best = max(rows, key=lambda r: r["val_acc_mean"])["epoch"]  # the first of the best
        ran = runfiles.read_json(search, "config.json")
        milestones = ran["milestones"] or [fold_epochs]  # pinned: --epochs alone would scale the preset's
        chosen_dir = os.path.join(where, "chosen")
        run(fold_flags + ["--epochs", str(best), "--milestones", ",".join(map(str, milestones)), "--out", chosen_dir])
        if not os.path.exists(os.path.join(where, "probs.npz")):  # once: a run continued on another device or
            evaluate.main([chosen_dir, "--probs", os.path.join(where, "probs.npz"), "--device", flags.device])  # thread
        with np.load(os.path.join(where, "probs.npz"), allow_pickle=False) as z:
            p = z["probs"].mean(0)
            held = ~z["trained"]
        assert np.array_equal(held, fold == i)  # settings.json: the folds are the ones these files were made with
        probs = np.zeros_like(p) if probs is None else probs
        probs[held] = p[held]
        chosen.append(best)
    return probs, chosen


@one_line("lab/confident.py")
def main(argv=None):
    """Out-of-fold probabilities, cleanlab's flags, and the pair trained on the rest: the last run's summary.json's
    numbers."""
    try:
        from cleanlab.filter import find_label_issues
    except ImportError as e:
        raise UserError(f"cleanlab cannot be imported ({e}): pip install -r requirements-dev.txt, which the lab's "
                        "tools and tests need") from None
    args, rest, flags = get_args(sys.argv[1:] if argv is None else list(argv))
    settings = check_out(flags.out, args)
    d, images, _, keep = build.load_data(flags)
    given = build.given_labels(flags, d, images, keep)
    fold = folds(given, args.folds, flags.seed)
    if settings is not None:  # the first write
        os.makedirs(os.path.join(flags.out, "folds"), exist_ok=True)
        runfiles.write_json(os.path.join(flags.out, "folds"), "settings.json", settings)
    probs, chosen = out_of_fold(rest, flags, keep, fold, args.folds, args.fold_epochs)
    flagged = find_label_issues(given, probs, filter_by=args.filter_by, n_jobs=1)  # no forked workers
    wrong = given != np.asarray(images.labels)
    kept = os.path.join(flags.out, "kept_indices.npy")
    if os.path.exists(kept) and not np.array_equal(np.load(kept, allow_pickle=False), keep[~flagged]):
        raise UserError(f"{kept} names other samples than find_label_issues flags now (cleanlab {cleanlab_version()}); "
                        f"the run on them stays as it is: choose another --out to flag them again")
    with runfiles.replacing(kept, "wb") as f:
        np.save(f, keep[~flagged])
    hits = int((flagged & wrong).sum())
    report = dict(filter_by=args.filter_by, folds=args.folds, fold_epochs=args.fold_epochs, chosen_epochs=chosen,
                  samples=len(given), flagged=int(flagged.sum()), wrong=int(wrong.sum()),
                  precision=hits / max(1, int(flagged.sum())), recall=hits / max(1, int(wrong.sum())),
                  kept_noise=float(wrong[~flagged].mean()), labels_from=labels_from(flags))
    with runfiles.replacing(os.path.join(flags.out, "confident.json")) as f:
        json.dump(report, f, indent=1)
    print(f"confident learning ({args.filter_by}): flagged {report['flagged']} of {len(given)}, precision "
          f"{report['precision']:.3f} recall {report['recall']:.3f}; the pair trains on the other "
          f"{len(given) - report['flagged']}, {100 * report['kept_noise']:.1f}% of them wrong", flush=True)
    print(f"to train another method on them: python train.py {report['labels_from']} --train-indices {kept} ... "
          "(these data and noise flags draw the labels cleanlab saw; --rate stays the noise of all of them, and "
          "what defaults to it, --forget-rate, --cdr-rate, Forward's T, with it: give the kept samples' own)",
          flush=True)
    return run(rest + CE + ["--train-indices", kept, "--out", flags.out])


def check_out(out, args):
    """Before anything is written: OUT is new, or a run of this tool with the same --folds, --fold-epochs and
    --filter-by (folds/settings.json). UserError otherwise. Returns what settings.json is to hold, None where it
    does already."""
    mine = dict(folds=args.folds, fold_epochs=args.fold_epochs, filter_by=args.filter_by)
    path = os.path.join(out, "folds", "settings.json")
    if os.path.exists(path):
        then = runfiles.read_json(os.path.dirname(path), "settings.json")
        if then != mine:
            raise UserError(f"{out} holds a run of lab/confident.py with " + " ".join(
                f"--{k.replace('_', '-')} {v}" for k, v in then.items()) + "; give the same to continue it, or "
                "another --out")
        return None
    if runfiles.state(out) != runfiles.NEW or os.path.isdir(os.path.join(out, "folds")):
        raise UserError(f"{out} holds a run that is not lab/confident.py's (or one made before it recorded its "
                        "settings); choose another --out")
    return mine


def cleanlab_version():
    import cleanlab
    return cleanlab.__version__


def labels_from(flags):
    """The train.py flags that draw the kept samples and their given labels, as one string."""
    synthetic = flags.dataset == "synthetic"
    return " ".join(f"--{k.replace('_', '-')} {getattr(flags, k)}" for k in LABELS if getattr(flags, k) is not None
                    and (synthetic or not k.startswith("synthetic_")))


if __name__ == "__main__":
    import signal

    from training.errors import stop_on_sigterm
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stop_on_sigterm()
    main()
