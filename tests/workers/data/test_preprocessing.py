import numpy as np

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
