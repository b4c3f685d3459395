"""ANIMAL-10N (training/datasets.py:_animal10n) on tiny copies in its released layout: training/ and testing/ folders of
64x64 JPEGs named <label>_<id>.jpg, the label in the name the given one."""

import numpy as np
import pytest
import torch
from PIL import Image

from training.datasets import DataError, TensorImages, load_dataset
from training.tiny import write_animal10n


def test_animal10n_reads_its_labels_from_the_file_names_and_tests_on_testing(tmp_path):
    sets = write_animal10n(tmp_path)
    d = load_dataset("animal10n", tmp_path, download=False)
    assert d.num_classes == 10 and set(d.tests) == {"test"}
    for got, (colours, labels) in ((d.train, sets["train"]), (d.tests["test"], sets["test"])):
        assert isinstance(got, TensorImages) and got.images.shape == (len(labels), 3, 64, 64)
        assert got.labels.dtype == np.int64 and got.labels.tolist() == labels.tolist()
        # each uniform image keeps its colour through JPEG
        assert torch.allclose(got.images.float().mean((2, 3)), torch.as_tensor(colours).float(), atol=3)


@pytest.mark.parametrize("name,message", [
    ("cat_00001.jpg", "not named <label>_<id>.jpg with a label in 0..9"),
    ("12_00001.jpg", "not named <label>_<id>.jpg with a label in 0..9"),
])
def test_a_file_not_named_as_the_release_names_them_is_one_line(tmp_path, name, message):
    write_animal10n(tmp_path)
    Image.new("RGB", (64, 64)).save(tmp_path / "training" / name)
    with pytest.raises(DataError) as e:
        load_dataset("animal10n", tmp_path, download=False)
    assert message in str(e.value) and name in str(e.value) and "\n" not in str(e.value)


def test_an_image_of_another_size_is_one_line_that_says_to_resize(tmp_path):
    write_animal10n(tmp_path)
    Image.new("RGB", (32, 32)).save(tmp_path / "training" / "2_77777.jpg")
    with pytest.raises(DataError) as e:
        load_dataset("animal10n", tmp_path, download=False)
    assert "2_77777.jpg is 32x32" in str(e.value) and "pass --image-size N" in str(e.value) and "\n" not in str(e.value)
    assert load_dataset("animal10n", tmp_path, image_size=64, download=False).train.images.shape[1:] == (3, 64, 64)


def test_animal10n_without_its_folders_says_where_to_get_it(tmp_path):
    with pytest.raises(DataError, match="ANIMAL-10N is not downloadable: ask its authors"):
        load_dataset("animal10n", tmp_path, download=False)
