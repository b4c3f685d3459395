"""The cuda marker: tests that need a CUDA device carry @pytest.mark.cuda and are skipped, with the reason,
where torch sees none. `python -m pytest -m cuda` runs just them (tools/gpu_check.sh on a GPU machine).
published_md5s: torchvision's published md5 sums, put back after every test that stood tiny files in for them.
pytest_runtest_call: a Ctrl-C (SIGINT) that train.py or a tool turned into SystemExit(130) inside a test stops the
whole run, as a Ctrl-C anywhere else does, so that --junitxml is still written: tools/gpu_check.sh stops
`pytest -m cuda` with SIGINT at its time limit and reads the XML."""
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    # pytest counts a SystemExit in a test as that test's failure and goes on to the next one, until the time
    # limit's SIGKILL, which leaves no XML; this test is still reported (failed), and the run stops after it
    outcome = yield
    exc = outcome.excinfo
    if exc is not None and issubclass(exc[0], SystemExit) and exc[1].code == 130:
        item.session.shouldstop = "stopped by Ctrl-C (SIGINT): a test's train.py or tool exited with 130"


@pytest.fixture(autouse=True)
def published_md5s():
    saved = [(cls, attr, cls.__dict__[attr]) for cls, attr in PUBLISHED]
    yield
    for cls, attr, value in saved:
        setattr(cls, attr, value)
