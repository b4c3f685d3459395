"""The CUDA configuration run on the CPU: bf16 and fp16 autocast, GradScaler, channels_last, torch.compile.

Each training run checks finite losses, metrics in range, and that the losses, the entropies and
the selection of Eqs. 3-4 are computed in float32 even where the models' logits are bf16 or fp16.
The same runs also go on CUDA where a GPU is present. The dtype tests prove that the losses do not
depend on the autocast dtype of the logits at all: only the logits' own rounding remains. Last, the
torchrun check of the GPU suite (tools/perf.py) runs here with gloo.
"""
import copy
import json
import math
import os
import shutil

import pytest
import torch

from test_train import TINY, metrics

import mutual
import train
from losses import cmd_loss, log_probs
from mutual import LCS, MODES, Clock, Method, Precision, mutual_step
from tools import perf
from training import rundir

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
FRACTIONS = ("selected_b2a", "selected_a2b", "precision_b2a", "precision_a2b", "recall_b2a", "recall_a2b",
             "memorized_a", "memorized_b", "confidence_a", "confidence_b")


class StepSpy:
    """Records what every training step of train.main computes with: dtypes and memory formats.

    It wraps the functions mutual_step calls, so it sees the tensors the step really uses:
    logits: dtypes of the models' outputs; scores: dtypes of log p and H(p) from log_probs;
    selection: dtypes of what cmd_distill (Eqs. 3-4) receives and returns, masks included;
    batches / weights: whether x and the conv weights are channels_last; nets, scalers: as passed.
    """

    def __init__(self, monkeypatch):
        self.logits, self.scores, self.selection, self.sums = set(), set(), set(), set()
        self.batches, self.weights, self.nets, self.scalers = set(), set(), [], []
        log_probs, cmd_distill, step = mutual.log_probs, mutual.cmd_distill, train.mutual_step

        def spy_log_probs(logits):
            logp, h = log_probs(logits)
            self.logits.add(logits.dtype)
            self.scores.update((logp.dtype, h.dtype))
            return logp, h

        def spy_cmd_distill(logp_a, logp_b, q_a, q_b, h_a, h_b, chi, draws=None):
            out = cmd_distill(logp_a, logp_b, q_a, q_b, h_a, h_b, chi, draws)
            self.selection.update(t.dtype for t in (logp_a, logp_b, q_a, q_b, h_a, h_b, *out))
            return out

        def spy_step(nets, opts, batch, method, chi, r, clock, precision):
            self.nets, self.scalers = nets, self.scalers + [precision.scaler]
            self.batches.add(batch[0].is_contiguous(memory_format=torch.channels_last))
            for n in nets:
                self.weights.update(p.is_contiguous(memory_format=torch.channels_last)
                                    for p in n.parameters() if p.dim() == 4)
            sums, hist = step(nets, opts, batch, method, chi, r, clock, precision)
            self.sums.update((sums.dtype, hist.dtype))
            return sums, hist

        monkeypatch.setattr(mutual, "log_probs", spy_log_probs)
        monkeypatch.setattr(mutual, "cmd_distill", spy_cmd_distill)
        monkeypatch.setattr(train, "mutual_step", spy_step)


def check_run(out, spy, logits_dtype):
    """Finite losses, every metric in range, and float32 wherever the method computes."""
    rows = metrics(out)
    assert rows
    for row in rows:
        assert math.isfinite(row["train_loss_a"]) and math.isfinite(row["train_loss_b"])
        assert all(0 <= row[k] <= 100 for k in ("test_acc_a", "test_acc_b", "test_acc_mean", "test_acc_ens"))
        assert all(row[k] is None or 0 <= row[k] <= 1 for k in FRACTIONS)
    assert spy.logits == {logits_dtype}  # the autocast really ran in this dtype...
    assert spy.scores == {torch.float32}  # ...and log p, H(p), the targets, Eqs. 3-4 and the masks did not
    assert spy.selection == {torch.float32}
    assert spy.sums == {torch.float32}


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_autocast_trains_with_float32_losses(tmp_path, monkeypatch, device):
    spy = StepSpy(monkeypatch)
    out = str(tmp_path / "r")
    train.main(TINY + ["--epochs", "2", "--amp", "bf16", "--device", device, "--out", out])
    check_run(out, spy, torch.bfloat16)
    assert not any(s.is_enabled() for s in spy.scalers)  # bf16 has float32's range: no loss scaling
    assert json.load(open(os.path.join(out, "config.json")))["amp"] == "bf16"


def fp16_unsupported(device):
    """None if fp16 autocast with a GradScaler runs on this device type in this torch; else why not."""
    try:
        lin = torch.nn.Linear(4, 2).to(device)
        opt = torch.optim.SGD(lin.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device)
        with torch.autocast(device, dtype=torch.float16):
            z = lin(torch.randn(3, 4, device=device))
        if z.dtype != torch.float16:
            return f"autocast on {device} gives {z.dtype} for float16"
        scaler.scale(z.float().sum()).backward()
        scaler.step(opt)
        scaler.update()
    except (RuntimeError, TypeError, ValueError, AttributeError) as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return None


@pytest.mark.parametrize("device", DEVICES)
def test_fp16_autocast_with_grad_scaler_trains_with_float32_losses(tmp_path, monkeypatch, device):
    reason = fp16_unsupported(device)
    if reason:
        pytest.skip(f"fp16 autocast + GradScaler on {device} with torch {torch.__version__}: {reason}")
    spy = StepSpy(monkeypatch)
    out = str(tmp_path / "r")  # mlp: fp16 convolutions on a CPU are slow, and the scaler does not care
    train.main(TINY + ["--arch", "mlp", "--epochs", "2", "--amp", "fp16", "--device", device, "--out", out])
    check_run(out, spy, torch.float16)
    assert all(s.is_enabled() for s in spy.scalers) and math.isfinite(spy.scalers[-1].get_scale())


@pytest.mark.parametrize("device,choice", [("cpu", "on"), ("cpu", "auto")]
                         + [pytest.param("cuda", c, marks=DEVICES[1].marks) for c in ("on", "off", "auto")])
def test_channels_last_flag_sets_models_and_batches(tmp_path, monkeypatch, device, choice):
    spy = StepSpy(monkeypatch)
    out = str(tmp_path / "r")
    train.main(TINY + ["--epochs", "1", "--channels-last", choice, "--device", device, "--out", out])
    on = choice == "on" or (choice == "auto" and device == "cuda")
    check_run(out, spy, torch.bfloat16 if device == "cuda" else torch.float32)  # --amp auto
    assert spy.batches == {on} and spy.weights == {on}
    assert json.load(open(os.path.join(out, "config.json")))["channels_last"] == ("on" if on else "off")


def test_a_run_resumes_in_the_other_memory_format(tmp_path, monkeypatch):
    # channels_last is a layout, not a setting of the method (rundir.ARITHMETIC: a run may resume in the other
    # layout, and says so): load_state_dict copies the saved values into the new layout, and SGD's momentum update is elementwise, so a checkpoint written in
    # one format continues in the other from exactly the saved state.
    flags = TINY + ["--epochs", "2"]
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    train.main(flags + ["--channels-last", "on", "--out", full])
    save = rundir.save_checkpoint

    class Stop(Exception):
        pass

    def save_and_stop(*args, **kwargs):  # an interruption right after epoch 1's checkpoint
        save(*args, **kwargs)
        raise Stop

    monkeypatch.setattr(rundir, "save_checkpoint", save_and_stop)
    with pytest.raises(Stop):
        train.main(flags + ["--channels-last", "on", "--out", part])
    monkeypatch.setattr(rundir, "save_checkpoint", save)
    ckpt = torch.load(os.path.join(part, "checkpoint.pt"), weights_only=True)
    seen = []
    step = train.mutual_step

    def first_state(nets, opts, *args, **kwargs):
        if not seen:
            seen.append(([copy.deepcopy(n.state_dict()) for n in nets], [copy.deepcopy(o.state_dict()) for o in opts],
                         [p.is_contiguous() for n in nets for p in n.parameters()]))
        return step(nets, opts, *args, **kwargs)

    monkeypatch.setattr(train, "mutual_step", first_state)
    train.main(flags + ["--channels-last", "off", "--out", part, "--resume"])
    states, opt_states, contiguous = seen[0]
    assert all(contiguous)  # now in the default layout...
    for state, k in zip(states, "ab"):  # ...holding exactly the saved weights and momentum buffers
        assert all(torch.equal(state[n], ckpt[f"model_{k}"][n]) for n in state)
    for state, k in zip(opt_states, "ab"):
        saved = ckpt[f"opt_{k}"]["state"]
        assert all(torch.equal(state["state"][i]["momentum_buffer"], saved[i]["momentum_buffer"]) for i in saved)
    # The layout changes only the order of float32 sums inside the convolutions, so epoch 2 agrees with the
    # run that stayed channels_last to rounding (1e-6 relative here); a resume that lost state differs by 1e-2.
    resumed, uninterrupted = metrics(part)[1], metrics(full)[1]
    for key in ("train_loss_a", "train_loss_b", "confidence_a", "confidence_b"):
        assert resumed[key] == pytest.approx(uninterrupted[key], rel=1e-4)


def has_cpp_compiler():
    return any(shutil.which(c) for c in (os.environ.get("CXX", "g++"), "g++", "c++", "clang++"))


@pytest.mark.slow  # a process of its own: the second tier (python -m pytest -q -m slow lab tests)
@pytest.mark.skipif(not has_cpp_compiler(), reason="torch.compile on CPU (inductor) needs a C++ compiler")
def test_compile_trains_the_cuda_configuration_on_cpu(tmp_path, monkeypatch):
    # The whole CUDA configuration at once: torch.compile + bf16 + channels_last. mlp is the cheapest model
    # to compile (about 20 s of CPU with a cold inductor cache: one training graph, one no_grad graph).
    spy = StepSpy(monkeypatch)
    out = str(tmp_path / "r")
    train.main(TINY + ["--arch", "mlp", "--epochs", "1", "--compile", "--amp", "bf16", "--channels-last", "on",
                       "--out", out])
    check_run(out, spy, torch.bfloat16)
    assert all(hasattr(n, "_orig_mod") for n in spy.nets)  # the step ran torch.compile's modules
    assert spy.batches == {True}


# ---------------------------------------------------------------- the losses do not depend on the logits' dtype
#
# Tolerance 0, derived: bf16 and fp16 numbers are float32 numbers (fewer exponent and mantissa bits), so
# logits.float() is exact. From there the two paths run the same float32 kernels on bit-identical inputs,
# so every loss, entropy, mask and sum must be equal, not close. Backward, the cast returns the float32
# gradient rounded once to the logits' dtype, in both paths alike. If log_softmax or H(p) ran in bf16, the
# results would differ by about 2^-8 relative (bf16's unit roundoff) and samples near chi could flip.

LOW = [torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", LOW)
def test_cmd_loss_from_low_precision_logits_equals_float32(dtype):
    g = torch.Generator().manual_seed(0)
    n, k = 256, 10
    z = [(4 * torch.randn(n, k, generator=g)).to(dtype) for _ in range(2)]  # entropies spread over [0, ln K]
    q = [torch.softmax(torch.randn(n, k, generator=g), -1) for _ in range(2)]  # soft float32 targets
    chi = math.log(k) / 2
    results = []
    for cast in (False, True):
        leaves = [(zi.float() if cast else zi).detach().requires_grad_() for zi in z]
        loss_b2a, loss_a2b = cmd_loss(leaves[0], leaves[1], q[0], q[1], chi)
        (loss_b2a + 2 * loss_a2b).backward()
        results.append((loss_b2a, loss_a2b, [leaf.grad for leaf in leaves]))
    (low_b2a, low_a2b, low_grads), (f32_b2a, f32_a2b, f32_grads) = results
    assert low_b2a.dtype == low_a2b.dtype == torch.float32
    assert torch.equal(low_b2a, f32_b2a) and torch.equal(low_a2b, f32_a2b)
    assert all(gl.dtype == dtype and torch.equal(gl, gf.to(dtype)) for gl, gf in zip(low_grads, f32_grads))
    _, h_b = log_probs(z[1])
    assert 0 < (h_b < chi).sum() < n  # some samples pass chi and some do not: the masks are tested too


class Cast(torch.nn.Module):
    """The same model, its logits cast to float32 on the way out."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x).float()


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("mode,lc", [("progressive", lc) for lc in LCS] + [(m, "ce") for m, x in MODES.items()
                                                                           if x.thresholds is None])
def test_training_step_from_low_precision_logits_equals_float32(dtype, mode, lc):
    if fp16_unsupported("cpu") and dtype == torch.float16:
        pytest.skip(f"no fp16 autocast on CPU in torch {torch.__version__}")
    n, k = 64, 6
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, 4, 4, generator=g)
    y_clean = torch.randint(0, k, (n,), generator=g)
    y = torch.where(torch.rand(n, generator=g) < 0.4, (y_clean + 1) % k, y_clean)
    torch.manual_seed(0)
    nets = [torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, k)) for _ in range(2)]
    with torch.no_grad():
        for net in nets:
            net[1].weight.mul_(3)  # confident and unconfident predictions both, so chi splits the batch
    method = Method(mode=mode, lc=lc, eta=None if MODES[mode].thresholds is None else 2.0, b=-5.0, noise=("sym", 0.4))
    autocast = dict(device_type="cpu", dtype=dtype, enabled=True)
    results = []
    for wrap in (lambda m: m, Cast):
        pair = [wrap(copy.deepcopy(m)) for m in nets]
        opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in pair]
        r = [torch.tensor(0.7), torch.tensor(0.4)]
        chi = method.chi_at(3.0, 10, k)
        sums, hist = mutual_step(pair, opts, (x, y, y_clean), method, chi, r, Clock(3, 0, 1, 10, 0),
                                 Precision(autocast, torch.amp.GradScaler("cpu", enabled=False)))
        results.append((sums, hist, [p.detach().clone() for m in pair for p in m.parameters()]))
    (low_sums, low_hist, low_params), (f32_sums, f32_hist, f32_params) = results
    assert torch.equal(low_sums, f32_sums) and torch.equal(low_hist, f32_hist)  # losses, selections, entropies
    assert all(torch.equal(a, b) for a, b in zip(low_params, f32_params))  # and the SGD update they drive
    s = dict(zip(mutual.sum_names(2), low_sums.tolist()))
    if MODES[mode].thresholds is not None:
        assert 0 < s["selected_b2a"] < n and 0 < s["selected_a2b"] < n


@pytest.mark.slow  # a process of its own: the second tier (python -m pytest -q -m slow lab tests)
def test_torchrun_smoke_helper_runs_train_py_under_torchrun():
    # the perf suite's NCCL smoke test, run here with gloo, so that its plumbing works before a GPU window
    ok, seconds, why = perf.torchrun_smoke(torch.device("cpu"), timeout=180)
    assert ok and why is None and seconds > 0
