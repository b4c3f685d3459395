"""The two controls of CMD's selection (mutual.Method.select, .peer_weight): each isolates one reason distilling
could help. --select shuffled teaches as many samples as passed χ, at random positions; --peer-weight mean
averages a taught sample's two terms instead of adding them, so that only its target moves."""
import os

import pytest
import torch
from test_faults import refused
from test_train import TINY, metrics

import train
from losses import cmd_distill, log_probs, peer_mean, shuffled_like, soft_cross_entropy
from mutual import Method, shuffle_draws

N, K = 64, 6


def scores(seed):
    g = torch.Generator().manual_seed(seed)
    logp_a, h_a = log_probs(3 * torch.randn(N, K, generator=g))
    logp_b, h_b = log_probs(3 * torch.randn(N, K, generator=g))
    q_a, q_b = torch.softmax(torch.randn(N, K, generator=g), -1), torch.softmax(torch.randn(N, K, generator=g), -1)
    return logp_a, logp_b, q_a, q_b, h_a, h_b


def test_shuffled_selection_keeps_each_directions_count_per_batch():
    logp_a, logp_b, q_a, q_b, h_a, h_b = scores(0)
    chi = h_a.median().item()
    for step in range(20):
        draws = shuffle_draws(0, 0, step, 2, N, "cpu")[0]
        _, _, m_b2a, m_a2b = cmd_distill(logp_a, logp_b, q_a, q_b, h_a, h_b, chi)
        _, _, s_b2a, s_a2b = cmd_distill(logp_a, logp_b, q_a, q_b, h_a, h_b, chi, draws)
        assert s_b2a.sum() == m_b2a.sum() == (h_b < chi).sum() and s_a2b.sum() == m_a2b.sum() == (h_a < chi).sum()
        assert set(s_b2a.unique().tolist()) <= {0.0, 1.0}


def test_shuffled_positions_do_not_depend_on_the_entropies_only_on_their_count():
    logp_a, logp_b, q_a, q_b, _, _ = scores(1)
    draws = shuffle_draws(3, 2, 7, 2, N, "cpu")[0]
    h1, h2 = torch.rand(N), torch.rand(N)  # two different sets of entropies, the same count below chi = 0.5
    h2[torch.argsort(h2)[:20]], h2[torch.argsort(h2)[20:]] = 0.1, 0.9
    h1[torch.argsort(h1)[:20]], h1[torch.argsort(h1)[20:]] = 0.1, 0.9
    assert not torch.equal(h1, h2)
    one = cmd_distill(logp_a, logp_b, q_a, q_b, h1, h1, 0.5, draws)
    two = cmd_distill(logp_a, logp_b, q_a, q_b, h2, h2, 0.5, draws)
    assert torch.equal(one[2], two[2]) and torch.equal(one[3], two[3]) and one[2].sum() == 20
    assert not torch.equal(one[2], (h1 < 0.5).float())  # and they are not the confident ones
    # the loss is Eq. 3 on the drawn positions, with the same targets
    assert torch.allclose(one[0], (one[2] * soft_cross_entropy(q_b, logp_a)).mean())
    assert torch.allclose(one[1], (one[3] * soft_cross_entropy(q_a, logp_b)).mean())


def test_shuffled_positions_are_uniform_and_each_direction_draws_its_own():
    counts, same = torch.zeros(N), 0
    mask = torch.zeros(N)
    mask[:16] = 1  # 16 confident samples, all at the start
    for step in range(2000):
        draws = shuffle_draws(0, 1, step, 2, N, "cpu")[0]
        a, b = shuffled_like(mask, draws[0]), shuffled_like(mask, draws[1])
        counts += a
        same += torch.equal(a, b)
    assert same == 0  # the two directions' positions are drawn independently
    expected = 2000 * 16 / N  # 500 each; binomial std about 19
    assert counts.min() > expected - 100 and counts.max() < expected + 100


def test_shuffle_draws_come_from_the_clock_alone():
    assert torch.equal(shuffle_draws(1, 2, 3, 2, N, "cpu"), shuffle_draws(1, 2, 3, 2, N, "cpu"))
    for other in [(1, 2, 4), (1, 3, 3), (2, 2, 3)]:
        assert not torch.equal(shuffle_draws(1, 2, 3, 2, N, "cpu"), shuffle_draws(*other, 2, N, "cpu"))
    assert shuffle_draws(0, 0, 0, 3, N, "cpu").shape == (3, 2, N)  # a cohort of 3: one (2, N) per pair


def test_shuffled_selection_is_sync_free():
    logp_a, logp_b, q_a, q_b, h_a, h_b = (t.to("meta") for t in scores(2))
    draws = torch.rand(2, N, device="meta")
    loss_b2a, loss_a2b, m_b2a, m_a2b = cmd_distill(logp_a, logp_b, q_a, q_b, h_a, h_b, 0.5, draws)
    assert all(t.device.type == "meta" for t in (loss_b2a, loss_a2b, m_b2a, m_a2b))  # no value was ever read


def test_peer_mean_averages_a_taught_samples_two_terms_and_adds_no_weight():
    logp_a, _, q_a, q_b, _, _ = scores(3)
    own, peer = soft_cross_entropy(q_a, logp_a), soft_cross_entropy(q_b, logp_a)
    mask = (torch.arange(N) % 3 == 0).float()
    want = sum((own[i] + peer[i]) / 2 if mask[i] else own[i] for i in range(N)) / N
    assert torch.allclose(peer_mean(own, peer, mask), want)
    assert peer_mean(own, own, mask) == own.mean()  # equal targets: exactly the own term's mean
    assert peer_mean(own, peer, torch.zeros(N)) == own.mean()


def test_peer_weight_mean_with_ce_is_zero_knowledge_exactly(tmp_path):
    base = TINY + ["--epochs", "3", "--lc", "ce", "--noise", "sym", "--rate", "0.4"]
    zero, mean = str(tmp_path / "zero"), str(tmp_path / "mean")
    train.main(base + ["--mode", "zero", "--out", zero])
    train.main(base + ["--mode", "all", "--peer-weight", "mean", "--out", mean])
    for z, m in zip(metrics(zero), metrics(mean)):
        for key in ("train_loss_a", "train_loss_b", "test_acc_a", "test_acc_b", "test_acc_ens"):
            assert z[key] == m[key], key
        assert m["selected_b2a"] > 0.5 and z["selected_b2a"] == 0  # the same weights, a different selection
    for f in ("model_a.pt", "model_b.pt"):
        a = torch.load(os.path.join(zero, f), weights_only=True)
        b = torch.load(os.path.join(mean, f), weights_only=True)
        assert all(torch.equal(a[k], b[k]) for k in a)
    # with the paper's sum, all knowledge is not zero knowledge: the test above can fail
    train.main(base + ["--mode", "all", "--out", str(tmp_path / "sum")])
    assert metrics(str(tmp_path / "sum"))[-1]["train_loss_a"] != metrics(zero)[-1]["train_loss_a"]


def test_shuffled_run_teaches_as_many_samples_as_the_confident_one_in_its_first_step(tmp_path):
    # one step an epoch, one epoch: both runs start from the same models, so chi passes the same count
    base = TINY + ["--epochs", "1", "--batch-size", "96", "--mode", "static", "--eta", "1.2", "--lc", "ce"]
    train.main(base + ["--out", str(tmp_path / "c")])
    train.main(base + ["--select", "shuffled", "--out", str(tmp_path / "s")])
    c, s = metrics(str(tmp_path / "c"))[0], metrics(str(tmp_path / "s"))[0]
    assert 0 < c["selected_b2a"] < 1 and c["selected_b2a"] == s["selected_b2a"]
    assert c["selected_a2b"] == s["selected_a2b"]
    assert c["train_loss_a"] != s["train_loss_a"]  # other samples were taught


@pytest.mark.parametrize("flags,why", [
    (["--select", "shuffled", "--mode", "mkd"], "--select shuffled: --mode mkd with --lc ce does not read it"),
    (["--peer-weight", "mean", "--mode", "mkd"], "--mode mkd with --lc ce does not"),
    (["--peer-weight", "mean", "--peers", "3"], "a pair, not --peers 3"),
    (["--peer-weight", "mean", "--lc", "cp"], "--lc cp's own term"),
    (["--select", "random"], "must be confident or shuffled"),
])
def test_the_controls_are_refused_where_they_do_not_apply(tmp_path, capsys, flags, why):
    out = tmp_path / "r"
    assert why in refused(capsys, TINY + ["--epochs", "1", "--out", str(out)] + flags)
    assert not out.exists()


def test_method_defaults_are_the_papers_selection():
    assert (Method().select, Method().peer_weight) == ("confident", "sum")
