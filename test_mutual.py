"""Tests for mutual.py: the step trains on Eqs. 3-6 with each label correction, and its epoch sums count what they name."""
import copy
import math

import pytest
import torch
import torch.nn.functional as F

import models
from label_correction import (boot_soft, confidence_penalty_loss, label_smoothing, mylc, one_hot, proselflc,
                              tfkd_reg_loss)
from losses import cmd_loss, entropy
from mutual import ENTROPY_BINS, LCS, MODES, EpochSums, Method, entropy_histogram, mutual_step

K, N = 5, 24
OFF = dict(device_type="cpu", dtype=torch.bfloat16, enabled=False)


def setup(seed=0):
    torch.manual_seed(seed)
    nets = [models.build_model("cnn", K) for _ in range(2)]
    opts = [torch.optim.SGD(n.parameters(), lr=0.1, momentum=0.9) for n in nets]
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(N, 3, 16, 16, generator=g)
    y_clean = torch.randint(0, K, (N,), generator=g)
    y = torch.where(torch.rand(N, generator=g) < 0.4, (y_clean + 1) % K, y_clean)  # some labels wrong
    return nets, opts, x, y, y_clean


def step(nets, opts, x, y, y_clean, method, chi, r=(0.7, 0.3), progress=0.6):
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    r = [torch.tensor(v) for v in r]
    sums, hist = mutual_step(nets, opts, x, y, y_clean, method=method, chi=chi, progress=progress, r=r,
                             autocast=OFF, scaler=scaler)
    assert hist.shape == (2, 2, ENTROPY_BINS) and hist.sum() == 2 * N  # every sample once per model
    return EpochSums(*sums.tolist())


def expected_self_loss(method, z, q, y, r, progress):
    """L_selfKD written from label_correction.py's functions, independently of mutual.py's dispatch."""
    p = F.softmax(z, -1)
    q_tilde = {"ce": q, "cp": q, "tfkd": q, "ls": label_smoothing(q, method.ls_eps), "bootsoft": boot_soft(q, p, 0.25),
               "proselflc": proselflc(q, p, progress, method.proselflc_b, method.proselflc_transit),
               "mylc": mylc(q, p, r, method.mylc_b1, method.mylc_rho)}[method.lc]
    if method.lc == "cp":
        return confidence_penalty_loss(z, q, method.cp_beta), q_tilde
    if method.lc == "tfkd":
        return tfkd_reg_loss(z, y), q_tilde
    return F.cross_entropy(z, q_tilde), q_tilde


@pytest.mark.parametrize("lc", LCS)
def test_step_minimises_eqs_5_and_6(lc):
    nets, opts, x, y, y_clean = setup()
    with torch.no_grad():  # train-mode forward of copies: the same logits the step sees
        z_a, z_b = (copy.deepcopy(n)(x) for n in nets)
    h_a, h_b = entropy(F.softmax(z_a, -1)), entropy(F.softmax(z_b, -1))
    chi = torch.cat([h_a, h_b]).median().item()  # some samples of each model pass, some do not
    method = Method(mode="static", lc=lc, eta=math.log(K) / chi, b=0.0)
    q = one_hot(y, K)
    self_a, qt_a = expected_self_loss(method, z_a, q, y, 0.7, 0.6)
    self_b, qt_b = expected_self_loss(method, z_b, q, y, 0.3, 0.6)
    l_b2a, l_a2b = cmd_loss(z_a, z_b, qt_a, qt_b, chi)
    s = step(nets, opts, x, y, y_clean, method, chi)
    assert s.loss_a / N == pytest.approx((self_a + l_b2a).item(), rel=1e-5)  # Eq. 5
    assert s.loss_b / N == pytest.approx((self_b + l_a2b).item(), rel=1e-5)  # Eq. 6
    assert s.selected_b2a == (h_b < chi).sum().item() and s.selected_a2b == (h_a < chi).sum().item()
    assert 0 < s.selected_b2a < N and 0 < s.selected_a2b < N and s.selected_a2b != s.selected_b2a
    # precision counts the taught target's argmax against the clean label
    assert s.clean_b2a == ((h_b < chi) & (qt_b.argmax(-1) == y_clean)).sum().item()
    assert s.clean_a2b == ((h_a < chi) & (qt_a.argmax(-1) == y_clean)).sum().item()
    # recall's numerator: selected samples whose given label is clean
    assert s.clean_label_b2a == ((h_b < chi) & (y == y_clean)).sum().item()


def test_epoch_sums_count_noise_memorisation_and_entropy():
    nets, opts, x, y, y_clean = setup(seed=3)
    with torch.no_grad():
        z_a, z_b = (copy.deepcopy(n)(x) for n in nets)
    s = step(nets, opts, x, y, y_clean, Method(mode="zero", lc="ce", eta=math.inf, b=0.0), chi=0.0)
    noisy = y != y_clean
    assert s.samples == N and s.noisy == noisy.sum().item() > 0
    assert s.memorized_a == (noisy & (z_a.argmax(-1) == y)).sum().item()
    assert s.memorized_b == (noisy & (z_b.argmax(-1) == y)).sum().item()
    assert s.entropy_a == pytest.approx(entropy(F.softmax(z_a, -1)).sum().item(), rel=1e-5)
    assert s.selected_b2a == s.selected_a2b == 0 and s.nonfinite == 0


def test_zero_knowledge_step_is_two_independent_cross_entropy_steps():
    nets, opts, x, y, y_clean = setup(seed=1)
    alone = [copy.deepcopy(n) for n in nets]
    alone_opts = [torch.optim.SGD(n.parameters(), lr=0.1, momentum=0.9) for n in alone]
    step(nets, opts, x, y, y_clean, Method(mode="zero", lc="ce", eta=math.inf, b=0.0), chi=0.0)
    for net, opt in zip(alone, alone_opts):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    for net, ref in zip(nets, alone):
        for p, p_ref in zip(net.parameters(), ref.parameters()):
            assert torch.allclose(p, p_ref, atol=1e-6)


@pytest.mark.parametrize("mode", ["mkd", "kdcl"])
def test_baselines_distil_everything_and_count_the_peer_prediction(mode):
    nets, opts, x, y, y_clean = setup(seed=2)
    with torch.no_grad():
        z_a, z_b = (copy.deepcopy(n)(x) for n in nets)
    s = step(nets, opts, x, y, y_clean, Method(mode=mode, lc="ce", eta=None, b=None), chi=None)
    assert s.selected_b2a == s.selected_a2b == N
    assert s.clean_b2a == (z_b.argmax(-1) == y_clean).sum().item()  # what B taught A: its prediction


def test_method_modes_and_chi():
    assert set(MODES) == {"zero", "all", "static", "progressive", "mkd", "kdcl"}
    assert Method(mode="zero", eta=math.inf, b=0.0).chi(3, 10, K) == 0.0
    assert Method(mode="all", eta=1.0, b=0.0).chi(3, 10, K) == pytest.approx(math.log(K))
    assert Method(mode="static", eta=4.0, b=0.0).chi(9.5, 10, K) == pytest.approx(math.log(K) / 4)
    progressive = Method()  # the defaults: CMD-P + MyLC, chi falls
    assert progressive.mode == "progressive" and progressive.lc == "mylc"
    assert progressive.chi(0, 10, K) > progressive.chi(5, 10, K) > progressive.chi(10, 10, K)
    assert Method(mode="mkd", eta=None, b=None).chi(3, 10, K) is None


def test_entropy_histogram_counts_each_sample_in_its_bin_and_split():
    k = 4
    ln_k = math.log(k)
    h = torch.tensor([[0.0, 0.26 * ln_k, 0.26 * ln_k, ln_k, ln_k * (1 + 1e-6)],  # model A
                      [0.99 * ln_k, 0.0, 0.5 * ln_k, 0.1, 0.1]])                  # model B
    noisy = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0])
    hist = entropy_histogram(h, noisy, k, bins=4)
    assert hist.shape == (2, 2, 4) and hist.sum() == 10
    assert hist[0, 0].tolist() == [1, 1, 0, 1]  # clean labels: H = 0, 0.26 ln K, ln K (+ rounding) in the last bin
    assert hist[0, 1].tolist() == [0, 1, 0, 1]  # noisy labels
    assert hist[1, 0].tolist() == [1, 0, 1, 1] and hist[1, 1].tolist() == [2, 0, 0, 0]
