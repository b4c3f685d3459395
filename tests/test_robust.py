"""robust.py, Table 3's single-network methods: each loss on inputs whose value is worked out by hand, and against a
direct transcription of its authors' code on random inputs; the anchor-point estimate on predictions whose anchors
are known; CDR's mask on gradients whose critical set is known."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import robust


def logits_of(p):
    return torch.tensor(p, dtype=torch.float64).log().float()  # softmax(log p) = p


def test_apl_by_hand():
    # p = (1/2, 1/4, 1/4), label 0: NCE = ln 2 / (ln 2 + 2 ln 4) = 1/5; RCE = −A (1/4 + 1/4) = 9.2103 / 2
    z, y = logits_of([[0.5, 0.25, 0.25]]), torch.tensor([0])
    assert robust.apl_loss(z, y, alpha=1.0, beta=0.0).item() == pytest.approx(0.2, rel=1e-6)
    assert robust.apl_loss(z, y, alpha=0.0, beta=1.0).item() == pytest.approx(-math.log(1e-4) / 2, rel=1e-6)
    assert robust.apl_loss(z, y).item() == pytest.approx(10 * 0.2 + 0.1 * -math.log(1e-4) / 2, rel=1e-6)


def test_apl_is_the_authors_nce_plus_rce():
    """HanxunH/Active-Passive-Losses, loss.py: NormalizedCrossEntropy(scale=alpha) + ReverseCrossEntropy(scale=beta)."""
    g = torch.Generator().manual_seed(0)
    z, y = 3 * torch.randn(16, 10, generator=g), torch.randint(0, 10, (16,), generator=g)
    pred = F.log_softmax(z, dim=1)
    one_hot = F.one_hot(y, 10).float()
    nce = -1 * torch.sum(one_hot * pred, dim=1) / (- pred.sum(dim=1))
    p = torch.clamp(F.softmax(z, dim=1), min=1e-7, max=1.0)
    rce = -1 * torch.sum(p * torch.log(torch.clamp(one_hot, min=1e-4, max=1.0)), dim=1)
    assert robust.apl_loss(z, y).item() == pytest.approx((10.0 * nce.mean() + 0.1 * rce.mean()).item(), rel=1e-6)


def test_dmi_by_hand():
    # Yᵀ P = [[3/4, 1/4], [1/4, 3/4]]: det = 1/2
    z, y = logits_of([[0.75, 0.25], [0.25, 0.75]]), torch.tensor([0, 1])
    assert robust.dmi_loss(z, y).item() == pytest.approx(-math.log(0.5 + 0.001), rel=1e-6)
    # a class absent from the batch: a singular matrix, the loss the 0.001 caps it at
    assert robust.dmi_loss(z, torch.tensor([0, 0])).item() == pytest.approx(-math.log(0.001), rel=1e-5)


def test_dmi_is_the_authors_loss():
    """Newbeeer/L_DMI, CIFAR-10/DMI.py: DMI_loss."""
    g = torch.Generator().manual_seed(1)
    z, y = torch.randn(64, 4, generator=g), torch.randint(0, 4, (64,), generator=g)
    outputs = F.softmax(z, dim=1)
    y_onehot = torch.zeros(64, 4).scatter_(1, y.reshape(64, 1), 1).transpose(0, 1)
    mat = y_onehot @ outputs
    want = -1.0 * torch.log(torch.abs(torch.det(mat.float())) + 0.001)
    assert robust.dmi_loss(z, y).item() == pytest.approx(want.item(), rel=1e-5)


def test_forward_by_hand():
    # T = [[.8, .2], [.3, .7]], p = (.6, .4), noisy label 1: (p T)_1 = .6 * .2 + .4 * .7 = .4
    t = torch.tensor([[0.8, 0.2], [0.3, 0.7]])
    z = logits_of([[0.6, 0.4]])
    assert robust.forward_loss(z, torch.tensor([1]), t).item() == pytest.approx(-math.log(0.4), rel=1e-6)
    # the identity T is plain CE
    g = torch.Generator().manual_seed(2)
    z, y = torch.randn(8, 5, generator=g), torch.randint(0, 5, (8,), generator=g)
    assert robust.forward_loss(z, y, torch.eye(5)).item() == pytest.approx(F.cross_entropy(z, y).item(), rel=1e-5)


def test_forward_is_the_authors_loss():
    """giorgiop/loss-correction, loss.py: robust('forward', P), its Keras ops in torch (epsilon 1e-7)."""
    g = torch.Generator().manual_seed(3)
    z, y = 4 * torch.randn(32, 6, generator=g), torch.randint(0, 6, (32,), generator=g)
    t = torch.rand(6, 6, generator=g) + torch.eye(6) * 3
    t = t / t.sum(1, keepdim=True)
    y_pred = F.softmax(z, dim=1)
    y_pred = y_pred / y_pred.sum(-1, keepdim=True)
    y_pred = torch.clamp(y_pred, 1e-7, 1.0 - 1e-7)
    want = (-torch.sum(F.one_hot(y, 6).float() * torch.log(y_pred @ t), dim=-1)).mean()
    assert robust.forward_loss(z, y, t).item() == pytest.approx(want.item(), rel=1e-5)


def test_the_anchor_estimate_takes_each_classs_most_confident_prediction():
    probs = np.array([[0.9, 0.1, 0.0], [0.2, 0.7, 0.1], [0.1, 0.3, 0.6], [0.5, 0.4, 0.1]])
    t = robust.anchor_transition(probs)
    assert np.allclose(t, probs[[0, 1, 2]])  # class 0's anchor is row 0, class 1's row 1, class 2's row 2
    # the 97th-percentile variant skips each column's top 3% (here its maximum, of 40 rows)
    many = np.repeat(probs, 10, axis=0)
    many[0] = [0.98, 0.01, 0.01]
    robust_t = robust.anchor_transition(many, percentile=97)
    assert np.allclose(robust_t[0], [0.5, 0.4, 0.1])  # below 0.98 and 0.9 (the top 3% of 40: two values)
    assert np.allclose(t.sum(1), 1) and np.allclose(robust_t.sum(1), 1)
    # noisy-label posteriors p T of a known T, some samples sure of their class (the anchors): the estimate is T
    true = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.25, 0.25, 0.5]])
    clean = np.random.default_rng(0).dirichlet(np.ones(3), 300)
    clean[:3] = np.eye(3)
    assert np.allclose(robust.anchor_transition(clean @ true), true)


def test_reweighting_by_hand_and_its_weight_is_a_constant():
    # p = (.9, .1), T = [[.8, .2], [.3, .7]], noisy label 1: (p T)_1 = .25, β = .1 / .25 = .4
    t = torch.tensor([[0.8, 0.2], [0.3, 0.7]])
    z = logits_of([[0.9, 0.1]]).requires_grad_()
    loss = robust.reweight_loss(z, torch.tensor([1]), t)
    assert loss.item() == pytest.approx(0.4 * -math.log(0.1), rel=1e-6)
    loss.backward()
    want = 0.4 * (torch.tensor([0.9, 0.1]) - torch.tensor([0.0, 1.0]))  # β times CE's gradient, p − onehot
    assert torch.allclose(z.grad[0], want, atol=1e-6)


def test_mentornet_weights_the_samples_below_the_batchs_percentile():
    losses = torch.tensor([0.1, 0.5, 1.0, 2.0])  # the 70% quantile: 1.0 + 0.1 (2.0 - 1.0) = 1.1
    p_y = torch.exp(-losses)
    z = torch.stack([p_y.log(), (1 - p_y).log()], 1)  # two classes: −log p_0 = the losses
    y = torch.zeros(4, dtype=torch.long)
    assert robust.mentornet_pd_loss(z, y, 0.7, 0.18, progress=0.5).item() == pytest.approx(1.6 / 4, rel=1e-5)
    assert robust.mentornet_pd_loss(z, y, 0.7, 0.18, progress=0.1).item() == pytest.approx(3.6 / 4, rel=1e-5)


def test_cdr_keeps_the_gradient_of_the_critical_weights_scaled_and_drops_the_others():
    net = torch.nn.Linear(2, 2)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
        net.bias.copy_(torch.tensor([1.0, 1.0]))
    net.weight.grad = torch.tensor([[4.0, 1.0], [0.1, 1.0]])  # |θ g| = 4, 2, 0.3, 4
    net.bias.grad = torch.tensor([5.0, 6.0])
    robust.cdr_mask_(net.parameters(), keep=0.5)  # the top half: the two 4s
    assert torch.equal(net.weight.grad, torch.tensor([[2.0, 0.0], [0.0, 0.5]]))  # kept, times keep
    assert torch.equal(net.bias.grad, torch.tensor([5.0, 6.0]))  # a bias keeps its whole gradient


# ---------------------------------------------------------------- in the harness

def test_a_warm_up_trains_plain_ce_then_the_label_correction(tmp_path):
    """--warmup 1: epoch 1 is a CE run's epoch 1, bit for bit; epoch 2 trains by --lc's loss, and differs."""
    import json

    import train
    flags = ["--dataset", "synthetic", "--arch", "mlp", "--synthetic-size", "96", "--synthetic-test-size", "48",
             "--synthetic-classes", "4", "--batch-size", "32", "--device", "cpu", "--workers", "0", "--epochs", "2",
             "--mode", "zero"]
    runs = {}
    for name, lc in (("ce", ["--lc", "ce"]), ("dmi", ["--lc", "dmi", "--warmup", "1"]),
                     ("apl", ["--lc", "apl", "--warmup", "1"])):
        train.main(flags + lc + ["--out", str(tmp_path / name)])
        runs[name] = [dict(json.loads(line), seconds=0) for line in open(tmp_path / name / "metrics.jsonl")]
    for lc in ("dmi", "apl"):
        assert runs[lc][0] == runs["ce"][0] and runs[lc][1] != runs["ce"][1], lc


def test_cdr_in_the_step_moves_only_the_critical_weights():
    """mutual_step with --lc cdr, SGD without momentum or weight decay: a fraction 1 − τ of each model's weights
    move, the others stay exactly where they were; its biases move exactly as a plain CE step moves them."""
    import copy

    import models
    from mutual import Clock, Comparators, Method, Precision, mutual_step
    torch.manual_seed(0)
    nets = [models.build_model("mlp", 4) for _ in range(2)]
    plain = copy.deepcopy(nets)
    before = [{k: v.clone() for k, v in n.named_parameters()} for n in nets]
    x, y = torch.randn(16, 3, 16, 16), torch.randint(0, 4, (16,))
    precision = Precision(dict(device_type="cpu", enabled=False), torch.amp.GradScaler("cpu", enabled=False))
    for models_, lc in ((nets, "cdr"), (plain, "ce")):
        method = Method(mode="zero", lc=lc, eta=math.inf, b=0.0, comparators=Comparators(cdr_rate=0.75))
        mutual_step(models_, [torch.optim.SGD(n.parameters(), lr=0.1) for n in models_], (x, y, y), method, 0.0,
                    [torch.zeros(()), torch.zeros(())], Clock(0, 0, 1, 1, 0), precision)
    for net, twin, old in zip(nets, plain, before):
        weights = torch.cat([(p != old[k]).flatten() for k, p in net.named_parameters() if p.dim() == 2])
        assert weights.float().mean().item() == pytest.approx(0.25, abs=1e-4)  # the critical quarter moved
        assert all(torch.equal(p, q) for p, q in zip(net.parameters(), twin.parameters()) if p.dim() == 1)


# ---------------------------------------------------------------- a stage: the estimate after the warm-up

STAGED = ["--dataset", "synthetic", "--arch", "mlp", "--synthetic-size", "96", "--synthetic-test-size", "48",
          "--synthetic-classes", "4", "--batch-size", "32", "--device", "cpu", "--workers", "0", "--epochs", "3",
          "--mode", "zero", "--warmup", "1", "--noise", "pair"]


@pytest.mark.parametrize("lc", ["trevision", "forward-anchor"])
def test_the_estimate_is_the_anchor_points_of_each_models_predictions_when_the_warm_up_ends(tmp_path, lc):
    """The checkpoint after the stage holds each model's T̂: robust.anchor_transition of that model's predicted
    probabilities on the training set (eval mode, no augmentation) at the warm-up's end, which a CE run of the
    warm-up's length reaches bit for bit (test_a_warm_up_trains_plain_ce_then_the_label_correction)."""
    import train
    from mutual import NAMES
    from training import build, config
    from training.report import predictions
    out, ce = str(tmp_path / lc), str(tmp_path / "ce")
    train.main(STAGED + ["--lc", lc, "--out", out])
    warm = [a for a in STAGED if a not in ("--warmup", "1")]
    warm[warm.index("--epochs") + 1] = "1"
    train.main(warm + ["--lc", "ce", "--out", ce])  # the warm-up alone: its final weights are the stage's models
    args = config.resolve(config.get_args(warm + ["--lc", "ce", "--out", ce]))
    d, train_set, _, _ = build.load_data(args)
    nets = build.build_models(args, d.num_classes, train_set, build.Setup.of(args)).nets
    for k, net in zip(NAMES, nets):
        net.load_state_dict(torch.load(tmp_path / "ce" / f"model_{k}.pt", weights_only=True))
    probs = predictions(nets, build.eval_batches(d, {"train": train_set}, build.Setup.of(args).placement())["train"],
                        dict(device_type="cpu", enabled=False))
    ckpt = torch.load(tmp_path / lc / "checkpoint.pt", weights_only=True)
    for k, p in zip(NAMES, probs):
        want = torch.as_tensor(robust.anchor_transition(p), dtype=torch.float32)
        assert torch.equal(ckpt[f"estimate_{k}"], want), k
        assert torch.allclose(want.sum(1), torch.ones(4))


@pytest.mark.parametrize("after", [2, 3])  # metrics.jsonl's second line fails: before the stage; its third: after
def test_a_run_stopped_before_or_after_its_stage_resumes_equal(tmp_path, capsys, monkeypatch, after):
    import train
    from test_stops import FullDisk, assert_same_run, command_in, one_line

    from training import runfiles
    full, out = str(tmp_path / "full"), str(tmp_path / "run")
    train.main(STAGED + ["--lc", "trevision", "--out", full])
    monkeypatch.setattr(runfiles, "open", FullDisk("metrics.jsonl", after=after), raising=False)
    with pytest.raises(SystemExit):
        train.main(STAGED + ["--lc", "trevision", "--out", out])
    line = one_line(capsys.readouterr().err)
    assert f"checkpoint.pt holds epoch {after - 1}" in line, line
    monkeypatch.undo()
    train.main(command_in(line))
    assert_same_run(out, full)


@pytest.mark.parametrize("flags,message", [
    (["--lc", "trevision"], "--lc trevision estimates T̂ from the models once their warm-up ends: give --warmup W"),
    (["--lc", "forward-anchor"], "--lc forward-anchor estimates T̂ from the models once their warm-up ends"),
    (["--lc", "forward", "--noise", "none"], "--lc forward trains with the noise's true T, which only synthetic noise "
                                             "has (--noise sym or pair); for --noise none, estimate it: --lc "
                                             "forward-anchor --warmup W"),
])
def test_what_a_stage_needs_is_refused_in_one_line_before_anything_is_written(tmp_path, capsys, flags, message):
    import train
    with pytest.raises(SystemExit) as e:
        train.main(STAGED[:STAGED.index("--warmup")] + flags + ["--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "run").exists()
