"""Input preprocessing fitted on the training set only: global contrast normalisation and ZCA
whitening (GELU paper §3.5; ELU paper §4.3: "global contrast normalization and ZCA whitening")."""
from __future__ import annotations

import numpy as np


def global_contrast_normalize(x: np.ndarray, scale: float = 55.0, eps: float = 1e-8) -> np.ndarray:
    """Per example: subtract its mean, scale to a fixed L2 norm (``scale``, as in pylearn2)."""
    flat = x.reshape(len(x), int(np.prod(x.shape[1:]))).astype(np.float64)
    flat = flat - flat.mean(axis=1, keepdims=True)
    norms = np.sqrt((flat ** 2).sum(axis=1, keepdims=True) / flat.shape[1])
    return (scale * flat / np.maximum(norms, eps)).reshape(x.shape).astype(np.float32)


class ZCA:
    """ZCA whitening: x ↦ (x − μ) · U diag(1/√(λ + ε)) Uᵀ, fitted on the training set."""

    def __init__(self, eps: float = 1e-2):
        self.eps = eps

    def fit(self, x: np.ndarray) -> "ZCA":
        flat = x.reshape(len(x), int(np.prod(x.shape[1:]))).astype(np.float64)
        self.mean = flat.mean(axis=0)
        centered = flat - self.mean
        covariance = centered.T @ centered / len(flat)
        eigenvalues, eigenvectors = np.linalg.eigh(covariance)
        self.matrix = (eigenvectors / np.sqrt(np.maximum(eigenvalues, 0) + self.eps)) @ eigenvectors.T
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        flat = x.reshape(len(x), int(np.prod(x.shape[1:]))).astype(np.float64)
        return ((flat - self.mean) @ self.matrix).reshape(x.shape).astype(np.float32)
