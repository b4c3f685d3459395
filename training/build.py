"""What a run is built from, before its first step (train.py's main, and tools/batched.py for many runs).

setup_distributed -- rank, world size and local rank under torchrun
pick_device  -- the torch.device of --device (training/config.py's add_device_flag), the same in every entry point
Setup        -- where and how this process computes: rank, device, precision, memory format, config.json's record
load_data    -- the dataset, its training subset (--subset) and its splits (--val-split)
chosen_rows  -- --train-indices: which of those samples train, checked
given_labels -- the labels a run trains on: CIFAR-N's human ones, or noise.add_noise's; a refusal in one line
data_and_labels -- train.py's data: load_data, --check-images (check_files), the labels the run trains on
weights_meta -- what the final weights file records beside the weights (evaluate.py reads it)
check_train_size -- enough training samples for a batch on every process, checked before anything is written
batch_args   -- Batches' settings for the training set
eval_batches -- one Batches per test set
build_models -- models A and B (or a cohort), their optimisers and lr schedules, seeded by --seed
optimiser, lr_schedule -- a model's optimiser and its lr schedule: the run's flags' SGD and MultiStepLR, or the mode's
check_input_size -- each model takes the training images' size, checked before anything is written
"""
import math
import os
import sys
from typing import NamedTuple

import numpy as np
import torch
import torch.distributed as dist

import models
from mutual import MODES
from noise import NOISE, add_noise, check_rate
from training import datasets, graph, images, rundir
from training.cifar_n import human_labels
from training.batches import Batches, Placement, Spec
from training.errors import UserError
from training.ranks import ALONE, Ranks


def setup_distributed():
    """rank, world size and local rank; initialises the process group under torchrun."""
    if "RANK" not in os.environ:
        return 0, 1, 0
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0))


def load_data(args):
    """The dataset, its training subset and splits: (d, train, tests, keep), keep the indices of the training
    samples kept (after --subset and --val-split) in the dataset's training set. Raises datasets.DataError."""
    synthetic = datasets.Synthetic(size=args.synthetic_size, test_size=args.synthetic_test_size,
                                   classes=args.synthetic_classes, difficulty=args.synthetic_difficulty,
                                   shift=args.synthetic_shift, seed=args.seed)
    mirror = getattr(args, "data_mirror", None)  # evaluate.py --run reads config.json, older ones lack it
    d = datasets.load_dataset(args.dataset, args.data_dir, image_size=args.image_size, synthetic=synthetic,
                              mirror=mirror)
    rng = np.random.default_rng(args.seed if args.subset_seed is None else args.subset_seed)
    keep = np.arange(len(d.train.labels))
    if args.subset is not None:
        if args.subset > len(keep):
            raise datasets.DataError(f"--subset {args.subset} is more than the {len(keep)} training samples")
        keep = np.sort(rng.choice(keep, args.subset, replace=False))
    tests = dict(d.tests)
    if args.val_split > 0:  # the paper's clean validation split for hyperparameter search
        perm = rng.permutation(keep)
        n_val = max(1, int(round(args.val_split * len(keep))))
        tests["val"] = images.take(d.train, np.sort(perm[:n_val]))
        keep = np.sort(perm[n_val:])
    return d, images.take(d.train, keep), tests, keep


def given_labels(args, d, train, keep):
    """The labels of the training set a run trains on, drawn here alone for train.py and tools.batched: with
    --noise human CIFAR-N's label of each kept image (keep: load_data's), else noise.add_noise's with the run's
    seed. A kind noise.py cannot draw here (too few classes for it) is one line, a UserError."""
    if args.noise == "human":  # CIFAR-N: one human label per training image, in its order
        return human_labels(args.noise_file, datasets.DATASETS[args.dataset].human, args.noise_key, d.train.labels,
                            d.num_classes)[keep]
    inputs = None
    if NOISE[args.noise].rows is not None:  # a kind that depends on each sample: its image, as the models see it
        if not isinstance(train, datasets.TensorImages):  # a folder of large images (the others: config.py)
            raise UserError(datasets.from_files(args.noise, args.dataset))
        inputs = train.images
    try:
        check_rate(args.noise, args.rate, d.num_classes)
    except ValueError as e:
        raise UserError(f"--noise {args.noise} --rate {args.rate:g} on {args.dataset} ({d.num_classes} classes): "
                        f"{e}") from None
    try:
        return add_noise(train.labels, args.noise, args.rate, d.num_classes, seed=args.seed, inputs=inputs)
    except ValueError as e:
        raise UserError(f"--noise {args.noise} --rate {args.rate:g} on {args.dataset} ({d.num_classes} classes): {e}; "
                        "choose another --noise") from None


def data_and_labels(args, run, setup):
    """load_data, --check-images, and the labels trained on (the run's own on resume); bad data: one line.
    Returns (Data, the training set, the test sets, the given labels of the training set)."""
    try:
        d, train, tests, keep = load_data(args)
        rows = None if args.train_indices is None else chosen_rows(args.train_indices, keep, args.dataset)
        if args.check_images:
            check_files(args, train, tests, setup.log)
        noisy = run.noisy_labels(len(train.labels) if rows is None else len(rows), d.num_classes)
        if noisy is None:  # keep: the indices --subset and --val-split kept, as for the images
            noisy = given_labels(args, d, train, keep)  # over all of them: a sample's label is the same whichever train
            noisy = noisy if rows is None else noisy[rows]
        if rows is not None:  # --train-indices: those of the kept samples, and the run keeps which (train_indices.npy)
            train = images.take(train, rows)
            run.trains_on(keep[rows])
    except datasets.BadImages as e:
        if len(e.bad) > 1:  # one line per file, then main's error line
            for path, why in e.bad:
                print(f"train.py: unreadable image: {path} ({why})", file=sys.stderr)
        raise
    check_train_size(len(noisy), setup.world)
    realised = "-" if args.noise == "none" else f"{np.mean(noisy != train.labels):.3f}"  # none: unknown, or 0
    setup.log(f"data: {args.dataset} train {len(noisy)} ({d.num_classes} classes, realised noise {realised}) " +
              " ".join(f"{name} {len(v.labels)}" for name, v in tests.items()))
    return d, train, tests, noisy


def chosen_rows(path, keep, dataset):
    """--train-indices: where the file's indices into the dataset's training set are in keep (load_data's: the samples
    --subset and --val-split keep), in the dataset's order. Bad input: a UserError in one line."""
    fix = "write a 1-D integer array with numpy.save"
    try:
        idx = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise UserError(f"--train-indices {path} does not exist; check the path") from None
    except (OSError, ValueError, EOFError) as e:  # not a .npy, one of objects (a pickle, refused), an empty file
        raise UserError(f"--train-indices {path} is not a .npy array of numbers ({type(e).__name__}); {fix}") from None
    if not isinstance(idx, np.ndarray):  # an .npz: several arrays
        idx.close()
        raise UserError(f"--train-indices {path} is an .npz of several arrays, not one; {fix}")
    if idx.ndim != 1 or idx.dtype.kind not in "iu" or len(idx) == 0:
        raise UserError(f"--train-indices {path} holds {idx.dtype} of shape {idx.shape}, not indices; {fix}")
    ours, counts = np.unique(idx, return_counts=True)
    if counts.max() > 1:
        raise UserError(f"--train-indices {path} holds index {ours[counts.argmax()]} {counts.max()} times; give each "
                        "sample once")
    pos = np.minimum(np.searchsorted(keep, ours), len(keep) - 1)
    absent = ours[keep[pos] != ours]
    if len(absent):
        raise UserError(f"--train-indices {path}: {len(absent)} of its indices (the first {absent[0]}) are not among "
                        f"the {len(keep)} samples of {dataset}'s training set that --subset and --val-split keep; "
                        "choose from those")
    return pos


def check_files(args, train, tests, log):
    """--check-images: decode every image read from files now, and list all that fail."""
    files = [ds for ds in (train, *tests.values()) if isinstance(ds, datasets.FileImages)]
    paths = [p for ds in files for p in ds.paths]
    if paths:
        log(f"checking {len(paths)} images with {max(1, args.workers)} threads", flush=True)
        images.check_images(paths, args.workers)
        log(f"--check-images: all {len(paths)} images can be read")
    elif args.dataset == "folder":
        log("--check-images: the folder's images are small, so all were decoded when it was loaded")
    else:
        log(f"--check-images: nothing to check, {args.dataset} is not read from image files")


NO_CUDA = "--device cuda but torch sees no CUDA device; use --device cpu"


def pick_device(choice, local_rank=0):
    """The torch.device of --device (under torchrun, this process's GPU); --device cuda without one: UserError."""
    if choice == "cuda" and not torch.cuda.is_available():
        raise UserError(NO_CUDA)
    if choice == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    torch.cuda.set_device(local_rank)
    # every batch has the same shapes, so cuDNN's autotuner pays for itself after a few steps: the ResNet34
    # pair's step fell from 27.5 to 22.7 ms on one H200 (python -m tools.perf profile, docs/performance.md)
    torch.backends.cudnn.benchmark = True
    return torch.device("cuda", local_rank)


def check_train_size(n, world):
    """DataError unless each of the world's processes has 2 training samples: BatchNorm needs 2, so with fewer
    no batch could be made."""
    if n < 2 * world:
        raise datasets.DataError(f"{n} training sample{'s' if n != 1 else ''} after --subset and --val-split: each "
                                 f"of the {world} process{'es' if world > 1 else ''} needs at least 2; keep more "
                                 f"samples")


def batch_args(args, d, setup):
    """Batches' settings for the training set: its spec (batch size, normalisation, augmentation, no flip for
    digits) and its placement (device, rank, world, workers, memory format)."""
    spec = Spec(batch_size=args.batch_size, mean=d.mean, std=d.std, augment=args.augment == "paper",
                flip=datasets.DATASETS[args.dataset].flip)
    return dict(spec=spec, placement=setup.placement(args.workers))


def eval_batches(d, tests, placement):
    """One Batches per test set: every sample once, in order, no augmentation, 500 a batch. placement: a
    batches.Placement (Setup.placement)."""
    spec = Spec(batch_size=500, mean=d.mean, std=d.std, train=False)
    return {name: Batches(v, labels=v.labels, clean=v.labels, spec=spec, placement=placement)
            for name, v in tests.items()}


def weights_meta(args, d, train):
    """What the final weights file records beside the weights (evaluate.py reads it): the dataset, its number
    of classes, the epochs, the input size of the training images and their normalisation."""
    size = list(train.images.shape[1:]) if isinstance(train, datasets.TensorImages) else [3, train.size, train.size]
    return dict(dataset=args.dataset, num_classes=d.num_classes, epoch=args.epochs, input_size=size, mean=d.mean,
                std=d.std)


def build_models(args, num_classes, train, setup, method=None):
    """Models A and B (or the cohort's), their optimisers and lr schedules (optimiser, lr_schedule), built before
    anything is written, and checked to take the training images' size."""
    torch.manual_seed(args.seed)
    try:
        nets = [models.build_model(a, num_classes, pretrained=args.pretrained) for a in args.arch.split(",")]
        nets = [n.to(setup.device, memory_format=setup.fmt) for n in nets]
        opts = [optimiser(n.parameters(), args, method) for n in nets]
        lr_scheds = [lr_schedule(o, args, method) for o in opts]
    except (RuntimeError, ValueError) as e:
        raise UserError(str(e).splitlines()[0]) from None
    check_input_size(nets, args.arch.split(","), train, setup)
    return rundir.Models(nets, opts, lr_scheds)


def optimiser(params, args, method=None):
    """A model's optimiser: SGD at the run's flags, or the mode's own (registry.Mode.optimiser, of method)."""
    own = None if method is None else MODES[method.mode].optimiser
    if own is not None:
        return own(params, args, method)
    return torch.optim.SGD(params, lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)


def lr_schedule(opt, args, method=None):
    """An optimiser's lr schedule: MultiStepLR at the run's milestones, or the mode's own (registry.Mode.schedule)."""
    own = None if method is None else MODES[method.mode].schedule
    if own is not None:
        return own(opt, args, method)
    return torch.optim.lr_scheduler.MultiStepLR(opt, args.milestones, args.lr_decay)


@torch.no_grad()
def check_input_size(nets, archs, train, setup):
    """Each model takes the training images' size: one forward pass of two blank images, in eval mode (no
    state changes, no random numbers), so that a network too deep for small images fails here, in one
    line, and not after the run's first files are written."""
    size = tuple(train.images.shape[1:]) if isinstance(train, datasets.TensorImages) else (3, train.size, train.size)
    x = torch.zeros(2, *size, device=setup.device).contiguous(memory_format=setup.fmt)
    for net, arch in zip(nets, archs):
        net.eval()
        try:
            net(x)
        except RuntimeError as e:
            raise UserError(f"--arch {arch} cannot take {size[1]}x{size[2]} images ({str(e).splitlines()[0][:120]});"
                            f" choose an arch for this size, or --image-size") from None
        net.train()


class Setup(NamedTuple):
    """Where and how this process computes: its rank among torchrun's processes, the device, the autocast
    precision and memory format, the config.json record of every setting, and how the ranks stop together."""
    rank: int
    world: int
    local_rank: int
    device: torch.device
    amp: str            # bf16 | fp16 | off
    channels_last: str  # on | off
    config: dict
    ranks: Ranks = ALONE  # under torchrun, the agreement of every rank (training/ranks.py)

    @classmethod
    def of(cls, args, method=None):
        """The Setup of a run of these flags; with its method (mutual.Method), config.json's record holds how its
        step runs, eager or replayed (graph.resolve: --graph)."""
        rank, world, local_rank = setup_distributed()
        device = pick_device(args.device, local_rank)
        amp = {"auto": "bf16" if device.type == "cuda" else "off"}.get(args.amp, args.amp)
        channels_last = {"auto": "on" if device.type == "cuda" else "off"}.get(args.channels_last, args.channels_last)
        config = {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v)) for k, v in vars(args).items()}
        config.update(amp=amp, channels_last=channels_last, world_size=world)
        if method is not None:
            config["graph"] = graph.resolve(args.graph, device, amp, method, dist.is_initialized(), args.compile)
        ranks = Ranks(rank, world, distributed=True) if dist.is_initialized() else ALONE  # they stop together from here
        return cls(rank, world, local_rank, device, amp, channels_last, config, ranks)

    @property
    def fmt(self):
        return torch.channels_last if self.channels_last == "on" else torch.contiguous_format

    def placement(self, workers=0):
        """Where batches go: a batches.Placement of this process's device, rank, world and memory format;
        workers: the DataLoader processes that read image files (--workers)."""
        return Placement(self.device, rank=self.rank, world=self.world, workers=workers, memory_format=self.fmt)

    def log(self, *a, **k):
        if self.rank == 0:
            print(*a, **k)
