"""The cuda marker: tests that need a CUDA device carry @pytest.mark.cuda and are skipped, with the reason,
where torch sees none. `python -m pytest -m cuda` runs just them (tools/gpu_check.sh on a GPU machine)."""
import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA device (torch {torch.__version__} sees none)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
