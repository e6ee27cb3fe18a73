"""Data of MNIST's shape (784 pixels in [0, 1), 10 classes) drawn at random: for benchmarks and
op counts where the real MNIST is not installed. Nothing learnable: speed only."""
from __future__ import annotations

import numpy as np

from workers.data.splits import Splits


def mnist_shaped(train: int = 55_000, val: int = 5_000, test: int = 10_000, seed: int = 0) -> Splits:
    """Uniform pixels and uniform labels in MNIST's shapes and dtypes (float32 images, int64 labels)."""
    rng = np.random.default_rng(seed)

    def part(n: int) -> tuple[np.ndarray, np.ndarray]:
        return rng.random((n, 784), dtype=np.float32), rng.integers(0, 10, n, dtype=np.int64)

    (tx, ty), (vx, vy), (sx, sy) = part(train), part(val), part(test)
    return Splits("mnist_shaped", "synthetic: uniform pixels and labels of MNIST's shape", tx, ty, vx, vy, sx, sy, 10)
