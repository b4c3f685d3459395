"""The cuda marker: tests that need a CUDA device carry @pytest.mark.cuda and are skipped, with the reason,
where torch sees none. `python -m pytest -m cuda` runs just them (tools/gpu_check.sh on a GPU machine).
published_md5s: torchvision's published md5 sums, put back after every test that stood tiny files in for them."""
import pytest
import torch
from torchvision import datasets as tv


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA device (torch {torch.__version__} sees none)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


# The md5 sums torchvision publishes for its datasets. Tests stand tiny copies of the files in for the published
# ones by setting their sums on the classes (test_datasets.publish, test_downloads.md5s_of); each test gets the
# real ones back afterwards.
PUBLISHED = [(cls, attr) for cls in (tv.CIFAR10, tv.CIFAR100) for attr in ("train_list", "test_list", "meta", "tgz_md5")]
PUBLISHED += [(tv.MNIST, "resources"), (tv.FashionMNIST, "resources"), (tv.Food101, "_MD5")]


@pytest.fixture(autouse=True)
def published_md5s():
    saved = [(cls, attr, cls.__dict__[attr]) for cls, attr in PUBLISHED]
    yield
    for cls, attr, value in saved:
        setattr(cls, attr, value)
