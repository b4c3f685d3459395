"""T-revision (Xia et al. 2019, the paper's Table 3): each network trained alone by importance reweighting with its T̂,
estimated after a warm-up of plain CE (lab/methods/forward.py's stage), and in its last epochs by the revision that
learns a slack ΔT beside T̂ with Adam, --mode trevision.

reweight_loss  -- the CE of each sample weighted by β = p(ỹ) / (p T)_ỹ, β detached
revision_loss  -- ... with T = T̂ + ΔT and β not detached, so that ΔT learns through the weights
revise_from    -- the epoch the revision starts; check_trevision what a run of it needs
SLACK          -- the revision's stage: each model's slack ΔT, learned by Adam with the model (lab/stages.py)
objective      -- each network by CE in the warm-up, then reweighting, then revision (lab/alone.py)
"""
import torch
import torch.nn.functional as F

from lab.alone import WARMUP, alone, ce, warm
from lab.methods.forward import ANCHORS, check_transition, estimate_stage
from lab.stages import Stage, Stages
from registry import Mode, knob, positive


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



def revise_from(m, epochs):
    """The epoch from whose start T-revision's models learn their slack ΔT: the last --trevision-revise epochs, and
    never before an epoch has trained with the warm-up's T̂ (check_trevision refuses a revision that would); None:
    reweighting alone."""
    revise = m.comparators.trevision_revise
    return max(epochs - revise, m.comparators.warmup + 1) if revise else None


def check_trevision(args):
    """What its estimate needs, and a revision stage that starts after the warm-up's estimate: a line, or None."""
    why = check_transition(args, True)
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
    from revise_from on). s: what the stages made of this model, {name: its state}."""
    if "slack" in s:
        return revision_loss(logits, y, s["estimate"], s["slack"], logp=logp)
    return reweight_loss(logits, y, s["estimate"], logp=logp)


def objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """T-revision for each network alone: CE in the warm-up, then its reweighting or revision with the model's own
    stages' states (mutual.OBJECTIVES' signature)."""
    on = not warm(method, clock)
    own = lambda k: {name: states[k] for name, states in (method.state or {}).items()}  # noqa: E731
    return alone(z, y, lambda k, logits, logp, q: trevision_loss(logits, logp, y, own(k)) if on else ce(q, logp))


SLACK = Stage(  # T-revision's revision: each model's slack ΔT beside its T̂, learned by Adam with the model
    "slack", start=revise_from, predictions=False,
    update=lambda state, probs, m: torch.zeros_like(m.state["estimate"][0]).requires_grad_(),
    optimiser=lambda net, s, m, weight_decay: torch.optim.Adam(  # theirs: Adam, lr 5e-7, their SGD's weight decay
        [*net.parameters(), s], lr=m.comparators.trevision_revise_lr, weight_decay=weight_decay),
    line=lambda m, epoch, n, states: f"from epoch {epoch + 1}, T-revision learns each model's slack ΔT beside its T̂, "
                                     f"by Adam at lr {m.comparators.trevision_revise_lr:g}")
STAGES = Stages(estimate_stage("T-revision"), SLACK)
MODES = {"trevision": Mode("T-revision", objective, rule=warm, between=STAGES, settings={**WARMUP, **ANCHORS, **dict(
    trevision_revise=knob(0, "T-revision: the last E epochs learn a slack ΔT beside T̂, each model and its ΔT by Adam at "
                             "--trevision-revise-lr (their revision stage; 0: reweighting alone)",
                          (lambda v: v >= 0, "at least 0")),
    trevision_revise_lr=knob(REVISION_LR, "T-revision: Adam's lr in the revision stage (the authors': 5e-7)",
                             (positive, "a positive lr")))},
                            check=lambda a, m: check_trevision(a) or STAGES.check(a, m),
                            unbatched="its T̂ is each run's estimate")}
