"""Fashion-MNIST (Xiao et al. 2017): MNIST's format and sizes (60k training images, 5k of them held
out for validation; 10k test), ten kinds of clothing. From the data directory in torchvision's
layout, else Debian's ``dataset-fashion-mnist`` package, else a download. Pixels k/255, as
torchvision reads MNIST."""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from workers.data.splits import DatasetNotFound, Splits, hold_out

DEBIAN = Path("/usr/share/datasets/fashion-mnist")  # apt-get install dataset-fashion-mnist
FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (MNIST's format), gzipped or not: big-endian dims after a 4-byte magic."""
    raw = (gzip.open if path.suffix == ".gz" else open)(path, "rb").read()
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _find(folder: Path, stem: str) -> Path | None:
    return next((p for p in (folder / stem, folder / f"{stem}.gz") if p.exists()), None)


def _from_folder(folder: Path):
    paths = [_find(folder, stem) for stem in FILES]
    if None in paths:
        return None
    images_train, labels_train, images_test, labels_test = (read_idx(p) for p in paths)
    return [(images_train.reshape(len(images_train), -1).astype(np.float32) / 255.0, labels_train.astype(np.int64)),
            (images_test.reshape(len(images_test), -1).astype(np.float32) / 255.0, labels_test.astype(np.int64))]


def load_fashion_mnist(data_dir: Path, download: bool, val_size: int, train_subset: int | None, options: dict) -> Splits:
    """Fashion-MNIST from DATA_DIR/FashionMNIST/raw, else /usr/share/datasets/fashion-mnist, else a download."""
    raw = Path(data_dir) / "FashionMNIST" / "raw"
    parts, source = None, None
    for folder in (raw, DEBIAN):
        if folder.is_dir() and (parts := _from_folder(folder)) is not None:
            source = str(folder)
            break
    reason = "download disabled (ACTSWEEP_DOWNLOAD=false)"
    if parts is None and download:
        try:
            from torchvision.datasets import FashionMNIST

            FashionMNIST(str(data_dir), train=True, download=True)
            FashionMNIST(str(data_dir), train=False, download=True)
            parts, source = _from_folder(raw), f"torchvision download to {raw}"
        except Exception as exc:  # offline: say how to provide the data instead
            reason = f"download failed ({type(exc).__name__})"
    if parts is None:
        raise DatasetNotFound(
            f"dataset: fashion_mnist not found: looked in {raw} and {DEBIAN}; {reason}. "
            f"Install Debian's dataset-fashion-mnist, or put the four idx files in {raw}")
    (x, y), (test_x, test_y) = parts
    train_x, train_y, val_x, val_y = hold_out(x, y, val_size, train_subset)
    return Splits("fashion_mnist", source, train_x, train_y, val_x, val_y, test_x, test_y, n_classes=10)
