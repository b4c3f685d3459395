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
elr_loss, elr_target    -- ELR (Liu et al. 2020): CE + lambda log(1 - <t, p>), a loss, with t each sample's running
                           target of the model's predictions, which a stage renews every epoch (ELR_TARGET)

LABEL_CORRECTIONS -- the registry: train.py's --lc names, each a registry.Correction (its target or its own loss,
                     its settings, the name plots show); mutual.targets and mutual.self_loss read it, and so does
                     everything that lists the corrections (the flags, their checks, the plots, the tests). It also
                     holds Table 3's single-network methods, robust.py's: APL, DMI, Forward (true T or T̂),
                     T-revision (its reweighting and revision), MentorNet PD, CDR's gradient rule, and Joint
                     optimisation's first step with its relabelling; what they learn between epochs is their
                     entries' Stages (estimate_stage, SLACK, HISTORY), which training/stages.py runs

l(p) = 1 - H(p)/H(u) is ProSelfLC's example trust; MyLC's l(p) is not defined in
the appendix; we read it as the same trust (docs/paper-notes.md, "MyLC").

What CMD distils for the loss-type methods: CP, Tf-KD_reg and GCE have no target of
the form (1 - eps) q + eps p_tilde, so a model trained with them passes its peer
the given label q (docs/paper-notes.md, "CP"). Selection still applies: the peer learns q
only where this model is confident.
"""
import math

import torch
import torch.nn.functional as F

import robust
from losses import entropy
from registry import Correction, Stage, knob, positive, unit
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


def elr_target(target, probs, beta=0.7):
    """ELR's running target of one model (Liu et al. 2020, "temporal ensembling"): t <- beta t + (1 - beta) p^, p^ the
    model's predicted probabilities clamped to [1e-4, 1 - 1e-4] and renormalised, as their code (elr_loss's target
    update). target: (n, K) or None before the first (their zeros); probs: (n, K). Returns (n, K) float32.

    Their code updates each sample's row in the step that trains it, from that step's training-mode outputs; here
    every row is updated at the start of each epoch, from the model's predictions then (eval mode, no augmentation:
    a Stage, training/stages.py). The two differ by how far the model moves within an epoch."""
    p = probs.float().clamp(1e-4, 1.0 - 1e-4)
    p = p / p.sum(1, keepdim=True)
    return (1 - beta) * p if target is None else beta * target + (1 - beta) * p


def elr_loss(logits, labels, target, lam=3.0, logp=None):
    """ELR (Liu et al. 2020): CE(p, y) + lam mean_n log(1 - <t_n, p_n>), p clamped to [1e-4, 1 - 1e-4] as their code,
    t the sample's running target (elr_target), a constant. The regulariser's gradient pulls p toward t, the
    model's own early predictions, so that it does not fit a noisy label it had not learned early.
    logits: (N, K) with gradient; labels: (N,) int64; target: (N, K). Returns a scalar."""
    if logp is None:
        logp = F.log_softmax(logits.float(), dim=-1)
    p = logp.exp().clamp(1e-4, 1.0 - 1e-4)
    reg = (1 - (target.detach() * p).sum(1)).log().mean()
    return F.nll_loss(logp, labels) + lam * reg


# ---------------------------------------------------------------- the registry: the paper's corrections

LABEL_CORRECTIONS = {
    "ce": Correction("CE"),
    "ls": Correction("LS", target=lambda q, p, h, r, progress, m: label_smoothing(q, m.ls_eps), knobs=("ls_eps",)),
    "cp": Correction("CP", loss=lambda logits, logp, q, y, m, clock, s: confidence_penalty_loss(logits, q, m.cp_beta,
                                                                                            logp=logp),
                     knobs=("cp_beta",)),
    "bootsoft": Correction("Boot-soft", target=lambda q, p, h, r, progress, m: boot_soft(q, p, m.bootsoft_eps),
                           knobs=("bootsoft_eps",)),
    "proselflc": Correction("ProSelfLC", target=lambda q, p, h, r, progress, m: proselflc(
        q, p, progress, m.proselflc_b, m.proselflc_transit, h=h), knobs=("proselflc_b", "proselflc_transit")),
    "mylc": Correction("MyLC", target=lambda q, p, h, r, progress, m: mylc(q, p, r, m.mylc_b1, m.mylc_rho, h=h),
                       knobs=("mylc_b1", "mylc_rho")),
}


# ---------------------------------------------------------------- ... and the comparators': Tables 2-4 and beyond,
# each with its settings (mutual.Comparators) and, where it learns between epochs, its stages

def estimate_stage(title):
    """The stage of Forward (T̂) and T-revision: once the warm-up ends, each model's estimate T̂ from its predictions on
    the training set (robust.anchor_transition), which its loss reads as s["estimate"] from then on."""
    return Stage("estimate", start=lambda m, epochs: m.warmup, line=lambda m, epoch, n, states: (
        f"after {m.warmup} warm-up epoch{'s' if m.warmup > 1 else ''} of CE, {title} trains with each model's "
        f"estimate from its predictions on the {n} training samples"),
                 update=lambda state, probs, m: torch.as_tensor(robust.anchor_transition(
                     probs, m.comparators.anchor_percentile), dtype=torch.float32))


SLACK = Stage(  # T-revision's revision: each model's slack ΔT beside its T̂, learned by Adam with the model
    "slack", start=robust.revise_from, predictions=False,
    update=lambda state, probs, m: torch.zeros_like(m.state["estimate"][0]).requires_grad_(),
    optimiser=lambda net, s, m, weight_decay: torch.optim.Adam(  # theirs: Adam, lr 5e-7, their SGD's weight decay
        [*net.parameters(), s], lr=m.comparators.trevision_revise_lr, weight_decay=weight_decay),
    line=lambda m, epoch, n, states: f"from epoch {epoch + 1}, T-revision learns each model's slack ΔT beside its T̂, "
                                     f"by Adam at lr {m.comparators.trevision_revise_lr:g}")
HISTORY = Stage(  # Joint optimisation's labels: each sample's label the mean of the model's last predictions
    "history", start=lambda m, epochs: max(1, robust.joint_begin(m, epochs) - robust.JOINT_WINDOW + 1), every=True,
    update=lambda history, probs, m: robust.joint_history(history, probs), rows=lambda history: history.mean(0),
    rows_from=robust.joint_begin, given=True, keep=True,
    line=lambda m, epoch, n, states: f"from epoch {epoch + 1}, each sample's label is each model's mean prediction "
                                     f"over its last {robust.JOINT_WINDOW} epochs ({len(states[0])} so far), renewed "
                                     f"every epoch")
ELR_TARGET = Stage(  # ELR's running target of each sample, renewed at the start of every epoch
    "target", start=lambda m, epochs: 0, every=True, rows=lambda target: target,
    update=lambda target, probs, m: elr_target(target, probs, m.comparators.elr_beta),
    line=lambda m, epoch, n, states: f"from epoch {epoch + 1}, ELR's target of each sample is the running mean of its "
                                     f"model's predictions, t <- {m.comparators.elr_beta:g} t + "
                                     f"{1 - m.comparators.elr_beta:g} p, renewed every epoch")
ANCHORS = dict(anchor_percentile=knob(100.0, "Forward (T̂), T-revision: each class's anchor is its most confident sample "
                                             "below this percentile (100: the most confident, the authors' CIFAR-100 "
                                             "setting; 97: their CIFAR-10 one)", (lambda v: 0 < v <= 100, "in (0, 100]")))
LABEL_CORRECTIONS.update({
    "tfkd": Correction("Tf-KD_reg", loss=lambda logits, logp, q, y, m, clock, s: tfkd_reg_loss(
        logits, y, m.comparators.tfkd_a, m.comparators.tfkd_t, m.comparators.tfkd_alpha,
        m.comparators.tfkd_multiplier, logp=logp), settings=dict(
        tfkd_a=knob(0.99, "Tf-KD_reg: the hand-made teacher's probability a on the label", (lambda v: 0 < v < 1,
                                                                                            "in (0, 1)")),
        tfkd_t=knob(20.0, "Tf-KD_reg: temperature T", (positive, "a positive temperature")),
        tfkd_alpha=knob(0.1, "Tf-KD_reg: weight α of the KL term", (unit, "in [0, 1]")),
        tfkd_multiplier=knob(100.0, "Tf-KD_reg: the authors' code's multiplier of the KL term",
                             (math.isfinite, "a finite number")))),
    "gce": Correction("GCE", loss=lambda logits, logp, q, y, m, clock, s: gce_loss(logits, y, m.comparators.gce_q,
                                                                                 logp=logp),
                      settings=dict(gce_q=knob(0.7, "GCE q in L_q = (1 - p_y^q)/q (q -> 0: CE, q = 1: MAE); --lc gce",
                                               (lambda v: 0 < v <= 1, "in (0, 1]")))),
    "elr": Correction("ELR", loss=lambda logits, logp, q, y, m, clock, s: elr_loss(
        logits, y, s["target"], m.comparators.elr_lambda, logp=logp), stages=(ELR_TARGET,), settings=dict(
        elr_beta=knob(0.7, "ELR: β of the running target t <- β t + (1 - β) p (--lc elr; their CIFAR-10 config)",
                      (lambda v: 0 <= v < 1, "in [0, 1)")),
        elr_lambda=knob(3.0, "ELR: λ of its regulariser λ log(1 - <t, p>) (--lc elr; their CIFAR-10 config)",
                        (lambda v: 0 <= v < math.inf, "at least 0"))), unbatched="each run keeps its own targets"),
    # Table 3's single-network methods (robust.py): losses a model trains by, alone (--mode zero) or under CMD
    "apl": Correction("APL (NCE+RCE)", loss=lambda logits, logp, q, y, m, clock, s: robust.apl_loss(
        logits, y, m.comparators.apl_alpha, m.comparators.apl_beta, logp=logp), settings=dict(
        apl_alpha=knob(10.0, "APL: α of its active loss, NCE (--lc apl; the authors' CIFAR-100 value)",
                       (lambda v: 0 <= v < math.inf, "at least 0")),
        apl_beta=knob(0.1, "APL: β of its passive loss, RCE (--lc apl; the authors' CIFAR-100 value)",
                      (lambda v: 0 <= v < math.inf, "at least 0")))),
    "dmi": Correction("DMI", loss=lambda logits, logp, q, y, m, clock, s: robust.dmi_loss(logits, y, logp=logp)),
    "forward": Correction("Forward (true T)", loss=lambda logits, logp, q, y, m, clock, s: robust.forward_loss(
        logits, y, robust.true_transition(*robust.noise_of(m, "forward"), logits.shape[-1], logits.device), logp=logp),
                          check=lambda a: robust.check_transition(a, "forward", False),
                          unbatched="its T depends on each run's noise rate"),
    "forward-anchor": Correction("Forward (T̂)", loss=lambda logits, logp, q, y, m, clock, s: robust.forward_loss(
        logits, y, s["estimate"], logp=logp), settings=ANCHORS, stages=(estimate_stage("Forward (T̂)"),),
                                 check=lambda a: robust.check_transition(a, "forward-anchor", True),
                                 unbatched="its T̂ is each run's estimate"),
    "trevision": Correction("T-revision", loss=lambda logits, logp, q, y, m, clock, s: robust.trevision_loss(
        logits, logp, y, s), knobs=("anchor_percentile",), stages=(estimate_stage("T-revision"), SLACK), settings=dict(
        trevision_revise=knob(0, "T-revision: the last E epochs learn a slack ΔT beside T̂, each model and its ΔT by "
                                 "Adam at --trevision-revise-lr (their revision stage; 0: reweighting alone)",
                              (lambda v: v >= 0, "at least 0")),
        trevision_revise_lr=knob(robust.REVISION_LR, "T-revision: Adam's lr in the revision stage (the authors': 5e-7)",
                                 (positive, "a positive lr"))),
                            check=robust.check_trevision, unbatched="its T̂ is each run's estimate"),
    "mentornet": Correction("MentorNet PD", loss=lambda logits, logp, q, y, m, clock, s: robust.mentornet_pd_loss(
        logits, y, m.comparators.mentornet_percentile, m.comparators.mentornet_burn_in, clock.percent, logp=logp),
                            settings=dict(
        mentornet_percentile=knob(0.7, "MentorNet PD: the percentile p of the batch's losses below which a sample "
                                       "counts (--lc mentornet; the value of the authors' flag)",
                                  (lambda v: 0 < v <= 1, "in (0, 1]")),
        mentornet_burn_in=knob(0.18, "MentorNet PD: every sample counts while ⌊100 t/Γ⌋ is at most 100 times this "
                                     "(--lc mentornet; the authors' predefined curriculum: percentage 18, the first "
                                     "19%% of training)", (unit, "in [0, 1]")))),
    "cdr": Correction("CDR", grad_rule=lambda nets, m: robust.cdr_rule(nets, 1 - (
        robust.noise_of(m, "cdr")[1] if m.comparators.cdr_rate is None else m.comparators.cdr_rate)), settings=dict(
        cdr_rate=knob(None, "CDR: τ, so that 1 - τ of the weights are critical (--lc cdr; default: --rate with a --noise "
                            "drawn at a rate, as the authors' code sets it; give it otherwise)",
                      (lambda v: 0 <= v < 1, "in [0, 1)"))),
                      unbatched="it acts on each model's gradients between backward and step"),
    "joint": Correction("Joint optimisation (step 1)", loss=lambda logits, logp, q, y, m, clock, s: robust.joint_loss(
        logits, q, m.comparators.joint_alpha, m.comparators.joint_beta, logp=logp), stages=(HISTORY,), settings=dict(
        joint_alpha=knob(1.0, "Joint optimisation: α of its prior term L_p (--lc joint; the authors' value)",
                         (lambda v: 0 <= v < math.inf, "at least 0")),
        joint_beta=knob(0.5, "Joint optimisation: β of its entropy term L_e (--lc joint; the authors' value)",
                        (lambda v: 0 <= v < math.inf, "at least 0")),
        joint_begin=knob(0.35, "Joint optimisation: the fraction of --epochs after which each sample's label is the "
                               "mean of the model's last 10 epochs of predictions (--lc joint; the authors': epoch 70 "
                               "of 200)", (lambda v: 0 < v <= 1, "in (0, 1]"))),
                        unbatched="each run relabels its own samples"),
})
