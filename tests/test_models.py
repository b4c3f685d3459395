"""Tests for models.py: shapes, CIFAR stems, parameter counts, pretrained loading."""
import os
import urllib.error

import pytest
import torch
import torch.nn as nn
import torchvision

from models import ARCHS, build_model, count_params

CIFAR_ARCHS = ("resnet18", "resnet34", "resnet50", "shufflenetv2")  # the paper's CIFAR stems, against torchvision
K = 100  # CIFAR-100


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def first_stage(net):
    """The module whose input is the stem's output."""
    return net.layer1 if hasattr(net, "layer1") else net.stage2


@pytest.mark.parametrize("name", CIFAR_ARCHS)
def test_cifar_arch_keeps_32x32_through_stem(name):
    net = build_model(name, K).eval()
    seen = []
    first_stage(net).register_forward_pre_hook(lambda m, args: seen.append(args[0].shape))
    with torch.no_grad():
        out = net(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, K)
    assert seen[0][-2:] == (32, 32)  # stride-1 stem, no max-pool
    assert isinstance(net.maxpool, nn.Identity)


@pytest.mark.parametrize("name", CIFAR_ARCHS)
def test_cifar_param_count_differs_from_torchvision_only_by_stem(name):
    tv_name = "shufflenet_v2_x1_0" if name == "shufflenetv2" else name
    tv = getattr(torchvision.models, tv_name)(weights=None, num_classes=K)
    tv_conv1 = tv.conv1[0] if name == "shufflenetv2" else tv.conv1
    c_out = tv_conv1.out_channels
    expected = count_params(tv) - tv_conv1.weight.numel() + c_out * 3 * 3 * 3
    assert count_params(build_model(name, K)) == expected


def test_resnet50_imagenet_is_torchvision_unchanged():
    net = build_model("resnet50_imagenet", 101)
    assert net.conv1.kernel_size == (7, 7) and net.conv1.stride == (2, 2)
    assert isinstance(net.maxpool, nn.MaxPool2d)
    assert count_params(net) == count_params(torchvision.models.resnet50(num_classes=101))
    with torch.no_grad():
        assert net.eval()(torch.randn(2, 3, 64, 64)).shape == (2, 101)


def test_inception_resnet_v2_matches_published_param_count():
    net = build_model("inception_resnet_v2", 1000)
    assert count_params(net) == 55_843_464  # timm / Cadene, 1000 classes
    net = build_model("inception_resnet_v2", 50).eval()  # mini-WebVision
    with torch.no_grad():
        assert net(torch.randn(1, 3, 299, 299)).shape == (1, 50)


def check_any_input_size(name):
    """Logits (N, K) for square inputs of its Arch.min_side and twice it, and of 32 (CIFAR's) where it takes them."""
    side = ARCHS[name].min_side
    net = build_model(name, 10).eval()
    with torch.no_grad():
        for s in sorted({side, 2 * side, max(side, 32)}):
            assert net(torch.randn(2, 3, s, s)).shape == (2, 10), s


def check_gradients_reach_every_parameter(name):
    net = build_model(name, 10)
    side = max(ARCHS[name].min_side, 32)
    loss = nn.functional.cross_entropy(net(torch.randn(4, 3, side, side)), torch.arange(4))
    loss.backward()
    for n, p in net.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n
        assert p.grad.abs().sum() > 0, n


@pytest.mark.parametrize("name", ARCHS)
def test_every_arch_takes_any_input_size_from_its_smallest(name):
    check_any_input_size(name)


@pytest.mark.parametrize("name", ARCHS)
def test_every_arch_gradients_reach_every_parameter(name):
    check_gradients_reach_every_parameter(name)


@pytest.mark.parametrize("name", ARCHS)
def test_channels_last_and_autocast(name):
    net = build_model(name, K).eval().to(memory_format=torch.channels_last)
    side = max(ARCHS[name].min_side, 32)
    x = torch.randn(2, 3, side, side).to(memory_format=torch.channels_last)
    with torch.no_grad():
        ref = net(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = net(x)
    assert out.shape == (2, K) and out.dtype == torch.bfloat16
    assert torch.allclose(out.float(), ref, atol=0.1 * ref.abs().max().item() + 0.1)


def test_unknown_arch_raises():
    with pytest.raises(ValueError, match="choose from"):
        build_model("vgg16", 10)


@pytest.mark.parametrize("name", [a for a, x in ARCHS.items() if not x.pretrained])
def test_pretrained_only_where_the_record_says_it_has_weights(name):
    with pytest.raises(ValueError, match="resnet50_imagenet"):
        build_model(name, 10, pretrained=True)


def test_pretrained_offline_says_where_to_put_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))

    def offline(*args, **kwargs):
        raise urllib.error.URLError("no internet")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", offline)
    with pytest.raises(RuntimeError) as e:
        build_model("resnet50_imagenet", 101, pretrained=True)
    assert os.path.join(str(tmp_path), "hub", "checkpoints") in str(e.value)
    assert "resnet50-0676ba61.pth" in str(e.value)


def test_pretrained_loads_from_the_cache_the_message_names(tmp_path, monkeypatch):
    """A file put where the error message says is loaded, with no download."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    cache = tmp_path / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    fake = torchvision.models.resnet50().state_dict()
    torch.save(fake, cache / "resnet50-0676ba61.pth")
    net = build_model("resnet50_imagenet", 101, pretrained=True)
    assert torch.equal(net.conv1.weight, fake["conv1.weight"])
    assert torch.equal(net.layer4[2].conv3.weight, fake["layer4.2.conv3.weight"])
    assert net.fc.out_features == 101 and net.fc.in_features == 2048
