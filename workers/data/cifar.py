"""CIFAR-10 and CIFAR-100 from torchvision's python-pickle layout in the data directory
(``cifar-10-batches-py/data_batch_1..5, test_batch``; ``cifar-100-python/train, test``), or
torchvision's download where the internet is reachable."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from workers.data.preprocessing import ZCA, global_contrast_normalize
from workers.data.splits import DatasetNotFound, Splits, hold_out

LAYOUT = {
    "cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], b"labels", 10),
    "cifar100": ("cifar-100-python", ["train"], ["test"], b"fine_labels", 100),
}


def _read(folder: Path, files: list[str], label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for name in files:
        with open(folder / name, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        xs.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        ys.append(np.asarray(batch[label_key], dtype=np.int64))
    return np.concatenate(xs), np.concatenate(ys)


def _download(name: str, data_dir: Path) -> None:
    from torchvision import datasets

    cls = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
    cls(str(data_dir), train=True, download=True)


def load_cifar(name: str, data_dir: Path, download: bool, val_size: int, train_subset: int | None,
               options: dict) -> Splits:
    """Pixels scaled to [0, 1], then per ``options``: ``gcn`` (global contrast normalisation) and
    ``zca`` (whitening fitted on the training split only, never on validation or test)."""
    folder_name, train_files, test_files, label_key, n_classes = LAYOUT[name]
    folder = data_dir / folder_name
    reason = "download disabled (ACTSWEEP_DOWNLOAD=false)"
    if not all((folder / f).is_file() for f in train_files + test_files) and download:
        try:
            _download(name, data_dir)
        except Exception as exc:  # offline, or a broken archive: named in the instructions below
            reason = f"download failed ({type(exc).__name__}: {exc})".splitlines()[0][:300]
    missing = [f for f in train_files + test_files if not (folder / f).is_file()]
    if missing:
        raise DatasetNotFound(
            f"dataset: {name} not found: looked in {folder} for {', '.join(missing)} (torchvision's python "
            f"pickle layout); {reason}. Download and extract the CIFAR python version there, or set "
            f"ACTSWEEP_DATA_DIR")
    x, y = _read(folder, train_files, label_key)
    test_x, test_y = _read(folder, test_files, label_key)
    x, test_x = x.astype(np.float32) / 255.0, test_x.astype(np.float32) / 255.0
    train_x, train_y, val_x, val_y = hold_out(x, y, val_size, train_subset)
    if options.get("gcn"):
        train_x, val_x, test_x = (global_contrast_normalize(a) for a in (train_x, val_x, test_x))
    if options.get("zca"):
        zca = ZCA(options.get("zca_eps", 1e-2)).fit(train_x)
        train_x, val_x, test_x = (zca.transform(a) for a in (train_x, val_x, test_x))
    return Splits(name, str(folder), train_x, train_y, val_x, val_y, test_x, test_y, n_classes=n_classes)


def write_synthetic(data_dir: Path, name: str, train: int = 50_000, test: int = 10_000, seed: int = 0) -> Path:
    """CIFAR files in torchvision's python-pickle layout (:data:`LAYOUT`) with random pixels and
    labels: the real layout and sizes, made-up images (benchmarks where CIFAR is not installed:
    speed only, nothing learnable). Returns ``data_dir``."""
    folder_name, train_files, test_files, label_key, n_classes = LAYOUT[name]
    rng = np.random.default_rng(seed)
    folder = Path(data_dir) / folder_name
    folder.mkdir(parents=True, exist_ok=True)
    sizes = [train // len(train_files)] * len(train_files) + [test]
    for file, size in zip(train_files + test_files, sizes):
        batch = {b"data": rng.integers(0, 256, (size, 3072), dtype=np.uint8),
                 label_key: rng.integers(0, n_classes, size).tolist()}
        with open(folder / file, "wb") as f:
            pickle.dump(batch, f)
    return Path(data_dir)


def load_cifar10(data_dir: Path, download: bool, val_size: int, train_subset: int | None, options: dict) -> Splits:
    return load_cifar("cifar10", data_dir, download, val_size, train_subset, options)


def load_cifar100(data_dir: Path, download: bool, val_size: int, train_subset: int | None, options: dict) -> Splits:
    return load_cifar("cifar100", data_dir, download, val_size, train_subset, options)
