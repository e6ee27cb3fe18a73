"""The nonlinearities compared by the GELU and ELU papers.

Every activation is an :class:`Activation` module built from its name (workers.registry.ACTIVATIONS
says which function computes it), so a spec names it with one string. The maths follows the papers:

- GELU (Hendrycks & Gimpel §2): x·Φ(x), Φ the standard normal CDF; the general form
  x·P(X ≤ x), X ~ N(μ, σ²), tends to ReLU as σ → 0.
- gelu_tanh: the paper's approximation 0.5x(1 + tanh[√(2/π)(x + 0.044715x³)]), used in every
  experiment of the paper.
- SOI, the stochastic 0-I map (§4): in training the input is multiplied by m ~ Bernoulli(Φ(x));
  at test time it returns the expectation x·Φ(x), which is the GELU.
- lalu: the Laplace variant x·P(L ≤ x), L ~ Laplace(0, 1), suggested in §2.
- ELU (Clevert et al.) with α = 1, LReLU with slope 0.1 (as in the ELU paper), SiLU x·σ(x).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from workers.registry import ACTIVATIONS, STOCHASTIC_ACTIVATIONS


def normal_cdf(x: Tensor) -> Tensor:
    """Φ(x), the standard normal CDF."""
    return 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu(x: Tensor, mu: float = 0.0, sigma: float = 1.0) -> Tensor:
    """x·P(X ≤ x) with X ~ N(mu, sigma²); mu=0, sigma=1 is the GELU of the paper."""
    if mu == 0.0 and sigma == 1.0:
        return F.gelu(x)  # fused kernel, same value as x * normal_cdf(x)
    return x * normal_cdf((x - mu) / sigma)


def gelu_tanh(x: Tensor) -> Tensor:
    """The paper's tanh approximation of the GELU."""
    return F.gelu(x, approximate="tanh")


def elu(x: Tensor) -> Tensor:
    """ELU with α = 1 (Clevert et al.)."""
    return F.elu(x, alpha=1.0)


def lrelu(x: Tensor) -> Tensor:
    """Leaky ReLU with slope 0.1, as in the ELU paper."""
    return F.leaky_relu(x, negative_slope=0.1)


def soi_expectation(x: Tensor) -> Tensor:
    """The SOI map at test time: its expectation x·Φ(x), the (exact) GELU."""
    return gelu(x)


def lalu(x: Tensor) -> Tensor:
    """x·P(L ≤ x) with L ~ Laplace(0, 1)."""
    laplace_cdf = 0.5 + 0.5 * torch.sign(x) * (1.0 - torch.exp(-x.abs()))
    return x * laplace_cdf


def uniform(shape, device, generator: torch.Generator | None = None, out: Tensor | None = None) -> Tensor:
    """U[0, 1) noise: the one source of a trial's dropout and SOI masks (see dropout_noise)."""
    if out is not None:
        return torch.rand(shape, generator=generator, out=out)
    return torch.rand(shape, device=device, generator=generator)


def soi_map(x: Tensor, training: bool, generator: torch.Generator | None = None, u: Tensor | None = None) -> Tensor:
    """The stochastic 0-I map: m·x with m ~ Bernoulli(Φ(x)) in training, x·Φ(x) at test time.

    m = [u < Φ(x)] for u ~ U[0, 1) (drawn here, or given as ``u``). The mask is a sample, not a
    function of x, so the gradient in training flows through the identity branch where m = 1,
    as with dropout.
    """
    if not training:
        return gelu(x)
    with torch.no_grad():
        mask = (uniform(x.shape, x.device, generator) if u is None else u) < normal_cdf(x)
    return mask * x


def dropout_noise(shape, p: float, device, generator: torch.Generator | None = None) -> Tensor:
    """Inverted-dropout noise: 1/(1 − p) with probability 1 − p, else 0, as [u < 1 − p] for
    u ~ U[0, 1) from ``generator`` (the global one if None).

    Written out rather than left to ``F.dropout`` so that a trial's masks come from one explicit
    stream of uniforms on every device, which a fused pack member (workers.fused) draws alike
    (and uniforms are about 4× faster to draw on a CPU than ``bernoulli_``).
    """
    return torch.where(uniform(shape, device, generator) < 1.0 - p, 1.0 / (1.0 - p), 0.0)


class Dropout(nn.Dropout):
    """``nn.Dropout`` with its noise from :func:`dropout_noise`."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return x
        return x * dropout_noise(x.shape, self.p, x.device)


class Activation(nn.Module):
    """A named pointwise nonlinearity; ``soi`` is stochastic in train mode only."""

    def __init__(self, name: str):
        super().__init__()
        self.name, self.function = name, ACTIVATIONS.get(name)  # (ValueError naming the accepted names)

    def forward(self, x: Tensor) -> Tensor:
        if self.name in STOCHASTIC_ACTIVATIONS:
            return soi_map(x, self.training)
        return self.function(x)

    def extra_repr(self) -> str:
        return self.name
