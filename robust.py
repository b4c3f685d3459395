"""The single-network methods of the paper's comparison (§4, Table 3) that CMD is compared with, in this harness's
form: each a model's own loss (label_correction.LABEL_CORRECTIONS' `loss`: it runs alone, --mode zero, or under
CMD, whose models then distil the given label), or CDR's rule on a model's gradients.

apl_loss          -- APL (Ma et al. 2020): α NCE + β RCE, the active-passive pair of their CIFAR-100 runs
dmi_loss          -- L_DMI (Xu et al. 2019): −log(|det(Yᵀ P)| + 0.001), after a CE warm-up (Method.warmup)
forward_loss      -- Forward correction (Patrini et al. 2017): the CE of T-corrected predictions, p T
true_transition   -- the true T of synthetic noise, the T Forward trains with here
anchor_transition -- Patrini et al.'s estimate T̂ from the anchor points of a model's predictions
reweight_loss     -- T-revision's importance reweighting (Xia et al. 2019) with a transition matrix T
revision_loss     -- ... and its revision stage: T = T̂ + ΔT, the slack ΔT learned through the weights
mentornet_pd_loss -- MentorNet (Jiang et al. 2018), its predefined curriculum, the form that needs no clean data
nearest_percentile -- ... its λ: a batch's percentile as TensorFlow takes it, one of the batch's values
cdr_mask_, cdr_rule -- CDR (Xia et al. 2021): the gradient kept on the critical parameters alone, of one model, of each
joint_loss        -- Joint optimisation (Tanaka et al. 2018), its first step: the CE with each sample's current
                     (soft) label, a prior term and an entropy term
joint_history     -- ... its labels: the last `window` epochs' predictions, whose mean each sample is relabelled to

What their stages and checks read of a run (label_correction.py's entries declare the stages):
noise_of, check_transition, check_trevision -- the noise's kind and rate; what Forward and T-revision need of a run
revise_from, joint_begin -- the epoch T-revision's revision starts; the epoch Joint's relabelled labels start

Where the paper and its authors' code differ, the docstring says which is followed, and why. The formulas were read
in the authors' public code; the papers' equation numbers were not checked here, so none is cited. Every loss is
float32 (from the logits' float32 log-probabilities, losses.log_probs), a mean over the batch, and waits for nothing
on the device. T is row-stochastic throughout: T[i, j] = P(ỹ = j | y = i), noise.transition_matrix's convention,
so that the noisy-label posterior Tᵀp of a sample is the row p T.
"""
import functools
import math

import numpy as np
import torch
import torch.nn.functional as F

from noise import NOISE, transition_matrix

RCE_LOG_ZERO = math.log(1e-4)  # A, RCE's log 0: the authors' code clamps the one-hot label at 1e-4 (the SCE paper: −4)


def apl_loss(logits, labels, alpha=10.0, beta=0.1, logp=None):
    """APL with NCE and RCE (Ma et al. 2020: their normalised CE, the reverse CE of Wang et al. 2019's SCE, and
    APL = α L_active + β L_passive):

      NCE = −log p_y / (−Σ_k log p_k)           the CE normalised over every label (the denominator carries gradient)
      RCE = −Σ_k p_k log q_k,  log 0 := A       the reverse CE; q the one-hot label: RCE = −A Σ_{k≠y} p_k
      L   = mean_n [α NCE + β RCE]

    α = 10, β = 0.1: the authors' CIFAR-100 configuration (configs/cifar100/sym/nce+rce.yaml); NCE+RCE is the pair
    their paper recommends. A = ln 1e-4 = −9.21 and p clamped to [1e-7, 1] as in their code (the SCE paper's A is
    −4). Their gradient-norm clipping at 5 is a training setting, not the loss: not applied here.
    logits: (N, K) with gradient; labels: (N,) int64 given labels. Returns a scalar.
    """
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    nce = logp.gather(1, labels[:, None])[:, 0] / logp.sum(-1)  # (N,) (−log p_y) / (−Σ log p_k)
    p = logp.exp().clamp(min=1e-7, max=1.0)
    log_q = torch.full_like(p, RCE_LOG_ZERO).scatter(1, labels[:, None], 0.0)  # (N, K) log of the clamped one-hot
    rce = -(p * log_q).sum(-1)  # (N,)
    return (alpha * nce + beta * rce).mean()


def dmi_loss(logits, labels, logp=None):
    """L_DMI (Xu et al. 2019: L_DMI = −log |det(U)|, U the empirical joint distribution of prediction and label
    over the batch), as the authors' code computes it:

      M = Yᵀ P (K, K),  M[i, j] = Σ_n [ỹ_n = i] p_n(j)       = N Uᵀ, not divided by N
      L = −log(|det M| + 0.001)

    The 0.001 inside the log is theirs: it keeps a singular M (a class absent from the batch) finite, at
    −ln 0.001 = 6.91, with a gradient near 0. |det| is the same for M and U up to the factor N^K, a constant. The
    authors ran K = 10 with batches of 256; at K = 100 a batch of 128 misses a class most of the time, and the
    determinant of a 100 x 100 matrix of sums underflows or overflows in float32: docs/training.md says what that
    means for Table 3's CIFAR-100 row. They train with CE first and then with L_DMI at a small lr (Method.warmup).
    logits: (N, K) with gradient; labels: (N,) int64. Returns a scalar, for the batch (not a mean over samples).
    """
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    m = F.one_hot(labels, logp.shape[-1]).float().T @ logp.exp()  # (K, K)
    return -torch.log(torch.linalg.det(m).abs() + 0.001)


def forward_loss(logits, labels, t, logp=None):
    """Forward correction (Patrini et al. 2017: the forward-corrected loss ℓ→(h(x), ỹ) = ℓ(Tᵀ h(x), ỹ)) with ℓ the
    CE:

      L = mean_n −log (p_n T)_{ỹ_n}

    t: (K, K) row-stochastic T, T[i, j] = P(ỹ = j | y = i), a constant: the true one where the noise is synthetic
    (noise.transition_matrix), else the estimate anchor_transition gives. p is clamped to [1e-7, 1 − 1e-7] before the
    product, as in their code (loss.py, robust('forward')). logits: (N, K) with gradient; labels: (N,) int64.
    Returns a scalar.
    """
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    p = logp.exp().clamp(min=1e-7, max=1 - 1e-7)
    return -torch.log((p @ t.to(p)).gather(1, labels[:, None])[:, 0]).mean()


@functools.cache
def true_transition(kind, rate, num_classes, device):
    """The transition matrix of synthetic noise (noise.transition_matrix) as a float32 tensor on device, made once
    per run: the true T that Forward trains with where the noise is synthetic."""
    return torch.as_tensor(transition_matrix(kind, rate, num_classes), dtype=torch.float32, device=device)


def anchor_transition(probs, percentile=100.0):
    """Patrini et al.'s estimate T̂ from anchor points: row i is the predicted distribution of the anchor of class i,
    x̄_i = argmax_x p(ỹ = i | x) over the training set; rows normalised to sum to 1.

    probs: (N, K) a model's predicted probabilities of the given labels on the training set (numpy or tensor).
    percentile < 100: take the largest p(ỹ = i | x) strictly below the column's percentile instead of its maximum,
    their robust variant (97 for MNIST and CIFAR-10); 100, the maximum, is their code's and T-revision's setting for
    CIFAR-100. (Their code zeroes the top of a column of the shared array, which changes the columns later rows
    read; here each column is a copy.) Returns a (K, K) float64 numpy array.
    """
    probs = np.asarray(probs.detach().cpu() if torch.is_tensor(probs) else probs, dtype=np.float64)
    k = probs.shape[1]
    t = np.empty((k, k))
    for i in range(k):
        col = probs[:, i].copy()
        if percentile < 100:
            col[col >= np.percentile(col, percentile, method="higher")] = 0.0
        t[i] = probs[np.argmax(col)]
    return t / t.sum(1, keepdims=True)


def reweight_loss(logits, labels, t, logp=None):
    """T-revision's importance reweighting (Xia et al. 2019): each sample's CE weighted by
    β_n = p_n(ỹ_n) / (p_n T)_{ỹ_n}, the clean-label posterior over the noisy one, β detached (their reweight_loss:
    `Variable(beta, requires_grad=True)` detaches it):

      L = mean_n β_n (−log p_n(ỹ_n))

    t: (K, K) row-stochastic, T̂ (+ ΔT in their revision stage). logits: (N, K) with gradient; labels: (N,) int64.
    Returns a scalar.
    """
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    p_y = p.gather(1, labels[:, None])[:, 0]
    beta = (p_y / (p @ t.to(p)).gather(1, labels[:, None])[:, 0]).detach()
    return (beta * -logp.gather(1, labels[:, None])[:, 0]).mean()


REVISION_LR = 5e-7  # Adam's lr in T-revision's revision stage, their main.py's


def revision_loss(logits, labels, t_hat, delta, logp=None):
    """T-revision's revision stage (Xia et al. 2019): the reweighted CE with T = T̂ + ΔT, ΔT a learned K x K slack, and
    β not detached, so that ΔT learns through the weights β (its only way) and the network through β and the CE:

      β_n = p_n(ỹ_n) / (p_n (T̂ + ΔT))_{ỹ_n},   L = mean_n β_n (−log p_n(ỹ_n))

    As their reweighting_revision_loss, which their main.py trains with (Adam at lr 5e-7 on the network and ΔT
    together, ΔT from 0), but for one slip: their loop adds ΔT to T once per sample, so that sample n of a batch
    reads T̂ + (n + 1) ΔT; here every sample reads T̂ + ΔT (their _v2 adds it once, and detaches β, which leaves ΔT
    without a gradient). No clamp, as theirs. logits: (N, K) with gradient; labels: (N,) int64; t_hat: (K, K), a
    constant; delta: (K, K) with gradient. Returns a scalar.
    """
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    p_y = p.gather(1, labels[:, None])[:, 0]
    beta = p_y / (p @ (t_hat.to(p) + delta)).gather(1, labels[:, None])[:, 0]
    return (beta * -logp.gather(1, labels[:, None])[:, 0]).mean()


MENTORNET_RAMP = 90  # from this percentage of training on, their PD curriculum ramps (vstar_spcl_linear)
MENTORNET_GAMMA = 1.0  # γ of that ramp: their command that trains the PD MentorNet, --vstar_gamma=1


def nearest_percentile(x, q):
    """TensorFlow's percentile of x (N,) at q in [0, 1] with its default interpolation, 'nearest', as MentorNet's
    code takes it (tf.contrib.distributions.percentile): x sorted in decreasing order, at index round((N − 1)(1 −
    q)), rounded half to even. One of x's own values, where torch.quantile interpolates between two. The index is
    a host number (N from x's shape): nothing waits for the device."""
    n = x.shape[0]
    return x.kthvalue(n - round((n - 1) * (1 - q))).values  # the index-th largest is the (n - index)-th smallest


def mentornet_pd_loss(logits, labels, percentile=0.7, burn_in=0.18, percent=0, logp=None):
    """MentorNet PD (Jiang et al. 2018), the predefined curriculum that runs without clean data (the Co-teaching
    paper's MentorNet baseline): the weight v*_i of their vstar_mentornet_pd (training_mentornet/models.py), the
    function their PD MentorNet is trained to imitate, at training's percentage e = ⌊100 t/Γ⌋ (their epoch_step):

      ℓ_i = −log p_i(ỹ_i);  λ = the batch's `percentile` quantile of ℓ, one of its values (nearest_percentile)
      v_i = 1                            while e ≤ 100 burn_in (18: the first 19% of training)
            1[ℓ_i − λ ≤ 0]               while e < 90 (vstar_self_paced)
            clip(1 − (ℓ_i − λ)/γ, 0, 1)  from e = 90 on, γ = 1 (vstar_spcl_linear)
      L   = mean_n v_n ℓ_n,  v a constant

    Departures from their student's training (code/utils.py, mentornet), declared: there a network fitted to this
    function gives v, λ is a moving average of the batch percentile (decay 0.5, their flag's default) that starts at
    0, and random samples are dropped (50% in the first 17% of training, then 5%). Here v is the function itself and
    λ the batch's own percentile: a pure function of the batch. percentile 0.7 is their flag's default, the one
    their CIFAR commands end up running (they misspell the flag that sets 0.75). percent: e, computed from whole step
    counts as theirs is, ⌊100 step / steps⌋ (mutual.Clock.percent), so that it agrees with theirs at every step of any
    run (a float t/Γ lands an ulp either side of a whole percentage); a host int, or a 0-dim integer tensor on the
    device (a replayed step's). logits: (N, K) with gradient; labels: (N,) int64. Returns a scalar.
    """
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    loss = -logp.gather(1, labels[:, None])[:, 0]  # (N,)
    diff = loss.detach() - nearest_percentile(loss.detach(), percentile)  # ℓ − λ, their loss_diff
    burn = round(100 * burn_in)
    if torch.is_tensor(percent):  # a replayed step's e, on the device: chosen there, nothing read back
        v = torch.where(percent >= MENTORNET_RAMP, (1 - diff / MENTORNET_GAMMA).clamp(0, 1), (diff <= 0).float())
        v = torch.where(percent <= burn, torch.ones_like(loss), v)
    else:  # a host int: no tensor made from it each step
        v = (torch.ones_like(loss) if percent <= burn else (diff <= 0).float() if percent < MENTORNET_RAMP else
             (1 - diff / MENTORNET_GAMMA).clamp(0, 1))
    return (v * loss).mean()


def cdr_rule(nets, keep):
    """CDR's rule on each model's gradients (registry.Correction.grad_rule): cdr_mask_ of each, keep = 1 − τ."""
    for net in nets:
        cdr_mask_(net.parameters(), keep)


@torch.no_grad()
def cdr_mask_(params, keep):
    """CDR (Xia et al. 2021, its algorithm), on one model's gradients after backward and before the optimiser's step:
    the critical parameters, the `keep` fraction with the largest |θ ⊙ ∂L/∂θ|, keep their gradient scaled by keep;
    the others lose it, so that their step is the weight decay alone (and SGD's momentum). keep = 1 − τ, τ the
    noise rate.

    As the authors' code (main.py, train_one_step): one threshold over every weight of dim 2 or 4 together, not
    per layer; biases and normalisation parameters keep their whole gradient; the critical gradients are multiplied
    by keep; a tie at the threshold counts as critical. params: the model's parameters. In place; nothing waits for
    the device.
    """
    weights = [p for p in params if p.grad is not None and p.dim() in (2, 4)]
    if not weights:
        return
    scores = [(p * p.grad).abs() for p in weights]
    flat = torch.cat([s.flatten() for s in scores])
    n_keep = max(1, int(keep * flat.numel()))
    threshold = flat.kthvalue(flat.numel() - n_keep + 1).values  # the n_keep-th largest: topk's last, by selection
    for p, s in zip(weights, scores):
        p.grad.mul_((s >= threshold).to(p.grad.dtype) * keep)


JOINT_WINDOW = 10  # the epochs of predictions whose mean a sample's label becomes (their code: "the past 10 epochs")


def joint_loss(logits, q, alpha=1.0, beta=0.5, logp=None):
    """Joint optimisation's first step (Tanaka et al. 2018: L = L_c + α L_p + β L_e), as their code computes it
    (first_step_train.py, TrainChain):

      L_c = −mean_n Σ_j q_nj log s_nj     the CE with the sample's current label q_n (the paper's KL(q_n ‖ s_n)
                                           up to a constant; soft, the labels their code runs)
      L_p = −Σ_j p_j log s̄_j              s̄ the batch's mean prediction, p the uniform prior of their code
      L_e = −mean_n Σ_j s_nj log s_nj     the predictions' entropy, with gradient through both factors

    α = 1.0 and β = 0.5 are their code's defaults (their README: α 1.2, β 0.8 for symmetric 70%; α 0.8, β 0.4 for
    asymmetric 40%). q starts as the one-hot given label; from an epoch on, each sample's label is the mean of the
    model's last predictions (joint_history). No epsilon, as theirs: a batch's mean prediction is positive.
    logits: (N, K) with gradient; q: (N, K) the labels, constant. Returns a scalar.
    """
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    s = logp.exp()
    l_c = -(q.detach() * logp).sum(-1).mean()
    l_p = -torch.log(s.mean(0)).mean()  # −Σ_j (1/K) log s̄_j
    l_e = -(s * logp).sum(-1).mean()
    return l_c + alpha * l_p + beta * l_e


def joint_history(history, probs, window=JOINT_WINDOW):
    """Joint optimisation's label update (their TrainData.label_update): a model's predictions on the training set,
    probs (N, K), join the last ones kept, history (W, N, K) or None; at most `window` are kept, the oldest dropped.
    Each sample's label is then history.mean(0). Returns the new history."""
    probs = probs[None]
    return probs if history is None else torch.cat([history[max(0, len(history) - window + 1):], probs.to(history)])


# ---------------------------------------------------------------- what their stages and checks read of a run

def noise_of(m, lc):
    """(kind, rate) of a run's synthetic noise (mutual.Method.noise), which Forward's true T and CDR's default τ
    read; ValueError where the method does not know it."""
    if m.noise is None:
        raise ValueError(f"--lc {lc} reads the noise's kind and rate: give Method(noise=(kind, rate)), as train.py "
                         f"does for --noise sym/pair")
    return m.noise


def check_transition(args, lc, estimates):
    """What a run of Forward or T-revision lacks: the true T of synthetic noise, or a warm-up to estimate T̂ after."""
    if not estimates:
        if NOISE[args.noise].matrix is not None and NOISE[args.noise].takes_rate:
            return None
        with_t = " or ".join(k for k, x in NOISE.items() if x.matrix is not None and x.takes_rate)
        return (f"--lc {lc} trains with the noise's true T, which only noise of a matrix has (--noise {with_t}); "
                f"for --noise {args.noise}, estimate it: --lc forward-anchor --warmup W")
    if args.warmup < 1:
        return f"--lc {lc} estimates T̂ from the models once their warm-up ends: give --warmup W (W >= 1 epochs of CE)"
    return None


def revise_from(m, epochs):
    """The epoch from whose start T-revision's models learn their slack ΔT: the last --trevision-revise epochs, and
    never before an epoch has trained with the warm-up's T̂ (check_trevision refuses a revision that would); None:
    reweighting alone."""
    revise = m.comparators.trevision_revise
    return max(epochs - revise, m.warmup + 1) if revise else None


def check_trevision(args):
    """--lc trevision: what its estimate needs, and a revision stage that starts after the warm-up's estimate."""
    why = check_transition(args, "trevision", True)
    if why:
        return why
    if not args.trevision_revise:
        return None if args.trevision_revise_lr == REVISION_LR else (
            f"--trevision-revise-lr {args.trevision_revise_lr:g} is the lr of a revision stage, and the run has none; "
            f"give --trevision-revise E, or drop it")
    if args.epochs - args.trevision_revise <= args.warmup:
        return (f"--trevision-revise {args.trevision_revise} starts the revision before --warmup {args.warmup}'s "
                f"estimate of T̂ has trained a step (--epochs {args.epochs}); give it fewer than "
                f"{args.epochs - args.warmup} epochs")
    return None


def trevision_loss(logits, logp, y, s):
    """T-revision's reweighting with the model's T̂ (s["estimate"]), or in its revision stage with T̂ + ΔT (s["slack"],
    from revise_from on)."""
    if "slack" in s:
        return revision_loss(logits, y, s["estimate"], s["slack"], logp=logp)
    return reweight_loss(logits, y, s["estimate"], logp=logp)


def joint_begin(m, epochs):
    """The epoch from whose start Joint optimisation's models train on their relabelled labels: the --joint-begin
    fraction of the run's epochs (their code: epoch 70 of 200), at least 1."""
    return max(1, round(m.comparators.joint_begin * epochs))
