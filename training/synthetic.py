"""Synthetic image classification data, generated in memory (not in the paper; for CPU runs and tests).

Synthetic      -- the data set's settings: how many images and classes, how hard, the seed (--synthetic-*, --seed)
make_synthetic -- (train, test) uint8 images and labels from a seed: class-dependent smooth
                  patterns plus clutter, with a knob for how hard they are to tell apart
SYNTHETIC_MEAN, SYNTHETIC_STD -- the normalisation the generator is built for
"""
from typing import NamedTuple

import numpy as np
import torch

# The generator is built to have pixel mean ~128 and std ~57 in every channel.
SYNTHETIC_MEAN, SYNTHETIC_STD = (0.5, 0.5, 0.5), (0.225, 0.225, 0.225)


class Synthetic(NamedTuple):
    """The synthetic data set of load_dataset("synthetic") and make_synthetic; train.py fills it from
    --synthetic-size, --synthetic-test-size, --synthetic-classes, --synthetic-difficulty, --synthetic-shift
    and --seed."""
    size: int = 2000          # training images
    test_size: int = 1000     # test images
    classes: int = 10         # K, balanced in both sets
    difficulty: float = 2.0   # the clutter's pixel std over the signal's (0: no clutter)
    shift: int = 4            # a sample is its class's pattern shifted by up to this many px
    seed: int = 0             # the classes' patterns and both sets' samples


def make_synthetic(synthetic, side=32, band=4, n_freq=4, chunk=8192):
    """Learnable class-dependent images, generated in memory from synthetic.seed; not in the paper.

    synthetic: a Synthetic (how many images and classes, difficulty, shift, seed); side: the
    images' height and width. Each class owns n_freq of the ~40 plane waves with at most `band` cycles per
    image, each with its own colour and phase. A sample is its class's waves,
    shifted by up to `shift` px, times a contrast in [0.7, 1.3], plus Gaussian
    "clutter": random complex amplitudes on *all* the low-frequency waves. The
    clutter lives in the same band as the signal, so no filter removes it;
    `difficulty` is its pixel std over the signal's (0: no clutter). The default
    2.0 keeps a small CNN clearly below 100% after 10 epochs on 2,000 clean
    images, so label noise has room to hurt. Brightness jitter sits in the DC term.
    Built in the Fourier domain: a shift is a phase, and one irfft2 per chunk makes
    CIFAR-100-sized data (50k + 10k images) in about 3 s on 2 CPU cores.
    Returns (train, test), each (uint8 images (n, 3, side, side), int64 labels (n,)).
    Raises ValueError on impossible sizes.
    """
    n_train, n_test, k = synthetic.size, synthetic.test_size, synthetic.classes
    difficulty, shift, seed = synthetic.difficulty, synthetic.shift, synthetic.seed
    if min(n_train, n_test) < 1 or k < 2 or n_train < k or difficulty < 0 or side < 8 or shift < 0:
        raise ValueError(f"synthetic data needs >= 2 classes, >= 1 train image per class, >= 1 test image, "
                         f"difficulty >= 0, image size >= 8 and shift >= 0; got {n_train} train, {n_test} test, "
                         f"{k} classes, difficulty {difficulty}, size {side}, shift {shift}")
    band = min(band, side // 2 - 1)  # below the Nyquist frequency
    r_class, r_train, r_test = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3)]
    fy = np.fft.fftfreq(side, 1 / side)[:, None]  # (side, 1) cycles per image
    fx = np.fft.rfftfreq(side, 1 / side)[None]    # (1, side//2 + 1)
    low = (np.abs(fy) <= band) & (fx <= band) & ((fx > 0) | (fy > 0))  # one of each conjugate pair, no DC
    iy, ix = np.nonzero(low)
    n_waves = len(iy)
    picks = np.argsort(r_class.random((k, n_waves)), axis=1)[:, :n_freq]  # (k, n_freq)
    waves = np.zeros((k, 3, n_waves), np.complex64)
    waves[np.arange(k)[:, None, None], np.arange(3)[None, :, None], picks[:, None]] = (
        r_class.standard_normal((k, 3, n_freq)) * np.exp(2j * np.pi * r_class.random((k, 1, n_freq))))
    # Each wave adds 2|a|^2 to a pixel's variance: E = 2 n_freq for a class's waves.
    unit = 1 / np.sqrt(2 * n_freq * (1 + difficulty ** 2))
    sets = []
    for rng, n in ((r_train, n_train), (r_test, n_test)):
        y = rng.permutation(np.arange(n) % k)  # balanced classes
        dy, dx = rng.integers(-shift, shift + 1, (2, n, 1))
        contrast = rng.uniform(0.7, 1.3, (n, 1))
        bright = rng.normal(0, 0.2, n)
        clutter = rng.standard_normal((n, 3, n_waves, 2), dtype=np.float32) * float(np.sqrt(n_freq / n_waves / 2))
        phase = torch.from_numpy(-2 * np.pi * (fy[iy, 0] * dy + fx[0, ix] * dx) / side)  # (n, n_waves)
        amp = torch.polar(torch.from_numpy(contrast * unit).expand_as(phase), phase).to(torch.complex64)
        spec_low = torch.from_numpy(waves)[y] * amp[:, None] + torch.view_as_complex(
            torch.from_numpy(clutter)) * float(difficulty * unit)  # (n, 3, n_waves)
        # Pixel = 128.5 + 57 * (waves + bright); the 0.5 makes the uint8 cast round.
        dc = torch.from_numpy(128.5 + 57 * bright).to(torch.complex64)
        # irfft2 doubles a wave with fx > 0 (its conjugate is implied) but takes
        # only the real part of one with fx = 0, so those get twice the gain.
        gain = torch.from_numpy(np.where(ix == 0, 2 * 57, 57)).to(torch.complex64)
        spec = torch.zeros((min(n, chunk), 3, side, side // 2 + 1), dtype=torch.complex64)
        images = torch.empty((n, 3, side, side), dtype=torch.uint8)
        for s in range(0, n, chunk):
            m = len(spec_low[s:s + chunk])
            spec[:m, :, iy, ix] = spec_low[s:s + chunk] * gain
            spec[:m, :, 0, 0] = dc[s:s + chunk, None]
            images[s:s + m] = torch.fft.irfft2(spec[:m], s=(side, side), norm="forward").clamp_(0, 255)
        sets.append((images, y.astype(np.int64)))
    return sets[0], sets[1]
