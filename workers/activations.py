"""The nonlinearities compared by the GELU and ELU papers, and a researcher's own.

An :class:`Activation` module is built from an :class:`~workers.activation_defs.ActivationDef` (a
family with parameter values, an expression, or a plugin); a spec names it with one canonical
string. The maths follows the papers:

- GELU (Hendrycks & Gimpel §2): x·Φ(x), Φ the standard normal CDF; the general form
  x·P(X ≤ x), X ~ N(μ, σ²), tends to ReLU as σ → 0 (§5; ``gelu(sigma=...)``).
- gelu_tanh: the paper's approximation 0.5x(1 + tanh[√(2/π)(x + 0.044715x³)]), used in every
  experiment of the paper.
- SOI, the stochastic 0-I map (§4): in training the input is multiplied by m ~ Bernoulli(Φ(x));
  at test time it returns the expectation x·Φ(x), which is the GELU.
- lalu: the Laplace variant x·P(L ≤ x), L ~ Laplace(μ, b), suggested in §2.
- ELU (Clevert et al.) with α = 1, LReLU with slope 0.1 (as in the ELU paper), SiLU x·σ(βx) (the GELU
  paper §5: the SiLU does worse than the GELU, usually better than ReLU and ELU).

A parameter declared learnable is an ``nn.Parameter`` of its layer (one per unit where asked),
initialised at its value; the family's function takes it as a tensor.
"""
from __future__ import annotations

import ast
import math
from importlib.metadata import entry_points
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from workers.activation_defs import PLUGIN_GROUP, ActivationDef, ActivationError, parse_name
from workers.masks import MaskClock


def normal_cdf(x: Tensor) -> Tensor:
    """Φ(x), the standard normal CDF."""
    return 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _is(value, default: float) -> bool:
    return not isinstance(value, Tensor) and value == default


def gelu(x: Tensor, mu=0.0, sigma=1.0) -> Tensor:
    """x·P(X ≤ x) with X ~ N(mu, sigma²); mu=0, sigma=1 is the GELU of the paper."""
    if _is(mu, 0.0) and _is(sigma, 1.0):
        return F.gelu(x)  # fused kernel, same value as x * normal_cdf(x)
    return x * normal_cdf((x - mu) / sigma)


def gelu_tanh(x: Tensor) -> Tensor:
    """The paper's tanh approximation of the GELU."""
    return F.gelu(x, approximate="tanh")


def elu(x: Tensor, alpha=1.0) -> Tensor:
    """ELU (Clevert et al.); α = 1 in the paper. ATen's kernel on every device: on the CPU its float32
    expm1 is vectorised, 3-4× faster than a float64 expm1 rounded back (docs/speed-cpu.md), and at most
    one ulp from the correctly rounded value (tests/workers/test_activations.py)."""
    if not isinstance(alpha, Tensor):
        return F.elu(x, alpha=alpha)
    return torch.where(x > 0, x, alpha * torch.expm1(x))


def lrelu(x: Tensor, slope=0.1) -> Tensor:
    """Leaky ReLU; slope 0.1 as in the ELU paper (PReLU: the slope trains)."""
    if not isinstance(slope, Tensor):
        return F.leaky_relu(x, negative_slope=slope)
    return torch.where(x > 0, x, slope * x)


def silu(x: Tensor, beta=1.0) -> Tensor:
    """x·σ(βx): Swish-β, the SiLU at β = 1."""
    if _is(beta, 1.0):
        return F.silu(x)
    return x * torch.sigmoid(beta * x)


def soi_expectation(x: Tensor, mu=0.0, sigma=1.0) -> Tensor:
    """The SOI map at test time: its expectation x·Φ((x − μ)/σ), the (exact) GELU."""
    return gelu(x, mu, sigma)


def lalu(x: Tensor, mu=0.0, b=1.0) -> Tensor:
    """x·P(L ≤ x) with L ~ Laplace(mu, b)."""
    z = (x - mu) / b if not (_is(mu, 0.0) and _is(b, 1.0)) else x
    laplace_cdf = 0.5 + 0.5 * torch.sign(z) * (1.0 - torch.exp(-z.abs()))
    return x * laplace_cdf


# family → f(x, **params) (workers.activation_defs.FAMILIES names them and their defaults)
FUNCTIONS: dict[str, Callable[..., Tensor]] = {
    "relu": F.relu, "gelu": gelu, "gelu_tanh": gelu_tanh, "elu": elu, "lrelu": lrelu, "prelu": lrelu,
    "silu": silu, "swish": silu, "soi": soi_expectation, "lalu": lalu,
}


# -- expressions: the checked tree (workers.activation_defs.check_expression) as torch operations ---

_EXPRESSION_TORCH: dict[str, Callable[..., Tensor]] = {
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "erf": torch.erf, "exp": torch.exp, "log1p": torch.log1p,
    "softplus": F.softplus, "abs": torch.abs, "relu": F.relu, "Phi": normal_cdf, "where": torch.where,
}
_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a / b, ast.Pow: lambda a, b: a ** b}
_COMPARE = {ast.Gt: torch.gt, ast.GtE: torch.ge, ast.Lt: torch.lt, ast.LtE: torch.le}


def compile_expression(normal_form: str) -> Callable[[Tensor], Tensor]:
    """f(x) from an expression already checked against the whitelist; autograd gives f′."""
    return _compile(ast.parse(normal_form, mode="eval").body)


def _compile(node) -> Callable[[Tensor], Tensor]:
    if isinstance(node, ast.Name):  # only x survives the check (parameters became numbers)
        return lambda x: x
    if isinstance(node, ast.Constant):
        value = float(node.value)
        return lambda x: value
    if isinstance(node, ast.UnaryOp):
        operand = _compile(node.operand)
        return (lambda x: -operand(x)) if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp):
        left, right, op = _compile(node.left), _compile(node.right), _BINARY[type(node.op)]
        return lambda x: op(left(x), right(x))
    if isinstance(node, ast.Compare):
        left, right, op = _compile(node.left), _compile(node.comparators[0]), _COMPARE[type(node.ops[0])]
        return lambda x: op(torch.as_tensor(left(x)), right(x))
    if isinstance(node, ast.Call):
        function, arguments = _EXPRESSION_TORCH[node.func.id], [_compile(a) for a in node.args]
        if node.func.id == "where":
            return lambda x: torch.where(*(torch.as_tensor(a(x), dtype=x.dtype) if i else a(x)
                                           for i, a in enumerate(arguments)))
        return lambda x: function(torch.as_tensor(arguments[0](x), dtype=x.dtype))
    raise ActivationError(f"activation: expr: {type(node).__name__} is not allowed")  # (the check refuses it first)


# -- plugins ----------------------------------------------------------------------------------------

def load_plugin(name: str) -> Callable[..., Tensor]:
    """The function an installed package registered as ``name`` (entry point group
    ``actsweep.activations``): f(x, **params), params as its keyword arguments."""
    for ep in entry_points(group=PLUGIN_GROUP):
        if ep.name == name:
            function = ep.load()
            if not callable(function):
                raise ActivationError(f"activation: plugin {name!r} ({ep.value}) is not callable")
            return function
    raise ActivationError(f"activation: no plugin {name!r} is installed")


def function_of(definition: ActivationDef) -> Callable[..., Tensor]:
    """f(x, **params) of a definition (expressions take x only)."""
    if definition.expr is not None:
        return compile_expression(definition.expr)
    return FUNCTIONS.get(definition.family) or load_plugin(definition.family)


def uniform(shape, device, generator: torch.Generator | None = None, out: Tensor | None = None) -> Tensor:
    """U[0, 1) noise from a torch generator: dropout and SOI outside the training loop, which
    draws from workers.masks instead."""
    if out is not None:
        return torch.rand(shape, generator=generator, out=out)
    return torch.rand(shape, device=device, generator=generator)


def soi_map(x: Tensor, training: bool, generator: torch.Generator | None = None, u: Tensor | None = None,
            mu: float = 0.0, sigma: float = 1.0) -> Tensor:
    """The stochastic 0-I map: m·x with m ~ Bernoulli(Φ((x − μ)/σ)) in training, its expectation
    x·Φ((x − μ)/σ) at test time (μ = 0, σ = 1 in the paper).

    m = [u < Φ(x)] for u ~ U[0, 1) (drawn here, or given as ``u``). The mask is a sample, not a
    function of x, so the gradient in training flows through the identity branch where m = 1,
    as with dropout.
    """
    if not training:
        return gelu(x, mu, sigma)
    with torch.no_grad():
        z = x if mu == 0.0 and sigma == 1.0 else (x - mu) / sigma
        mask = (uniform(x.shape, x.device, generator) if u is None else u) < normal_cdf(z)
    return mask * x


def dropout_noise(shape, p: float, device, generator: torch.Generator | None = None) -> Tensor:
    """Inverted-dropout noise: 1/(1 − p) with probability 1 − p, else 0, as [u < 1 − p] for
    u ~ U[0, 1) from ``generator`` (the global one if None).

    Written out rather than left to ``F.dropout`` so that a trial's masks come from one explicit
    source of uniforms on every device: in training, the counter-based generator of
    workers.masks, which a fused pack member (workers.fused) draws alike.
    """
    return torch.where(uniform(shape, device, generator) < 1.0 - p, 1.0 / (1.0 - p), 0.0)


class Dropout(nn.Dropout):
    """``nn.Dropout`` with its noise from :func:`dropout_noise`: in a network built by
    workers.models, from its mask clock at its site (workers.masks), else from the global generator."""

    mask_clock: MaskClock | None = None
    mask_site = 1

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return x
        keep = self.mask_clock.keep(self.mask_site, x.shape, x.device, self.p) if self.mask_clock is not None else None
        if keep is None:
            return x * dropout_noise(x.shape, self.p, x.device)
        return x * torch.where(keep, 1.0 / (1.0 - self.p), 0.0)


class Activation(nn.Module):
    """One layer's nonlinearity: a definition's function with its fixed parameters and its
    learnable ones (``nn.Parameter``, of shape (units,) where per unit, broadcast over the last
    dimension, or over the channel dimension of a conv's (N, C, H, W) output). ``soi`` is
    stochastic in train mode only."""

    def __init__(self, definition: ActivationDef | str, units: int | None = None):
        super().__init__()
        self.definition = parse_name(definition) if isinstance(definition, str) else definition
        self.name = self.definition.canonical
        self.function = function_of(self.definition)
        self.fixed = {k: v for k, v in self.definition.params if k not in self.definition.learnable}
        self.learned = nn.ParameterDict()
        for key in self.definition.learnable:
            if self.definition.per_unit and units is None:
                raise ActivationError(f"activation: {self.name}: a per-unit parameter needs a layer with a width")
            shape = (units,) if self.definition.per_unit else ()
            self.learned[key] = nn.Parameter(torch.full(shape, self.definition.param_dict()[key]))

    def parameters_for(self, x: Tensor) -> dict:
        """The function's keyword arguments for input ``x``: fixed numbers and learned tensors."""
        found = dict(self.fixed)
        for key, value in self.learned.items():
            found[key] = value.view(-1, 1, 1) if value.dim() and x.dim() == 4 else value
        return found

    mask_clock: MaskClock | None = None  # (SOI's masks: workers.masks, set by workers.models)
    mask_site = 0

    def forward(self, x: Tensor) -> Tensor:
        if self.definition.stochastic:
            u = (self.mask_clock.draw(self.mask_site, x.shape, x.device)
                 if self.training and self.mask_clock is not None else None)
            return soi_map(x, self.training, u=u, mu=self.fixed.get("mu", 0.0), sigma=self.fixed.get("sigma", 1.0))
        return self.function(x, **self.parameters_for(x))

    def extra_repr(self) -> str:
        return self.name


def learned_parameters(model: nn.Module) -> dict[str, float]:
    """Each activation layer's learned parameters (``learned_<param>_<layer>``, layers from 1; the
    mean over units where per unit), for MLflow and the report."""
    layers = [m for m in model.modules() if isinstance(m, Activation)]
    return {f"learned_{key}_{i}": value.detach().float().mean().item()
            for i, layer in enumerate(layers, start=1) for key, value in layer.learned.items()}


def probe(definition: ActivationDef | str) -> None:
    """Raises ActivationError unless f and f′ are finite on a probe tensor spanning [−10, 10]
    (checked before a sweep starts, so a bad expression fails at once, not in every trial)."""
    layer = Activation(definition, units=4)
    points = torch.cat([torch.linspace(-10, 10, 400), torch.tensor([0.0, 1e-6, -1e-6])])  # (0 exactly: kinks)
    x = points.repeat(4, 1).t().contiguous().requires_grad_(True)
    try:
        layer.eval()
        y = layer(x)
        if not isinstance(y, Tensor) or y.shape != x.shape:
            raise ActivationError(f"activation: {layer.name}: gives {getattr(y, 'shape', type(y).__name__)} "
                                  f"for an input of shape {tuple(x.shape)}; it must act pointwise")
        (grad,) = torch.autograd.grad(y.sum(), x, allow_unused=True)
    except ActivationError:
        raise
    except Exception as exc:  # a plugin's or an expression's own failure, named
        raise ActivationError(f"activation: {layer.name}: fails on a probe tensor: {type(exc).__name__}: {exc}") from None
    if not torch.isfinite(y).all():
        raise ActivationError(f"activation: {layer.name}: not finite on [-10, 10]")
    if grad is None or not torch.isfinite(grad).all():
        raise ActivationError(f"activation: {layer.name}: its derivative is not finite (or not defined) on [-10, 10]")
