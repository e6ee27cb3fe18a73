"""TIMIT frame classification (GELU paper §3.4). TIMIT is licensed: the features come from the user.

Expected file: ``DATA_DIR/timit/timit_frames.npz`` with arrays ``x_train``, ``y_train``, ``x_val``,
``y_val``, ``x_test``, ``y_test``. Each x row is one frame in its context: 11 frames × 26 features
(shape (N, 11, 26) or (N, 286), float), the paper's input; each y is one of the 39 phone labels
(integers 0..38, after the usual folding of the 61 TIMIT phones).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from workers.data.splits import DatasetNotFound, Splits

FRAMES, FEATURES, PHONES = 11, 26, 39


def load_timit(data_dir: Path, download: bool, val_size: int, train_subset: int | None, options: dict) -> Splits:
    """The user's feature file (licensed data: never downloaded; its own validation split)."""
    path = data_dir / "timit" / "timit_frames.npz"
    if not path.is_file():
        raise DatasetNotFound(
            f"dataset: timit not found: looked for {path}. TIMIT is licensed and is not downloaded: write your "
            f"features there as an .npz with x_train/y_train/x_val/y_val/x_test/y_test, x of shape "
            f"(N, {FRAMES}, {FEATURES}) or (N, {FRAMES * FEATURES}), y in 0..{PHONES - 1} (see workers/timit.py)")
    arrays = np.load(path)
    parts = []
    for split in ("train", "val", "test"):
        x = arrays[f"x_{split}"].astype(np.float32).reshape(-1, FRAMES * FEATURES)
        y = arrays[f"y_{split}"].astype(np.int64)
        if len(x) != len(y) or (len(y) and not 0 <= y.min() <= y.max() < PHONES):
            raise DatasetNotFound(f"dataset: timit file {path}: {split} labels must be 0..{PHONES - 1}, one per frame")
        parts.append((x, y))
    (train_x, train_y), (val_x, val_y), (test_x, test_y) = parts
    if train_subset is not None:
        train_x, train_y = train_x[:train_subset], train_y[:train_subset]
    return Splits("timit", str(path), train_x, train_y, val_x, val_y, test_x, test_y, n_classes=PHONES)
