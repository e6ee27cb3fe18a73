"""digits: scikit-learn's 1,797 real 8×8 handwritten digits, always installed (smoke runs, tests)."""
from __future__ import annotations

import numpy as np

from workers.data.splits import SPLIT_SEED, Splits, hold_out


def load_digits(data_dir, download: bool, val_size: int, train_subset: int | None, options: dict,
                test_size: int = 360) -> Splits:
    """scikit-learn's 8×8 digits, pixels scaled to [0, 1]; a fixed test split of ``test_size``."""
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    x, y = (bunch.data / 16.0).astype(np.float32), bunch.target.astype(np.int64)
    order = np.random.default_rng(SPLIT_SEED + 1).permutation(len(y))
    test, rest = order[:test_size], order[test_size:]
    train_x, train_y, val_x, val_y = hold_out(x[rest], y[rest], val_size, train_subset)
    return Splits("digits", "sklearn.datasets.load_digits", train_x, train_y, val_x, val_y,
                  x[test], y[test], n_classes=10)
