"""ELR (Liu et al. 2020, "Early-Learning Regularization Prevents Memorization of Noisy Labels"), --mode elr: its loss
and its running target against a transcription of the authors' code, and its stage from the first epoch on. That it
trains alone and under CMD, and resumes bit for bit, the registry's tests hold for every entry (test_train,
test_stops)."""
import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import train
from lab.methods.elr import elr_loss, elr_target
from mutual import MODES, NAMES


class ElrLoss(nn.Module):
    """shengliu66/ELR, ELR/model/loss.py, elr_loss, transcribed: its target is a buffer of every sample's rows, and
    its forward updates the rows of the batch's samples from the batch's own outputs, then computes the loss.
    `lam` is their config's train_loss.args.lambda (config_cifar10.json: beta 0.7, lambda 3)."""

    def __init__(self, num_examp, num_classes=10, beta=0.3, lam=3.0):
        super().__init__()
        self.num_classes = num_classes
        self.target = torch.zeros(num_examp, self.num_classes)
        self.beta, self.lam = beta, lam

    def forward(self, index, output, label):
        y_pred = F.softmax(output, dim=1)
        y_pred = torch.clamp(y_pred, 1e-4, 1.0 - 1e-4)
        y_pred_ = y_pred.data.detach()
        self.target[index] = self.beta * self.target[index] + (1 - self.beta) * (
            (y_pred_) / (y_pred_).sum(dim=1, keepdim=True))
        ce_loss = F.cross_entropy(output, label)
        elr_reg = ((1 - (self.target[index] * y_pred).sum(dim=1)).log()).mean()
        final_loss = ce_loss + self.lam * elr_reg
        return final_loss


@pytest.mark.parametrize("beta,lam", [(0.7, 3.0), (0.9, 7.0), (0.0, 1.0)])
def test_the_target_and_the_loss_are_the_authors(beta, lam):
    """Two steps of theirs on the same samples: each time their forward first moves the batch's target rows toward
    the outputs, then computes the loss with them. elr_target makes the same rows of the same outputs, and elr_loss
    the same value and gradient with them."""
    g = torch.Generator().manual_seed(3)
    n, k, index = 40, 10, torch.arange(8, 24)
    theirs = ElrLoss(n, k, beta, lam)
    target = None  # ours, for the batch's samples: none before the first update (their zeros)
    for step in range(2):
        z = (4 * torch.randn(len(index), k, generator=g)).requires_grad_()
        y = torch.randint(0, k, (len(index),), generator=g)
        want = theirs(index, z, y)
        want.backward()
        grad, z.grad = z.grad.clone(), None
        target = elr_target(target, F.softmax(z.detach(), 1), beta)
        assert torch.allclose(target, theirs.target[index], atol=1e-7), step
        got = elr_loss(z, y, target, lam)
        got.backward()
        assert got.item() == pytest.approx(want.item(), rel=1e-6)
        assert torch.allclose(z.grad, grad, rtol=1e-5, atol=1e-6)  # softmax, or exp of log_softmax: float32 apart


def test_the_stage_renews_every_samples_target_from_the_first_epoch(tmp_path):
    """A one-epoch run trains with ELR, not plain CE: its stage acts at the start of epoch 1, from the models'
    predictions on the training set as they are initialised, and the checkpoint keeps each model's target; the
    loss of that epoch differs from a CE run's of the same seed."""
    from training import build, config
    from training.report import predictions
    flags = ["--dataset", "synthetic", "--arch", "mlp", "--synthetic-size", "64", "--synthetic-test-size", "32",
             "--synthetic-classes", "4", "--batch-size", "32", "--device", "cpu", "--workers", "0", "--epochs", "1",
             ]
    elr, ce = str(tmp_path / "elr"), str(tmp_path / "ce")
    train.main(flags + ["--mode", "elr", "--out", elr])
    train.main(flags + ["--mode", "zero", "--lc", "ce", "--out", ce])
    args = config.resolve(config.get_args(flags + ["--mode", "elr", "--out", elr]))
    d, train_set, _, _ = build.load_data(args)
    setup = build.Setup.of(args)
    nets = build.build_models(args, d.num_classes, train_set, setup).nets  # as the run built them: its seed
    probs = predictions(nets, build.eval_batches(d, {"train": train_set}, setup.placement())["train"],
                        dict(device_type="cpu", enabled=False))
    ckpt = torch.load(tmp_path / "elr" / "checkpoint.pt", weights_only=True)
    beta = MODES["elr"].settings["elr_beta"].default
    for k, p in zip(NAMES, probs):
        assert torch.allclose(ckpt[f"state_target_{k}"], elr_target(None, p, beta)), k
    rows = [json.loads(open(f"{d}/metrics.jsonl").readline()) for d in (elr, ce)]
    assert rows[0]["train_loss_a"] != rows[1]["train_loss_a"]
