import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import norm

from workers.activation_defs import accepted_names
from workers.activations import Activation, elu, gelu, gelu_tanh, lalu, soi_map

GRID = torch.linspace(-6, 6, 2001, dtype=torch.float64)


def test_gelu_is_x_times_normal_cdf():
    expected = GRID.numpy() * norm.cdf(GRID.numpy())
    np.testing.assert_allclose(gelu(GRID).numpy(), expected, rtol=1e-12, atol=1e-12)


def test_general_gelu_uses_mu_and_sigma():
    expected = GRID.numpy() * norm.cdf(GRID.numpy(), loc=0.5, scale=2.0)
    np.testing.assert_allclose(gelu(GRID, mu=0.5, sigma=2.0).numpy(), expected, rtol=1e-12, atol=1e-12)


def test_tanh_approximation_within_1e_3_on_minus6_to_6():
    assert (gelu_tanh(GRID) - gelu(GRID)).abs().max().item() < 1e-3


def test_gelu_tends_to_relu_as_sigma_shrinks():
    gaps = [(gelu(GRID, sigma=s) - torch.relu(GRID)).abs().max().item() for s in (1.0, 0.1, 0.01, 0.001)]
    assert all(a > b for a, b in zip(gaps, gaps[1:]))  # shrinks monotonically
    assert gaps[-1] < 2e-4  # the largest gap is about 0.17 sigma, at |x| ≈ sigma


def test_soi_monte_carlo_mean_in_train_mode_approaches_gelu():
    x = torch.linspace(-3, 3, 61, dtype=torch.float64)
    samples = 20_000
    generator = torch.Generator().manual_seed(0)
    draws = torch.stack([soi_map(x, training=True, generator=generator) for _ in range(samples)])
    standard_error = draws.std(dim=0) / samples ** 0.5
    assert ((draws.mean(dim=0) - gelu(x)).abs() <= 5 * standard_error + 1e-12).all()
    # each draw is either 0 or x: the map zeroes or passes the input, it does not scale it
    assert ((draws == 0) | (draws == x)).all()


def test_soi_in_eval_mode_is_deterministic_and_equals_gelu():
    module = Activation("soi").eval()
    x = torch.randn(1000, dtype=torch.float64)
    assert torch.equal(module(x), module(x))
    torch.testing.assert_close(module(x), gelu(x))
    assert not torch.equal(module.train()(x), module(x))  # train mode samples


def test_soi_gradient_flows_where_the_mask_is_one():
    x = torch.randn(500, requires_grad=True)
    out = soi_map(x, training=True, generator=torch.Generator().manual_seed(1))
    out.sum().backward()
    kept = out.detach() != 0
    assert torch.equal(x.grad, kept.float())


@pytest.mark.parametrize("name, x, expected", [
    ("relu", -2.0, 0.0), ("elu", -1.0, np.expm1(-1.0)), ("lrelu", -2.0, -0.2),
    ("silu", 1.0, 1 / (1 + np.exp(-1.0))), ("lalu", 1.0, 1.0 * (1 - 0.5 * np.exp(-1.0))),
])
def test_pointwise_values(name, x, expected):
    assert Activation(name)(torch.tensor([x], dtype=torch.float64)).item() == pytest.approx(expected)


def test_lalu_is_x_times_laplace_cdf():
    from scipy.stats import laplace

    np.testing.assert_allclose(lalu(GRID).numpy(), GRID.numpy() * laplace.cdf(GRID.numpy()), atol=1e-12)


def test_unknown_activation_names_the_accepted_ones():
    with pytest.raises(ValueError, match="activation: unknown 'mish'.*gelu_tanh"):
        Activation("mish")
    assert set(accepted_names()) >= {"gelu", "gelu_tanh", "relu", "elu", "silu", "lrelu", "soi", "swish", "prelu"}


def test_elu_is_atens_kernel_and_one_ulp_from_correct_rounding_at_most():
    x = torch.cat([torch.randn(200_000, generator=torch.Generator().manual_seed(0)) * 4,
                   torch.tensor([0.0, -0.0, 1e-30, -1e-30, -1e-8, -88.0, float("inf"), float("-inf")])])
    ours = elu(x)
    assert torch.equal(ours, F.elu(x))  # (a pack's grouped ELU runs the same kernel: tests/workers/test_fused.py)
    # the float64 expm1, rounded once: what a correctly rounded float32 ELU gives
    exact = torch.where(x.double() > 0, x.double(), torch.expm1(x.double())).float()
    ulp = torch.abs(torch.nextafter(exact, torch.full_like(exact, float("inf"))) - exact)
    finite = torch.isfinite(exact)
    assert ((ours - exact).abs() <= ulp)[finite].all() and torch.equal(ours[~finite], exact[~finite])
    # (misrounded on 0.03% of these inputs on ATen's AVX2 and AVX-512 paths, 3.3% on its scalar one,
    # ATEN_CPU_CAPABILITY=default)
    assert (ours != exact).float().mean().item() < 0.05
    assert torch.isnan(elu(torch.tensor([float("nan")]))).all()
    assert torch.equal(elu(x, alpha=0.5), F.elu(x, alpha=0.5))
    alpha = torch.tensor(0.5)  # a learnable alpha: the formula, as a tensor
    assert torch.allclose(elu(x, alpha=alpha), F.elu(x, alpha=0.5), rtol=1e-6, atol=1e-7)


def test_elu_gradient_is_torchs_and_bf16_stays_bf16():
    x = (torch.randn(1000, generator=torch.Generator().manual_seed(1)) * 3).requires_grad_()
    g = torch.randn(1000, generator=torch.Generator().manual_seed(2))
    (ours,) = torch.autograd.grad(elu(x), x, g)
    (torchs,) = torch.autograd.grad(F.elu(x), x, g)
    assert torch.equal(ours, torchs)
    low = x.detach().bfloat16()
    assert elu(low).dtype == torch.bfloat16
    torch.testing.assert_close(elu(low), F.elu(low), rtol=1e-2, atol=1e-2)
