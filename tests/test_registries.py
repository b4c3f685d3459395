"""One place per choice: each axis of the method and the data is one registry in the file of its concept, and an
entry added there alone reaches every place that reads the axis. For each axis a fixture adds an entry (a label
correction, an architecture, a noise kind, a dataset in its real files) and trains one CPU epoch with it through
train.main, checking that the entry, not a default, did the training; every knob of the method changes what a
step computes in some mode, so a knob that reaches Method but not the loss fails; the docs' lists of choices are
the registries'; a dataset is fetched only from its own published files."""
import argparse
import dataclasses
import functools
import hashlib
import json
import math
import os
import re

import numpy as np
import pytest
import torch
import test_cmd
import test_models
import test_train
import torch.nn as nn
from torchvision import datasets as tv

import label_correction
import models
import mutual
import noise
import train
from mutual import Clock, Method, Precision, mutual_step
from tools import batched, plot
from training import config, datasets, download, presets, report, rundir, tiny
from training.images import DataError

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ONE_EPOCH = ["--dataset", "synthetic", "--arch", "mlp", "--epochs", "1", "--synthetic-size", "64",
             "--synthetic-test-size", "32", "--synthetic-classes", "4", "--batch-size", "32", "--device", "cpu",
             "--workers", "0"]


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_a_label_correction_added_to_its_registry_trains(tmp_path, monkeypatch):
    calls = []

    def capped(q, p, h, r, progress, m):  # MyLC with ε at most 0.5
        calls.append(1)
        eps = (label_correction.mylc(q, p, r, m.mylc_b1, m.mylc_rho, h=h) - q).norm() / (p - q).norm().clamp_min(1e-12)
        eps = eps.clamp(max=0.5)
        return (1 - eps) * q + eps * p
    monkeypatch.setitem(label_correction.LABEL_CORRECTIONS, "mylc-capped", label_correction.Correction(
        "MyLC (ε ≤ 0.5)", target=capped))
    out = str(tmp_path / "run")
    train.main(ONE_EPOCH + ["--lc", "mylc-capped", "--out", out])
    assert calls and json.load(open(os.path.join(out, "config.json")))["lc"] == "mylc-capped"
    assert plot.describe(json.load(open(os.path.join(out, "config.json"))))["lc"] == "MyLC (ε ≤ 0.5)"  # plots read its name
    assert "mylc-capped" in config.parser().format_help()


def test_an_architecture_added_to_its_registry_trains_on_its_own_preset(tmp_path, monkeypatch, capsys):
    built = []

    def tiny(k, pretrained):
        built.append(k)
        return nn.Sequential(nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(48, k))
    monkeypatch.setitem(models.ARCHS, "tiny", models.Arch(tiny, "cpu", min_side=4))
    out = str(tmp_path / "run")
    train.main([a if a != "mlp" else "tiny" for a in ONE_EPOCH] + ["--out", out])
    cfg = json.load(open(os.path.join(out, "config.json")))
    assert built == [4, 4] and cfg["arch"] == "tiny,tiny" and cfg["lr"] == presets.preset("synthetic", "mlp")["lr"]
    # the tests of every architecture take it as they take the registry's own (test_models)
    test_models.check_any_input_size("tiny")
    test_models.check_gradients_reach_every_parameter("tiny")
    monkeypatch.setitem(models.ARCHS, "tiny", models.Arch(tiny, "no-such-schedule"))  # no row: one line, no guess
    with pytest.raises(SystemExit) as e:
        train.main([a if a != "mlp" else "tiny" for a in ONE_EPOCH] + ["--out", str(tmp_path / "other")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "schedule 'no-such-schedule'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "other").exists()
    # one the paper does not train brings its own row, and --help prints its note, not a paper row's
    own = dict(epochs=3, batch_size=16, lr=0.03, milestones=(2,), lr_decay=0.5, momentum=0.8, weight_decay=1e-4,
               why="a tiny pooled net's own schedule")
    monkeypatch.setitem(models.ARCHS, "tiny", models.Arch(tiny, "tiny", settings=own))
    args = config.resolve(config.get_args(["--dataset", "synthetic", "--arch", "tiny"]))
    assert (args.epochs, args.batch_size, args.lr, args.milestones, args.momentum) == (3, 16, 0.03, [2], 0.8)
    shown = presets.presets_help()
    assert "synthetic" not in shown and "any dataset + tiny" in shown and "a tiny pooled net's own schedule" in shown
    assert "ResNet28" not in shown.split("any dataset + tiny")[1].split("\n  any")[0]


def test_a_noise_kind_added_to_its_registry_trains_on_its_own_labels(tmp_path, monkeypatch):
    def two_up(rate, k):  # a label moves two classes up
        return (1 - rate) * np.eye(k) + rate * np.roll(np.eye(k), 2, axis=1)
    monkeypatch.setitem(noise.NOISE, "up2", noise.NoiseKind("two-up", two_up))
    out = str(tmp_path / "run")
    train.main(ONE_EPOCH + ["--noise", "up2", "--rate", "0.5", "--out", out])
    given = np.load(os.path.join(out, "noisy_labels.npy"))
    clean = datasets.load_dataset("synthetic", None, synthetic=datasets.Synthetic(size=64, test_size=32, classes=4)
                                  ).train.labels
    flipped = given != clean
    assert 0.3 < flipped.mean() < 0.7 and np.array_equal(given[flipped], (clean[flipped] + 2) % 4)
    assert plot.describe(json.load(open(os.path.join(out, "config.json"))))["noise"] == "50% two-up noise"
    # the tests of every noise kind take it as they take the registry's own (test_cmd)
    test_cmd.test_every_noise_kind_flips_about_its_rate_and_its_seed_fixes_the_flips("up2")
    test_cmd.test_every_noise_kind_is_a_transition_matrix_that_add_noise_draws_from("up2")


@pytest.mark.parametrize("entry", ["train.py", "tools.batched"])
def test_a_noise_kind_that_depends_on_the_sample_added_to_its_registry_flips_by_each_image(tmp_path, monkeypatch, entry):
    """One edit, its record: a kind with rows (noise.NoiseKind.rows) reaches train.py and tools.batched through the one
    noise path, with each training image: here the bright images (mean pixel above 127) move one class up, the others
    keep their label, so the flips are exactly the bright images."""
    def bright_up(images, labels, rate, k, rng):
        bright = np.asarray(images).reshape(len(labels), -1).mean(1) > 127
        return np.eye(k)[np.where(bright, (labels + 1) % k, labels)]
    monkeypatch.setitem(noise.NOISE, "bright", noise.NoiseKind("bright-up", None, rows=bright_up))
    out = tmp_path / "run"
    (train.main if entry == "train.py" else batched.main)(ONE_EPOCH + ["--noise", "bright", "--out", str(out)])
    run = out if entry == "train.py" else next(p for p in out.iterdir() if p.is_dir())
    given = np.load(run / "noisy_labels.npy")
    data = datasets.load_dataset("synthetic", None, synthetic=datasets.Synthetic(size=64, test_size=32, classes=4))
    bright = data.train.images.reshape(64, -1).float().mean(1).numpy() > 127
    assert 0 < bright.sum() < 64 and np.array_equal(given != data.train.labels, bright)
    if entry == "train.py":  # the tests of every kind that depends on the sample take it too (test_cmd)
        test_cmd.test_a_kind_that_depends_on_the_sample_flips_by_its_input("bright")


@pytest.mark.parametrize("entry", ["train.py", "tools.batched"])
def test_a_noise_kind_that_needs_more_classes_is_one_line_in_train_py_and_tools_batched(tmp_path, monkeypatch, capsys,
                                                                                         entry):
    def in_fives(rate, k):  # a label moves within its group of five classes
        return (1 - rate) * np.eye(k) + rate * np.kron(np.eye(k // 5), np.roll(np.eye(5), 1, axis=1))
    monkeypatch.setitem(noise.NOISE, "fives", noise.NoiseKind("within-five", in_fives, min_classes=5))
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        (train.main if entry == "train.py" else batched.main)(ONE_EPOCH + ["--noise", "fives", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].endswith(
        "error: --noise fives --rate 0.4 on synthetic (4 classes): fives noise needs at least 5 classes, got 4; choose "
        "another --noise"), err
    assert not out.exists()


KMNIST = datasets.Dataset(datasets.DATASETS["mnist"].read, "KMNIST", "mlp", "KMNIST", (0.1918,) * 3, (0.3483,) * 3,
                          flip=False, form=download.gz_files, tiny=tiny.Copy(lambda root: tiny.write_idx(
                              root, n_train=40, n_test=20)))


def test_a_dataset_added_to_its_registry_downloads_reads_its_real_files_and_trains(tmp_path, monkeypatch):
    # one edit, its record: a torchvision class of a form download.py knows is fetched, read and trained
    monkeypatch.setitem(datasets.DATASETS, "kmnist", KMNIST)
    sets = KMNIST.tiny.write(tmp_path / "mirror")  # its record's tiny copy: KMNIST's published names, gzipped
    tv.KMNIST.resources = [(f, hashlib.md5((tmp_path / "mirror" / f).read_bytes()).hexdigest())
                           for f, _ in tv.KMNIST.resources]  # the tiny copies' sums (conftest puts the real ones back)
    out = str(tmp_path / "run")
    train.main(["--dataset", "kmnist", "--data-dir", str(tmp_path / "data"), "--data-mirror",
                (tmp_path / "mirror").as_uri(), "--epochs", "1", "--batch-size", "16", "--device", "cpu",
                "--workers", "0", "--noise", "none", "--out", out])
    cfg = json.load(open(os.path.join(out, "config.json")))
    assert cfg["arch"] == "mlp,mlp" and len(metrics(out)) == 1  # its own default arch
    assert sorted(os.listdir(tmp_path / "data" / "KMNIST" / "raw")) == sorted(  # where torchvision's KMNIST reads
        f for name, _ in tv.KMNIST.resources for f in (name, name[:-len(".gz")]))
    d = datasets.load_dataset("kmnist", tmp_path / "data", download=False)
    assert np.array_equal(d.train.labels, sets["train"][1]) and d.mean == KMNIST.mean
    # the tests of every dataset read from files take it as they take the registry's own (test_train), by its copy
    for mode in ("progressive", "mkd"):
        test_train.check_every_mode_trains_on(tmp_path / mode, "kmnist", mode)


def test_a_download_form_reads_each_name_off_the_class():
    """The folder a download makes is the one the class reads, from the class: its base_folder, the name of the
    archive it holds, its own name; never another class's."""
    assert download.archive(tv.CIFAR10).folder == "cifar-10-batches-py"  # its base_folder, not the archive's name
    assert download.archive(tv.Food101).folder == "food-101" and download.archive(tv.Country211).folder == "country211"
    svhn = download.split_files(tv.SVHN)
    assert svhn.folder == "SVHN" and not svhn.archive and [f for f, _, _ in svhn.files] == ["train_32x32.mat",
                                                                                           "test_32x32.mat"]
    assert [(md5, urls) for _, md5, urls in svhn.files] == [(tv.SVHN.split_list[s][2], [tv.SVHN.split_list[s][0]])
                                                            for s in ("train", "test")]
    for name, d in datasets.DATASETS.items():  # every record's form fits its class
        assert (d.form is None) == (d.published() is None), name


def test_a_dataset_is_fetched_only_from_its_own_published_files(tmp_path, monkeypatch, capsys):
    # KMNIST's files have MNIST's names: its download must be KMNIST's, never MNIST's under another name
    files, folder, archive = KMNIST.published()
    assert folder == os.path.join("KMNIST", "raw") and not archive
    assert [f for f, _, _ in files] == [f for f, _ in tv.KMNIST.resources]
    assert all(url.startswith(tuple(tv.KMNIST.mirrors)) for _, _, urls in files for url in urls)
    assert not set(md5 for _, md5, _ in files) & set(md5 for _, md5 in tv.MNIST.resources)
    for name, source in (("unpublished", None), ("wrong-form", "SVHN")):  # no source; a class of another form
        monkeypatch.setitem(datasets.DATASETS, name, KMNIST._replace(source=source))
        with pytest.raises(SystemExit) as e:  # refused in one line, before any request
            train.main(["--dataset", name, "--data-dir", str(tmp_path / "data"), "--data-mirror", "http://127.0.0.1:9/",
                        "--device", "cpu", "--out", str(tmp_path / "run")])
        err = capsys.readouterr().err
        assert e.value.code == 2 and len(err.strip().splitlines()) == 1, err
        assert ("not published for download" if source is None else
                "torchvision's SVHN does not publish its files as one .gz per file") in err
        assert "network failure" not in err and not (tmp_path / "data").exists() and not (tmp_path / "run").exists()
    with pytest.raises(DataError, match="unknown dataset 'nope'"):
        datasets.load_dataset("nope", tmp_path)


# ---------------------------------------------------------------- every knob reaches what a step computes

def knobs():
    """(kind, field) of every knob of Method and of the registered modes' Comparators: the axes (mode, lc) are the
    registries, tested above; noise and what a mode makes between epochs are the run's, not knobs."""
    return [(kind, f) for kind in (Method, mutual.Comparators) for f in dataclasses.fields(kind)
            if f.name not in ("mode", "lc", "comparators", "noise", "state")]


KNOBS = knobs()


def other_value(f):
    """A valid value of knob f other than its default: a word's next choice, a number its check accepts."""
    if f.metadata["choices"]:
        return next(c for c in f.metadata["choices"] if c != f.default)
    if f.name == "warmup":
        return 9  # past both epochs step_of trains (1 and 8)
    check = f.metadata["check"][0] if f.metadata["check"] else (lambda v: True)
    default = 0.2 if f.default is None else f.default  # forget_rate: the noise rate a run gives it
    if isinstance(default, int):  # epochs: num_gradual, coteach_plus_init
        return default // 2 if default > 1 else default + 5
    for v in (default * 0.5, default + 0.3, 2 * default + 1, 0.3, 2.0, -3.0):
        if v != default and check(v):
            return v
    raise AssertionError(f"no other valid value found for {f.name}")


EPOCHS = 10  # the run step_of trains in


def predictions(epoch, m):
    """The fixed predictions of m models on step_of's 64 samples at the start of epoch, which a stage reads."""
    g = torch.Generator().manual_seed(10 + epoch)
    return [torch.softmax(3 * torch.randn(64, 4, generator=g), -1) for _ in range(m)]


def unchanged(method, models, epoch, predict):
    """What a mode of the paper does between epochs: nothing. (method, models, rows)."""
    return method, models, None


def step_of(method, m=2, epoch=1, between=unchanged):
    """What one training step computes (its sums) for this method: train.py's step on a fixed batch of 64 for a
    small pair, the thresholds from Method.chis_at, MyLC's r at 0.6 and 0.8, in epoch `epoch` + 1 of 10 (epoch 1:
    t/Γ = 0.125, where Eq. 7's b, ProSelfLC's transit and a small-loss method's R(t) all matter; epoch 8, where R(t)
    keeps few enough of Co-teaching+'s disagreements that τ moves the count). between(method, models, e, predict)
    acts at the start of every epoch e up to this one as a run's mode does between epochs (the lab's stages), the 64
    samples its training set and fixed predictions of them (predictions), so that a knob it reads changes the step
    too. The inputs' scales spread the predictions' entropies over [0, ln K], so that a χ that moves moves the
    selection."""
    torch.manual_seed(0)
    nets = [nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 4)) for _ in range(m)]
    with torch.no_grad():
        nets[0][3].weight.mul_(4)  # confident and unconfident predictions both
    models = rundir.Models(nets, [torch.optim.SGD(n.parameters(), lr=0.1, momentum=0.9) for n in nets], [])
    own = mutual.MODES[method.mode].optimiser
    if own is not None:  # a mode's own optimiser, at the same settings
        models = models._replace(opts=[own(n.parameters(), SGD, method) for n in nets])
    rows = None
    for e in range(epoch + 1):  # what the mode does between epochs, at the start of each
        method, models, made = between(method, models, e, lambda: predictions(e, m))
        rows = rows if made is None else made
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 3, 2, 2, generator=g) * torch.linspace(0.05, 8, 64)[:, None, None, None]
    y = torch.randint(0, 4, (64,), generator=g)
    clock = Clock(epoch, 1, 4, EPOCHS, 0)
    precision = Precision(dict(device_type="cpu", enabled=False), torch.amp.GradScaler("cpu", enabled=False))
    batch = (x, y, (y + 1) % 4) + (() if rows is None else (rows,))
    sums, _ = mutual_step(nets, models.opts, batch, method, method.chis_at(clock.t, clock.epochs, 4, m),
                          [torch.tensor(0.6), torch.tensor(0.8)][:m], clock, precision)
    return torch.cat([sums, *(p.detach().flatten() for n in nets for p in n.parameters()),  # and the update
                      *(s.detach().flatten() for states in (method.state or {}).values() for s in states)])


SGD = argparse.Namespace(lr=0.1, momentum=0.9, weight_decay=0.0)  # step_of's SGD, as a mode's own optimiser reads it


def accepted(mode, lc, f):
    """Whether train.py takes knob f at other_value(f) with --mode and --lc; False: one line, rc 2. 20 epochs: room
    for a warm-up of up to 9, and what a label correction asks of a run given it (its check: a warm-up before an
    estimate, a revision its lr reads), as its one line says."""
    flags = ONE_EPOCH + ["--mode", mode, "--lc", lc, "--" + f.name.replace("_", "-"), str(other_value(f)), "--epochs",
                         "20"]
    for _ in range(3):
        try:
            config.resolve(config.get_args(flags))
            return True
        except config.UserError as e:
            asked = re.findall(r"give (--[a-z-]+) [A-Z]\b", str(e))  # "give --warmup W": the run lacks it
            if not asked or asked[0] in flags:
                return False
            flags += [asked[0], "1" if asked[0] == "--warmup" else "2"]
    return False


def base_method(mode, lc, **settings):
    """The method each knob is changed from: the mode's own (η, b), b = −5 where it is tunable, and settings of its
    Comparators (the lab's: τ = 0.2, T-revision's last 2 of 10 epochs revising)."""
    eta, b = mutual.MODES[mode].thresholds or (None, None)
    return Method(mode=mode, lc=lc, eta=eta, b=-5.0 if mutual.MODES[mode].tunable else b, noise=("sym", 0.2),
                  comparators=mutual.Comparators(**settings))


def check_knob(kind, f, base_of, between=unchanged, epochs_of=lambda base, changed: set()):
    """A knob changes what a step computes exactly where its mode or label correction declares it read, and train.py
    takes it there alone: over every mode of the registry (and every correction where the mode has a threshold).
    base_of(mode, lc): the method it is changed from; between, epochs_of(base, changed): what the mode does between
    epochs, and the epochs beyond 1 and 8 where that shows (a stage's start)."""
    reads, steps = 0, functools.lru_cache(maxsize=None)(lambda mode, lc, e: step_of(base_of(mode, lc), 2, e, between))
    for mode, x in mutual.MODES.items():
        for lc in mutual.LCS if x.thresholds else ("ce",):
            read = f.name in mutual.knobs_read(mode, lc)
            assert accepted(mode, lc, f) == read, (f.name, mode, lc, read)
            if f.name in ("eta", "b") and not x.tunable:
                continue  # zero and all knowledge are defined by their (η, b), the others have none: refused above
            if f.name == "peer_weight" and label_correction.LABEL_CORRECTIONS[lc].loss is not None:
                continue  # --peer-weight mean is for targets: refused above
            base = base_of(mode, lc)
            if kind is Method:
                changed = dataclasses.replace(base, **{f.name: other_value(f)})
            else:
                changed = dataclasses.replace(base, comparators=dataclasses.replace(base.comparators, **{
                    f.name: other_value(f)}))
            epochs = {1, 8} | epochs_of(base, changed)
            changes = any(not torch.equal(steps(mode, lc, e), step_of(changed, 2, e, between)) for e in sorted(epochs))
            assert changes == read, (
                f"{f.name} = {other_value(f)} with --mode {mode} --lc {lc}: "
                + ("declared read but changes nothing the step computes" if read else
                   "changes the step, but neither entry declares it, so train.py refuses it"))
            reads += read
    assert reads, f"{f.name} is read by no mode and no label correction"


@pytest.mark.parametrize("kind,f", KNOBS, ids=[f.name for _, f in KNOBS])
def test_every_knob_changes_a_step_exactly_where_its_mode_or_label_correction_reads_it(kind, f):
    # a knob read by nothing fails here, whatever its name; so does one whose entries do not declare it
    # (registry.Mode.knobs, registry.Correction.knobs), and train.py refuses it wherever they do not
    check_knob(kind, f, base_method)


@pytest.mark.parametrize("flags, message", [
    (["--lc", "mylc", "--ls-eps", "0.3"], "--ls-eps 0.3: --mode progressive with --lc mylc does not read it (only --lc "
                                          "ls does); drop it"),
    (["--mode", "progressive", "--mkd-eps", "0.3"], "--mkd-eps 0.3: --mode progressive with --lc mylc does not read it "
                                                    "(only --mode mkd does); drop it"),
])
def test_a_knob_the_run_does_not_read_is_refused_in_one_line_before_anything_is_written(tmp_path, capsys, flags,
                                                                                       message):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        train.main(ONE_EPOCH + flags + ["--out", str(out)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err == f"train.py: error: {message}\n" and not out.exists()


def test_a_grid_passes_each_run_only_the_knobs_its_mode_and_label_correction_read():
    extra = ["--ls-eps", "0.3", "--mylc-rho=0.4", "--mkd-eps", "0.25", "--workers", "2", "--cp-beta", "0.1"]
    assert config.knobs_for(["--mode", "progressive", "--lc", "ls"], extra) == ["--ls-eps", "0.3", "--workers", "2"]
    assert config.knobs_for(["--mode", "zero"], extra) == ["--mylc-rho=0.4", "--workers", "2"]  # MyLC by default
    assert config.knobs_for(["--mode", "mkd"], extra) == ["--mkd-eps", "0.25", "--workers", "2"]


# ---------------------------------------------------------------- the docs list what the registries hold

def choices():
    """{flag: its choices} of train.py's parser for the flags whose choices are registries."""
    p = config.parser()
    return {a.option_strings[0]: set(a.choices) for a in p._actions if a.choices and a.option_strings and
            a.option_strings[0] in ("--mode", "--lc", "--noise", "--dataset", "--select", "--peer-weight")}


def test_the_parser_offers_what_the_registries_hold():
    got = choices()
    assert got["--mode"] == set(mutual.MODES) and got["--lc"] == set(label_correction.LABEL_CORRECTIONS)
    assert got["--noise"] == set(noise.NOISE) and got["--dataset"] == set(datasets.DATASETS)
    assert plot.title("mode", "progressive") == "CMD-P" and plot.title("lc", "bootsoft") == "Boot-soft"
    for name, arch in models.ARCHS.items():  # every architecture is trained by a preset row of its own schedule
        assert any(p.schedule == arch.schedule for p in presets.rows()), name
    for name, d in datasets.DATASETS.items():
        assert d.arch in models.ARCHS, name


def test_the_docs_lists_of_choices_are_the_registries():
    """docs/training.md's flag list names every choice, and no doc names a choice that does not exist."""
    got = choices()
    manual = open(os.path.join(HERE, "docs", "training.md")).read()
    for flag, allowed in got.items():
        listed = re.findall(re.escape(flag) + r" \{([^}]+)\}", manual)
        assert listed and set(listed[0].split(",")) == allowed, (flag, listed)
    for doc in ("README.md", "docs/training.md", "docs/results.md", "docs/performance.md"):
        text = open(os.path.join(HERE, doc)).read()
        for flag, allowed in got.items():
            for found in re.findall(re.escape(flag) + r" \{([^}]+)\}", text):
                assert set(found.split(",")) <= allowed, (doc, flag, found)


def test_each_models_chi_from_chis_at_reaches_the_loss(tmp_path, monkeypatch):
    # a knob that gives each model its own χ changes Method.chis_at alone: what it returns reaches cmd_distill as
    # it is, model by model, in the step and in train.py (A passes nothing, B everything)
    assert Method(mode="static", eta=2.0, b=0.0).chis_at(1.0, 3, 4, 3) == (math.log(4) / 2,) * 3
    monkeypatch.setattr(Method, "chis_at", lambda self, t, total, k, m: (0.0, 5.0 + t))
    names = mutual.sum_names(2)
    sums = step_of(Method(mode="static"))
    assert sums[names.index("selected_a2b")] == 0 and sums[names.index("selected_b2a")] == 64
    # what the run shows is the χ the step used, each model's: the epoch line, metrics.jsonl, entropy_hist.npz,
    # from train.py and from tools.batched alike
    for run, entry in (("run", train.main), ("grid", batched.main)):
        out = str(tmp_path / run)
        entry(ONE_EPOCH + ["--mode", "static", "--out", out])
        d = out if run == "run" else os.path.join(out, next(iter(os.listdir(out))))
        row, = metrics(d)
        assert row["selected_a2b"] == 0 and row["selected_b2a"] == 1
        assert (row["chi"], row["chi_a"], row["chi_b"]) == (None, 0.0, 6.0)  # at the epoch's end, t = 1
        line = report.epoch_line(row)
        assert " | chi A 0.00 B 6.00 | taught b2a 1.00 a2b 0.00 |" in line
        with np.load(os.path.join(d, "entropy_hist.npz")) as h:
            assert h["chi_start_models"].tolist() == [[0.0, 5.0]] and h["chi_end_models"].tolist() == [[0.0, 6.0]]
            assert np.isnan(h["chi_start"]).all() and np.isnan(h["chi_end"]).all()  # no one χ of both
    monkeypatch.undo()
    out = str(tmp_path / "one")
    train.main(ONE_EPOCH + ["--mode", "static", "--eta", "2", "--out", out])
    row, = metrics(out)
    assert row["chi"] == pytest.approx(math.log(4) / 2) and "chi_a" not in row  # one χ: one number
