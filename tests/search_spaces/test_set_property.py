"""Every ``--set`` field of the spec schema, with valid and invalid values: validation ends in a
spec or in one line naming what is wrong (exit 2), never in a traceback. In-process, against
validation only (search_spaces.load_spec, and the activations' probe that `actsweep run` does
before anything starts): nothing trains."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from search_spaces import SweepSpec, load_spec
from search_spaces.catalog import SpecError, parse_set_options
from workers.activation_defs import ActivationError
from workers.activations import probe


def _fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    found = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += _fields(annotation, f"{prefix}{name}.")
        found.append(f"{prefix}{name}")
    return found


FIELDS = _fields(SweepSpec)
TOKENS = ["0", "1", "-1", "3", "0.5", "1e-3", "1e9", "-0.1", "nan", "inf", "true", "false", "null", "~", "gelu", "relu",
          "soi", "mish", "adam", "sgd", "fused", "auto", "digits", "mnist", "[gelu,relu]", "[1, 2]", "[]", "{}",
          "{kind: cosine}", "{a", "[a, {b]", '"x', ": :", "a,b", "gelu(sigma=0.5)", "gelu(sigma=-1)", "x*sigmoid(x)",
          "0,0.5", "1e-3,1e-4", "", " ", "%", "&a", "*a", "!!python/object:os.system", "---", "?", "|", ">"]
VALUES = st.one_of(st.sampled_from(TOKENS), st.text(max_size=12),
                   st.lists(st.sampled_from(TOKENS), min_size=2, max_size=3).map(",".join))


def test_the_schema_has_fields_to_walk():
    assert {"epochs", "lr", "activation", "model.width", "execution.mode", "execution.gpus_per_trial"} <= set(FIELDS)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(FIELDS), value=VALUES)
def test_any_set_value_is_a_spec_or_one_line_naming_the_problem(field, value):
    try:
        spec = load_spec("mnist_classification", overrides=parse_set_options([f"{field}={value}"]))
        for name in spec.activation:
            probe(spec.activation_def(name))
    except (SpecError, ActivationError) as refused:
        message = str(refused)
        assert message and "\n" not in message, (field, value, message)
        return
    assert isinstance(spec, SweepSpec)


@pytest.mark.parametrize("option", ["epochs", "=3", "epochs=[1,", "model.width={a"])
def test_a_malformed_option_is_a_spec_error(option):
    with pytest.raises(SpecError):
        load_spec("mnist_classification", overrides=parse_set_options([option]))
