"""The lab's tests: every method of the comparison registered (lab.register), as python lab/train.py runs them.

staged: a method with every stage of its mode acted as in a run, for the tests that take any method."""
import torch

import lab
from lab import stages
from mutual import MODES

lab.register()


def staged(method, n, k, epoch=6, epochs=10, models=2):
    """method with every stage of its mode (lab.stages.Stage: a T̂, a slack, ELR's targets, Joint's history) acted at
    the start of each epoch up to `epoch` of `epochs`, as a run acts them, from fixed predictions of n samples of k
    classes: what its objective reads in Method.state, whatever the mode."""
    between = MODES[method.mode].between
    g = torch.Generator().manual_seed(7)
    for e in range(epoch + 1):
        probs = [torch.softmax(3 * torch.randn(n, k, generator=g), -1) for _ in range(models)]
        if isinstance(between, stages.Stages):
            method = stages.act(between.stages, method, e, epochs, lambda: probs, models, torch.device("cpu")).method
    return method
