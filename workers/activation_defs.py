"""What an activation is, as data: a family and its parameters, an expression, or a plugin; torch-free.

A spec's activation axis holds entries like ``relu``, ``"gelu(sigma=0.5)"``,
``{name: gelu, sigma: [0.1, 0.5, 1.0]}`` (a parameter that is itself a grid axis),
``{name: silu, beta: 1.0, learnable: beta}`` or ``{expr: "x * sigmoid(1.702 * x)", name: gelu_sigmoid}``.
Each expands to :class:`ActivationDef` values whose :attr:`~ActivationDef.canonical` name is
what every table, legend, MLflow param, REST trial and cache key shows: the family, then its
parameters that differ from the defaults in sorted order, e.g. ``gelu(sigma=0.5)``; the paper's
``gelu`` stays ``gelu``. An expression's canonical name is its ``name`` (its normal form, the
``ast.unparse`` of the checked tree, travels with the spec under ``expressions``).

Expressions are parsed with :mod:`ast` and only a whitelist is accepted (see :func:`check_expression`);
workers.activations compiles the checked tree to torch operations. Nothing is ever ``eval``-ed.
"""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import entry_points
from itertools import product
from typing import Any

from workers.registry import did_you_mean


@dataclass(frozen=True)
class Family:
    """A built-in (or plugin) activation: its parameters' defaults, which of them train by
    default, and whether it is stochastic in training (SOI)."""

    params: dict[str, float] = field(default_factory=dict)
    learnable: tuple[str, ...] = ()
    per_unit: bool = False
    stochastic: bool = False
    doc: str = ""


# name → family; workers.activations.FUNCTIONS computes each (defaults = the papers' settings)
FAMILIES: dict[str, Family] = {
    "relu": Family(doc="max(0, x)"),
    "gelu": Family({"mu": 0.0, "sigma": 1.0}, doc="x·P(X ≤ x), X ~ N(mu, sigma²) (GELU paper §2); → relu as sigma → 0 (§5 of the final version)"),
    "gelu_tanh": Family(doc="0.5x(1 + tanh[√(2/π)(x + 0.044715x³)]), the GELU paper's approximation"),
    "elu": Family({"alpha": 1.0}, doc="x if x > 0 else alpha·(eˣ − 1) (Clevert et al.)"),
    "lrelu": Family({"slope": 0.1}, doc="x if x > 0 else slope·x (slope 0.1 as in the ELU paper)"),
    "prelu": Family({"slope": 0.25}, ("slope",), per_unit=True, doc="leaky ReLU whose slope trains, one per unit (He et al.)"),
    "silu": Family({"beta": 1.0}, doc="x·σ(beta·x) (Swish-β; beta 1 is the SiLU)"),
    "swish": Family({"beta": 1.0}, ("beta",), doc="x·σ(beta·x) with beta trained, one per layer (Ramachandran et al.)"),
    "soi": Family({"mu": 0.0, "sigma": 1.0}, stochastic=True,
                  doc="m·x, m ~ Bernoulli(Φ((x − mu)/sigma)) in training; its expectation at test (GELU paper §4)"),
    "lalu": Family({"mu": 0.0, "b": 1.0}, doc="x·P(L ≤ x), L ~ Laplace(mu, b) (GELU paper §2)"),
}
PLUGIN_GROUP = "actsweep.activations"  # entry points: name → a callable f(x, **params) (see load_plugin)

# -- expressions: the whitelist -----------------------------------------------------------------------
EXPRESSION_FUNCTIONS = {"sigmoid": 1, "tanh": 1, "erf": 1, "exp": 1, "log1p": 1, "softplus": 1, "abs": 1,
                        "relu": 1, "Phi": 1, "where": 3}  # name → number of arguments
EXPRESSION_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.USub, ast.UAdd,
                        ast.Gt, ast.GtE, ast.Lt, ast.LtE)
MAX_EXPRESSION_CHARS = 1_000
MAX_EXPRESSION_NODES = 200
MAX_EXPONENT = 16  # x ** c: |c| at most this, and c a number (no x ** x)
MAX_CONSTANT = 1e6
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


class ActivationError(ValueError):
    """An activation entry that cannot be used; the message names the offending part."""


@dataclass(frozen=True)
class ActivationDef:
    """One activation of a grid: a family (or plugin) with parameter values, or an expression."""

    family: str  # a FAMILIES name, a plugin's name, or "expr"
    params: tuple[tuple[str, float], ...] = ()  # every parameter, sorted by name
    learnable: tuple[str, ...] = ()
    per_unit: bool = False
    expr: str | None = None  # the normal form of an expression
    name: str | None = None  # an expression's name (its canonical name)

    @property
    def canonical(self) -> str:
        if self.expr is not None:
            return self.name or f"expr({self.expr})"
        family = _family(self.family)
        shown = [f"{k}={_number(v)}" for k, v in self.params if family is None or family.params.get(k) != v]
        if family is not None and tuple(sorted(self.learnable)) != tuple(sorted(family.learnable)):
            shown.append(f"learnable={'+'.join(self.learnable) or 'none'}")
        if family is not None and self.learnable and self.per_unit != family.per_unit:
            shown.append(f"per_unit={'true' if self.per_unit else 'false'}")
        return f"{self.family}({', '.join(shown)})" if shown else self.family

    @property
    def stochastic(self) -> bool:
        family = _family(self.family)
        return family is not None and family.stochastic

    def param_dict(self) -> dict[str, float]:
        return dict(self.params)

    def identity(self) -> dict[str, Any]:
        """What the trial cache key and experiment identity hold of it."""
        return {"family": self.family, "params": dict(self.params), "learnable": list(self.learnable),
                "per_unit": self.per_unit, "expr": self.expr}


def _number(value: float) -> str:
    return f"{value:g}"


def _family(name: str) -> Family | None:
    return FAMILIES.get(name) or plugin_families().get(name)


@lru_cache(maxsize=1)
def plugin_families() -> dict[str, Family]:
    """Activations registered by installed packages under the ``actsweep.activations`` entry point
    group. Their parameters are read when a plugin is loaded (workers.activations.load_plugin); a
    spec may give any parameter, and a wrong one fails the probe before the sweep starts."""
    return {ep.name: Family(doc=f"plugin {ep.value}") for ep in entry_points(group=PLUGIN_GROUP)
            if ep.name not in FAMILIES and NAME_PATTERN.fullmatch(ep.name)}


def accepted_names() -> list[str]:
    return [*FAMILIES, *plugin_families()]


# -- parsing entries ----------------------------------------------------------------------------------

_CALL = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?\s*", re.S)


def parse_name(text: str, expressions: dict[str, str] | None = None) -> ActivationDef:
    """``relu``, ``gelu(sigma=0.5)``, ``silu(beta=1, learnable=beta)`` or an expression's name."""
    if not isinstance(text, str) or len(text) > 300:
        raise ActivationError(f"activation: {str(text)[:60]!r} is not an activation name")
    match = _CALL.fullmatch(text)
    if match is None:
        raise ActivationError(f"activation: cannot read {text!r}; write a name, or name(param=value, ...)")
    name, arguments = match.group(1), match.group(2)
    if expressions and name in expressions and arguments is None:
        return ActivationDef("expr", expr=expressions[name], name=name)
    values: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in (arguments or "").split(","))):
        key, eq, value = part.partition("=")
        if not eq:
            raise ActivationError(f"activation: {text!r}: {part!r} is not param=value")
        values[key.strip()] = value.strip()
    return build_def(name, values, where=text)


def build_def(name: str, values: dict[str, Any], where: str = "") -> ActivationDef:
    """One family with scalar parameter values (and ``learnable``, ``per_unit``) checked."""
    family = _family(name)
    if family is None:
        raise ActivationError(f"activation: unknown {name!r}{did_you_mean(name, accepted_names())}; "
                              f"accepted: {', '.join(accepted_names())}, "
                              f"or an expression {{expr: ..., name: ...}}")
    values = dict(values)
    learnable = values.pop("learnable", None)
    per_unit = values.pop("per_unit", None)
    params = dict(family.params)
    for key, value in values.items():
        if family.params and key not in family.params or not NAME_PATTERN.fullmatch(str(key)):
            raise ActivationError(f"activation: {name} has no parameter {key!r}; "
                                  f"its parameters: {', '.join(family.params) or 'none'}")
        params[key] = _finite(value, f"{name}.{key}")
    if name in ("gelu", "soi") and params["sigma"] <= 0 or name == "lalu" and params["b"] <= 0:
        raise ActivationError(f"activation: {where or name}: the scale (sigma, b) must be > 0")
    learnable_names = _learnable(learnable, family, name)
    per = family.per_unit if per_unit is None else _boolean(per_unit, f"{name}.per_unit")
    return ActivationDef(name, tuple(sorted(params.items())), learnable_names, per and bool(learnable_names))


def _learnable(value, family: Family, name: str) -> tuple[str, ...]:
    if value is None:
        return family.learnable
    items = value if isinstance(value, (list, tuple)) else [v for v in str(value).replace("+", " ").split() if v != "none"]
    for item in items:
        if item not in family.params:
            raise ActivationError(f"activation: {name}.learnable: {item!r} is not one of its parameters "
                                  f"({', '.join(family.params) or 'none'})")
    return tuple(sorted(set(items)))


def _finite(value, where: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ActivationError(f"activation: {where} must be a number (got {value!r})") from None
    if not math.isfinite(number) or abs(number) > MAX_CONSTANT:
        raise ActivationError(f"activation: {where} must be a finite number of magnitude ≤ {MAX_CONSTANT:g} (got {value!r})")
    return number


def _boolean(value, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "1", "yes"):
        return True
    if str(value).lower() in ("false", "0", "no"):
        return False
    raise ActivationError(f"activation: {where} must be true or false (got {value!r})")


def expand_entry(entry: Any, expressions: dict[str, str]) -> list[ActivationDef]:
    """One entry of a spec's activation axis as the activations it stands for; an expression's
    normal form is added to ``expressions`` under its name."""
    if isinstance(entry, str):
        return [parse_name(entry, expressions)]
    if not isinstance(entry, dict):
        raise ActivationError(f"activation: {entry!r} is neither a name nor a mapping")
    entry = dict(entry)
    if "expr" in entry:
        name = entry.pop("name", None)
        params = entry.pop("params", {})
        text = entry.pop("expr")
        if entry:
            raise ActivationError(f"activation: an expression takes expr, name and params; not {', '.join(entry)}")
        if name is None or not NAME_PATTERN.fullmatch(str(name)) or _family(str(name)) is not None:
            raise ActivationError(f"activation: an expression needs a name of letters, digits and _ that is not "
                                  f"a built-in's (got {name!r})")
        normal = check_expression(text, params)
        if expressions.get(name, normal) != normal:
            raise ActivationError(f"activation: {name!r} names two different expressions")
        expressions[name] = normal
        return [ActivationDef("expr", expr=normal, name=name)]
    if "name" not in entry:
        raise ActivationError("activation: a mapping names its activation (name: gelu) or gives an expr")
    name = entry.pop("name")
    axes = {k: (v if isinstance(v, list) else [v]) for k, v in entry.items() if k not in ("learnable", "per_unit")}
    fixed = {k: v for k, v in entry.items() if k in ("learnable", "per_unit")}
    if any(len(v) == 0 for v in axes.values()):
        raise ActivationError(f"activation: {name}: an empty parameter list")
    return [build_def(str(name), {**dict(zip(axes, combo)), **fixed}) for combo in product(*axes.values())]


# -- expressions ---------------------------------------------------------------------------------------

def check_expression(text: Any, params: dict | None = None) -> str:
    """An expression's normal form, after checking it against the whitelist: arithmetic, numbers,
    comparisons (inside ``where``), ``x``, the declared ``params`` (name → value, substituted as
    numbers) and the functions of EXPRESSION_FUNCTIONS. Raises ActivationError naming the part."""
    if not isinstance(text, str) or not text.strip():
        raise ActivationError("activation: expr must be a non-empty string")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ActivationError(f"activation: expr is {len(text)} characters; at most {MAX_EXPRESSION_CHARS}")
    constants = {str(k): _finite(v, f"expr param {k}") for k, v in (params or {}).items()}
    for name in constants:
        if not NAME_PATTERN.fullmatch(name) or name == "x" or name in EXPRESSION_FUNCTIONS:
            raise ActivationError(f"activation: expr param {name!r} is not a usable name")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ActivationError(f"activation: expr is not a formula: {exc.msg} at column {exc.offset}") from None
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_EXPRESSION_NODES:
        raise ActivationError(f"activation: expr has {nodes} nodes; at most {MAX_EXPRESSION_NODES}")
    tree = _Checked(constants).visit(tree)
    return ast.unparse(tree)


class _Checked(ast.NodeTransformer):
    """Refuses every node outside the whitelist; substitutes declared parameters by their values."""

    def __init__(self, constants: dict[str, float]):
        self.constants = constants

    def generic_visit(self, node):
        if not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Load, *EXPRESSION_OPERATORS)):
            raise ActivationError(f"activation: expr may not use {type(node).__name__}"
                                  f"{_at(node)}; allowed: arithmetic, numbers, x, parameters and "
                                  f"{', '.join(EXPRESSION_FUNCTIONS)}")
        return super().generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ActivationError(f"activation: expr may not use the constant {node.value!r}{_at(node)}")
        _finite(node.value, "expr constant")
        return node

    def visit_Name(self, node):
        if node.id == "x":
            return node
        if node.id in self.constants:
            return ast.copy_location(ast.Constant(self.constants[node.id]), node)
        raise ActivationError(f"activation: expr uses the unknown name {node.id!r}{_at(node)}; "
                              f"names: x, {', '.join([*self.constants, *EXPRESSION_FUNCTIONS])}")

    def visit_Call(self, node):
        if isinstance(node.func, ast.Attribute):
            raise ActivationError(f"activation: expr may not use Attribute (attribute access){_at(node)}")
        if not isinstance(node.func, ast.Name) or node.func.id not in EXPRESSION_FUNCTIONS:
            what = node.func.id if isinstance(node.func, ast.Name) else type(node.func).__name__
            raise ActivationError(f"activation: expr calls {what!r}{_at(node)}; functions: {', '.join(EXPRESSION_FUNCTIONS)}")
        if node.keywords or len(node.args) != EXPRESSION_FUNCTIONS[node.func.id]:
            raise ActivationError(f"activation: expr: {node.func.id} takes {EXPRESSION_FUNCTIONS[node.func.id]} "
                                  f"positional argument(s){_at(node)}")
        node.args = [self.visit(a) for a in node.args]
        return node

    def visit_BinOp(self, node):
        node = self.generic_visit(node)
        if isinstance(node.op, ast.Pow):
            exponent = node.right
            if isinstance(exponent, ast.UnaryOp) and isinstance(exponent.operand, ast.Constant):
                exponent = exponent.operand
            if not isinstance(exponent, ast.Constant) or abs(exponent.value) > MAX_EXPONENT:
                raise ActivationError(f"activation: expr: an exponent must be a number of magnitude ≤ "
                                      f"{MAX_EXPONENT}{_at(node)}")
        return node

    def visit_Compare(self, node):
        if len(node.ops) != 1:
            raise ActivationError(f"activation: expr: one comparison at a time{_at(node)}")
        return self.generic_visit(node)


def _at(node) -> str:
    return f" (column {node.col_offset + 1})" if hasattr(node, "col_offset") else ""
