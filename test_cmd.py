"""Property tests for the paper's equations: schedule.py, losses.py, label_correction.py, noise.py."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from appendix_code import paper_cmd_loss
from label_correction import (boot_soft, confidence_from_sum, confidence_penalty_loss, label_smoothing,
                              model_confidence, mylc, one_hot, proselflc)
from losses import cmd_distill, cmd_loss, entropy, log_probs, mkd_loss, t2s_kd_loss
from noise import NOISE, add_noise, flip_rows, max_rate, transition_matrix, truncated_normal
from schedule import chi, logistic

K = 10


def batch(n=64, k=K, scale=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    za = (scale * torch.randn(n, k, generator=g)).requires_grad_()
    zb = (scale * torch.randn(n, k, generator=g)).requires_grad_()
    qa = F.softmax(torch.randn(n, k, generator=g), -1)
    qb = F.softmax(torch.randn(n, k, generator=g), -1)
    return za, zb, qa, qb


# ---- schedule.py: Eq. 7 ----

def test_logistic_values_and_no_overflow():
    assert logistic(0.0, 5.0) == 0.5 and logistic(3.0, 0.0) == 0.5
    assert logistic(1.0, 2.0) == pytest.approx(1 / (1 + math.exp(-2)))
    assert logistic(-0.5, 5000.0) == 0.0 and logistic(0.5, 5000.0) == 1.0
    x = torch.tensor([-1.0, 0.0, 2.0])
    assert torch.allclose(logistic(x, 1.5), 1 / (1 + torch.exp(-1.5 * x)))


@pytest.mark.parametrize("eta", [0.5, 1.0, 2.0, 4.0])
def test_chi_static_when_b_is_zero(eta):
    for t in [0, 0.3, 17.5, 50, 100]:
        assert chi(t, 100, K, eta, 0.0) == pytest.approx(math.log(K) / eta, rel=1e-12)


def test_chi_midpoint_is_static_value_for_any_b():
    # 2 s(0, b) = 1: the 0.5 restored in Eq. 7 puts the static value at t = Gamma/2.
    for b in [-10, -1, 3, 12]:
        assert chi(50, 100, 100, 2.0, b) == pytest.approx(math.log(100) / 2)


@pytest.mark.parametrize("b,sign", [(4.0, 1), (-4.0, -1)])
def test_chi_monotone_in_t(b, sign):
    ts = np.linspace(0, 100, 201)  # fractional epochs
    values = np.array([chi(t, 100, 100, 2.0, b) for t in ts])
    assert np.all(sign * np.diff(values) > 0)
    assert values[0] == pytest.approx(math.log(100) / 2 * 2 * logistic(-0.5, b))


def test_chi_special_cases():
    assert chi(10, 100, K, math.inf, 3.0) == 0.0
    assert chi(10, 100, K, math.inf, 0.0) == 0.0
    assert chi(10, 100, K, -2.0, 0.0) < 0 and chi(90, 100, K, -0.5, 5.0) < 0
    for eta in [0.25, 0.5, 1.0]:
        assert chi(3, 100, K, eta, 0.0) >= math.log(K)
    with pytest.raises(ValueError, match="eta = 0"):
        chi(0, 100, K, 0, 0.0)


# ---- losses.py: entropy, Eqs. 3-6 ----

def test_entropy():
    p = torch.tensor([[1.0, 0, 0, 0], [0.25, 0.25, 0.25, 0.25], [0.5, 0.5, 0, 0]])
    h = entropy(p)
    assert h[0].item() == 0.0 and not torch.isnan(h).any()
    assert torch.allclose(h[1:], torch.tensor([math.log(4), math.log(2)]))
    logits = torch.randn(8, K)
    assert torch.allclose(log_probs(logits)[1], entropy(F.softmax(logits, -1)), atol=1e-6)
    assert log_probs(torch.tensor([[200.0, -200.0, 0.0]]))[1].item() == pytest.approx(0.0, abs=1e-6)


def test_cmd_loss_matches_paper_appendix_code():
    for seed in range(5):
        za, zb, qa, qb = batch(n=128, seed=seed, scale=2.0)
        pa, pb = F.softmax(za, -1), F.softmax(zb, -1)
        h_sorted = torch.cat([entropy(pa), entropy(pb)]).detach().sort().values
        i = 60 + 30 * seed  # thresholds between two entropies, from a quarter to most of the batch
        threshold = ((h_sorted[i] + h_sorted[i + 1]) / 2).item()
        # The paper's log(p + 1e-6) moves H by at most K * 1e-6; keep rows clear of the threshold.
        assert (torch.cat([entropy(pa), entropy(pb)]) - threshold).abs().min() > K * 1e-6
        ref_b2a, ref_a2b = paper_cmd_loss(qa, qb, pa.detach(), pb.detach(), threshold)
        b2a, a2b = cmd_loss(za, zb, qa, qb, threshold)
        # Reference CE uses -log(p + 1e-6): bound its difference from -log p per term.
        tol_b2a = (qb * torch.log1p(1e-6 / pa)).sum(-1).mean().item() + 1e-6
        tol_a2b = (qa * torch.log1p(1e-6 / pb)).sum(-1).mean().item() + 1e-6
        assert abs(b2a.item() - float(ref_b2a)) <= tol_b2a
        assert abs(a2b.item() - float(ref_a2b)) <= tol_a2b
        assert 0 < b2a.item() and 0 < a2b.item()


def test_cmd_loss_divides_by_batch_size_not_selected_count():
    za, zb, qa, qb = batch()
    h_b = log_probs(zb)[1]
    threshold = h_b.sort().values[10].item()  # exactly 10 samples of B are confident
    b2a, _ = cmd_loss(za, zb, qa, qb, threshold)
    logp_a = F.log_softmax(za, -1)
    sel = h_b < threshold
    assert sel.sum() == 10
    expected = -(qb[sel] * logp_a[sel]).sum() / len(za)
    assert torch.allclose(b2a, expected)


@pytest.mark.parametrize("eta", [0.25, 0.5, 1.0])
def test_all_knowledge_equals_plain_cross_entropy_to_peer_targets(eta):
    za, zb, qa, qb = batch()
    threshold = chi(7, 100, K, eta, 0.0)
    b2a, a2b = cmd_loss(za, zb, qa, qb, threshold)
    assert torch.allclose(b2a, F.cross_entropy(za, qb))  # soft-target CE, batch mean
    assert torch.allclose(a2b, F.cross_entropy(zb, qa))


@pytest.mark.parametrize("eta", [math.inf, -1.0, -0.1])
@pytest.mark.parametrize("b", [0.0, 5.0, -5.0])
def test_zero_knowledge_gives_exactly_zero_loss_and_gradient(eta, b):
    za, zb, qa, qb = batch()
    qa = one_hot(torch.randint(0, K, (64,)), K)  # even exact one-hot targets
    b2a, a2b = cmd_loss(za, zb, qa, qb, chi(30, 100, K, eta, b))
    assert b2a.item() == 0.0 and a2b.item() == 0.0
    (b2a + a2b).backward()
    assert torch.count_nonzero(za.grad) == 0 and torch.count_nonzero(zb.grad) == 0


def test_no_gradient_reaches_the_peer():
    za, zb, qa, qb = batch()
    qa = qa.clone().requires_grad_()
    qb = qb.clone().requires_grad_()
    b2a, a2b = cmd_loss(za, zb, qa, qb, 2.0)
    assert b2a.item() > 0
    b2a.backward()
    assert za.grad.abs().sum() > 0
    assert zb.grad is None and qa.grad is None and qb.grad is None
    za.grad = None
    a2b.backward()
    assert zb.grad.abs().sum() > 0 and za.grad is None and qa.grad is None


def test_selection_is_strict_and_reads_the_peer_entropy():
    # A's entropy is ln K (uniform); B is one-hot confident on the first row only.
    za = torch.zeros(2, K)
    zb = torch.tensor([[50.0] + [0.0] * (K - 1), [0.0] * K])
    q = one_hot(torch.tensor([1, 2]), K)
    h_uniform = log_probs(za)[1][0].item()  # ln K as float32 computes it
    assert h_uniform == pytest.approx(math.log(K))
    b2a, a2b = cmd_loss(za, zb, q, q, h_uniform)
    assert b2a.item() == pytest.approx(math.log(K) / 2)  # row 0 only: H(q, u) = ln K, divided by N = 2
    assert a2b.item() == 0.0  # H(p_A) = chi is not < chi


@pytest.mark.parametrize("as_tensor", [False, True])
@pytest.mark.parametrize("fn", ["cmd_distill", "cmd_loss"])
def test_a_prediction_whose_entropy_is_chi_exactly_is_not_taught_either_way(fn, as_tensor):
    # Eq. 3's strict <, as in the appendix code. Row 0: A and B uniform; row 1: A confident, B uniform;
    # row 2: B confident, A uniform. chi is H(u) as float32 computes it, so a uniform row sits exactly at chi.
    za, zb = torch.zeros(3, K), torch.zeros(3, K)
    za[1, 3], zb[2, 5] = 8.0, 8.0
    q_a, q_b = one_hot(torch.tensor([1, 2, 3]), K), one_hot(torch.tensor([4, 5, 6]), K)
    (logp_a, h_a), (logp_b, h_b) = log_probs(za), log_probs(zb)
    at = h_a[0]  # H(u), float32
    assert torch.equal(h_a[[0, 2]], at.expand(2)) and torch.equal(h_b[[0, 1]], at.expand(2))  # exactly at chi
    assert h_a[1] < at and h_b[2] < at
    ce_b2a, ce_a2b = -(q_b * logp_a).sum(-1), -(q_a * logp_b).sum(-1)  # (3,) H(q_B, p_A), H(q_A, p_B)
    above = torch.nextafter(at, torch.tensor(math.inf))  # the next float32 up: every row passes
    for threshold, want_b2a, want_a2b in ((at, [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]), (above, [1.0] * 3, [1.0] * 3)):
        threshold = threshold if as_tensor else threshold.item()
        want_b2a, want_a2b = torch.tensor(want_b2a), torch.tensor(want_a2b)
        if fn == "cmd_distill":
            b2a, a2b, m_b2a, m_a2b = cmd_distill(logp_a, logp_b, q_a, q_b, h_a, h_b, threshold)
            assert torch.equal(m_b2a, want_b2a) and torch.equal(m_a2b, want_a2b)
        else:
            b2a, a2b = cmd_loss(za, zb, q_a, q_b, threshold)
        assert torch.allclose(b2a, (want_b2a * ce_b2a).mean(), rtol=1e-6, atol=0)  # B taught A row 2 alone
        assert torch.allclose(a2b, (want_a2b * ce_a2b).mean(), rtol=1e-6, atol=0)  # A taught B row 1 alone


def test_cmd_loss_runs_on_meta_tensors():
    za, zb, qa, qb = (torch.empty(32, 100, device="meta") for _ in range(4))
    b2a, a2b = cmd_loss(za.requires_grad_(), zb.requires_grad_(), qa, qb, 1.3)
    assert b2a.device.type == "meta" and b2a.shape == () and a2b.shape == ()
    logp, h = log_probs(za)
    b2a, a2b, m_b2a, m_a2b = cmd_distill(logp, logp, qa, qb, h, h, 1.3)
    assert b2a.device.type == "meta" and m_b2a.shape == (32,)


def test_cmd_loss_takes_integer_labels_as_one_hot_targets():
    for n, k in [(64, K), (K, K), (7, 3)]:  # N == K is the case a silent broadcast would get wrong
        za, zb, _, _ = batch(n=n, k=k)
        ya, yb = torch.randint(0, k, (n,)), torch.randint(0, k, (n,))
        for chi_value in [0.5 * math.log(k), 2 * math.log(k)]:
            got = cmd_loss(za, zb, ya, yb, chi_value)
            want = cmd_loss(za, zb, one_hot(ya, k), one_hot(yb, k), chi_value)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        b2a, _ = cmd_loss(za, zb, ya, yb, 2 * math.log(k))  # all knowledge: plain CE to B's labels
        assert torch.allclose(b2a, F.cross_entropy(za, yb))


@pytest.mark.parametrize("bad", [torch.zeros(8), torch.zeros(8, 5), torch.zeros(8, K, dtype=torch.long),
                                 torch.zeros(4, K), torch.zeros(8, 1, K), torch.zeros(K, dtype=torch.long),
                                 torch.zeros(8, dtype=torch.bool)])  # a mask passed by mistake, not labels
def test_cmd_loss_refuses_other_target_shapes(bad):
    za, zb, qa, _ = batch(n=8)
    with pytest.raises(ValueError, match="q_b must be .N,. integer class labels or .N, K. float targets"):
        cmd_loss(za, zb, qa, bad, 1.0)


def test_cmd_distill_masks_are_the_selection_and_gradient_stays_with_the_student():
    za, zb, qa, qb = batch()
    logp_a, h_a = log_probs(za)
    logp_b, h_b = log_probs(zb)
    threshold = h_a.median().item()
    b2a, a2b, m_b2a, m_a2b = cmd_distill(logp_a, logp_b, qa, qb, h_a, h_b, threshold)
    assert torch.equal(m_b2a, (h_b < threshold).float()) and torch.equal(m_a2b, (h_a < threshold).float())
    assert 0 < m_a2b.mean() < 1
    assert torch.equal(b2a, cmd_loss(za, zb, qa, qb, threshold)[0])  # cmd_loss is this function from logits
    b2a.backward()
    assert zb.grad is None and za.grad.abs().sum() > 0


def test_mkd_loss_is_ce_plus_class_summed_kl_with_detached_peer():
    za, zb, _, q = batch()
    eps = 0.3
    la, lb = mkd_loss(za, zb, q, eps)
    pa, pb = F.softmax(za, -1), F.softmax(zb, -1)
    kl_ba = F.kl_div(F.log_softmax(za, -1), pb, reduction="batchmean")
    assert torch.allclose(la, (1 - eps) * F.cross_entropy(za, q) + eps * kl_ba)
    kl_ab = (pa * (pa.log() - pb.log())).sum(-1).mean()
    assert torch.allclose(lb, (1 - eps) * F.cross_entropy(zb, q) + eps * kl_ab, atol=1e-6)
    la.backward()
    assert zb.grad is None
    # Eq. 1 with the teacher equal to the student: KL = 0, only CE remains.
    assert torch.allclose(t2s_kd_loss(za, za, q, 0.7), 0.3 * F.cross_entropy(za, q))


# ---- label_correction.py ----

def test_targets_at_eps_zero_are_the_label():
    q = one_hot(torch.randint(0, K, (16,)), K)
    p = F.softmax(torch.randn(16, K), -1)
    assert torch.equal(label_smoothing(q, 0.0), q)
    assert torch.equal(boot_soft(q, p, 0.0), q)
    assert torch.allclose(proselflc(q, p, 0.3, 0.0, transit=0.3) * 0 + proselflc(q, p, 0.0, 1e4), q)  # g -> 0
    assert torch.allclose(mylc(q, p, 0.0, 1e4), q)  # r far below rho: g -> 0


def test_label_smoothing_and_boot_soft_formulas():
    q = one_hot(torch.tensor([2, 0]), 4)
    assert torch.allclose(label_smoothing(q, 0.4)[0], torch.tensor([0.1, 0.1, 0.7, 0.1]))
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]], requires_grad=True)
    qt = boot_soft(q, p, 0.5)
    assert torch.allclose(qt[0], torch.tensor([0.05, 0.1, 0.65, 0.2])) and not qt.requires_grad


@pytest.mark.parametrize("fn", ["proselflc", "mylc"])
def test_adaptive_eps_trusts_confident_not_uniform_predictions(fn):
    q = one_hot(torch.tensor([0, 0]), K)
    confident = torch.zeros(K)
    confident[3] = 1.0
    p = torch.stack([confident, torch.full((K,), 1 / K)])
    qt = proselflc(q, p, 1.0, 1e4) if fn == "proselflc" else mylc(q, p, 1.0, 1e4)  # g(.) = 1
    assert torch.allclose(qt[0], confident, atol=1e-6)  # l(p) = 1: the target becomes the prediction
    assert torch.allclose(qt[1], q[1], atol=1e-6)  # l(u) = 0: the label is kept
    assert torch.allclose(qt.sum(-1), torch.ones(2))


def test_proselflc_eps_formula():
    q = one_hot(torch.tensor([1]), K)
    p = F.softmax(torch.randn(1, K), -1)
    progress, b, transit = 0.8, 6.0, 0.3
    eps = (1 / (1 + math.exp(-(progress - transit) * b))) * (1 - entropy(p).item() / math.log(K))
    expected = (1 - eps) * q + eps * p
    assert torch.allclose(proselflc(q, p, progress, b, transit), expected, atol=1e-6)
    assert torch.allclose(proselflc(q, p, progress, b, transit, h=entropy(p)), expected, atol=1e-6)


def test_mylc_eps_formula_and_model_confidence():
    p = F.softmax(2 * torch.randn(32, K), -1)
    r = model_confidence(p)
    assert torch.allclose(r, 1 - entropy(p).sum() / (32 * math.log(K)))
    assert model_confidence(torch.full((4, K), 1 / K)).item() == pytest.approx(0.0, abs=1e-6)
    assert model_confidence(one_hot(torch.arange(4), K)).item() == 1.0
    q = one_hot(torch.randint(0, K, (32,)), K)
    g = 1 / (1 + math.exp(-(r.item() - 0.5) * 10))
    eps = g * (1 - entropy(p) / math.log(K))[:, None]
    assert torch.allclose(mylc(q, p, r, 10.0), (1 - eps) * q + eps * p, atol=1e-6)
    assert torch.allclose(mylc(q, p, r.item(), 10.0, h=entropy(p)), (1 - eps) * q + eps * p, atol=1e-6)


def test_confidence_from_sum_is_eq8_of_the_summed_entropies():
    p_a, p_b = F.softmax(3 * torch.randn(50, K), -1), F.softmax(torch.randn(50, K), -1)
    chunks = [sum(entropy(c).sum() for c in p.split(16)) for p in (p_a, p_b)]  # as the loop adds them up
    r_a, r_b = confidence_from_sum(chunks, 50, K)  # one r per model
    assert torch.allclose(r_a, model_confidence(p_a)) and torch.allclose(r_b, model_confidence(p_b))
    assert r_a > r_b  # the sharper model is the more confident
    assert confidence_from_sum([50 * math.log(K), 0.0], 50, K) == [pytest.approx(0.0), 1.0]  # uniform: 0; one-hot: 1


def test_confidence_penalty_loss():
    z = torch.randn(8, K, requires_grad=True)
    q = one_hot(torch.randint(0, K, (8,)), K)
    beta = 0.3
    expected = F.cross_entropy(z, q) - beta * entropy(F.softmax(z, -1)).mean()
    assert torch.allclose(confidence_penalty_loss(z, q, beta), expected)
    assert torch.allclose(confidence_penalty_loss(z, q, 0.0), F.cross_entropy(z, q))
    logp = F.log_softmax(z, -1)  # the training step passes the log-probabilities it already has
    assert torch.equal(confidence_penalty_loss(z, q, beta, logp=logp), confidence_penalty_loss(z, q, beta))
    g1, = torch.autograd.grad(confidence_penalty_loss(z, q, beta), z)
    g2, = torch.autograd.grad(expected, z)
    assert torch.allclose(g1, g2, atol=1e-6)  # the entropy term carries gradient: confident p is penalised


# ---- noise.py ----

def test_transition_matrices():
    for kind in ["sym", "pair"]:
        t = transition_matrix(kind, 0.4, K)
        assert np.allclose(t.sum(1), 1) and np.allclose(np.diag(t), 0.6)
    sym = transition_matrix("sym", 0.4, K)
    off = sym[~np.eye(K, dtype=bool)]
    assert np.allclose(off, 0.4 / (K - 1))
    pair = transition_matrix("pair", 0.2, K)
    for c in range(K):
        assert pair[c, (c + 1) % K] == pytest.approx(0.2)
        assert np.count_nonzero(pair[c]) == 2
    assert np.array_equal(transition_matrix("none", 0.4, K), np.eye(K))
    assert np.array_equal(transition_matrix("sym", 0.0, K), np.eye(K))
    for bad in [-0.1, 1.0, 1.5]:
        with pytest.raises(ValueError, match=r"\[0, 1\)"):
            transition_matrix("sym", bad, K)
    with pytest.raises(ValueError, match="is unknown"):
        transition_matrix("asym", 0.2, K)
    with pytest.raises(ValueError, match="has no transition matrix"):
        transition_matrix("idn", 0.2, K)


@pytest.mark.parametrize("kind,rate", [("sym", 0.2), ("sym", 0.6), ("pair", 0.4)])
def test_add_noise_rate_structure_and_determinism(kind, rate):
    n, k = 20000, 100
    clean = np.random.default_rng(1).integers(0, k, n)
    before = clean.copy()
    noisy = add_noise(clean, kind, rate, k, seed=7)
    assert np.array_equal(clean, before) and noisy is not clean and noisy.dtype == np.int64
    flipped = noisy != clean
    tol = 4 * math.sqrt(rate * (1 - rate) / n)  # four binomial standard deviations
    assert abs(flipped.mean() - rate) < tol
    if kind == "pair":
        assert np.array_equal(noisy[flipped], (clean[flipped] + 1) % k)
    else:  # flips spread over the other classes: each destination gets about r/(K-1)
        counts = np.bincount((noisy[flipped] - clean[flipped]) % k, minlength=k)
        assert counts[0] == 0 and counts[1:].min() > 0.5 * counts[1:].mean()
    assert np.array_equal(add_noise(clean, kind, rate, k, seed=7), noisy)
    assert not np.array_equal(add_noise(clean, kind, rate, k, seed=8), noisy)


def images_of(n, seed, size=6):
    """n random uint8 images (n, 3, size, size): the inputs a kind that depends on the sample draws from."""
    return np.random.default_rng(seed).integers(0, 256, (n, 3, size, size), dtype=np.uint8)


@pytest.mark.parametrize("kind", [k for k, x in NOISE.items() if x.takes_rate])
def test_every_noise_kind_flips_about_its_rate_and_its_seed_fixes_the_flips(kind):
    # every kind that takes --rate, whatever it is made of (a matrix, or each sample's own row), so that a new
    # one is tested here without a line of its own
    x, n = NOISE[kind], 4000
    k = max(10, x.min_classes)
    assert (x.matrix is None) != (x.rows is None), f"{kind}: a kind that takes a rate draws from a matrix or rows"
    clean = np.random.default_rng(1).integers(0, k, n)
    inputs = images_of(n, 2)
    for rate in (0.2, min(0.4, x.max_rate / 2)):
        for seed in range(3):
            noisy = add_noise(clean, kind, rate, k, seed=seed, inputs=inputs)
            # within four binomial standard deviations, and 0.02 for idn's truncation of its flip rates at 0
            assert abs((noisy != clean).mean() - rate) < 0.02 + 4 * math.sqrt(rate * (1 - rate) / n), (rate, seed)
            assert np.array_equal(add_noise(clean, kind, rate, k, seed=seed, inputs=inputs), noisy)
        assert not np.array_equal(add_noise(clean, kind, rate, k, seed=seed + 1, inputs=inputs), noisy)
    assert np.array_equal(add_noise(clean, kind, 0.0, k, seed=0, inputs=inputs), clean)


@pytest.mark.parametrize("kind", [k for k, x in NOISE.items() if x.takes_rate])
@pytest.mark.parametrize("k", [2, 4, 10])
def test_no_kind_draws_at_a_rate_where_a_wrong_class_is_as_likely_as_the_true_one(kind, k):
    """Every kind drawn at a rate takes the rates below (K - 1)/K and its own bound (max_rate), and refuses the rest:
    at (K - 1)/K symmetric noise is uniform, and above it each wrong class is likelier than the true one."""
    if k < NOISE[kind].min_classes:
        return
    bound = max_rate(kind, k)
    assert bound <= (k - 1) / k and bound <= NOISE[kind].max_rate
    clean = np.random.default_rng(1).integers(0, k, 200)
    inputs = images_of(200, 2)
    for rate in (bound, (bound + 1) / 2):
        with pytest.raises(ValueError, match=f"use a rate below {bound:g}"):
            add_noise(clean, kind, rate, k, seed=0, inputs=inputs)
    below = add_noise(clean, kind, bound - 0.01, k, seed=0, inputs=inputs)
    assert (below != clean).mean() > 0  # a rate just below it is drawn
    if NOISE[kind].matrix is not None:  # and where it is drawn, the true class is the likeliest label of its row
        t = transition_matrix(kind, bound - 0.01, k)
        assert (np.diag(t) > t.max(1, where=~np.eye(k, dtype=bool), initial=0)).all()


@pytest.mark.parametrize("kind", [k for k, x in NOISE.items() if x.rows is not None])
def test_a_kind_that_depends_on_the_sample_flips_by_its_input(kind):
    """The same labels, seed and rate with other images: other flips; each row is a distribution that keeps the
    label with the sample's own probability; without its inputs, add_noise refuses."""
    k, n = 10, 2000
    clean = np.random.default_rng(1).integers(0, k, n)
    a, b = (add_noise(clean, kind, 0.4, k, seed=0, inputs=images_of(n, s)) for s in (2, 3))
    assert (a != b).mean() > 0.1  # other images: other labels for many samples
    rows = NOISE[kind].rows(images_of(n, 2), clean, 0.4, k, np.random.default_rng(0))
    assert rows.shape == (n, k) and (rows >= 0).all() and np.allclose(rows.sum(1), 1)
    kept = rows[np.arange(n), clean]
    assert kept.std() > 0.01  # each sample its own rate
    with pytest.raises(ValueError, match="draws each label from its sample's input"):
        add_noise(clean, kind, 0.4, k, seed=0)


def test_idn_rows_are_the_authors_from_the_same_draws():
    """xiaoboxia/Part-dependent-label-noise (and CDR's tools.py): get_instance_noisy_label, its loop over samples in
    torch float32, fed the flip rates and projections W that noise.flip_rows is fed, and the images as their
    dataset_split passes them: torch.from_numpy(train_images).float(), the stored uint8 pixels 0..255."""
    from math import inf  # their code's name, as they import it
    n, k = 300, 5
    labels = np.random.default_rng(4).integers(0, k, n)
    images = images_of(n, 5, size=4)
    rng = np.random.default_rng(6)
    flip_rate = rng.uniform(0, 1, n)
    W = torch.FloatTensor(rng.standard_normal((k, 48, k), dtype=np.float32))
    P = []
    data = torch.from_numpy(images).float()  # their tools.dataset_split, for mnist, fmnist and cifar10 alike
    for i, (x, y) in enumerate(zip(data, labels)):
        A = x.view(1, -1).mm(W[y]).squeeze(0)
        A[y] = -inf
        A = flip_rate[i] * F.softmax(A, dim=0)
        A[y] += 1 - flip_rate[i]
        P.append(A)
    P = torch.stack(P, 0).numpy()
    # at 0..255 two classes' logits can lie within float32's rounding of a sum of thousands: 1e-5, not 1e-6
    assert np.allclose(flip_rows(images.reshape(n, -1), labels, flip_rate, W.numpy()), P, atol=1e-5)


@pytest.mark.parametrize("mean", [0.05, 0.2, 0.4, 0.9])
def test_idn_flip_rates_are_their_truncated_normal(mean):
    """noise.truncated_normal against scipy.stats.truncnorm, which their code draws from: its mean and standard
    deviation within 4 standard errors, over [0, 1], at std 0.1."""
    from scipy import stats  # the distribution their code draws from, to compare with
    n, std = 200_000, 0.1
    q = truncated_normal(np.random.default_rng(0), mean, std, n)
    ref = stats.truncnorm((0 - mean) / std, (1 - mean) / std, loc=mean, scale=std)
    assert q.min() >= 0 and q.max() <= 1
    assert abs(q.mean() - ref.mean()) < 4 * ref.std() / math.sqrt(n)
    assert abs(q.std() - ref.std()) < 0.002


@pytest.mark.parametrize("kind", [k for k, x in NOISE.items() if x.matrix is not None and x.takes_rate])
def test_every_noise_kind_is_a_transition_matrix_that_add_noise_draws_from(kind):
    # every kind of the registry, so that a new one is tested here without a line of its own
    x, k, n = NOISE[kind], max(10, NOISE[kind].min_classes), 20000
    rate = min(0.4, x.max_rate / 2)
    t = transition_matrix(kind, rate, k)
    assert t.shape == (k, k) and (t >= 0).all() and np.allclose(t.sum(1), 1) and np.allclose(np.diag(t), 1 - rate)
    clean = np.random.default_rng(2).integers(0, k, n)
    noisy = add_noise(clean, kind, rate, k, seed=3)
    drawn = np.zeros((k, k))
    np.add.at(drawn, (clean, noisy), 1)
    drawn /= drawn.sum(1, keepdims=True)
    assert np.abs(drawn - t).max() < 0.05  # each clean class's labels follow its row of T
    with pytest.raises(ValueError, match=f"at least {x.min_classes} classes"):
        transition_matrix(kind, rate, x.min_classes - 1)


def test_add_noise_fixed_seed_is_machine_independent():
    # PCG64 with a fixed seed is specified bit-for-bit, so these labels are the same everywhere.
    noisy = add_noise(np.zeros(12, dtype=np.int64), "sym", 0.5, 4, seed=0)
    u = np.random.default_rng(0).random(12)
    expected = np.where(u < 0.5, 0, np.where(u < 0.5 + 0.5 / 3, 1, np.where(u < 0.5 + 1 / 3, 2, 3)))
    assert np.array_equal(noisy, expected)
    assert np.array_equal(add_noise([3, 1], "none", 0.4, 4, seed=0), [3, 1])
