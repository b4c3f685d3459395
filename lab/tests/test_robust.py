"""robust.py, Table 3's single-network methods: each loss on inputs whose value is worked out by hand, and against a
direct transcription of its authors' code on random inputs; the anchor-point estimate on predictions whose anchors
are known; CDR's mask on gradients whose critical set is known."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lab.methods import apl, cdr, dmi, forward, joint, mentornet, trevision
from lab.methods.tfkd import tfkd_reg_loss
from mutual import Clock


def logits_of(p):
    return torch.tensor(p, dtype=torch.float64).log().float()  # softmax(log p) = p


def test_apl_by_hand():
    # p = (1/2, 1/4, 1/4), label 0: NCE = ln 2 / (ln 2 + 2 ln 4) = 1/5; RCE = −A (1/4 + 1/4) = 9.2103 / 2
    z, y = logits_of([[0.5, 0.25, 0.25]]), torch.tensor([0])
    assert apl.apl_loss(z, y, alpha=1.0, beta=0.0).item() == pytest.approx(0.2, rel=1e-6)
    assert apl.apl_loss(z, y, alpha=0.0, beta=1.0).item() == pytest.approx(-math.log(1e-4) / 2, rel=1e-6)
    assert apl.apl_loss(z, y).item() == pytest.approx(10 * 0.2 + 0.1 * -math.log(1e-4) / 2, rel=1e-6)


def test_apl_is_the_authors_nce_plus_rce():
    """HanxunH/Active-Passive-Losses, loss.py: NormalizedCrossEntropy(scale=alpha) + ReverseCrossEntropy(scale=beta)."""
    g = torch.Generator().manual_seed(0)
    z, y = 3 * torch.randn(16, 10, generator=g), torch.randint(0, 10, (16,), generator=g)
    pred = F.log_softmax(z, dim=1)
    one_hot = F.one_hot(y, 10).float()
    nce = -1 * torch.sum(one_hot * pred, dim=1) / (- pred.sum(dim=1))
    p = torch.clamp(F.softmax(z, dim=1), min=1e-7, max=1.0)
    rce = -1 * torch.sum(p * torch.log(torch.clamp(one_hot, min=1e-4, max=1.0)), dim=1)
    assert apl.apl_loss(z, y).item() == pytest.approx((10.0 * nce.mean() + 0.1 * rce.mean()).item(), rel=1e-6)


def test_dmi_by_hand():
    # Yᵀ P = [[3/4, 1/4], [1/4, 3/4]]: det = 1/2
    z, y = logits_of([[0.75, 0.25], [0.25, 0.75]]), torch.tensor([0, 1])
    assert dmi.dmi_loss(z, y).item() == pytest.approx(-math.log(0.5 + 0.001), rel=1e-6)
    # a class absent from the batch: a singular matrix, the loss the 0.001 caps it at
    assert dmi.dmi_loss(z, torch.tensor([0, 0])).item() == pytest.approx(-math.log(0.001), rel=1e-5)


def test_dmi_is_the_authors_loss():
    """Newbeeer/L_DMI, CIFAR-10/DMI.py: DMI_loss."""
    g = torch.Generator().manual_seed(1)
    z, y = torch.randn(64, 4, generator=g), torch.randint(0, 4, (64,), generator=g)
    outputs = F.softmax(z, dim=1)
    y_onehot = torch.zeros(64, 4).scatter_(1, y.reshape(64, 1), 1).transpose(0, 1)
    mat = y_onehot @ outputs
    want = -1.0 * torch.log(torch.abs(torch.det(mat.float())) + 0.001)
    assert dmi.dmi_loss(z, y).item() == pytest.approx(want.item(), rel=1e-5)


def test_forward_by_hand():
    # T = [[.8, .2], [.3, .7]], p = (.6, .4), noisy label 1: (p T)_1 = .6 * .2 + .4 * .7 = .4
    t = torch.tensor([[0.8, 0.2], [0.3, 0.7]])
    z = logits_of([[0.6, 0.4]])
    assert forward.forward_loss(z, torch.tensor([1]), t).item() == pytest.approx(-math.log(0.4), rel=1e-6)
    # the identity T is plain CE
    g = torch.Generator().manual_seed(2)
    z, y = torch.randn(8, 5, generator=g), torch.randint(0, 5, (8,), generator=g)
    assert forward.forward_loss(z, y, torch.eye(5)).item() == pytest.approx(F.cross_entropy(z, y).item(), rel=1e-5)


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
    assert forward.forward_loss(z, y, t).item() == pytest.approx(want.item(), rel=1e-5)


def test_the_anchor_estimate_takes_each_classs_most_confident_prediction():
    probs = np.array([[0.9, 0.1, 0.0], [0.2, 0.7, 0.1], [0.1, 0.3, 0.6], [0.5, 0.4, 0.1]])
    t = forward.anchor_transition(probs)
    assert np.allclose(t, probs[[0, 1, 2]])  # class 0's anchor is row 0, class 1's row 1, class 2's row 2
    # the 97th-percentile variant skips each column's top 3% (here its maximum, of 40 rows)
    many = np.repeat(probs, 10, axis=0)
    many[0] = [0.98, 0.01, 0.01]
    robust_t = forward.anchor_transition(many, percentile=97)
    assert np.allclose(robust_t[0], [0.5, 0.4, 0.1])  # below 0.98 and 0.9 (the top 3% of 40: two values)
    assert np.allclose(t.sum(1), 1) and np.allclose(robust_t.sum(1), 1)
    # noisy-label posteriors p T of a known T, some samples sure of their class (the anchors): the estimate is T
    true = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.25, 0.25, 0.5]])
    clean = np.random.default_rng(0).dirichlet(np.ones(3), 300)
    clean[:3] = np.eye(3)
    assert np.allclose(forward.anchor_transition(clean @ true), true)


def test_reweighting_by_hand_and_its_weight_is_a_constant():
    # p = (.9, .1), T = [[.8, .2], [.3, .7]], noisy label 1: (p T)_1 = .25, β = .1 / .25 = .4
    t = torch.tensor([[0.8, 0.2], [0.3, 0.7]])
    z = logits_of([[0.9, 0.1]]).requires_grad_()
    loss = trevision.reweight_loss(z, torch.tensor([1]), t)
    assert loss.item() == pytest.approx(0.4 * -math.log(0.1), rel=1e-6)
    loss.backward()
    want = 0.4 * (torch.tensor([0.9, 0.1]) - torch.tensor([0.0, 1.0]))  # β times CE's gradient, p − onehot
    assert torch.allclose(z.grad[0], want, atol=1e-6)


def test_mentornet_weights_the_samples_below_the_batchs_percentile():
    losses = torch.tensor([0.1, 0.5, 1.0, 2.0])  # the 70% quantile: 1.0 + 0.1 (2.0 - 1.0) = 1.1
    p_y = torch.exp(-losses)
    z = torch.stack([p_y.log(), (1 - p_y).log()], 1)  # two classes: −log p_0 = the losses
    y = torch.zeros(4, dtype=torch.long)
    assert mentornet.mentornet_pd_loss(z, y, 0.7, 0.18, percent=50).item() == pytest.approx(1.6 / 4, rel=1e-5)
    assert mentornet.mentornet_pd_loss(z, y, 0.7, 0.18, percent=10).item() == pytest.approx(3.6 / 4, rel=1e-5)


def tf_percentile_nearest(x, q):
    """tf.contrib.distributions.percentile(x, q) at its default interpolation, 'nearest' (TF 1.x's
    distributions/python/ops/sample_stats.py): sorted in decreasing order, index round((d - 1) * (1 - q / 100)),
    TensorFlow's round being half to even, as numpy's is."""
    sorted_y = np.sort(x)[::-1]
    frac_at_q_or_above = 1.0 - q / 100.0
    return sorted_y[int(np.round((len(x) - 1) * frac_at_q_or_above))]


def vstar_mentornet_pd(loss_diff, epoch, gamma=1):
    """google/mentornet, code/training_mentornet/models.py: vstar_mentornet_pd with vstar_self_paced and
    vstar_spcl_linear, transcribed (inbatch's columns passed by name; their PD command: --vstar_gamma=1)."""
    v1 = np.copy(loss_diff)  # vstar_self_paced
    v1[np.where(loss_diff <= 0)] = 1
    v1[np.where(loss_diff > 0)] = 0
    v2 = -1.0 / gamma * loss_diff + 1  # vstar_spcl_linear
    v2 = np.maximum(np.minimum(v2, 1), 0)
    v = np.zeros(len(epoch))
    ids = np.where(epoch >= 90)
    v[ids] = v2[ids]
    ids = np.where(epoch < 90)
    v[ids] = v1[ids]
    ids = np.where(epoch <= 18)
    v[ids] = 1
    return v


@pytest.mark.parametrize("n", [2, 5, 128, 127])
def test_mentornet_pd_is_their_curriculum_at_every_point_of_training_with_their_percentile(n):
    """The weight of every sample at every percentage of training is vstar_mentornet_pd's, with λ TensorFlow's
    nearest percentile of the batch's losses (their student code's): at 128 samples and p = 0.7 it keeps 90 where
    torch.quantile's interpolation would keep 89, and every sample counts until ⌊100 t/Γ⌋ passes 18 (19%)."""
    g = torch.Generator().manual_seed(n)
    z, y = torch.randn(n, 10, generator=g) * 3, torch.randint(0, 10, (n,), generator=g)
    loss = F.cross_entropy(z, y, reduction="none").double().numpy()
    for p in (0.7, 0.5, 0.75):
        lam = tf_percentile_nearest(loss, p * 100)
        for step in range(0, 400, 3):
            clock = Clock(epoch=step // 20, batch=step % 20, batches=20, epochs=20, seed=0)  # 400 steps in all
            epoch = np.full(n, 100 * step // 400)  # their epoch_step: ⌊100 global_step / max_step⌋
            want = (vstar_mentornet_pd(loss - lam, epoch) * loss).mean()
            got = mentornet.mentornet_pd_loss(z, y, p, 0.18, percent=clock.percent).item()
            assert got == pytest.approx(want, rel=1e-5, abs=1e-6), (p, step)
            on_device = mentornet.mentornet_pd_loss(z, y, p, 0.18, percent=torch.tensor(clock.percent)).item()
            assert on_device == pytest.approx(want, rel=1e-5, abs=1e-6), (p, step)
    if n == 128:
        kept = (loss <= tf_percentile_nearest(loss, 70)).sum()
        assert kept == 90 and (loss <= torch.quantile(torch.tensor(loss), 0.7).item()).sum() == 89


@pytest.mark.parametrize("step, steps, batches, e", [
    (19_015, 100_079, 100_079, 18),  # 100 t/Γ = 18.99999: their ⌊.⌋ is 18, still burn-in
    (29, 50, 25, 58), (29, 100, 25, 29),  # 100 t/Γ whole, which Clock.progress's float puts an ulp below (57.99...)
    (270, 300, 30, 90), (269, 300, 30, 89),  # the ramp's first step, and the step before it
])
def test_mentornet_percentage_is_their_integer_step_count_where_a_float_lands_an_ulp_off(step, steps, batches, e):
    """e = ⌊100 step / steps⌋ in whole numbers, as their epoch_step counts, at the steps where t/Γ in floating point
    lands either side of a whole percentage (the nudge the float form needed put step 19,015 of 100,079 at 19, where
    their burn-in still weights every sample 1: 38 of 128 weights differed there); eager and replayed alike."""
    clock = Clock(epoch=step // batches, batch=step % batches, batches=batches, epochs=steps // batches, seed=0)
    assert clock.percent == e and 100 * step // steps == e
    g = torch.Generator().manual_seed(0)
    z, y = torch.randn(128, 10, generator=g) * 3, torch.randint(0, 10, (128,), generator=g)
    loss = F.cross_entropy(z, y, reduction="none").double().numpy()
    want = (vstar_mentornet_pd(loss - tf_percentile_nearest(loss, 70), np.full(128, e)) * loss).mean()
    for percent in (clock.percent, torch.tensor(clock.percent)):
        assert mentornet.mentornet_pd_loss(z, y, 0.7, 0.18, percent=percent).item() == pytest.approx(want, rel=1e-6)
    if step == 19_015:  # burn-in: every sample counts, where e = 19 would drop those above λ
        assert mentornet.mentornet_pd_loss(z, y, 0.7, 0.18, percent=e).item() == pytest.approx(loss.mean(), rel=1e-6)
        assert mentornet.mentornet_pd_loss(z, y, 0.7, 0.18, percent=e + 1).item() < loss.mean() - 0.1


def test_cdr_keeps_the_gradient_of_the_critical_weights_scaled_and_drops_the_others():
    net = torch.nn.Linear(2, 2)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
        net.bias.copy_(torch.tensor([1.0, 1.0]))
    net.weight.grad = torch.tensor([[4.0, 1.0], [0.1, 1.0]])  # |θ g| = 4, 2, 0.3, 4
    net.bias.grad = torch.tensor([5.0, 6.0])
    cdr.cdr_mask_(net.parameters(), keep=0.5)  # the top half: the two 4s
    assert torch.equal(net.weight.grad, torch.tensor([[2.0, 0.0], [0.0, 0.5]]))  # kept, times keep
    assert torch.equal(net.bias.grad, torch.tensor([5.0, 6.0]))  # a bias keeps its whole gradient


def cdr_train_one_step_mask(net, nonzero_ratio, clip):
    """The masking of CDR's train_one_step (xiaoboxia/CDR, main.py), transcribed: every parameter of dim 2 or 4 (a
    linear layer's weights, a conv layer's kernels) enters one ranking of |θ g|; the threshold is the nz-th largest
    (torch.topk), nz = int(ratio x their count); those at or above it keep their gradient times clip, the rest lose it.
    On the net's .grad in place, after backward and before the optimiser's step."""
    chosen = [p for _, p in net.named_parameters() if p.dim() in (2, 4)]
    metric = torch.cat([(p.grad.data.view(-1) * p.data.view(-1)).abs() for p in chosen])
    thresh = torch.topk(metric, int(nonzero_ratio * metric.numel()))[0][-1]
    for p in chosen:
        p.grad.data = ((p.data * p.grad.data).abs() >= thresh).float() * clip * p.grad.data


def test_cdr_masks_a_conv_nets_kernels_as_their_code_does():
    """On a cnn, whose conv kernels are 4-D: cdr_mask_ leaves every gradient as their train_one_step's mask does, for
    the kernels too (keep = 1 − τ, their nonzero_ratio and clip alike); a rule on 2-D weights alone would leave tens
    of thousands of conv gradients unmasked."""
    import models

    def backward():  # a cnn with its gradients of one batch, the same each call
        torch.manual_seed(0)
        net = models.build_model("cnn", 10)
        x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
        F.cross_entropy(net(x), y).backward()
        return net
    assert any(p.dim() == 4 for p in backward().parameters())  # a conv net: what the mlp tests cannot see
    for keep in (0.25, 0.6):
        ours, oracle = backward(), backward()
        cdr.cdr_mask_(ours.parameters(), keep)
        cdr_train_one_step_mask(oracle, keep, keep)
        for (name, p), q in zip(ours.named_parameters(), oracle.parameters()):
            assert torch.equal(p.grad, q.grad), (keep, name)
        conv = [p for p in ours.parameters() if p.dim() == 4]
        dropped = sum(int((p.grad == 0).sum()) for p in conv)
        assert dropped > 0.2 * sum(p.numel() for p in conv)  # the kernels are masked, not only the linear layers


# ---------------------------------------------------------------- in the harness

def test_a_warm_up_trains_plain_ce_then_the_modes_own_loss(tmp_path):
    """--warmup 1: epoch 1 is a CE run's epoch 1 (zero knowledge, --lc ce), bit for bit (but χ, 0 there and none in a
    mode without one); epoch 2 trains by the mode's loss, and differs: every mode that reads --warmup."""
    import json

    import train
    from mutual import MODES
    flags = ["--dataset", "synthetic", "--arch", "mlp", "--synthetic-size", "96", "--synthetic-test-size", "48",
             "--synthetic-classes", "4", "--batch-size", "32", "--device", "cpu", "--workers", "0", "--epochs", "2",
             "--noise", "pair"]
    warmed = [m for m, x in MODES.items() if "warmup" in x.settings]
    assert {"dmi", "trevision", "forward-anchor"} <= set(warmed)
    runs = {}
    for name, mode in [("ce", ["--mode", "zero", "--lc", "ce"])] + [(m, ["--mode", m, "--warmup", "1"]) for m in warmed]:
        train.main(flags + mode + ["--out", str(tmp_path / name)])
        runs[name] = [dict(json.loads(line), seconds=0, chi=None) for line in open(tmp_path / name / "metrics.jsonl")]
    for m in warmed:
        assert runs[m][0] == runs["ce"][0] and runs[m][1] != runs["ce"][1], m


def test_cdr_in_the_step_moves_only_the_critical_weights():
    """mutual_step with --mode cdr and its own optimiser, SGD without momentum or weight decay: a fraction 1 − τ of
    each model's weights move, the others stay exactly where they were; its biases move exactly as a plain CE step
    (zero knowledge, --lc ce) moves them."""
    import copy
    from types import SimpleNamespace

    import models
    import mutual
    from mutual import Clock, Method, Precision, mutual_step
    torch.manual_seed(0)
    nets = [models.build_model("mlp", 4) for _ in range(2)]
    plain = copy.deepcopy(nets)
    before = [{k: v.clone() for k, v in n.named_parameters()} for n in nets]
    x, y = torch.randn(16, 3, 16, 16), torch.randint(0, 4, (16,))
    precision = Precision(dict(device_type="cpu", enabled=False), torch.amp.GradScaler("cpu", enabled=False))
    sgd = SimpleNamespace(lr=0.1, momentum=0.0, weight_decay=0.0)
    for models_, method in ((nets, Method(mode="cdr", lc="ce", eta=None, b=None,
                                          comparators=mutual.Comparators(cdr_rate=0.75))),
                            (plain, Method(mode="zero", lc="ce", eta=math.inf, b=0.0))):
        own = mutual.MODES[method.mode].optimiser
        opts = [own(n.parameters(), sgd, method) if own else torch.optim.SGD(n.parameters(), lr=0.1) for n in models_]
        mutual_step(models_, opts, (x, y, y), method, None if method.mode == "cdr" else 0.0,
                    [torch.zeros(()), torch.zeros(())], Clock(0, 0, 1, 1, 0), precision)
    for net, twin, old in zip(nets, plain, before):
        weights = torch.cat([(p != old[k]).flatten() for k, p in net.named_parameters() if p.dim() == 2])
        assert weights.float().mean().item() == pytest.approx(0.25, abs=1e-4)  # the critical quarter moved
        assert all(torch.equal(p, q) for p, q in zip(net.parameters(), twin.parameters()) if p.dim() == 1)


# ---------------------------------------------------------------- a stage: the estimate after the warm-up

STAGED = ["--dataset", "synthetic", "--arch", "mlp", "--synthetic-size", "96", "--synthetic-test-size", "48",
          "--synthetic-classes", "4", "--batch-size", "32", "--device", "cpu", "--workers", "0", "--epochs", "3",
          "--mode", "zero", "--warmup", "1", "--noise", "pair"]


@pytest.mark.parametrize("mode", ["trevision", "forward-anchor"])
def test_the_estimate_is_the_anchor_points_of_each_models_predictions_when_the_warm_up_ends(tmp_path, mode):
    """The checkpoint after the stage holds each model's T̂: forward.anchor_transition of that model's predicted
    probabilities on the training set (eval mode, no augmentation) at the warm-up's end, which a CE run of the
    warm-up's length reaches bit for bit (test_a_warm_up_trains_plain_ce_then_the_label_correction)."""
    import train
    from mutual import NAMES
    from training import build, config
    from training.report import predictions
    out, ce = str(tmp_path / mode), str(tmp_path / "ce")
    train.main(STAGED + ["--mode", mode, "--out", out])
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
    ckpt = torch.load(tmp_path / mode / "checkpoint.pt", weights_only=True)
    for k, p in zip(NAMES, probs):
        want = torch.as_tensor(forward.anchor_transition(p), dtype=torch.float32)
        assert torch.equal(ckpt[f"state_estimate_{k}"], want), k
        assert torch.allclose(want.sum(1), torch.ones(4))


@pytest.mark.parametrize("after", [2, 3])  # metrics.jsonl's second line fails: before the stage; its third: after
def test_a_run_stopped_before_or_after_its_stage_resumes_equal(tmp_path, capsys, monkeypatch, after):
    import train
    from test_stops import FullDisk, assert_same_run, command_in, one_line

    from training import runfiles
    full, out = str(tmp_path / "full"), str(tmp_path / "run")
    train.main(STAGED + ["--mode", "trevision", "--out", full])
    monkeypatch.setattr(runfiles, "open", FullDisk("metrics.jsonl", after=after), raising=False)
    with pytest.raises(SystemExit):
        train.main(STAGED + ["--mode", "trevision", "--out", out])
    line = one_line(capsys.readouterr().err)
    assert f"checkpoint.pt holds epoch {after - 1}" in line, line
    monkeypatch.undo()
    train.main(command_in(line))
    assert_same_run(out, full)


@pytest.mark.parametrize("flags,message", [
    (["--mode", "trevision"], "--mode trevision estimates T̂ from the models once their warm-up ends: give --warmup W"),
    (["--mode", "forward-anchor"], "--mode forward-anchor estimates T̂ from the models once their warm-up ends"),
    (["--mode", "forward", "--noise", "none"], "--mode forward trains with the noise's true T, which only noise of a "
                                             "matrix has (--noise sym or pair); for --noise none, estimate it: --mode "
                                             "forward-anchor --warmup W"),
    (["--mode", "forward", "--noise", "idn"], "(--noise sym or pair); for --noise idn, estimate it"),
])
def test_what_a_stage_needs_is_refused_in_one_line_before_anything_is_written(tmp_path, capsys, flags, message):
    import train
    with pytest.raises(SystemExit) as e:
        train.main(STAGED[:STAGED.index("--warmup")] + flags + ["--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- Joint optimisation: its loss, its relabelling

def test_joint_by_hand():
    # p = (1/2, 1/4, 1/4), q the one-hot of class 0, a batch of one: L_c = ln 2; L_p = −(1/3)(ln 1/2 + 2 ln 1/4)
    # = (5/3) ln 2; L_e = H(p) = (3/2) ln 2
    z, q = logits_of([[0.5, 0.25, 0.25]]), torch.tensor([[1.0, 0.0, 0.0]])
    ln2 = math.log(2)
    assert joint.joint_loss(z, q, alpha=0.0, beta=0.0).item() == pytest.approx(ln2, rel=1e-6)
    assert joint.joint_loss(z, q, alpha=1.0, beta=0.0).item() == pytest.approx(ln2 + 5 / 3 * ln2, rel=1e-6)
    assert joint.joint_loss(z, q, alpha=0.0, beta=1.0).item() == pytest.approx(ln2 + 1.5 * ln2, rel=1e-6)
    # a soft label: L_c = −(1/2 ln 1/2 + 1/2 ln 1/4) = (3/2) ln 2
    soft = torch.tensor([[0.5, 0.5, 0.0]])
    assert joint.joint_loss(z, soft, alpha=0.0, beta=0.0).item() == pytest.approx(1.5 * ln2, rel=1e-6)


def test_joint_is_the_authors_loss_and_its_gradient():
    """DaikiTanaka-UT/JointOptimization, first_step_train.py: TrainChain.__call__, its Chainer ops in torch; the
    gradient too, so that the entropy term's flows through both of its factors, as theirs."""
    g = torch.Generator().manual_seed(4)
    z = (3 * torch.randn(32, 10, generator=g)).requires_grad_()
    soft_label = torch.softmax(torch.randn(32, 10, generator=g), 1)
    alpha, beta = 1.2, 0.8
    s = F.softmax(z, dim=1)
    s_ = torch.mean(s, dim=0)
    p = torch.ones(10) / 10.
    L_c = -torch.mean(torch.sum(F.log_softmax(z, dim=1) * soft_label, dim=1))
    L_p = -torch.sum(torch.log(s_) * p)
    L_e = -torch.mean(torch.sum(F.log_softmax(z, dim=1) * s, dim=1))
    want = L_c + alpha * L_p + beta * L_e
    (want_grad,) = torch.autograd.grad(want, z)
    got = joint.joint_loss(z, soft_label, alpha, beta)
    (got_grad,) = torch.autograd.grad(got, z)
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    assert torch.allclose(got_grad, want_grad, atol=1e-7)


def test_the_label_history_keeps_the_last_window_and_its_mean_is_the_label():
    history = None
    for e in range(13):
        history = joint.joint_history(history, torch.full((2, 3), float(e)), window=10)
    assert history.shape == (10, 2, 3) and history[:, 0, 0].tolist() == [float(e) for e in range(3, 13)]
    assert torch.equal(history.mean(0), torch.full((2, 3), 7.5))  # the mean of epochs 3..12


def test_relabelled_rows_are_each_models_given_labels_in_the_objective():
    """A batch that carries each model's rows G (M, N, K): model k's loss is its step's on G[k] (Joint's loss in the
    first step, CE's H(G[k], p_k) in the second), and what it teaches nobody is G[k]."""
    from losses import log_probs, soft_cross_entropy
    from mutual import Clock, Method, objective_for
    g = torch.Generator().manual_seed(5)
    z = [torch.randn(8, 4, generator=g) for _ in range(2)]
    y = torch.randint(0, 4, (8,), generator=g)
    rows = torch.softmax(torch.randn(2, 8, 4, generator=g), -1)
    clock, r = Clock(0, 0, 1, 1, 0), [torch.zeros(())] * 2
    for mode in ("joint", "joint2"):
        method = Method(mode=mode, lc="ce", eta=None, b=None)
        out = objective_for(method, 2)(z, y, method, None, r, clock, None, rows)
        for k in range(2):
            logp = log_probs(z[k])[0]
            own = joint.joint_loss(z[k], rows[k]) if mode == "joint" else soft_cross_entropy(rows[k], logp).mean()
            assert out.losses[k].item() == pytest.approx(float(own), rel=1e-6), (mode, k)
            assert torch.equal(out.q_tilde[k], rows[k]) and not out.taught[1 - k, k].any()


JOINT = ["--dataset", "synthetic", "--arch", "mlp", "--synthetic-size", "96", "--synthetic-test-size", "48",
         "--synthetic-classes", "4", "--batch-size", "32", "--device", "cpu", "--workers", "0", "--epochs", "3",
         "--noise", "pair", "--mode", "joint", "--joint-begin", "0.67"]  # epoch 2 of 3: relabelled


def train_probs(out, flags, weights):
    """Each model's predictions on the training set (eval mode, in order) with the weights weights(k) gives."""
    from mutual import NAMES
    from training import build, config
    from training.report import predictions
    args = config.resolve(config.get_args(flags + ["--out", str(out)]))
    d, train_set, _, _ = build.load_data(args)
    setup = build.Setup.of(args)
    nets = build.build_models(args, d.num_classes, train_set, setup).nets
    for k, net in zip(NAMES, nets):
        net.load_state_dict(weights(k))
    return predictions(nets, build.eval_batches(d, {"train": train_set}, setup.placement())["train"],
                       dict(device_type="cpu", enabled=False))


def test_joint_relabels_with_the_mean_of_each_models_last_predictions_and_resumes_equal(tmp_path, capsys, monkeypatch):
    """A run stopped after epoch 2 (its checkpoint: the predictions at the start of epochs 2 and 3, 1-based, in
    its history) resumes to the uninterrupted run bit for bit; the uninterrupted run's history ends with the
    predictions of the models the stopped run kept; its labels.npz is each model's mean of that history and of
    its final predictions."""
    import train
    from test_stops import FullDisk, assert_same_run, command_in, one_line
    from training import runfiles
    full, out = tmp_path / "full", tmp_path / "run"
    train.main(JOINT + ["--out", str(full)])
    monkeypatch.setattr(runfiles, "open", FullDisk("metrics.jsonl", after=3), raising=False)
    with pytest.raises(SystemExit):
        train.main(JOINT + ["--out", str(out)])
    line = one_line(capsys.readouterr().err)
    assert "checkpoint.pt holds epoch 2" in line, line
    stopped = torch.load(out / "checkpoint.pt", weights_only=True)
    monkeypatch.undo()
    train.main(command_in(line))
    assert_same_run(str(out), str(full))
    ckpt = torch.load(full / "checkpoint.pt", weights_only=True)
    kept = train_probs(out, JOINT, lambda k: stopped[f"model_{k}"])  # the models after epoch 2
    final = train_probs(full, JOINT, lambda k: torch.load(full / f"model_{k}.pt", weights_only=True))
    with np.load(full / "labels.npz", allow_pickle=False) as labels:
        for k, p_kept, p_final in zip("ab", kept, final):
            history = ckpt[f"state_history_{k}"]
            assert history.shape == (2, 96, 4) and torch.equal(history[-1], p_kept), k
            assert np.allclose(labels[k], torch.cat([history, p_final[None]]).mean(0).numpy(), atol=1e-7), k


def test_the_second_step_trains_each_model_on_its_own_labels_from_scratch(tmp_path, capsys):
    """--mode joint2 --labels-from: epoch 1 of a CE run on the rows of a joint run, against epoch 1 of a plain CE run
    (zero knowledge) on its given labels: the loss differs, and the refusals say what is wrong in one line and write
    nothing."""
    import json

    import train
    step1, step2, plain = tmp_path / "joint", tmp_path / "second", tmp_path / "plain"
    train.main(JOINT + ["--out", str(step1)])
    second = [a for a in JOINT if a not in ("--joint-begin", "0.67")]
    second[second.index("joint")] = "joint2"
    train.main(second + ["--out", str(step2), "--labels-from", str(step1)])
    train.main([a if a != "joint2" else "zero" for a in second] + ["--out", str(plain)])
    rows = [[json.loads(line) for line in open(d / "metrics.jsonl")] for d in (step2, plain)]
    assert rows[0][0]["train_loss_a"] != rows[1][0]["train_loss_a"]
    from training import config  # its default folder names the first step's
    named = config.run_name(config.resolve(config.get_args(second + ["--labels-from", str(step1)])))
    assert "-joint2-joint-" in named, named
    for flags, message in [
        (["--noise", "sym"], "was trained on other data: its --noise was pair, this run's is sym"),
        (["--synthetic-difficulty", "0.5"], "its --synthetic-difficulty was 2.0, this run's is 0.5"),
        (["--seed", "1"], "trained on other given labels than this run's"),
        (["--labels-from", str(plain)], "holds no labels.npz: give the folder of a finished --mode joint run"),
        (["--labels-from", str(step1 / "labels.npz")], "is a file: give the folder of the --mode joint run"),
        (["--mode", "coteach"], "--labels-from " + str(step1) + ": --mode coteach with --lc ce does not read it (only "
                                "--mode joint2 does)"),
    ]:
        argv = second + ["--labels-from", str(step1)]
        for i in range(0, len(flags), 2):
            if flags[i] in argv:
                argv[argv.index(flags[i]) + 1] = flags[i + 1]
            else:
                argv += flags[i:i + 2]
        with pytest.raises(SystemExit) as e:
            train.main(argv + ["--out", str(tmp_path / "refused")])
        err = capsys.readouterr().err
        assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
        assert not (tmp_path / "refused").exists()


@pytest.mark.parametrize("spoil,message", [
    (lambda r: r * 0.657, "sample 0 is not a distribution (it sums to 0.657"),
    (lambda r: torch.cat([r[:3], torch.tensor([[1.25, -0.25, 0.0, 0.0]]), r[4:]]),
     "sample 3 is not a distribution (it sums to 1.000, its least entry is -0.25"),
])
def test_labels_from_refuses_rows_that_are_not_distributions_in_one_line(tmp_path, capsys, spoil, message):
    """--labels-from: each sample's label must be a distribution (finite, non-negative, summing to 1 within
    rundir.LABEL_SUM_TOLERANCE); a file whose rows are not is refused in one line, and nothing is written."""
    import train
    step1 = tmp_path / "joint"
    train.main(JOINT + ["--out", str(step1)])
    with np.load(step1 / "labels.npz") as f:
        rows = {k: f[k] for k in f.files}
    np.savez(step1 / "labels.npz", a=spoil(torch.as_tensor(rows["a"])).numpy(), b=rows["b"])
    second = [a for a in JOINT if a not in ("--joint-begin", "0.67")]
    second[second.index("joint")] = "joint2"
    with pytest.raises(SystemExit) as e:
        train.main(second + ["--labels-from", str(step1), "--out", str(tmp_path / "refused")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "model A's label of " + message in err, err
    assert not (tmp_path / "refused").exists()


# ---------------------------------------------------------------- T-revision's revision stage

def test_revision_by_hand_and_its_slack_learns_through_the_weight():
    # p = (.9, .1), T̂ = [[.8, .2], [.3, .7]], ΔT = 0, noisy label 1: β = .1 / .25 = .4, as the reweighting
    t = torch.tensor([[0.8, 0.2], [0.3, 0.7]])
    z = logits_of([[0.9, 0.1]]).requires_grad_()
    delta = torch.zeros(2, 2, requires_grad=True)
    loss = trevision.revision_loss(z, torch.tensor([1]), t, delta)
    assert loss.item() == pytest.approx(0.4 * -math.log(0.1), rel=1e-6)
    loss.backward()
    # ∂L/∂ΔT[i, 1] = −β/(p T)_1 p_i · CE: the slack moves by the weight alone; column 0 is not read for label 1
    ce = -math.log(0.1)
    want = torch.tensor([[0.0, -0.4 / 0.25 * 0.9 * ce], [0.0, -0.4 / 0.25 * 0.1 * ce]])
    assert torch.allclose(delta.grad, want, atol=1e-5)
    # and the network's gradient is not the reweighting's, whose β is a constant
    z2 = logits_of([[0.9, 0.1]]).requires_grad_()
    trevision.reweight_loss(z2, torch.tensor([1]), t).backward()
    assert not torch.allclose(z.grad, z2.grad)


def test_revision_is_the_authors_loss_with_the_slack_added_once():
    """xiaoboxia/T-Revision, loss.py: reweighting_revision_loss, its loop over samples, with T = T̂ + ΔT for each
    sample (their loop adds ΔT once more per sample; here, as their _v2, once)."""
    g = torch.Generator().manual_seed(7)
    out, target = torch.randn(16, 4, generator=g), torch.randint(0, 4, (16,), generator=g)
    t_hat = torch.softmax(3 * torch.eye(4) + torch.rand(4, 4, generator=g), 1)
    correction = 0.01 * torch.randn(4, 4, generator=g)
    loss = 0.
    out_softmax = F.softmax(out, dim=1)
    for i in range(len(target)):
        temp = out[i].unsqueeze(0)
        temp_softmax = out_softmax[i].unsqueeze(0)
        temp_target = target[i].unsqueeze(0)
        pro1 = temp_softmax[:, target[i]]
        T = t_hat + correction  # once
        out_T = torch.matmul(T.t(), temp_softmax.t())
        out_T = out_T.t()
        pro2 = out_T[:, target[i]]
        beta = (pro1 / pro2)
        cross_loss = F.cross_entropy(temp, temp_target)
        loss += beta * cross_loss
    want = loss / len(target)
    assert trevision.revision_loss(out, target, t_hat, correction).item() == pytest.approx(want.item(), rel=1e-5)


REVISED = STAGED[:STAGED.index("--epochs")] + ["--epochs", "4"] + STAGED[STAGED.index("--epochs") + 2:] + [
    "--mode", "trevision", "--trevision-revise", "2"]


@pytest.mark.parametrize("after", [3, 4])  # metrics.jsonl's third line fails: before the revision; its fourth: in it
def test_the_revision_learns_each_slack_by_adam_and_resumes_equal(tmp_path, capsys, monkeypatch, after):
    """Epochs 3 and 4 of 4 revise: each model's checkpoint holds its slack, moved from 0, and Adam's state over the
    model and the slack; a run stopped before or in the revision resumes to the uninterrupted one bit for bit."""
    import train
    from test_stops import FullDisk, assert_same_run, command_in, one_line

    from training import runfiles
    full, out = tmp_path / "full", tmp_path / "run"
    train.main(REVISED + ["--out", str(full)])
    ckpt = torch.load(full / "checkpoint.pt", weights_only=True)
    for k in "ab":
        assert ckpt[f"state_slack_{k}"].shape == (4, 4) and 0 < ckpt[f"state_slack_{k}"].abs().max() < 1e-4, k
        state = ckpt[f"opt_{k}"]
        assert state["param_groups"][0]["lr"] == 5e-7 and "exp_avg" in state["state"][0]
        assert len(state["param_groups"][0]["params"]) == len(ckpt[f"model_{k}"]) - sum(
            "running" in n or "num_batches" in n for n in ckpt[f"model_{k}"]) + 1  # the weights and the slack
    monkeypatch.setattr(runfiles, "open", FullDisk("metrics.jsonl", after=after), raising=False)
    with pytest.raises(SystemExit):
        train.main(REVISED + ["--out", str(out)])
    line = one_line(capsys.readouterr().err)
    assert f"checkpoint.pt holds epoch {after - 1}" in line, line
    monkeypatch.undo()
    train.main(command_in(line))
    assert_same_run(str(out), str(full))


LONG_REVISION = STAGED[:STAGED.index("--epochs")] + ["--epochs", "5"] + STAGED[STAGED.index("--epochs") + 2:] + [
    "--mode", "trevision", "--trevision-revise", "3"]


def test_a_revision_resumes_equal_from_every_epoch(tmp_path, capsys, monkeypatch):
    """Epochs 3-5 of 5 revise, by Adam over each model and its slack: a run stopped after any of epochs 1-4 (before the
    revision, as it begins, and twice within it) resumes to the uninterrupted run bit for bit, so the epoch from which
    a resumed run restores the stage's optimiser is the one where the stage brought it, neither one sooner nor later."""
    import train
    from test_stops import FullDisk, assert_same_run, command_in, one_line

    from training import runfiles
    full = tmp_path / "full"
    train.main(LONG_REVISION + ["--out", str(full)])
    for after in (2, 3, 4, 5):  # metrics.jsonl's line `after` fails: the checkpoint holds epoch after - 1
        out = tmp_path / f"stopped-{after}"
        monkeypatch.setattr(runfiles, "open", FullDisk("metrics.jsonl", after=after), raising=False)
        with pytest.raises(SystemExit):
            train.main(LONG_REVISION + ["--out", str(out)])
        line = one_line(capsys.readouterr().err)
        assert f"checkpoint.pt holds epoch {after - 1}" in line, line
        monkeypatch.undo()
        train.main(command_in(line))
        assert_same_run(str(out), str(full))


@pytest.mark.parametrize("flags,message", [
    (["--trevision-revise", "3"], "--trevision-revise 3 starts the revision before --warmup 1's estimate"),
    (["--trevision-revise", "1", "--graph", "compile"], "which a replayed step (--graph compile) cannot follow"),
    (["--trevision-revise-lr", "0.001"], "is the lr of a revision stage, and the run has none"),
    (["--warmup", "3"], "--warmup 3 fills the run's --epochs 3: --mode trevision would never train"),
])
def test_a_revision_that_cannot_run_is_one_line(tmp_path, capsys, flags, message):
    import train
    argv = STAGED + ["--mode", "trevision", "--out", str(tmp_path / "run")] + flags
    argv = argv[:argv.index("--warmup")] + argv[argv.index("--warmup") + 2:] if "--warmup" in flags else argv
    with pytest.raises(SystemExit) as e:
        train.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "run").exists()


K = 10


@pytest.mark.filterwarnings("ignore:reduction")  # nn.KLDivLoss()'s 'mean', kept as the authors wrote it
def test_tfkd_reg_matches_the_authors_loop():
    z = torch.randn(6, K)
    y = torch.randint(0, K, (6,))
    a, T, alpha, mult = 0.99, 20.0, 0.1, 100.0
    teacher = torch.ones(6, K) * (1 - a) / (K - 1)
    for i in range(6):
        teacher[i, y[i]] = a
    kl = torch.nn.KLDivLoss()(F.log_softmax(z, dim=1), F.softmax(teacher / T, dim=1)) * mult
    expected = (1 - alpha) * F.cross_entropy(z, y) + alpha * kl
    assert torch.allclose(tfkd_reg_loss(z, y, a, T, alpha, mult), expected)
