"""JoCoR (Wei et al. 2020; not in the paper's Table 3): one joint loss with co-regularisation; both networks learn the
samples where it is small, --mode jocor.

jocor     -- the joint loss of each sample, its small-loss selection, and each network's share of it
objective -- jocor at R(t) (lab/methods/coteaching.py's rule)
"""
from lab.methods.coteaching import R_T, _per_sample, keep_rule, pair, pair_objective, small_loss
from losses import kl_divergence
from registry import Mode, knob, unit
import torch


def jocor(logits_a, logits_b, labels, keep, lam):
    """JoCoR (Wei et al. 2020, Algorithm 1): one joint loss per sample; both networks learn the samples where it is
    small.

      l(x_i) = (1 - lambda) (CE(p_A, y_i) + CE(p_B, y_i)) + lambda (KL(p_A || p_B) + KL(p_B || p_A))
      D~ = argmin_{D': |D'| >= R(t)|D|} l(D'),   L = mean_{i in D~} l(x_i),   (theta_A, theta_B) -= eta grad L
    logits_*: (N, K) with gradient; labels: (N,) int64; keep: R(t), a host float; lam: lambda in [0, 1].
    |D~| = max(1, int(R(t) N)), as in coteaching; the selection treats l as a constant.

    Detaching: the authors' code (algorithm/loss.py, kl_loss_compute) does not detach the peer in either KL
    term, and one optimiser steps both networks on L, so each KL term trains both networks. We follow it,
    unlike the rest of this project, which detaches peers (losses.py). So that each returned loss trains only
    its own network, L is split into the terms each network's parameters move:
      L_A = mean_{D~} (1 - lambda) CE(p_A, y) + lambda (KL(p_A || sg p_B) + KL(sg p_B || p_A)),  L_B mirrored,
    sg = stop-gradient. grad_A L_A = grad_A L and grad_B L_B = grad_B L exactly, so one backward pass of
    L_A + L_B is the authors' update; in value L_A + L_B = L + lambda mean_{D~} (KL_AB + KL_BA), the symmetric
    KL counted once in each network's loss.
    lambda: the code's argparse default is 0.1, but its only MNIST command (example.sh) uses 0.95 and its
    README puts the best between 0.5 and 0.9 (0.9 CIFAR-10, 0.85 CIFAR-100): Method's default is 0.95 for
    MNIST-like data. taught[(0, 1)] and taught[(1, 0)] are both D~.
    """
    n = labels.shape[0]
    n_keep = max(1, int(keep * n))
    logp_a, ce_a = _per_sample(logits_a, labels)
    logp_b, ce_b = _per_sample(logits_b, labels)
    with torch.no_grad():
        kl_ab, kl_ba = kl_divergence(logp_a, logp_b), kl_divergence(logp_b, logp_a)
        joint = (1 - lam) * (ce_a + ce_b) + lam * (kl_ab + kl_ba)  # (N,) l(x_i)
    sel = small_loss(joint, n_keep)  # D~
    peer_a, peer_b = logp_a.detach(), logp_b.detach()
    # the terms A's parameters move, and B's
    share_a = (1 - lam) * ce_a + lam * (kl_divergence(logp_a, peer_b) + kl_divergence(peer_b, logp_a))
    share_b = (1 - lam) * ce_b + lam * (kl_divergence(logp_b, peer_a) + kl_divergence(peer_a, logp_b))
    loss_a, loss_b = (sel * share_a).sum() / n_keep, (sel * share_b).sum() / n_keep
    return (loss_a, loss_b), {(0, 1): sel, (1, 0): sel}


def jocor_objective(z, y, method, chi, r, clock, draws=None, rows=None):
    """JoCoR as a training objective: coteaching_objective's arguments and result."""
    lam = method.comparators.jocor_lambda
    return pair_objective(z, y, *jocor(*pair(method, z), y, keep_rule(method, clock), lam))



MODES = {"jocor": Mode("JoCoR", jocor_objective, pair=True, rule=keep_rule, settings={**R_T, **dict(
    jocor_lambda=knob(0.95, "jocor: λ in l = (1 - λ)(CE_A + CE_B) + λ(KL(p_A‖p_B) + KL(p_B‖p_A)) (the authors' MNIST "
                            "command; their README: 0.9 for CIFAR-10, 0.85 for CIFAR-100)", (unit, "in [0, 1]")))})}
