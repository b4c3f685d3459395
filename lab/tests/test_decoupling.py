"""Decoupling (Malach and Shalev-Shwartz 2017), --mode decoupling: against a transcription of the public PyTorch form
of it, and where the two networks agree on every sample. That it trains, reports its selection and resumes bit for
bit, the registry's tests hold for every mode (test_train, test_baselines, test_stops)."""
import numpy as np
import pytest
import torch
import torch.nn as nn

import train
from lab.methods.decoupling import decoupling
from mutual import Clock, Method, objective_for


class Decouple:
    """songheony/TAkS, methods/decouple.py, transcribed: the samples on which the two networks' argmax differs, each
    network's criterion on them (None where there are none, and the loop then takes no step)."""

    def __init__(self, criterion):
        self.criterion = criterion
        self.name = "Decouple"
        self.num_models = 2

    def loss(self, outputs, target, *args, **kwargs):
        output1, output2 = outputs
        pred1 = np.argmax(output1.detach().cpu().numpy(), axis=1)
        pred2 = np.argmax(output2.detach().cpu().numpy(), axis=1)
        ind_update = np.where(pred1 != pred2)[0]

        if len(ind_update) > 0:
            loss1 = self.criterion(output1[ind_update], target[ind_update])
            loss2 = self.criterion(output2[ind_update], target[ind_update])
        else:
            loss1, loss2 = None, None

        return [loss1, loss2], [ind_update, ind_update]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_network_learns_the_samples_they_disagree_on_as_the_public_code_does(seed):
    g = torch.Generator().manual_seed(seed)
    z_a = (2 * torch.randn(32, 5, generator=g)).requires_grad_()
    z_b = (2 * torch.randn(32, 5, generator=g)).requires_grad_()
    y = torch.randint(0, 5, (32,), generator=g)
    (want_a, want_b), (ind, _) = Decouple(nn.CrossEntropyLoss()).loss((z_a, z_b), y)
    grads = torch.autograd.grad(want_a + want_b, (z_a, z_b))
    (got_a, got_b), taught = decoupling(z_a, z_b, y)
    assert 0 < len(ind) < 32 and torch.equal(taught[0, 1], taught[1, 0])
    assert taught[0, 1].nonzero().flatten().tolist() == ind.tolist()
    assert got_a.item() == pytest.approx(want_a.item(), rel=1e-6) and got_b.item() == pytest.approx(want_b.item(),
                                                                                                    rel=1e-6)
    mine = torch.autograd.grad(got_a + got_b, (z_a, z_b))
    assert all(torch.allclose(m, w, atol=1e-7) for m, w in zip(mine, grads))


def test_two_networks_that_agree_everywhere_learn_nothing():
    """No disagreement: the public code has no loss and takes no step; here the losses and their gradients are 0."""
    z_a = torch.randn(16, 5).requires_grad_()
    z_b = (3 * z_a.detach() + 1).requires_grad_()  # the same argmax everywhere
    y = torch.randint(0, 5, (16,))
    assert Decouple(nn.CrossEntropyLoss()).loss((z_a, z_b), y)[0] == [None, None]
    (loss_a, loss_b), taught = decoupling(z_a, z_b, y)
    assert loss_a.item() == loss_b.item() == 0 and taught[0, 1].sum() == 0
    assert all(g.abs().sum() == 0 for g in torch.autograd.grad(loss_a + loss_b, (z_a, z_b)))


def test_it_is_a_pair_mode_that_needs_no_forget_rate(tmp_path):
    """Its entry's objective is decoupling's, for a pair only; it reads no R(t), so --noise none needs no τ."""
    g = torch.Generator().manual_seed(4)
    z, y = [torch.randn(8, 3, generator=g) for _ in range(2)], torch.randint(0, 3, (8,), generator=g)
    method = Method(mode="decoupling", lc="ce", eta=None, b=None)
    out = objective_for(method, 2)(z, y, method, None, None, Clock(0, 0, 1, 1, 0))
    (loss_a, loss_b), _ = decoupling(*z, y)
    assert torch.equal(out.losses[0], loss_a) and torch.equal(out.losses[1], loss_b)
    with pytest.raises(ValueError, match="trains a pair, not 3"):
        objective_for(method, 3)(z + z[:1], y, method, None, None, Clock(0, 0, 1, 1, 0))
    train.main(["--dataset", "synthetic", "--arch", "mlp", "--synthetic-size", "64", "--synthetic-test-size", "32",
                "--synthetic-classes", "4", "--batch-size", "32", "--device", "cpu", "--workers", "0", "--epochs", "1",
                "--mode", "decoupling", "--noise", "none", "--out", str(tmp_path / "run")])
