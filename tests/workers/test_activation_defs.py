"""Researchers' activations: parametrised families, expressions, learnable parameters, plugins."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from scipy.stats import laplace, norm

from workers.activation_defs import ActivationError, check_expression, expand_entry, parse_name
from workers.activations import Activation, compile_expression, learned_parameters, probe

X = torch.linspace(-4, 4, 801, dtype=torch.float64)
x = X.numpy()


@pytest.mark.parametrize("name, closed_form", [
    ("gelu(mu=0.5, sigma=2)", lambda: x * norm.cdf(x, loc=0.5, scale=2)),
    ("elu(alpha=0.5)", lambda: np.where(x > 0, x, 0.5 * np.expm1(x))),
    ("lrelu(slope=0.3)", lambda: np.where(x > 0, x, 0.3 * x)),
    ("silu(beta=2)", lambda: x / (1 + np.exp(-2 * x))),
    ("lalu(mu=0.5, b=2)", lambda: x * laplace.cdf(x, loc=0.5, scale=2)),
    ("soi(sigma=0.5)", lambda: x * norm.cdf(x, scale=0.5)),  # its expectation (eval mode)
])
def test_each_family_with_parameters_matches_its_closed_form(name, closed_form):
    np.testing.assert_allclose(Activation(name).eval()(X).numpy(), closed_form(), rtol=1e-10, atol=1e-12)


def test_gelu_with_a_small_sigma_is_relu_within_1e_3():
    # the largest gap is about 0.17·sigma (at x ≈ −sigma)
    assert (Activation("gelu(sigma=0.005)")(X) - torch.relu(X)).abs().max().item() < 1e-3
    assert (Activation("gelu(sigma=0.5)")(X) - torch.relu(X)).abs().max().item() > 0.05


def test_canonical_names_drop_defaults_and_sort_parameters():
    assert parse_name("gelu(sigma=1.0, mu=0)").canonical == "gelu"
    assert parse_name("gelu( sigma = 0.50 )").canonical == "gelu(sigma=0.5)"
    assert parse_name("lalu(b=2, mu=0.5)").canonical == "lalu(b=2, mu=0.5)"
    assert parse_name("silu(learnable=beta)").canonical == "silu(learnable=beta)"
    assert parse_name("swish").learnable == ("beta",) and parse_name("prelu").per_unit


def test_a_parameter_list_is_a_grid_axis():
    expressions: dict = {}
    names = [d.canonical for entry in ["relu", {"name": "gelu", "sigma": [0.1, 0.5, 1.0]}]
             for d in expand_entry(entry, expressions)]
    assert names == ["relu", "gelu(sigma=0.1)", "gelu(sigma=0.5)", "gelu"]


@pytest.mark.parametrize("entry, named", [
    ("gelu(tau=1)", "has no parameter 'tau'.*mu, sigma"), ("gelu(sigma=0)", "must be > 0"),
    ("mish", "unknown 'mish'.*gelu_tanh"), ("gelu(sigma=inf)", "finite"),
    ({"name": "silu", "learnable": "gamma"}, "learnable: 'gamma'"),
    ({"expr": "x", "name": "relu"}, "not a built-in"),
])
def test_a_bad_entry_names_its_part(entry, named):
    with pytest.raises(ActivationError, match=named):
        expand_entry(entry, {})


def test_an_expression_is_parsed_into_its_normal_form_and_compiled():
    normal = check_expression("x*sigmoid( k*x )", {"k": 1.702})
    assert normal == "x * sigmoid(1.702 * x)"
    torch.testing.assert_close(compile_expression(normal)(X), X * torch.sigmoid(1.702 * X))
    mish = compile_expression(check_expression("x * tanh(softplus(x))"))
    torch.testing.assert_close(mish(X), X * torch.tanh(torch.nn.functional.softplus(X)))
    relu_like = compile_expression(check_expression("where(x > 0, x, 0.1 * x)"))
    torch.testing.assert_close(relu_like(X), torch.nn.functional.leaky_relu(X, 0.1))


def test_an_expressions_gradient_comes_from_autograd():
    x = X.clone().requires_grad_(True)
    compile_expression(check_expression("x * Phi(x)"))(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.as_tensor(norm.cdf(X.numpy()) + X.numpy() * norm.pdf(X.numpy())))


@pytest.mark.parametrize("text, named", [
    ("__import__('os')", "calls '__import__'"),
    ("__import__('os').system('true')", "Attribute"),
    ("x.__class__", "may not use Attribute"),
    ("(lambda y: y)(x)", "may not use Lambda|calls 'Lambda'"),
    ("x ** 1000", "exponent"),
    ("x ** x", "exponent"),
    ("foo(x)", "calls 'foo'"),
    ("x * y", "unknown name 'y'"),
    ("[x][0]", "may not use Subscript|may not use List"),
    ("'a' * 3", "constant 'a'"),
    ("x if x > 0 else 0", "IfExp"),
    ("+".join(["x"] * 10_000), "characters|nodes"),
    ("sigmoid(x, 2)", "takes 1"),
    ("x *", "not a formula"),
])
def test_malicious_or_broken_expressions_are_refused_by_name(text, named):
    with pytest.raises(ActivationError, match=named):
        check_expression(text)


def test_a_deep_tree_is_refused_before_it_is_walked():
    with pytest.raises(ActivationError, match="nodes"):
        check_expression("(" * 150 + "x" + "+1)" * 150)


def test_the_probe_refuses_non_finite_outputs_and_gradients():
    with pytest.raises(ActivationError, match="not finite"):
        probe(parse_name("e", {"e": check_expression("exp(x) ** 16")}))
    with pytest.raises(ActivationError, match="derivative"):
        probe(parse_name("s", {"s": check_expression("abs(x) ** 0.5")}))
    probe(parse_name("gelu(sigma=0.5)"))


def test_learnable_parameters_are_per_layer_or_per_unit_and_train():
    layer, per_unit = Activation("swish", units=5), Activation("prelu", units=5)
    assert layer.learned["beta"].shape == () and per_unit.learned["slope"].shape == (5,)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), layer, torch.nn.Linear(5, 5), per_unit)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(64, 3)).pow(2).sum().backward()
    optimizer.step()
    found = learned_parameters(model)
    assert set(found) == {"learned_beta_1", "learned_slope_2"} and found["learned_beta_1"] != 1.0


PLUGIN = """
import torch
def cube_root(x, k=1.0):
    return k * torch.sign(x) * (x.abs() + 1e-3) ** (1 / 3)
"""


def test_an_installed_plugin_is_listed_and_trains(tmp_path):
    """A package registering an activation under the ``actsweep.activations`` entry point group."""
    (tmp_path / "cube_plugin.py").write_text(PLUGIN)
    info = tmp_path / "cube_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cube-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[actsweep.activations]\ncube = cube_plugin:cube_root\n")
    code = textwrap.dedent("""
        import torch
        from workers.activation_defs import accepted_names, parse_name
        from workers.activations import Activation, probe
        assert "cube" in accepted_names(), accepted_names()
        probe(parse_name("cube(k=2)"))
        print(parse_name("cube(k=2)").canonical, Activation("cube(k=2)")(torch.tensor([8.0])).item())
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": f"{tmp_path}:{':'.join(sys.path)}", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    name, value = done.stdout.split()
    assert name == "cube(k=2)" and float(value) == pytest.approx(4.0, rel=1e-3)


def test_the_cache_key_covers_the_canonical_activation():
    from workers.trial import GridPoint, trial_key

    settings = {"epochs": 1, "expressions": {"mine": "x * sigmoid(x)"}}
    other = {"epochs": 1, "expressions": {"mine": "x * sigmoid(2 * x)"}}
    key = lambda name, s=settings: trial_key(s, GridPoint(name, 1e-3, 0.0, 0), {"dataset": "digits"})  # noqa: E731
    assert key("gelu") != key("gelu(sigma=0.5)") != key("gelu(sigma=0.25)")
    assert key("mine") != key("mine", other)  # same name, another expression
    assert key("gelu") == key("gelu", other)  # another activation's expression is not this trial's
    assert key("silu(beta=1.5)") != key("silu(beta=1.5, learnable=beta)")
