"""ImageNet (ELU paper §4.3.1) in torchvision's ImageFolder layout, supplied by the user:
``DATA_DIR/imagenet/train/<class>/*`` and ``DATA_DIR/imagenet/val/<class>/*`` (the validation
images, sorted into class folders, serve as the test set).

1.3M images do not fit in memory as arrays: the splits hold file lists (:class:`ImageFiles`) that
the training loop reads batch by batch (workers.train.rows). Every image is resized to
``image_size`` × ``image_size`` (256); training takes random 224 × 224 crops and flips of those
(the spec's ``augment``), evaluation the central crop.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from workers.data.splits import DatasetNotFound, Splits, hold_out

_READERS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="imagenet")


class ImageFiles:
    """A split of image files read on demand: ``read_rows(index)`` gives (n, 3, size, size) floats
    in [0, 1], each image resized to ``image_size`` and, if ``crop`` is set, its central crop."""

    def __init__(self, paths: list[str], image_size: int, crop: int | None = None):
        self.paths, self.image_size, self.crop = list(paths), image_size, crop
        side = crop or image_size
        self.shape = (len(self.paths), 3, side, side)

    def __len__(self) -> int:
        return len(self.paths)

    def _read(self, path: str) -> Tensor:
        from PIL import Image

        with Image.open(path) as image:
            square = image.convert("RGB").resize((self.image_size, self.image_size), Image.Resampling.BILINEAR)
        pixels = torch.from_numpy(np.asarray(square).copy()).permute(2, 0, 1)  # (3, size, size) uint8
        if self.crop:
            start = (self.image_size - self.crop) // 2
            pixels = pixels[:, start:start + self.crop, start:start + self.crop]
        return pixels

    def read_rows(self, index: Tensor | slice) -> Tensor:
        picked = self.paths[index] if isinstance(index, slice) else [self.paths[i] for i in index.tolist()]
        return torch.stack(list(_READERS.map(self._read, picked))).float().div_(255)


def _files(folder: Path):
    from torchvision.datasets import ImageFolder

    found = ImageFolder(str(folder), allow_empty=True)
    paths = np.asarray([path for path, _ in found.samples])
    labels = np.asarray([label for _, label in found.samples], dtype=np.int64)
    return paths, labels, found.classes


def load_imagenet(data_dir: Path, download: bool, val_size: int, train_subset: int | None,
                  options: dict) -> Splits:
    """The user's ImageFolder copy (licensed data: never downloaded); ``val`` is the test set."""
    folder = data_dir / "imagenet"
    if not all((folder / split).is_dir() and any((folder / split).iterdir()) for split in ("train", "val")):
        raise DatasetNotFound(
            f"dataset: imagenet not found: looked in {folder}/train and {folder}/val for class folders of images "
            f"(torchvision's ImageFolder layout). ImageNet is licensed and is not downloaded: put it there, or set "
            f"ACTSWEEP_DATA_DIR")
    paths, labels, classes = _files(folder / "train")
    test_paths, test_labels, test_classes = _files(folder / "val")
    if test_classes != classes:
        raise DatasetNotFound(f"dataset: imagenet: {folder}/val has other class folders than {folder}/train")
    train_x, train_y, val_x, val_y = hold_out(paths, labels, val_size, train_subset)
    size, crop = options.get("image_size", 256), options.get("crop", 224)
    return Splits("imagenet", str(folder), ImageFiles(train_x, size), train_y, ImageFiles(val_x, size, crop), val_y,
                  ImageFiles(test_paths, size, crop), test_labels, n_classes=len(classes))
