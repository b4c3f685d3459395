"""What every test of the project shares, a plugin of both tiers (pytest.ini: -p hooks; the reference's tests/ and
the lab's lab/tests/, every test of which is marked slow: the second tier). The cuda marker: tests that need a CUDA device carry @pytest.mark.cuda and are skipped, with the reason,
where torch sees none. `python -m pytest -m cuda` runs just them (studies/gpu_check.sh on a GPU machine).
published_md5s: torchvision's published md5 sums, put back after every test that stood tiny files in for them.
pytest_runtest_call: a Ctrl-C (SIGINT) that train.py or a tool turned into SystemExit(130) inside a test stops the
whole run, as a Ctrl-C anywhere else does, so that --junitxml is still written: studies/gpu_check.sh stops
`pytest -m cuda` with SIGINT at its time limit and reads the XML. A suite started with SIGINT ignored gets Python's
own handler back, so that its tests of Ctrl-C see the Ctrl-C they send."""
import signal

import pytest
import torch
from torchvision import datasets as tv
from torchvision.datasets.vision import VisionDataset

from training.datasets import DATASETS


# A suite started with SIGINT ignored (`nohup`, or `cmd &` in a script) would never see the Ctrl-C its tests send:
# Python leaves an ignored SIGINT ignored, in itself and in the processes it starts. The tests of Ctrl-C need
# Python's own handler, here and in the train.py each of them starts.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    for item in items:  # the lab's tests are the second tier's, with the slow end-to-end ones (pytest.ini)
        if "lab" in item.path.parts[len(config.rootpath.parts):-1]:
            item.add_marker(pytest.mark.slow)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA device (torch {torch.__version__} sees none)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


# The md5 sums torchvision publishes for its datasets. Tests stand tiny copies of the files in for the published
# ones by setting their sums on the classes (test_datasets.publish, test_downloads.md5s_of); each test gets the
# real ones back afterwards. Every data attribute of every torchvision dataset class, and of any other class a record
# of training/datasets.py names, is kept, so that no list here can leave out a class a record or a test's fixture uses.
CLASSES = [c for c in vars(tv).values() if isinstance(c, type) and issubclass(c, VisionDataset)]
CLASSES += [d.torchvision() for d in DATASETS.values() if d.source is not None and d.torchvision() not in CLASSES]
PUBLISHED = [(cls, attr) for cls in CLASSES for attr, v in vars(cls).items()
             if not attr.startswith("__") and isinstance(v, (str, bytes, int, float, tuple, list, dict))]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    # pytest counts a SystemExit in a test as that test's failure and goes on to the next one, until the time
    # limit's SIGKILL, which leaves no XML; this test is still reported (failed), and the run stops after it
    outcome = yield
    exc = outcome.excinfo
    if exc is not None and issubclass(exc[0], SystemExit) and exc[1].code == 130:
        item.session.shouldstop = "stopped by Ctrl-C (SIGINT): a test's train.py or tool exited with 130"


def _copy(v):
    """v with each list and dict in it copied, so that a test that edits one in place (a list of [file, md5]) edits
    the class's, not the copy kept."""
    if type(v) is list:
        return [_copy(x) for x in v]
    return {k: _copy(x) for k, x in v.items()} if type(v) is dict else v


@pytest.fixture(autouse=True)
def published_md5s():
    saved = [(cls, attr, _copy(cls.__dict__[attr])) for cls, attr in PUBLISHED]
    yield
    for cls, attr, value in saved:
        setattr(cls, attr, value)
