"""Network architectures used in the paper (appendix "Implementation Details").

The paper trains two peers of the same architecture and names, per dataset:
  CIFAR-100 (32x32)   ResNet18, ResNet34, ResNet50, ShuffleNetV2
  Food-101  (224x224) ResNet50 initialised from ImageNet
  mini-WebVision (299x299) Inception-ResNet-v2 (Szegedy et al. 2017)

ARCHS                -- the registry: train.py's --arch names, each an Arch (how it is built, which of
                        appendix C's optimisation presets trains it, whether ImageNet weights load)
build_model          -- name -> nn.Module that returns logits (N, num_classes)
count_params         -- number of parameters (buffers such as BN statistics excluded)
InceptionResNetV2    -- written here because torchvision has none
cnn                  -- a small network for CPU smoke runs; not in the paper
mlp                  -- a fully connected network that memorises noisy labels on a CPU; not in the paper

The CIFAR nets are torchvision's with the stem adapted to 32x32 inputs, not
rewrites. No custom ops, so every model works with channels_last and autocast.
"""
import os
from typing import Callable, NamedTuple
from urllib.parse import urlparse

import torch
import torch.nn as nn


def count_params(model):
    """Number of parameters (buffers such as BN running stats not counted)."""
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- small CNN

def cnn(num_classes):
    """Three conv3x3-BN-ReLU-maxpool blocks (32/64/128), global pool, linear.

    For smoke runs on CPU only; any input of side >= 8 works thanks to the
    global average pool.
    """
    layers, c_in = [], 3
    for c_out in (32, 64, 128):
        layers += [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
                   nn.BatchNorm2d(c_out), nn.ReLU(inplace=True), nn.MaxPool2d(2)]
        c_in = c_out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(c_in, num_classes))


def mlp(num_classes, width=512, side=16):
    """Average-pool the image to side x side, then three linear layers (width 512) with ReLU.

    For CPU demonstrations only. With ~0.7M parameters and no convolutional prior it
    fits a few thousand images, noisy labels included, in seconds per epoch: the
    regime (a network that memorises its training set) where label noise hurts.
    """
    return nn.Sequential(nn.AdaptiveAvgPool2d(side), nn.Flatten(), nn.Linear(3 * side * side, width),
                         nn.ReLU(inplace=True), nn.Linear(width, width), nn.ReLU(inplace=True),
                         nn.Linear(width, num_classes))


# ------------------------------------------------------ CIFAR-form torchvision
# torchvision is imported by each builder of one of its nets: it imports torch._dynamo, about 3 s of every start,
# which a run of the MLP or the CNN never needs.

def cifar_resnet(depth, num_classes):
    """torchvision ResNet with the usual CIFAR stem (He et al. 2016, §4.2).

    The ImageNet stem (7x7 stride-2 conv, then max-pool) would shrink a 32x32
    image to 8x8 before layer1; a 3x3 stride-1 conv and no pool keep it 32x32.
    """
    import torchvision  # here: see this section's first comment
    net = getattr(torchvision.models, f"resnet{depth}")(weights=None, num_classes=num_classes)
    net.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    # Same init torchvision gives its other convs.
    nn.init.kaiming_normal_(net.conv1.weight, mode="fan_out", nonlinearity="relu")
    net.maxpool = nn.Identity()
    return net


def cifar_shufflenetv2(num_classes):
    """torchvision ShuffleNetV2 x1.0 with a stride-1 first conv and no max-pool.

    As in the common CIFAR ports (kuangliu, weiaicunzai/pytorch-cifar100) the
    three stride-2 stages stay, so the map is 4x4 before the global pool.
    torchvision's first conv is already 3x3, so the parameter count is unchanged.
    """
    import torchvision  # here: see this section's first comment
    net = torchvision.models.shufflenet_v2_x1_0(weights=None, num_classes=num_classes)
    net.conv1[0] = nn.Conv2d(3, 24, kernel_size=3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(net.conv1[0].weight, mode="fan_out", nonlinearity="relu")
    net.maxpool = nn.Identity()
    return net


def imagenet_resnet50(num_classes, pretrained):
    """torchvision ResNet50, unchanged; for Food-101 the paper starts from ImageNet.

    With pretrained=True, loads IMAGENET1K_V1 and puts a fresh Linear(2048, K) head
    on it. The weights come from torch's cache or are downloaded into it.
    """
    import torchvision  # here: see this section's first comment
    if not pretrained:
        return torchvision.models.resnet50(weights=None, num_classes=num_classes)
    url = torchvision.models.ResNet50_Weights.IMAGENET1K_V1.url
    try:
        state = torch.hub.load_state_dict_from_url(url, progress=True, check_hash=True)
    except OSError as e:  # URLError, socket timeouts and DNS failures are all OSError
        cache = os.path.join(torch.hub.get_dir(), "checkpoints")
        name = os.path.basename(urlparse(url).path)
        raise RuntimeError(
            f"could not download ImageNet weights ({e}); copy {name} from {url} "
            f"into {cache} from a machine with internet, then rerun") from e
    net = torchvision.models.resnet50(weights=None)
    net.load_state_dict(state)
    net.fc = nn.Linear(net.fc.in_features, num_classes)
    return net


# ------------------------------------------------------ Inception-ResNet-v2
# Layout and channel widths follow the Cadene pretrainedmodels / timm port of
# the TF-slim model, so counts match the published 55,843,464 (1000 classes).

class BasicConv2d(nn.Sequential):
    def __init__(self, c_in, c_out, kernel_size, stride=1, padding=0):
        super().__init__(nn.Conv2d(c_in, c_out, kernel_size, stride, padding, bias=False),
                         nn.BatchNorm2d(c_out, eps=1e-3), nn.ReLU(inplace=True))


def conv_chain(c_in, *specs):
    """BasicConv2d chain; each spec is (c_out, kernel_size[, stride[, padding]])."""
    layers = []
    for c_out, *rest in specs:
        layers.append(BasicConv2d(c_in, c_out, *rest))
        c_in = c_out
    return nn.Sequential(*layers)


class Concat(nn.Module):
    """Runs the branches on the same input and concatenates along channels."""

    def __init__(self, *branches):
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x):
        return torch.cat([b(x) for b in self.branches], dim=1)


class Residual(nn.Module):
    """Inception-ResNet block: x + scale * conv1x1(concat(branches)), then ReLU.

    Scaling the residual by 0.1-0.3 is the paper's fix (Szegedy et al. §3.3)
    for the instability of very wide residual Inception nets.
    """

    def __init__(self, channels, scale, branches, relu=True):
        super().__init__()
        self.branches = Concat(*branches)
        c_cat = sum(b[-1][0].out_channels for b in branches)
        self.up = nn.Conv2d(c_cat, channels, 1)  # linear projection, with bias
        self.scale, self.relu = scale, relu

    def forward(self, x):
        out = x + self.scale * self.up(self.branches(x))
        return torch.relu(out) if self.relu else out


def block35(scale=0.17):  # Inception-ResNet-A, 35x35x320
    return Residual(320, scale, [conv_chain(320, (32, 1)),
                                 conv_chain(320, (32, 1), (32, 3, 1, 1)),
                                 conv_chain(320, (32, 1), (48, 3, 1, 1), (64, 3, 1, 1))])


def block17(scale=0.10):  # Inception-ResNet-B, 17x17x1088
    return Residual(1088, scale, [conv_chain(1088, (192, 1)),
                                  conv_chain(1088, (128, 1), (160, (1, 7), 1, (0, 3)),
                                             (192, (7, 1), 1, (3, 0)))])


def block8(scale=0.20, relu=True):  # Inception-ResNet-C, 8x8x2080
    return Residual(2080, scale, [conv_chain(2080, (192, 1)),
                                  conv_chain(2080, (192, 1), (224, (1, 3), 1, (0, 1)),
                                             (256, (3, 1), 1, (1, 0)))], relu)


class InceptionResNetV2(nn.Module):
    """Inception-ResNet-v2 (Szegedy et al. 2017, Fig. 15), for 299x299 inputs."""

    def __init__(self, num_classes, drop_rate=0.2):
        super().__init__()
        def pool():
            return nn.MaxPool2d(3, stride=2)

        self.stem = nn.Sequential(
            conv_chain(3, (32, 3, 2), (32, 3), (64, 3, 1, 1)), pool(),     # 147 -> 73
            conv_chain(64, (80, 1), (192, 3)), pool(),                      # 71 -> 35
            Concat(conv_chain(192, (96, 1)),                                # mixed_5b -> 320
                   conv_chain(192, (48, 1), (64, 5, 1, 2)),
                   conv_chain(192, (64, 1), (96, 3, 1, 1), (96, 3, 1, 1)),
                   nn.Sequential(nn.AvgPool2d(3, 1, 1, count_include_pad=False),
                                 BasicConv2d(192, 64, 1))))
        self.blocks = nn.Sequential(
            *[block35() for _ in range(10)],
            Concat(conv_chain(320, (384, 3, 2)),                            # Reduction-A -> 1088
                   conv_chain(320, (256, 1), (256, 3, 1, 1), (384, 3, 2)),
                   pool()),
            *[block17() for _ in range(20)],
            Concat(conv_chain(1088, (256, 1), (384, 3, 2)),                 # Reduction-B -> 2080
                   conv_chain(1088, (256, 1), (288, 3, 2)),
                   conv_chain(1088, (256, 1), (288, 3, 1, 1), (320, 3, 2)),
                   pool()),
            *[block8() for _ in range(9)],
            # TF-slim, Cadene and timm all run the 10th block-C unscaled (scale 1.0,
            # not 0.20) and without ReLU; we compute the same function. Module
            # names differ, so their checkpoints would need a key mapping.
            block8(scale=1.0, relu=False),
            BasicConv2d(2080, 1536, 1))
        # Dropout keep-prob 0.8 before the classifier, as in Szegedy et al. Fig. 15.
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Dropout(drop_rate), nn.Linear(1536, num_classes))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


# ---------------------------------------------------------------- the registry, and the entry point

class Arch(NamedTuple):
    """One architecture, as train.py's --arch names it.

    build      -- (num_classes, pretrained) -> nn.Module of logits (N, num_classes)
    schedule   -- which of appendix C's optimisation presets trains it (training/presets.py's Preset.schedule);
                  every architecture names one, so none falls to another's settings unseen
    pretrained -- ImageNet weights can be loaded into it (--pretrained)
    settings   -- an architecture the paper does not train brings its own schedule's row: Preset's fields but the
                  dataset and the schedule (epochs, batch_size, lr, milestones, lr_decay, momentum, weight_decay,
                  why), so that it borrows no paper row and its note; None: a row of PRESETS
    min_side   -- the smallest square input side it takes (its stem's and poolings' strides): the tests feed it this
                  side and twice it
    """
    build: Callable
    schedule: str
    pretrained: bool = False
    settings: dict | None = None
    min_side: int = 8


ARCHS = {
    "cnn": Arch(lambda k, pretrained: cnn(k), "cpu"),
    "mlp": Arch(lambda k, pretrained: mlp(k), "cpu"),
    "resnet18": Arch(lambda k, pretrained: cifar_resnet(18, k), "resnet18"),
    "resnet34": Arch(lambda k, pretrained: cifar_resnet(34, k), "resnet34"),
    "resnet50": Arch(lambda k, pretrained: cifar_resnet(50, k), "resnet50"),
    "shufflenetv2": Arch(lambda k, pretrained: cifar_shufflenetv2(k), "resnet18"),
    "resnet50_imagenet": Arch(imagenet_resnet50, "resnet34", pretrained=True),  # Food-101's own preset trains it
    "inception_resnet_v2": Arch(lambda k, pretrained: InceptionResNetV2(k), "resnet34", min_side=75),  # and WebVision's
}


def build_model(name, num_classes, pretrained=False):
    """Architecture by name (ARCHS) -> nn.Module mapping images to logits (N, num_classes)."""
    if name not in ARCHS:
        raise ValueError(f"unknown architecture {name!r}; choose from {', '.join(ARCHS)}")
    if pretrained and not ARCHS[name].pretrained:
        with_weights = [a for a, arch in ARCHS.items() if arch.pretrained]
        raise ValueError(f"only {', '.join(with_weights)} has pretrained weights, not {name!r}; "
                         "pass pretrained=False")
    return ARCHS[name].build(num_classes, pretrained)
