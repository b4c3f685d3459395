"""The objectives are pure functions of tensors: torch.func.vmap batches them over runs that differ in chi, r,
labels and logits, and each run's slice equals the unbatched call (what tools/batched.py relies on); a cohort of
two is the paper's pair, and each run trains by the objective its flags ask for."""
import pytest
import torch
from torch.func import vmap


from losses import Objective
from mutual import (LCS, MODES, OBJECTIVES, Clock, Method, cmd_objective, cohort_objective, mkd_objective,
                    objective_for, peer_mean_objective, shuffle_draws, step_sums)

R, N, K = 3, 16, 5
CLOCK = Clock(epoch=3, batch=2, batches=10, epochs=20, seed=0)


def runs(seed=0):
    """R runs of a pair: each its own logits, noisy labels, chi and MyLC's r (one per model)."""
    g = torch.Generator().manual_seed(seed)
    z = [3 * torch.randn(R, N, K, generator=g) for _ in range(2)]
    y = torch.randint(0, K, (R, N), generator=g)
    chi = torch.tensor([0.3, 0.8, 1.3])
    r = [torch.tensor([0.2, 0.5, 0.9]), torch.tensor([0.7, 0.4, 0.1])]
    return z, y, chi, r


def run_slice(i, z, y, chi, r):
    return [z_k[i] for z_k in z], y[i], chi[i], [r_k[i] for r_k in r]


def assert_same(batched, i, one):
    for a, b in zip(batched.losses, one.losses):
        assert torch.allclose(a[i], b, rtol=1e-6, atol=1e-7)
    assert batched.taught.keys() == one.taught.keys()
    assert all(torch.equal(batched.taught[k][i], one.taught[k]) for k in one.taught)  # the same selection
    assert all(torch.allclose(a[i], b, atol=1e-6) for a, b in zip(batched.q_tilde, one.q_tilde))
    assert all(torch.allclose(a[i], b, atol=1e-6) for a, b in zip(batched.h, one.h))


@pytest.mark.parametrize("lc", LCS)
def test_cmd_objective_vmaps_over_runs_with_their_own_chi_and_r(lc):
    z, y, chi, r = runs()
    method = Method(mode="progressive", lc=lc, noise=("sym", 0.4))
    batched = vmap(lambda z, y, chi, r: cmd_objective(z, y, method, chi, r, CLOCK))(z, y, chi, r)
    assert isinstance(batched, Objective) and batched.losses[0].shape == (R,)
    for i in range(R):
        zi, yi, chi_i, ri = run_slice(i, z, y, chi, r)
        assert_same(batched, i, cmd_objective(zi, yi, method, chi_i, ri, CLOCK))
    selected = batched.taught[1, 0].sum(-1)  # B taught A, per run: chi moves it
    assert len(set(selected.tolist())) == R


@pytest.mark.parametrize("control", [dict(select="shuffled"), dict(peer_weight="mean"),
                                     dict(select="shuffled", peer_weight="mean")])
def test_the_controls_vmap_too(control):
    z, y, chi, r = runs(1)
    method = Method(mode="progressive", lc="mylc", **control)
    objective = objective_for(method, 2)
    assert objective is not cmd_objective  # a control is an objective of its own
    draws = torch.stack([shuffle_draws(seed, 0, 0, 2, N, "cpu") for seed in range(R)])  # each run's own draws
    batched = vmap(lambda z, y, chi, r, draws: objective(z, y, method, chi, r, CLOCK, draws))(z, y, chi, r, draws)
    for i in range(R):
        zi, yi, chi_i, ri = run_slice(i, z, y, chi, r)
        assert_same(batched, i, objective(zi, yi, method, chi_i, ri, CLOCK, draws[i]))


@pytest.mark.parametrize("mode", [m for m, x in MODES.items() if x.objective is mkd_objective])
def test_the_all_knowledge_objectives_vmap(mode):
    z, y, _, r = runs(2)
    method = Method(mode=mode, lc="ce", eta=None, b=None)
    batched = vmap(lambda z, y: OBJECTIVES[mode](z, y, method, None, None, CLOCK))(z, y)
    for i in range(R):
        assert_same(batched, i, OBJECTIVES[mode]([z_k[i] for z_k in z], y[i], method, None, None, CLOCK))


def test_step_sums_vmap():
    z, y, chi, r = runs(3)
    y_clean = torch.randint(0, K, (N,), generator=torch.Generator().manual_seed(9)).expand(R, N)
    method = Method(mode="static", lc="ls")

    def sums(z, y, y_clean, chi, r):
        out = cmd_objective(z, y, method, chi, r, CLOCK)
        return step_sums(z, y, y_clean, sum(out.losses), out)

    batched = vmap(sums)(z, y, y_clean, chi, r)
    for i in range(R):
        zi, yi, chi_i, ri = run_slice(i, z, y, chi, r)
        assert torch.allclose(batched[i], sums(zi, yi, y_clean[i], chi_i, ri), rtol=1e-6)


@pytest.mark.parametrize("lc", ["mylc", "cp"])
def test_a_cohort_of_two_is_the_papers_pair_exactly(lc):
    z, y, chi, r = run_slice(0, *runs(4))
    method = Method(mode="progressive", lc=lc)
    pair, cohort = cmd_objective(z, y, method, chi, r, CLOCK), cohort_objective(z, y, method, chi, r, CLOCK)
    assert all(torch.equal(a, b) for a, b in zip(pair.losses, cohort.losses))  # Eqs. 5-6 at M = 2, to the bit
    assert pair.taught.keys() == cohort.taught.keys()
    assert all(torch.equal(pair.taught[k], cohort.taught[k]) for k in pair.taught)
    assert all(torch.equal(a, b) for a, b in zip(pair.q_tilde + pair.h, cohort.q_tilde + cohort.h))


def test_each_run_trains_by_its_own_objective():
    cmd = [objective_for(Method(mode=mode), 2) for mode in ("zero", "all", "static", "progressive")]
    assert cmd == [cmd_objective] * 4  # the paper's pair: CMD's modes differ only in chi
    assert objective_for(Method(), 3) is cohort_objective
    assert objective_for(Method(select="shuffled"), 2) is cohort_objective
    assert objective_for(Method(peer_weight="mean"), 2) is peer_mean_objective
    assert objective_for(Method(mode="mkd", lc="ce", eta=None, b=None), 3) is OBJECTIVES["mkd"]
