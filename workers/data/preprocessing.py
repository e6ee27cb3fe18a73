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
    """ZCA whitening: x ↦ (x − μ) · U diag(1/√(λ + ε)) Uᵀ, fitted on the training set.

    With fewer training examples n than inputs d (a quick run's 200 CIFAR images against 3,072
    inputs), the covariance has rank below n, and its eigenvectors with nonzero eigenvalues come
    from the n × n Gram matrix instead of the d × d covariance: the same matrix, every direction
    outside the data's span scaled by 1/√ε as the covariance's zero eigenvalues are, at a fraction
    of the cost (on 2 cores of an AMD EPYC: 0.7 s instead of 5.7 s for n = 800, d = 3,072)."""

    def __init__(self, eps: float = 1e-2):
        self.eps = eps

    def fit(self, x: np.ndarray) -> "ZCA":
        flat = x.reshape(len(x), int(np.prod(x.shape[1:]))).astype(np.float64)
        self.mean = flat.mean(axis=0)
        centered = flat - self.mean
        n, d = centered.shape
        if n >= d:
            covariance = centered.T @ centered / n
            eigenvalues, eigenvectors = np.linalg.eigh(covariance)
            self.matrix = (eigenvectors / np.sqrt(np.maximum(eigenvalues, 0) + self.eps)) @ eigenvectors.T
        else:
            self.matrix = _zca_from_gram(centered, self.eps)
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        flat = x.reshape(len(x), int(np.prod(x.shape[1:]))).astype(np.float64)
        return ((flat - self.mean) @ self.matrix).reshape(x.shape).astype(np.float32)


def _zca_from_gram(centered: np.ndarray, eps: float) -> np.ndarray:
    # C = centered (n × d): CᵀC/n and CCᵀ/n share their nonzero eigenvalues λ, and u = Cᵀv / √(nλ).
    # W = Σ u uᵀ / √(λ + ε) + (I − Σ u uᵀ) / √ε  (the directions with λ = 0 get 1/√ε)
    n, d = centered.shape
    eigenvalues, v = np.linalg.eigh(centered @ centered.T / n)
    # eigenvalues that are rounding noise (centering leaves rank n − 1) belong to the null space
    kept = eigenvalues > eigenvalues.max(initial=0.0) * n * np.finfo(np.float64).eps
    u = centered.T @ (v[:, kept] / np.sqrt(n * eigenvalues[kept]))
    weights = 1 / np.sqrt(eigenvalues[kept] + eps) - 1 / np.sqrt(eps)
    matrix = (u * weights) @ u.T
    matrix[np.diag_indices(d)] += 1 / np.sqrt(eps)
    return matrix
