"""mini-WebVision as the paper uses it (appendix, "Datasets"): Jiang et al. 2018's "Mini" setting.

load          -- Data of the first 50 classes of WebVision's Google subset, tested on WebVision val and
                 on ILSVRC12 val (the paper's test set), from WebVision's own on-disk layout
WEBVISION_URL -- where WebVision is downloaded (no library can fetch it)

datasets.load_dataset("webvision", ...) calls load; its errors are images.DataError, one line each.
"""
import os
import warnings

from training.images import (IMAGENET_MEAN, IMAGENET_STD, Data, DataError, FileImages, first_line, label_array,
                             require_file)

WEBVISION_URL = "https://data.vision.ee.ethz.ch/cvl/webvision/download.html"


def load(data_dir, size, num_classes=50):
    """The "mini" setting of Jiang et al. 2018: the first 50 classes of the Google subset.

    Tests: WebVision's own validation images, and ILSVRC12 val for the same 50
    classes if <data_dir>/imagenet/val/ exists (the paper's test set).
    """
    layout = (f"expected under {data_dir}: info/train_filelist_google.txt, info/val_filelist.txt, google/, "
              f"val_images_256/, and for ILSVRC12 val imagenet/val/<wnid>/ with info/synsets.txt or "
              f"imagenet/val/<class index 0..{num_classes - 1}>/; download from {WEBVISION_URL}")
    info = os.path.join(data_dir, "info")
    train = _filelist(os.path.join(info, "train_filelist_google.txt"), data_dir, num_classes, size, layout)
    tests = {"webvision_val": _filelist(os.path.join(info, "val_filelist.txt"),
                                        os.path.join(data_dir, "val_images_256"), num_classes, size, layout)}
    val = os.path.join(data_dir, "imagenet", "val")
    if not os.path.isdir(val):
        warnings.warn(f"ILSVRC12 val not found at {val}, so only webvision_val is evaluated; the paper "
                      f"tests on it: put the images in class folders there, imagenet/val/<wnid>/*.JPEG "
                      f"(as ImageNet's valprep.sh makes) or imagenet/val/<class index>/*.JPEG")
        return Data(train, tests, num_classes, IMAGENET_MEAN, IMAGENET_STD)
    tests["ilsvrc12_val"] = _ilsvrc12_val(val, info, num_classes, size, layout)
    return Data(train, tests, num_classes, IMAGENET_MEAN, IMAGENET_STD)


def _ilsvrc12_val(val, info, num_classes, size, layout):
    """ILSVRC12 val images of the first num_classes WebVision classes, in either of two layouts:
    val/<wnid>/ (ImageNet's valprep.sh), labelled by the wnid's line in info/synsets.txt, or
    val/<class index>/ with index 0..num_classes-1 (the DivideMix family's layout), which needs no synsets.txt."""
    folders = {e.name for e in os.scandir(val) if e.is_dir()}
    if not folders:
        raise DataError(f"{val} holds no class folders; put ILSVRC12 val there as <wnid>/ or <class index>/ "
                        f"folders of images, or remove it to evaluate on webvision_val only")
    numbered = {name: int(name) for name in folders if name.isdigit() and int(name) < num_classes}
    wnid_like = sorted(name for name in folders if name[:1] == "n" and name[1:].isdigit())
    if numbered and wnid_like:
        raise DataError(f"{val} mixes class-index folders (e.g. {min(numbered, key=numbered.get)}) and wnid folders "
                        f"(e.g. {wnid_like[0]}); keep one layout")
    if numbered:
        present, kind = numbered, f"<class index 0..{num_classes - 1}>"
    else:  # the label is the wnid's line in synsets.txt, not its rank among the folders present
        wnids = [line.split()[0] for line in _read_lines(os.path.join(info, "synsets.txt"), layout) if line.strip()]
        if len(wnids) < num_classes:
            raise DataError(f"{info}/synsets.txt lists {len(wnids)} synsets, expected 1000 "
                            f"(at least {num_classes}); {layout}")
        present, kind = {w: i for i, w in enumerate(wnids[:num_classes]) if w in folders}, "<wnid>"
    from torchvision.datasets.folder import IMG_EXTENSIONS, make_dataset  # here: datasets.py says why
    try:
        samples = make_dataset(val, present, extensions=IMG_EXTENSIONS)
    except (OSError, ValueError) as err:  # no class folder present, or an empty one
        raise DataError(f"no ILSVRC12 val images of the first {num_classes} classes at {val} "
                        f"({first_line(err)}); expected imagenet/val/{kind}/*.JPEG") from err
    if len(present) < num_classes:
        warnings.warn(f"ILSVRC12 val at {val} lacks {num_classes - len(present)} of the {num_classes} "
                      f"class folders; ilsvrc12_val covers only the others")
    return FileImages([p for p, _ in samples], label_array([y for _, y in samples]), size, "webvision")


def _read_lines(path, layout):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except OSError as err:
        raise DataError(f"WebVision file {path} not readable ({first_line(err)}); {layout}") from err


def _filelist(path, image_dir, num_classes, size, layout):
    """Lines "relative/path.jpg label" -> FileImages of the lines with label < num_classes."""
    paths, labels = [], []
    for n, line in enumerate(_read_lines(path, layout), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not parts[1].isdigit():
            raise DataError(f"{path} line {n}: expected 'path label', got '{line.strip()}'; {layout}")
        if int(parts[1]) < num_classes:
            paths.append(os.path.join(image_dir, parts[0]))
            labels.append(int(parts[1]))
    if not paths:
        raise DataError(f"{path} lists no images of classes 0..{num_classes - 1}; {layout}")
    require_file(paths[0], path)
    return FileImages(paths, label_array(labels), size, "webvision")
