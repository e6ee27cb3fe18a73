import numpy as np
import pytest

from workers.data.preprocessing import ZCA, global_contrast_normalize


def test_zca_whitened_training_data_has_identity_covariance():
    rng = np.random.default_rng(0)
    mixing = rng.normal(size=(48, 48))
    x = (rng.normal(size=(5000, 48)) @ mixing + 3.0).reshape(5000, 3, 4, 4).astype(np.float32)
    zca = ZCA(eps=1e-6).fit(x)
    white = zca.transform(x).reshape(5000, -1).astype(np.float64)
    covariance = np.cov(white, rowvar=False, bias=True)
    np.testing.assert_allclose(covariance, np.eye(48), atol=1e-3)
    np.testing.assert_allclose(white.mean(axis=0), 0, atol=1e-4)
    # ZCA is the symmetric whitening: the closest whitened data to the original (the matrix is symmetric)
    np.testing.assert_allclose(zca.matrix, zca.matrix.T, atol=1e-8)


def test_gcn_gives_each_example_zero_mean_and_fixed_scale():
    x = np.random.default_rng(1).uniform(size=(10, 3, 8, 8)).astype(np.float32)
    out = global_contrast_normalize(x, scale=55.0).reshape(10, -1)
    np.testing.assert_allclose(out.mean(axis=1), 0, atol=1e-4)
    np.testing.assert_allclose(np.sqrt((out ** 2).mean(axis=1)), 55.0, rtol=1e-4)


def _zca_by_covariance(x: np.ndarray, eps: float) -> np.ndarray:
    flat = x.reshape(len(x), -1).astype(np.float64)
    centered = flat - flat.mean(axis=0)
    eigenvalues, eigenvectors = np.linalg.eigh(centered.T @ centered / len(flat))
    return (eigenvectors / np.sqrt(np.maximum(eigenvalues, 0) + eps)) @ eigenvectors.T


@pytest.mark.parametrize("n, d, eps", [(40, 300, 1e-2), (199, 200, 1e-2), (30, 96, 1e-6)])
def test_fewer_examples_than_inputs_give_the_covariances_zca(n, d, eps):
    """The Gram-matrix route (n < d) is the covariance route's matrix, null space included, and
    transforms data outside the training data's span as that one does."""
    rng = np.random.default_rng(n)
    x = (rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + 5.0).astype(np.float32)
    zca = ZCA(eps=eps).fit(x)
    expected = _zca_by_covariance(x, eps)
    # (the covariance's zero eigenvalues come out of eigh as ±1e-13-ish rounding, which moves its own
    # 1/√(λ + ε) by λ/2ε: at ε = 1e-6 that is some 1e-8 of the matrix's largest entry)
    np.testing.assert_allclose(zca.matrix, expected, atol=1e-7 * np.abs(expected).max())
    held_out = rng.normal(size=(7, d)).astype(np.float32) * 10  # mostly outside the training data's span
    reference = (held_out.astype(np.float64) - x.astype(np.float64).mean(axis=0)) @ expected
    np.testing.assert_allclose(zca.transform(held_out), reference, rtol=1e-5, atol=1e-5 * np.abs(reference).max())
