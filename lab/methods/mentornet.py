"""MentorNet PD (Jiang et al. 2018, the paper's Table 3): each network trained alone by the loss its predefined
curriculum weights, the form that needs no clean data, --mode mentornet.

nearest_percentile -- a batch's percentile as TensorFlow takes it, one of the batch's values
mentornet_pd_loss  -- their curriculum's weights v*_i at training's percentage, times each sample's CE
objective          -- each network by mentornet_pd_loss (lab/alone.py)
"""

import torch
import torch.nn.functional as F

from lab.alone import alone
from registry import Mode, knob, unit

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



def objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """MentorNet PD for each network alone, at the step's ⌊100 t/Γ⌋ (clock.percent) (mutual.OBJECTIVES' signature)."""
    c = method.comparators
    return alone(z, y, lambda k, logits, logp, q: mentornet_pd_loss(logits, y, c.mentornet_percentile,
                                                                     c.mentornet_burn_in, clock.percent, logp=logp))


MODES = {"mentornet": Mode("MentorNet PD", objective, settings=dict(
    mentornet_percentile=knob(0.7, "MentorNet PD: the percentile p of the batch's losses below which a sample counts "
                                   "(--mode mentornet; the value of the authors' flag)", (lambda v: 0 < v <= 1,
                                                                                          "in (0, 1]")),
    mentornet_burn_in=knob(0.18, "MentorNet PD: every sample counts while ⌊100 t/Γ⌋ is at most 100 times this (--mode "
                                 "mentornet; the authors' predefined curriculum: percentage 18, the first 19%% of "
                                 "training)", (unit, "in [0, 1]"))))}
