"""The paper's appendix code (CMDWithLoss, §"The Core Implementation of CMD Using PyTorch"), transcribed.

paper_cmd_loss -- CMDWithLoss.forward, line for line

A test oracle, not part of training: test_cmd.py checks losses.cmd_loss against
it, and bench.py times it against cmd_loss (paper_ratio).
"""
import torch


def paper_cmd_loss(qA, qB, pA, pB, threshold):
    """The appendix's CMDWithLoss.forward, transcribed literally.

    Only `.cuda()` became `device=hpA.device`, so it runs anywhere. It keeps the
    paper's log(p + 1e-6), nonzero() indexing and Python sum(), which sync with
    the host. pA, pB are probabilities (N, K); qA, qB targets (N, K).
    """
    hpA = torch.sum(-pA * torch.log(pA + 1e-6), 1)
    hpB = torch.sum(-pB * torch.log(pB + 1e-6), 1)

    threshold_l = threshold * torch.ones(len(hpA), device=hpA.device)

    indexA = (hpB < threshold_l).nonzero()
    indexB = (hpA < threshold_l).nonzero()

    lossB2A = torch.sum(qB[indexA].squeeze(1) *
                        (-torch.log(pA[indexA].squeeze(1) + 1e-6)), 1)
    lossA2B = torch.sum(qA[indexB].squeeze(1) *
                        (-torch.log(pB[indexB].squeeze(1) + 1e-6)), 1)

    lossB2A = sum(lossB2A) / len(hpA)
    lossA2B = sum(lossA2B) / len(hpB)

    return lossB2A, lossA2B
