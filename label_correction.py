"""Self label correction: how each model builds its own target (appendix "Label Correction", "MyLC").

Every method here builds q_tilde = (1 - eps) q + eps p_tilde, a constant target
(no gradient) whose rows sum to 1, or is a loss of its own (CP, Tf-KD_reg):

one_hot                 -- q, the given (possibly noisy) label; CE is q_tilde = q
label_smoothing         -- LS (Szegedy et al. 2016): p_tilde = u, fixed eps
boot_soft               -- Boot-soft (Reed et al. 2015): p_tilde = p, fixed eps
confidence_penalty_loss -- CP (Pereyra et al. 2017): H(q, p) - beta H(p), a loss
proselflc               -- ProSelfLC (Wang et al. 2021): eps = s(t/Gamma - transit, b) * l(p)
model_confidence        -- Eq. 8: r = 1 - sum_i H(p_i) / (n H(u)), from the predictions
confidence_from_sum     -- Eq. 8 from each model's sum_i H(p_i) over an epoch: MyLC's r for the next epoch
mylc                    -- MyLC (appendix B): eps = s(r - rho, b1) * l(p)
tfkd_reg_loss           -- Tf-KD_reg (Yuan et al. 2020), the authors' code variant, a loss
gce_loss                -- GCE (Zhang and Sabuncu 2018): the L_q loss (1 - p_y^q)/q, a loss

LABEL_CORRECTIONS -- the registry: train.py's --lc names, each a Correction (its target or its own loss, the
                     name plots show); mutual.targets and mutual.self_loss read it, and so does everything that
                     lists the corrections (the flags, their checks, the plots, the tests). It also holds Table 3's
                     single-network methods, robust.py's: APL, DMI, Forward (true T or T̂), T-revision (its
                     reweighting and revision), MentorNet PD, CDR's gradient rule, and Joint optimisation's first
                     step with its relabelling

l(p) = 1 - H(p)/H(u) is ProSelfLC's example trust; MyLC's l(p) is not defined in
the appendix; we read it as the same trust (docs/paper-notes.md, "MyLC").

What CMD distils for the loss-type methods: CP, Tf-KD_reg and GCE have no target of
the form (1 - eps) q + eps p_tilde, so a model trained with them passes its peer
the given label q (docs/paper-notes.md, "CP"). Selection still applies: the peer learns q
only where this model is confident.
"""
import math
import os
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

import robust
from losses import entropy
from noise import NOISE
from schedule import logistic


def one_hot(labels, num_classes):
    """q: (N,) int64 labels -> (N, K) float32 one-hot rows."""
    return F.one_hot(labels, num_classes).float()


def label_smoothing(q, eps=0.25):
    """LS: q_tilde = (1 - eps) q + eps u, u = 1/K. q: (N, K) -> (N, K)."""
    return (1 - eps) * q + eps / q.shape[-1]


def boot_soft(q, p, eps=0.25):
    """Boot-soft: q_tilde = (1 - eps) q + eps p, p detached. q, p: (N, K) -> (N, K)."""
    return (1 - eps) * q + eps * p.detach()


def confidence_penalty_loss(logits, q, beta=0.25, logp=None):
    """CP: mean_n [H(q, p) - beta H(p)]. A loss, not a target.

    logits: (N, K) with gradient; q: (N, K) constant target. Gradient flows through
    both terms, so confident (low-entropy) predictions are penalised.
    logp: optional log_softmax(logits) in float32 that the caller already has
    (losses.log_probs), so the training step computes it once.
    Models trained with CP distil q to their peer (see the module docstring).
    """
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    cross_entropy = -(q.detach() * logp).sum(-1)  # (N,) H(q, p)
    h = entropy(logp.exp(), logp)                 # (N,) H(p), with gradient
    return (cross_entropy - beta * h).mean()


@torch.no_grad()
def proselflc(q, p, progress, b=6.0, transit=0.3, h=None):
    """ProSelfLC: q_tilde = (1 - eps) q + eps p, eps = s(progress - transit, b) * (1 - H(p)/H(u)).

    q, p: (N, K); p is the model's own prediction on the same batch (no gradient,
    as in the authors' code). progress = t/Gamma in [0, 1], t fractional.
    h: optional (N,) precomputed H(p), to avoid computing it twice.
    b=6 and transit=0.3 are what train.py runs (mutual.Method: one recorded setting of the authors' code,
    docs/paper-notes.md); ProSelfLC's paper uses transit 0.5.
    Returns q_tilde (N, K), rows summing to 1.
    """
    h = entropy(p) if h is None else h  # (N,)
    eps = logistic(progress - transit, b) * (1 - h / math.log(p.shape[-1]))[:, None]  # (N, 1): s(.) l(p)
    return (1 - eps) * q + eps * p


@torch.no_grad()
def model_confidence(p):
    """Eq. 8: r = 1 - sum_i H(p_i) / (n H(u)) over the n predictions p (n, K). Returns a 0-dim tensor.

    The training loop never holds all n predictions at once: it adds up H(p_i)
    during an epoch and calls confidence_from_sum, the same formula, for the next
    epoch's r.
    """
    return confidence_from_sum([entropy(p).sum()], p.shape[0], p.shape[-1])[0]


def confidence_from_sum(entropy_sums, n, num_classes):
    """MyLC's r of each model for the next epoch: Eq. 8, r = 1 - sum_i H(p_i) / (n H(u)), H(u) = ln K.

    entropy_sums: one sum_i H(p_i) per model, added up over the epoch's n training predictions (the
    training-mode forward passes that trained it); floats, or tensors, then each r is a tensor on the
    same device and nothing waits for it. Returns a list of r, one per model. The paper's "all samples" is
    read as the previous epoch's training samples; in the first epoch r = 0 (docs/paper-notes.md, "MyLC").
    """
    return [1 - entropy_sum / (n * math.log(num_classes)) for entropy_sum in entropy_sums]


@torch.no_grad()
def mylc(q, p, r, b1=10.0, rho=0.5, h=None):
    """MyLC: q_tilde = (1 - eps) q + eps p, eps = s(r - rho, b1) * (1 - H(p)/H(u)).

    q, p: (N, K); p is the model's own prediction, no gradient. r: the model's confidence (Eq. 8,
    confidence_from_sum), a float or a 0-dim tensor on p's device (so no host sync). rho = 0.5 as in the
    paper; b1 = 10, the slope train.py runs (the paper does not give it). h: optional (N,) precomputed H(p).
    Returns q_tilde (N, K), rows summing to 1.
    """
    h = entropy(p) if h is None else h  # (N,)
    eps = logistic(torch.as_tensor(r, device=p.device) - rho, b1) * (1 - h / math.log(p.shape[-1]))[:, None]
    return (1 - eps) * q + eps * p  # eps: (N, 1), s(r - rho, b1) l(p)


def tfkd_reg_loss(logits, labels, a=0.99, T=20.0, alpha=0.1, multiplier=100.0, logp=None):
    """Tf-KD_reg (Yuan et al. 2020), as the authors' public code computes it.

    Teacher: a on the given label, (1 - a)/(K - 1) elsewhere; its target is
    softmax(teacher / T) of these *probabilities* (nearly uniform for K = 100), and
    the student's logits are not divided by T (authors' code; the paper's formula
    differs, see their issues #3, #19, #24).
    L = (1 - alpha) CE(logits, y) + alpha * multiplier * KL(target || p) / (N K):
    the code's nn.KLDivLoss() averages over all N*K elements, hence the multiplier.
    Defaults are the authors' CIFAR-100 ResNet18 setting (T 20, alpha 0.1,
    multiplier 100); for ShuffleNetV2 they use T 10, alpha 0.95, multiplier 1.
    logits: (N, K) with gradient; labels: (N,) int64. Returns a scalar.
    logp: optional log_softmax(logits) in float32 that the caller already has (losses.log_probs):
    then the logits are cast to float32 once per step, so under autocast the gradient into bf16/fp16
    logits is rounded once, not once per term.
    """
    k = logits.shape[-1]
    teacher = torch.full_like(logits, (1 - a) / (k - 1), dtype=torch.float32)
    teacher.scatter_(1, labels[:, None], a)
    target = F.softmax(teacher / T, dim=-1)
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    kl = F.kl_div(logp, target, reduction="sum") / logp.numel()  # mean over N*K, as nn.KLDivLoss()
    return (1 - alpha) * F.nll_loss(logp, labels) + alpha * multiplier * kl  # nll of log_softmax = cross-entropy


def gce_loss(logits, labels, gce_q=0.7, logp=None):
    """GCE (Zhang and Sabuncu 2018): mean_n L_q, L_q = (1 - p_y^q) / q, the negative Box-Cox transform of p_y.

    q = gce_q in (0, 1] (default 0.7, the value of the GCE paper's experiments), not the label q of the rest
    of this file. q -> 0 is CE, -log p_y; q = 1 is MAE up to a factor, 1 - p_y = |e_y - p|_1 / 2. Plain L_q,
    not the truncated variant. p_y^q is computed as exp(q log p_y), and 1 - exp(.) as -expm1(.), from float32
    log-probabilities: exact for small q, finite where p_y underflows. logits: (N, K) with gradient; labels:
    (N,) int64 given labels. logp: optional log_softmax(logits) in float32 that the caller already has
    (losses.log_probs). Returns a scalar. Models trained with GCE distil q to their peer (see the module docstring).
    """
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    logp_y = logp.gather(1, labels[:, None])[:, 0]  # (N,) log p_y
    return (-torch.expm1(gce_q * logp_y) / gce_q).mean()


# ---------------------------------------------------------------- the registry

def estimated(probs, m):
    """T̂ of one model from its predictions on the training set (robust.anchor_transition), float32."""
    return torch.as_tensor(robust.anchor_transition(probs, m.comparators.anchor_percentile), dtype=torch.float32)


def check_transition(args, lc, estimates):
    """What a run of Forward or T-revision lacks: the true T of synthetic noise, or a warm-up to estimate T̂ after
    (and one process: the estimate reads every training sample's prediction)."""
    if not estimates:
        if NOISE[args.noise].matrix is not None and NOISE[args.noise].takes_rate:
            return None
        with_t = " or ".join(k for k, x in NOISE.items() if x.matrix is not None and x.takes_rate)
        return (f"--lc {lc} trains with the noise's true T, which only noise of a matrix has (--noise {with_t}); "
                f"for --noise {args.noise}, estimate it: --lc forward-anchor --warmup W")
    if args.warmup < 1:
        return f"--lc {lc} estimates T̂ from the models once their warm-up ends: give --warmup W (W >= 1 epochs of CE)"
    return check_one_process(args, lc, "estimate of T̂")


def check_one_process(args, lc, what):
    """A stage that reads every training sample's prediction runs in one process: not under torchrun."""
    if "RANK" in os.environ:
        return f"--lc {lc}'s {what} reads every training sample's prediction in one process: not under torchrun"
    return None


def joint_begin(m, epochs):
    """The epoch from whose start Joint optimisation's models train on their relabelled labels: the --joint-begin
    fraction of the run's epochs (their code: epoch 70 of 200), at least 1."""
    return max(1, round(m.comparators.joint_begin * epochs))


def revise_from(m, epochs):
    """The epoch from whose start T-revision's models learn their slack ΔT: the last --trevision-revise epochs, and
    never before an epoch has trained with the warm-up's T̂ (train.py refuses a revision that would); None:
    reweighting alone."""
    revise = m.comparators.trevision_revise
    return max(epochs - revise, m.warmup + 1) if revise else None


def revision_optimisers(nets, slack, m, weight_decay):
    """The optimisers of a revision stage (Correction.revise): Adam on each model's parameters and its slack together,
    at m.comparators.trevision_revise_lr, with the run's weight decay on both (their revision: Adam, lr 5e-7, weight
    decay 1e-4, which is their SGD's too)."""
    return [torch.optim.Adam([*net.parameters(), s], lr=m.comparators.trevision_revise_lr, weight_decay=weight_decay)
            for net, s in zip(nets, slack)]


def trevision_loss(logits, logp, y, m, clock, k):
    """T-revision's reweighting with T̂, or in its revision stage (Method.slack, from revise_from) with T̂ + ΔT."""
    if m.slack is not None and clock.epoch >= revise_from(m, clock.epochs):
        return robust.revision_loss(logits, y, m.estimates[k], m.slack[k], logp=logp)
    return robust.reweight_loss(logits, y, m.estimates[k], logp=logp)


def check_trevision(args):
    """--lc trevision: what its estimate needs, and a revision stage that starts after the warm-up's estimate."""
    why = check_transition(args, "trevision", True)
    if why:
        return why
    if not args.trevision_revise:
        return None if args.trevision_revise_lr == robust.REVISION_LR else (
            f"--trevision-revise-lr {args.trevision_revise_lr:g} is the lr of a revision stage, and the run has none; "
            f"give --trevision-revise E, or drop it")
    if args.epochs - args.trevision_revise <= args.warmup:
        return (f"--trevision-revise {args.trevision_revise} starts the revision before --warmup {args.warmup}'s "
                f"estimate of T̂ has trained a step (--epochs {args.epochs}); give it fewer than "
                f"{args.epochs - args.warmup} epochs")
    if args.graph in ("capture", "compile"):
        return (f"--trevision-revise changes each model's optimiser to Adam when its revision starts, which a replayed "
                f"step (--graph {args.graph}) cannot follow; use --graph off")
    return None


def noise_of(m, lc):
    """(kind, rate) of a run's synthetic noise (mutual.Method.noise), which Forward's true T and CDR's default τ
    read; ValueError where the method does not know it."""
    if m.noise is None:
        raise ValueError(f"--lc {lc} reads the noise's kind and rate: give Method(noise=(kind, rate)), as train.py "
                         f"does for --noise sym/pair")
    return m.noise


class Correction(NamedTuple):
    """One self label correction, as train.py's --lc names it. Its knobs are fields of mutual.Method (their
    defaults and flags), which the functions below read from `m`.

    title  -- its name in plots and tables
    target -- (q, p, h, r, progress, m) -> q~ (N, K), no gradient: q, p (N, K) the given labels and the model's
              own prediction, h (N,) H(p), r MyLC's confidence (Eq. 8), progress t/Γ, m the run's mutual.Method.
              None: the given label q (CE, and the corrections that are losses, whose models distil q)
    loss   -- (logits, logp, q, y, m, clock, k) -> a scalar, the model's L_selfKD when it is a loss of its own;
              None: H(q~, p). logp: the logits' float32 log_softmax; y: (N,) the given labels as integers; clock:
              the step's mutual.Clock; k: the model's index (A is 0), for what a stage estimated of it
    knobs  -- the names of the fields of mutual.Method (or of its Comparators) that target or loss reads: train.py
              refuses any other label correction's knob given with this one
    grad_rule -- (parameters, m) -> None, a rule applied to each model's gradients after backward and before its
              optimiser steps (CDR's); None: the gradients as they are
    estimate -- (probs, m) -> a tensor: what the run estimates of each model once its warm-up ends (mutual.Method's
              warmup), from the model's predicted probabilities (N, K) on the training set; the loss reads model k's
              as m.estimates[k] (Forward's and T-revision's T̂). None: no estimate
    revise -- (m, epochs) -> R or None: from the start of epoch R (0-based) on, each model learns a slack beside its
              estimate (Method.slack, zeros at first) with Adam at m.comparators.trevision_revise_lr, the model and
              its slack together (T-revision's revision stage). None: no revision
    relabel -- (m, epochs) -> B: from the start of epoch B (0-based) on, each model trains on relabelled given
              labels, the mean of its predicted probabilities on the training set (eval mode, no augmentation) at the
              start of each of the last robust.JOINT_WINDOW epochs, recorded from epoch B - W + 1 on (Joint's); the
              loss reads them as q. None: the given labels throughout
    check  -- (args) -> a line saying what the run lacks, or None: what train.py refuses before anything is written
    unbatched -- why tools.batched cannot train it ("" where it can)
    """
    title: str
    target: Callable | None = None
    loss: Callable | None = None
    knobs: tuple = ()
    grad_rule: Callable | None = None
    estimate: Callable | None = None
    revise: Callable | None = None
    relabel: Callable | None = None
    check: Callable | None = None
    unbatched: str = ""


LABEL_CORRECTIONS = {
    "ce": Correction("CE"),
    "ls": Correction("LS", target=lambda q, p, h, r, progress, m: label_smoothing(q, m.ls_eps), knobs=("ls_eps",)),
    "cp": Correction("CP", loss=lambda logits, logp, q, y, m, clock, k: confidence_penalty_loss(logits, q, m.cp_beta,
                                                                                            logp=logp),
                     knobs=("cp_beta",)),
    "bootsoft": Correction("Boot-soft", target=lambda q, p, h, r, progress, m: boot_soft(q, p, m.bootsoft_eps),
                           knobs=("bootsoft_eps",)),
    "proselflc": Correction("ProSelfLC", target=lambda q, p, h, r, progress, m: proselflc(
        q, p, progress, m.proselflc_b, m.proselflc_transit, h=h), knobs=("proselflc_b", "proselflc_transit")),
    "mylc": Correction("MyLC", target=lambda q, p, h, r, progress, m: mylc(q, p, r, m.mylc_b1, m.mylc_rho, h=h),
                       knobs=("mylc_b1", "mylc_rho")),
    "tfkd": Correction("Tf-KD_reg", loss=lambda logits, logp, q, y, m, clock, k: tfkd_reg_loss(
        logits, y, m.comparators.tfkd_a, m.comparators.tfkd_t, m.comparators.tfkd_alpha,
        m.comparators.tfkd_multiplier, logp=logp), knobs=("tfkd_a", "tfkd_t", "tfkd_alpha", "tfkd_multiplier")),
    "gce": Correction("GCE", loss=lambda logits, logp, q, y, m, clock, k: gce_loss(logits, y, m.comparators.gce_q,
                                                                                 logp=logp),
                      knobs=("gce_q",)),
    # Table 3's single-network methods (robust.py): losses a model trains by, alone (--mode zero) or under CMD
    "apl": Correction("APL (NCE+RCE)", loss=lambda logits, logp, q, y, m, clock, k: robust.apl_loss(
        logits, y, m.comparators.apl_alpha, m.comparators.apl_beta, logp=logp), knobs=("apl_alpha", "apl_beta")),
    "dmi": Correction("DMI", loss=lambda logits, logp, q, y, m, clock, k: robust.dmi_loss(logits, y, logp=logp)),
    "forward": Correction("Forward (true T)", loss=lambda logits, logp, q, y, m, clock, k: robust.forward_loss(
        logits, y, robust.true_transition(*noise_of(m, "forward"), logits.shape[-1], logits.device), logp=logp),
                          check=lambda a: check_transition(a, "forward", False),
                          unbatched="its T depends on each run's noise rate"),
    "forward-anchor": Correction("Forward (T̂)", loss=lambda logits, logp, q, y, m, clock, k: robust.forward_loss(
        logits, y, m.estimates[k], logp=logp), knobs=("anchor_percentile",), estimate=lambda probs, m: estimated(
        probs, m), check=lambda a: check_transition(a, "forward-anchor", True), unbatched="its T̂ is each run's estimate"),
    "trevision": Correction("T-revision", loss=lambda logits, logp, q, y, m, clock, k: trevision_loss(
        logits, logp, y, m, clock, k), knobs=("anchor_percentile", "trevision_revise", "trevision_revise_lr"),
                            estimate=lambda probs, m: estimated(probs, m), revise=revise_from, check=check_trevision,
                            unbatched="its T̂ is each run's estimate"),
    "mentornet": Correction("MentorNet PD", loss=lambda logits, logp, q, y, m, clock, k: robust.mentornet_pd_loss(
        logits, y, m.comparators.mentornet_percentile, m.comparators.mentornet_burn_in, clock.progress, logp=logp),
                            knobs=("mentornet_percentile", "mentornet_burn_in")),
    "cdr": Correction("CDR", grad_rule=lambda params, m: robust.cdr_mask_(params, 1 - (
        noise_of(m, "cdr")[1] if m.comparators.cdr_rate is None else m.comparators.cdr_rate)), knobs=("cdr_rate",),
                      unbatched="it acts on each model's gradients between backward and step"),
    "joint": Correction("Joint optimisation (step 1)", loss=lambda logits, logp, q, y, m, clock, k: robust.joint_loss(
        logits, q, m.comparators.joint_alpha, m.comparators.joint_beta, logp=logp),
                        knobs=("joint_alpha", "joint_beta", "joint_begin"), relabel=joint_begin,
                        check=lambda a: check_one_process(a, "joint", "relabelling"),
                        unbatched="each run relabels its own samples"),
}
