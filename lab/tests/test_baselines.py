"""Tests of the lab's pair methods (lab/methods/: Co-teaching, Co-teaching+, JoCoR, KDCL) and GCE, and their place in
mutual_step and train.py.

Each method is checked on one fixed batch against a plain reference written here, sample by sample, from its
paper's algorithm; the fixtures are asymmetric (A and B rank the samples differently) so that a model
learning its own selection instead of its peer's, or A swapped with B, fails.
"""
import copy
import math

import pytest
import torch
import torch.nn.functional as F
from test_mutual import setup
from test_train import TINY, metrics

import train
import lab
import mutual
from lab.methods.coteaching import (COTEACH_PLUS_STEPS, coteach_plus_early, coteach_plus_rule, coteaching,
                                    coteaching_plus, keep_rule, remember_rate, small_loss)
from lab.methods.gce import gce_loss
from lab.methods.jocor import jocor
from lab.methods.kdcl import kdcl_cohort_loss, kdcl_loss
from mutual import ALIASES, MODES, Clock, Method, Precision, mutual_step, sum_names
from test_cmd import K as CMD_K, batch
from training import config

N, K = 12, 4
OFF = dict(device_type="cpu", dtype=torch.bfloat16, enabled=False)


def at(epoch, batch=0):
    """The clock of a 20-epoch run of 600 batches an epoch, at the batch'th batch of the (0-based) epoch."""
    return Clock(epoch=epoch, batch=batch, batches=600, epochs=20, seed=0)


def comparator(mode, **settings):
    """The Method of a comparator's run: on the given labels, with these of its Comparators settings."""
    return Method(mode=mode, lc="ce", eta=None, b=None, comparators=mutual.Comparators(**settings))


def fixture(seed=0):
    """Fixed logits of A and B (different scales, so they rank the samples differently) and given labels."""
    g = torch.Generator().manual_seed(seed)
    z_a = 2.0 * torch.randn(N, K, generator=g)
    z_b = 3.0 * torch.randn(N, K, generator=g)
    y = torch.randint(0, K, (N,), generator=g)
    return z_a, z_b, y


# ---------------------------------------------------------------- plain references, one sample at a time

def log_softmax_row(row):
    top = max(row)
    log_z = top + math.log(sum(math.exp(v - top) for v in row))
    return [v - log_z for v in row]


def ce_list(z, y):
    return [-log_softmax_row(z[i].tolist())[int(y[i])] for i in range(len(y))]


def kl_row(logp, logq):
    return sum(math.exp(a) * (a - b) for a, b in zip(logp, logq))


def smallest(values, k, among=None):
    """The indices of the k smallest values (among the given indices), as a set."""
    among = range(len(values)) if among is None else among
    return set(sorted(among, key=lambda i: values[i])[:k])


def ref_coteaching(z_a, z_b, y, keep):
    """Co-teaching's Algorithm 1: D_A, D_B = each network's R(t) N smallest CE; A learns D_B, B learns D_A."""
    n = len(y)
    k = max(1, int(keep * n))
    ce_a, ce_b = ce_list(z_a, y), ce_list(z_b, y)
    d_a, d_b = smallest(ce_a, k), smallest(ce_b, k)
    return d_a, d_b, sum(ce_a[i] for i in d_b) / k, sum(ce_b[i] for i in d_a) / k


def ref_coteaching_plus(z_a, z_b, y, keep, early):
    """Co-teaching+: Co-teaching among the disagreements; the authors' code's rules for an empty or tiny set."""
    n = len(y)
    ce_a, ce_b = ce_list(z_a, y), ce_list(z_b, y)
    dis = [i for i in range(n) if int(z_a[i].argmax()) != int(z_b[i].argmax())]
    if not dis:  # no disagreement: everything with plain CE while early, nothing after
        if early:
            return set(range(n)), set(range(n)), sum(ce_a) / n, sum(ce_b) / n
        return set(), set(), 0.0, 0.0
    k = int(keep * len(dis)) or len(dis)
    d_a, d_b = smallest(ce_a, k, dis), smallest(ce_b, k, dis)
    return d_a, d_b, sum(ce_a[i] for i in d_b) / k, sum(ce_b[i] for i in d_a) / k


def ref_jocor(z_a, z_b, y, keep, lam):
    """JoCoR: l_i = (1 - λ)(CE_A + CE_B) + λ(KL(p_A||p_B) + KL(p_B||p_A)); both learn the R(t) N smallest.
    Returns D~, the mean joint loss on it, and each network's share (the terms its parameters move)."""
    n = len(y)
    k = max(1, int(keep * n))
    ce_a, ce_b = ce_list(z_a, y), ce_list(z_b, y)
    lp_a = [log_softmax_row(z_a[i].tolist()) for i in range(n)]
    lp_b = [log_softmax_row(z_b[i].tolist()) for i in range(n)]
    kl = [kl_row(lp_a[i], lp_b[i]) + kl_row(lp_b[i], lp_a[i]) for i in range(n)]
    joint = [(1 - lam) * (ce_a[i] + ce_b[i]) + lam * kl[i] for i in range(n)]
    d = smallest(joint, k)
    share_a = sum((1 - lam) * ce_a[i] + lam * kl[i] for i in d) / k
    share_b = sum((1 - lam) * ce_b[i] + lam * kl[i] for i in d) / k
    return d, sum(joint[i] for i in d) / k, share_a, share_b


def chosen(mask):
    assert mask.shape == (N,) and set(mask.unique().tolist()) <= {0.0, 1.0}
    return set(torch.nonzero(mask).flatten().tolist())


# ---------------------------------------------------------------- the methods against their references

def test_coteaching_exchanges_each_networks_small_loss_samples():
    z_a, z_b, y = fixture()
    keep = remember_rate(3, 0.5, 10)  # 0.85: int(0.85 * 12) = 10 of 12 kept
    d_a, d_b, loss_a, loss_b = ref_coteaching(z_a, z_b, y, keep)
    assert len(d_a) == 10 and d_a != d_b  # the fixture tells A's selection from B's
    (got_a, got_b), taught = coteaching(z_a, z_b, y, keep)
    assert chosen(taught[0, 1]) == d_a and chosen(taught[1, 0]) == d_b  # A's selection teaches B
    assert got_a.item() == pytest.approx(loss_a, rel=1e-5) and got_b.item() == pytest.approx(loss_b, rel=1e-5)
    own_a = sum(ce_list(z_a, y)[i] for i in d_a) / 10  # A on its own selection: not what Co-teaching does
    assert abs(own_a - loss_a) > 1e-3 and abs(loss_a - loss_b) > 1e-3


def test_coteaching_plus_exchanges_small_loss_samples_among_the_disagreements():
    z_a, z_b, y = fixture(1)
    dis = (z_a.argmax(-1) != z_b.argmax(-1)).sum().item()
    assert 4 <= dis < N  # some agree, some disagree
    keep = 0.6
    d_a, d_b, loss_a, loss_b = ref_coteaching_plus(z_a, z_b, y, keep, early=False)
    assert d_a != d_b and len(d_a) == int(keep * dis) >= 2
    (got_a, got_b), taught = coteaching_plus(z_a, z_b, y, keep, disagree=True, early=False)
    assert chosen(taught[0, 1]) == d_a and chosen(taught[1, 0]) == d_b
    assert got_a.item() == pytest.approx(loss_a, rel=1e-5) and got_b.item() == pytest.approx(loss_b, rel=1e-5)
    d_ct, _, ct_a, _ = ref_coteaching(z_a, z_b, y, keep)  # and not Co-teaching on the whole batch
    assert d_ct != d_a and abs(ct_a - loss_a) > 1e-3


@pytest.mark.parametrize("early", [True, False])
def test_coteaching_plus_without_disagreement_follows_the_authors_step_rule(early):
    z_a, _, y = fixture(2)
    z_b = 0.5 * z_a + 0.1  # the same argmax everywhere, other losses
    d_a, d_b, loss_a, loss_b = ref_coteaching_plus(z_a, z_b, y, 0.7, early)
    (got_a, got_b), taught = coteaching_plus(z_a, z_b, y, 0.7, disagree=True, early=early)
    assert chosen(taught[0, 1]) == d_a == (set(range(N)) if early else set()) and chosen(taught[1, 0]) == d_b
    assert got_a.item() == pytest.approx(loss_a, rel=1e-5, abs=1e-7)
    assert got_b.item() == pytest.approx(loss_b, rel=1e-5, abs=1e-7)
    if early:
        assert got_a.item() == pytest.approx(F.cross_entropy(z_a, y).item(), rel=1e-5)


def test_coteaching_plus_keeps_a_disagreement_set_too_small_for_one_sample_whole():
    z_a, _, y = fixture(3)
    z_b = z_a.clone()
    z_b[5] = -z_a[5]  # exactly one disagreement: int(0.6 * 1) = 0, so the code keeps it
    assert (z_a.argmax(-1) != z_b.argmax(-1)).tolist() == [i == 5 for i in range(N)]
    _, _, loss_a, loss_b = ref_coteaching_plus(z_a, z_b, y, 0.6, early=False)
    (got_a, got_b), taught = coteaching_plus(z_a, z_b, y, 0.6, disagree=True, early=False)
    assert chosen(taught[0, 1]) == chosen(taught[1, 0]) == {5}
    assert got_a.item() == pytest.approx(loss_a, rel=1e-5) and got_b.item() == pytest.approx(loss_b, rel=1e-5)


def test_coteaching_plus_sizes_its_selection_as_the_authors_int_does():
    g = torch.Generator().manual_seed(10)
    z_a = torch.randn(80, K, generator=g)
    z_b = z_a.clone()
    z_b[:75] = z_a[:75].roll(1, dims=-1)  # 75 disagreements
    y = torch.randint(0, K, (80,), generator=g)
    keep = remember_rate(4, 0.4, 10)  # 0.84: int(0.84 * 75) = 63, where float32 arithmetic gives 62
    _, taught = coteaching_plus(z_a, z_b, y, keep, disagree=True, early=False)
    assert taught[0, 1].sum().item() == taught[1, 0].sum().item() == int(keep * 75) == 63


def test_jocor_selects_by_the_joint_loss_and_steps_both_networks_on_it():
    z_a, z_b, y = fixture(4)
    keep, lam = remember_rate(2, 0.4, 10), 0.7  # 0.92: 11 of 12
    d, joint, share_a, share_b = ref_jocor(z_a, z_b, y, keep, lam)
    assert d != smallest(ce_list(z_a, y), 11) or d != smallest(ce_list(z_b, y), 11)  # not a CE selection
    a, b = z_a.clone().requires_grad_(), z_b.clone().requires_grad_()
    (got_a, got_b), taught = jocor(a, b, y, keep, lam)
    assert chosen(taught[0, 1]) == chosen(taught[1, 0]) == d
    assert got_a.item() == pytest.approx(share_a, rel=1e-5) and got_b.item() == pytest.approx(share_b, rel=1e-5)
    assert abs(share_a - share_b) > 1e-3
    (got_a + got_b).backward()
    # the authors' update: one joint loss, mean over D~, with gradient through both sides of both KL terms
    a2, b2 = z_a.clone().requires_grad_(), z_b.clone().requires_grad_()
    lp_a, lp_b = F.log_softmax(a2, -1), F.log_softmax(b2, -1)
    per = (1 - lam) * (F.nll_loss(lp_a, y, reduction="none") + F.nll_loss(lp_b, y, reduction="none")) + lam * (
        (lp_a.exp() * (lp_a - lp_b)).sum(-1) + (lp_b.exp() * (lp_b - lp_a)).sum(-1))
    authors = per[sorted(d)].mean()
    assert authors.item() == pytest.approx(joint, rel=1e-5)
    authors.backward()
    assert torch.allclose(a.grad, a2.grad, atol=1e-6) and torch.allclose(b.grad, b2.grad, atol=1e-6)
    share_only_ce = torch.autograd.grad(F.nll_loss(F.log_softmax(a2, -1)[sorted(d)], y[sorted(d)]), a2)[0]
    assert not torch.allclose(a.grad, (1 - lam) * share_only_ce, atol=1e-4)  # the KL terms do train A


# ---------------------------------------------------------------- properties

def ce_grads(z, y):
    z = z.clone().requires_grad_()
    loss = F.cross_entropy(z, y)
    loss.backward()
    return loss, z.grad


@pytest.mark.parametrize("method", ["coteach", "coteach+", "jocor"])
def test_no_forgetting_is_two_independent_cross_entropy_models(method):
    z_a, z_b, y = fixture(5)
    keep = remember_rate(7, 0.0, 10)  # tau = 0: R(t) = 1
    a, b = z_a.clone().requires_grad_(), z_b.clone().requires_grad_()
    (loss_a, loss_b), taught = (coteaching(a, b, y, keep) if method == "coteach" else
                                coteaching_plus(a, b, y, keep, disagree=False, early=False) if method == "coteach+"
                                else jocor(a, b, y, keep, 0.0))  # JoCoR at lambda = 0
    (loss_a + loss_b).backward()
    for loss, z, grad in ((loss_a, z_a, a.grad), (loss_b, z_b, b.grad)):
        ref_loss, ref_grad = ce_grads(z, y)
        assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
        assert torch.allclose(grad, ref_grad, atol=1e-7)
    assert all(chosen(m) == set(range(N)) for m in taught.values())


def test_coteaching_plus_before_its_initial_epochs_is_coteaching():
    z_a, z_b, y = fixture(6)
    (pa, pb), pt = coteaching_plus(z_a, z_b, y, 0.75, disagree=False, early=False)
    (ca, cb), ct = coteaching(z_a, z_b, y, 0.75)
    assert torch.equal(pa, ca) and torch.equal(pb, cb) and all(torch.equal(pt[k], ct[k]) for k in ct)
    m = comparator("coteach+", forget_rate=0.3, coteach_plus_init=3)
    assert [coteach_plus_rule(m, at(e)).disagree for e in range(5)] == [False, False, False, True, True]
    assert coteach_plus_rule(comparator("coteach+", forget_rate=0.3), at(0)).disagree  # MNIST's 0


def test_remember_rate_falls_linearly_over_t_k_epochs_then_stays():
    assert [remember_rate(t, 0.4, 10) for t in (0, 5, 10, 50)] == pytest.approx([1.0, 0.8, 0.6, 0.6])
    assert remember_rate(1, 0.4, 2) == pytest.approx(0.8)
    m = comparator("jocor", forget_rate=0.2, num_gradual=4)
    assert keep_rule(m, at(2, batch=7)) == pytest.approx(0.9)  # once an epoch: the batch does not move it


def test_the_step_rule_is_the_authors_product_of_epoch_and_batch_index():
    assert coteach_plus_early(0, COTEACH_PLUS_STEPS - 1) and not coteach_plus_early(0, COTEACH_PLUS_STEPS)
    assert coteach_plus_early(9, 499) and not coteach_plus_early(9, 500)  # their epoch 10: 10 * 500 = 5000
    assert coteach_plus_early(10 ** 6, 0)  # every epoch's first batch
    m = comparator("coteach+", forget_rate=0.3)
    assert coteach_plus_rule(m, at(9, batch=499)).early and not coteach_plus_rule(m, at(9, batch=500)).early


def test_small_loss_marks_the_n_keep_smallest():
    loss = torch.tensor([0.5, 0.1, 0.9, 0.3, 0.7])
    assert small_loss(loss, 2).tolist() == [0, 1, 0, 1, 0] and small_loss(loss, 0).sum() == 0


# ---------------------------------------------------------------- no host sync

def calls(device, requires_grad=True):
    g = torch.Generator().manual_seed(7)
    z_a, z_b = (torch.randn(64, 10, generator=g).to(device).requires_grad_(requires_grad) for _ in range(2))
    y = torch.randint(0, 10, (64,), generator=g).to(device)
    return [lambda: coteaching(z_a, z_b, y, 0.7), lambda: coteaching_plus(z_a, z_b, y, 0.7, True, False),
            lambda: coteaching_plus(z_a, z_b, y, 0.7, True, True), lambda: jocor(z_a, z_b, y, 0.7, 0.9)]


def test_every_method_runs_on_meta_tensors_so_reads_nothing_back_to_the_host():
    # a meta tensor has no data: .item(), .tolist(), nonzero() and boolean-mask indexing raise on it
    with pytest.raises(Exception):
        torch.zeros(3, device="meta").sum().item()
    for call in calls("meta"):
        (loss_a, loss_b), taught = call()
        (loss_a + loss_b).backward()
        assert loss_a.shape == loss_b.shape == () and set(taught) == {(0, 1), (1, 0)}
        assert all(m.device.type == "meta" and m.shape == (64,) for m in taught.values())
    for call in calls("cpu"):  # on a real device, everything returned stays on it
        (loss_a, loss_b), taught = call()
        assert all(t.device.type == "cpu" for t in (loss_a, loss_b, *taught.values()))


@pytest.mark.cuda
def test_every_method_is_sync_free_on_cuda():
    device = torch.device("cuda")
    fns = calls(device)
    for call in fns:  # warm up: lazy initialisation may sync once
        (loss_a, loss_b), _ = call()
        (loss_a + loss_b).backward()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for call in fns:
            (loss_a, loss_b), taught = call()
            (loss_a + loss_b).backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(m.is_cuda for m in taught.values())


# ---------------------------------------------------------------- GCE

def test_gce_tends_to_cross_entropy_as_q_tends_to_zero_and_is_mae_like_at_one():
    z, _, y = fixture(8)
    assert gce_loss(z, y, 1e-4).item() == pytest.approx(F.cross_entropy(z, y).item(), rel=1e-3)
    p_y = F.softmax(z, -1).gather(1, y[:, None])[:, 0]
    assert gce_loss(z, y, 1.0).item() == pytest.approx((1 - p_y).mean().item(), rel=1e-6)
    assert gce_loss(z, y, 1.0).item() == pytest.approx((F.one_hot(y, K) - F.softmax(z, -1)).abs().sum(-1).mean()
                                                       .item() / 2, rel=1e-6)


def test_gce_gradient_matches_the_hand_computation():
    z, _, y = fixture(9)
    q = 0.7
    z = z.clone().requires_grad_()
    gce_loss(z, y, q).backward()
    # d/dz_j (1 - p_y^q)/q = -p_y^(q-1) dp_y/dz_j = -p_y^q (e_y - p)_j, averaged over the batch
    p = F.softmax(z.detach(), -1)
    p_y = p.gather(1, y[:, None])
    hand = -(p_y ** q) * (F.one_hot(y, K).float() - p) / N
    assert torch.allclose(z.grad, hand, atol=1e-7)


# ---------------------------------------------------------------- through mutual_step

setup_pair = setup  # test_mutual's pair of cnn models and a batch with some wrong labels


def step(nets, opts, x, y, y_clean, method, clock=Clock(epoch=4, batch=0, batches=10, epochs=20, seed=0)):
    sums, _ = mutual_step(nets, opts, (x, y, y_clean), method, None, [torch.tensor(0.5)] * 2, clock,
                          Precision(OFF, torch.amp.GradScaler("cpu", enabled=False)))
    return dict(zip(sum_names(2), sums.tolist()))


def test_mutual_step_counts_what_coteaching_selected_and_its_label_precision():
    nets, opts, x, y, y_clean = setup_pair(1)
    with torch.no_grad():
        z_a, z_b = (copy.deepcopy(n)(x) for n in nets)
    method = comparator("coteach", forget_rate=0.5, num_gradual=10)
    s = step(nets, opts, x, y, y_clean, method, Clock(epoch=5, batch=0, batches=10, epochs=20, seed=0))  # R(t) 0.75
    d_a, d_b, loss_a, loss_b = ref_coteaching(z_a, z_b, y, 0.75)
    assert s["loss_a"] / 24 == pytest.approx(loss_a, rel=1e-5) and s["loss_b"] / 24 == pytest.approx(loss_b, rel=1e-5)
    assert s["selected_a2b"] == len(d_a) == 18 and s["selected_b2a"] == len(d_b)
    clean = {i for i in range(24) if y[i] == y_clean[i]}
    assert s["clean_a2b"] == s["clean_label_a2b"] == len(d_a & clean)  # what A taught B: the given label
    assert s["clean_b2a"] == len(d_b & clean)


def test_a_coteaching_step_without_forgetting_is_two_independent_cross_entropy_steps():
    nets, opts, x, y, y_clean = setup_pair(2)
    alone = [copy.deepcopy(n) for n in nets]
    alone_opts = [torch.optim.SGD(n.parameters(), lr=0.1, momentum=0.9) for n in alone]
    method = comparator("coteach", forget_rate=0.0)
    step(nets, opts, x, y, y_clean, method)
    for net, opt in zip(alone, alone_opts):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    for net, ref in zip(nets, alone):
        assert all(torch.allclose(p, q, atol=1e-6) for p, q in zip(net.parameters(), ref.parameters()))


def test_a_small_loss_mode_refuses_a_cohort():
    nets, opts, x, y, y_clean = setup_pair(3)
    nets, opts = nets + nets[:1], opts + opts[:1]
    method = comparator("jocor", forget_rate=0.2)
    with pytest.raises(ValueError, match="trains a pair, not 3"):
        step(nets, opts, x, y, y_clean, method)


def test_the_modes_and_their_papers_names():
    assert all(MODES[m] is x and x.thresholds is None for m, x in lab.METHODS.items())  # no chi: no (eta, b)
    assert ALIASES["co-teaching"] == "coteach" and ALIASES["co-teaching+"] == "coteach+"


# ---------------------------------------------------------------- end to end through train.py

PAIRS = [m for m, x in lab.METHODS.items() if x.pair or m == "kdcl"]  # those that teach: the pair methods, KDCL


@pytest.mark.parametrize("mode", PAIRS)
def test_each_comparator_trains_and_reports_its_selection(tmp_path, mode):
    out = str(tmp_path / "r")
    summary = train.main(TINY + ["--epochs", "2", "--mode", mode, "--out", out])
    rows = metrics(out)
    assert [r["epoch"] for r in rows] == [1, 2] and 0 <= summary["test_acc_mean"] <= 100
    for r in rows:
        assert {"selected_a2b", "selected_b2a", "precision_a2b", "precision_b2a", "recall_a2b", "recall_b2a"} <= set(r)
        assert r["chi"] is None and math.isfinite(r["train_loss_a"]) and math.isfinite(r["train_loss_b"])
        assert all(0 <= r[k] <= 1 for k in ("selected_a2b", "selected_b2a"))
    if MODES[mode].rule is keep_rule:  # R(0) = 1, R(1) = 1 - 0.4/10: int(0.96 * 32) = 30 of each batch of 32
        assert rows[0]["selected_a2b"] == rows[0]["selected_b2a"] == 1
        assert rows[1]["selected_a2b"] == rows[1]["selected_b2a"] == 90 / 96
        assert 0 < rows[1]["precision_a2b"] <= 1 and 0 < rows[1]["recall_a2b"] <= 1


def test_gce_trains_each_network_alone(tmp_path):
    out = str(tmp_path / "r")
    train.main(TINY + ["--epochs", "1", "--mode", "gce", "--out", out])
    row = metrics(out)[0]
    assert math.isfinite(row["train_loss_a"]) and math.isfinite(row["train_loss_b"])
    assert row["selected_b2a"] == row["selected_a2b"] == 0


@pytest.mark.parametrize("flags,message", [
    (["--peers", "3", "--mode", "coteach"], "--mode coteach is defined for a pair of networks, not --peers 3"),
    (["--noise", "none", "--mode", "coteach"], "--mode coteach needs --forget-rate"),
    (["--mode", "jocor", "--lc", "mylc"], "--mode jocor trains on the given labels"),
    (["--mode", "coteach", "--forget-rate", "1"], "--forget-rate 1.0: must be in [0, 1)"),
    (["--mode", "coteach", "--num-gradual", "0"], "--num-gradual 0: must be at least 1"),
    (["--mode", "gce", "--gce-q", "0"], "--gce-q 0.0: must be in (0, 1]"),
    (["--mode", "gce", "--lc", "mylc"], "--mode gce trains on the given labels"),
])
def test_bad_comparator_flags_are_one_line(tmp_path, capsys, flags, message):
    out = tmp_path / "x"
    with pytest.raises(SystemExit) as e:
        train.main(TINY + ["--epochs", "1", "--out", str(out)] + flags)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and message in err and len(err.splitlines()) == 1 and not out.exists()


def test_forget_rate_defaults_to_the_noise_rate_and_the_papers_names_name_the_run():
    args = config.resolve(config.get_args(["--dataset", "synthetic", "--mode", "Co-Teaching+", "--noise", "pair",
                                           "--rate", "0.3"]))
    assert (args.mode, args.forget_rate, args.lc) == ("coteach+", 0.3, "ce")
    assert args.out == "runs/synthetic-pair0.3-coteach+-ce-cnn-s0"
    args = config.resolve(config.get_args(["--dataset", "synthetic", "--mode", "jocor", "--noise", "none",
                                           "--forget-rate", "0.2"]))
    assert args.forget_rate == 0.2 and args.jocor_lambda == 0.95 and args.num_gradual == 10


def test_kdcl_minlogit_teacher():
    za, zb, _, _ = batch()
    y = torch.randint(0, K, (64,))
    T = 2.0
    la, lb = kdcl_loss(za, zb, y, T=T, lam=1.0)
    # Slow reference: per sample, per class minimum over the two students.
    zt = torch.empty(64, CMD_K)
    for n in range(64):
        for c in range(CMD_K):
            zt[n, c] = min(za[n, c] - za[n, y[n]], zb[n, c] - zb[n, y[n]])
    pt = F.softmax(zt / T, -1)
    for z, loss in [(za, la), (zb, lb)]:
        kl = F.kl_div(F.log_softmax(z / T, -1), pt, reduction="batchmean")
        assert torch.allclose(loss, F.cross_entropy(z, y) + T * T * kl, atol=1e-6)
    # The MinLogit teacher's given-label logit is 0 and no other logit exceeds either student's margin.
    assert torch.all(zt.gather(1, y[:, None]) == 0)
    la.backward()
    assert zb.grad is None


def test_kdcl_of_a_cohort_is_the_pair_at_two_and_takes_the_minimum_over_all():
    g = torch.Generator().manual_seed(6)
    z = [3 * torch.randn(16, CMD_K, generator=g) for _ in range(3)]
    y = torch.randint(0, CMD_K, (16,), generator=g)
    assert all(torch.equal(a, b) for a, b in zip(kdcl_cohort_loss(z[:2], y), kdcl_loss(z[0], z[1], y)))
    teacher = torch.stack([z_k - z_k.gather(1, y[:, None]) for z_k in z]).min(0).values  # MinLogit over all three
    for z_k, loss in zip(z, kdcl_cohort_loss(z, y)):
        kl = F.kl_div(F.log_softmax(z_k / 2, -1), F.softmax(teacher / 2, -1), reduction="batchmean")
        assert torch.allclose(loss, F.cross_entropy(z_k, y) + 4 * kl, atol=1e-6)
