"""Tests for mutual.py: the step trains on Eqs. 3-6 with each label correction, and its epoch sums count what they name."""
import copy
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import models
from label_correction import (LABEL_CORRECTIONS, boot_soft, confidence_penalty_loss, label_smoothing, mylc, one_hot,
                              proselflc)
from losses import cmd_loss, entropy
from mutual import ENTROPY_BINS, LCS, MODES, Clock, Method, Precision, entropy_histogram, mutual_step, sum_names

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
    precision = Precision(OFF, torch.amp.GradScaler("cpu", enabled=False))
    r = [torch.tensor(v) for v in r]
    clock = Clock(epoch=round(progress * 10), batch=0, batches=1, epochs=10, seed=0)  # t/Γ = progress
    assert clock.progress == progress
    sums, hist = mutual_step(nets, opts, (x, y, y_clean), method, chi, r, clock, precision)
    assert hist.shape == (len(nets), 2, ENTROPY_BINS) and hist.sum() == len(nets) * N  # every sample once per model
    return SimpleNamespace(**dict(zip(sum_names(len(nets)), sums.tolist())))


def expected_self_loss(method, z, q, y, r, progress, k):
    """L_selfKD written from label_correction.py's functions, independently of mutual.py's dispatch."""
    p = F.softmax(z, -1)
    oracle = {"ce": q, "cp": q, "ls": label_smoothing(q, method.ls_eps), "bootsoft": boot_soft(q, p, 0.25),
              "proselflc": proselflc(q, p, progress, method.proselflc_b, method.proselflc_transit),
              "mylc": mylc(q, p, r, method.mylc_b1, method.mylc_rho)}
    if method.lc not in oracle:  # a correction not written out here (its own oracle test checks its formula): its
        # entry's, so that what this test checks of it is Eqs. 5-6's sum and the selection
        entry = LABEL_CORRECTIONS[method.lc]
        q_tilde = q if entry.target is None else entry.target(q, p, entropy(p), r, progress, method)
        if entry.loss is None:
            return F.cross_entropy(z, q_tilde), q_tilde
        clock = Clock(epoch=round(progress * 10), batch=0, batches=1, epochs=10, seed=0)
        return entry.loss(z, F.log_softmax(z, -1), q, y, method, clock), q_tilde
    q_tilde = oracle[method.lc]
    if method.lc == "cp":
        return confidence_penalty_loss(z, q, method.cp_beta), q_tilde
    return F.cross_entropy(z, q_tilde), q_tilde


@pytest.mark.parametrize("lc", LCS)
def test_step_minimises_eqs_5_and_6(lc):
    nets, opts, x, y, y_clean = setup()
    with torch.no_grad():  # train-mode forward of copies: the same logits the step sees
        z_a, z_b = (copy.deepcopy(n)(x) for n in nets)
    h_a, h_b = entropy(F.softmax(z_a, -1)), entropy(F.softmax(z_b, -1))
    chi = torch.cat([h_a, h_b]).median().item()  # some samples of each model pass, some do not
    method = Method(mode="static", lc=lc, eta=math.log(K) / chi, b=0.0, noise=("sym", 0.4))
    q = one_hot(y, K)
    self_a, qt_a = expected_self_loss(method, z_a, q, y, 0.7, 0.6, 0)
    self_b, qt_b = expected_self_loss(method, z_b, q, y, 0.3, 0.6, 1)
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


def test_mkd_distils_everything_and_counts_the_peer_prediction():
    nets, opts, x, y, y_clean = setup(seed=2)
    with torch.no_grad():
        z_a, z_b = (copy.deepcopy(n)(x) for n in nets)
    s = step(nets, opts, x, y, y_clean, Method(mode="mkd", lc="ce", eta=None, b=None), chi=None)
    assert s.selected_b2a == s.selected_a2b == N
    assert s.clean_b2a == (z_b.argmax(-1) == y_clean).sum().item()  # what B taught A: its prediction


def test_method_modes_and_chi():
    assert {"zero", "all", "static", "progressive", "mkd"} <= set(MODES)  # the paper's (and any a program registers)
    assert Method(mode="zero", eta=math.inf, b=0.0).chi_at(3, 10, K) == 0.0
    assert Method(mode="all", eta=1.0, b=0.0).chi_at(3, 10, K) == pytest.approx(math.log(K))
    assert Method(mode="static", eta=4.0, b=0.0).chi_at(9.5, 10, K) == pytest.approx(math.log(K) / 4)
    progressive = Method()  # the defaults: CMD-P + MyLC, chi falls
    assert progressive.mode == "progressive" and progressive.lc == "mylc"
    assert progressive.chi_at(0, 10, K) > progressive.chi_at(5, 10, K) > progressive.chi_at(10, 10, K)
    assert Method(mode="mkd", eta=None, b=None).chi_at(3, 10, K) is None


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


# ---- cohorts of M > 2 models ----

def pair_step_oracle(nets, opts, x, y, method, chi, r, progress):
    """The pair's step written out for two models, as §3 reads: an oracle for the cohort code at M = 2."""
    from label_correction import one_hot as oh
    from losses import cmd_distill, log_probs
    from mutual import self_loss, targets
    z_a, z_b = nets[0](x), nets[1](x)
    logp_a, h_a = log_probs(z_a)
    logp_b, h_b = log_probs(z_b)
    q = oh(y, z_a.shape[-1])
    clock = Clock(epoch=round(progress * 10), batch=0, batches=1, epochs=10, seed=0)  # t/Γ = progress, as step()'s
    q_a = targets(method, q, logp_a.detach().exp(), h_a, r[0], clock)
    q_b = targets(method, q, logp_b.detach().exp(), h_b, r[1], clock)
    loss_b2a, loss_a2b, _, _ = cmd_distill(logp_a, logp_b, q_a, q_b, h_a, h_b, chi)
    loss_a = self_loss(method, z_a, logp_a, q, q_a, y, clock) + loss_b2a
    loss_b = self_loss(method, z_b, logp_b, q, q_b, y, clock) + loss_a2b
    for o in opts:
        o.zero_grad(set_to_none=True)
    (loss_a + loss_b).backward()
    for o in opts:
        o.step()
    return loss_a, loss_b


@pytest.mark.parametrize("lc", LCS)
def test_a_cohort_of_two_is_the_pair_bit_for_bit(lc):
    nets, opts, x, y, y_clean = setup(seed=4)
    twins = [copy.deepcopy(n) for n in nets]
    twin_opts = [torch.optim.SGD(n.parameters(), lr=0.1, momentum=0.9) for n in twins]
    method = Method(mode="static", lc=lc, eta=2.0, b=0.0, noise=("sym", 0.4))
    chi, r = math.log(K) / 1.2, (0.7, 0.3)
    s = step(nets, opts, x, y, y_clean, method, chi, r=r)
    loss_a, loss_b = pair_step_oracle(twins, twin_opts, x, y, method, chi, [torch.tensor(v) for v in r], 0.6)
    assert s.loss_a == (loss_a.detach() * N).item() and s.loss_b == (loss_b.detach() * N).item()
    for net, twin in zip(nets, twins):
        assert all(torch.equal(p, q) for p, q in zip(net.parameters(), twin.parameters()))


def test_a_cohort_learns_the_mean_of_what_its_confident_peers_teach():
    torch.manual_seed(6)  # a seed whose three fresh models' entropy ranges overlap
    m = 3
    nets = [models.build_model("cnn", K) for _ in range(m)]
    opts = [torch.optim.SGD(n.parameters(), lr=0.1) for n in nets]
    _, _, x, y, y_clean = setup(seed=6)
    with torch.no_grad():
        z = [copy.deepcopy(n)(x) for n in nets]
    h = [entropy(F.softmax(z_k, -1)) for z_k in z]
    lo, hi = max(h_k.min().item() for h_k in h), min(h_k.max().item() for h_k in h)
    assert lo < hi
    chi = (lo + hi) / 2  # inside every model's range: each teaches on some samples and not on others
    method = Method(mode="static", lc="ls", eta=math.log(K) / chi, b=0.0)
    q_tilde = label_smoothing(one_hot(y, K), method.ls_eps)
    s = step(nets, opts, x, y, y_clean, method, chi, r=(0.5,) * m)
    for k, name in enumerate("abc"):
        taught = [cmd_loss(z[k], z[j], q_tilde, q_tilde, chi)[0] for j in range(m) if j != k]  # what j teaches k
        expected = F.cross_entropy(z[k], q_tilde) + sum(taught) / (m - 1)
        assert getattr(s, f"loss_{name}") / N == pytest.approx(expected.item(), rel=1e-5)
    for j, teacher in enumerate("abc"):
        for k, student in enumerate("abc"):
            if j != k:  # j teaches k where j is confident, whoever k is
                assert 0 < getattr(s, f"selected_{teacher}2{student}") == (h[j] < chi).sum().item() < N


def test_dml_of_a_cohort_is_mkd_at_two_and_averages_over_peers():
    from losses import dml_loss, mkd_loss, t2s_kd_loss
    g = torch.Generator().manual_seed(6)
    z = [3 * torch.randn(16, K, generator=g) for _ in range(3)]
    y = torch.randint(0, K, (16,), generator=g)
    q = one_hot(y, K)
    assert all(torch.equal(a, b) for a, b in zip(dml_loss(z[:2], q, 0.3), mkd_loss(z[0], z[1], q, 0.3)))
    for k, loss in enumerate(dml_loss(z, q, 0.3)):  # DML: CE plus the mean KL to the peers
        kl = [F.kl_div(F.log_softmax(z[k], -1), F.softmax(z[j], -1), reduction="batchmean") for j in range(3) if j != k]
        assert torch.allclose(loss, 0.7 * F.cross_entropy(z[k], q) + 0.3 * sum(kl) / 2, atol=1e-6)
        assert torch.allclose(loss, sum(t2s_kd_loss(z[k], z[j], q, 0.3) for j in range(3) if j != k) / 2)
