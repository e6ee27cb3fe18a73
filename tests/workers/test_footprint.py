"""The dense models' ceiling (workers.footprint.dense_ceiling) bounds the estimate on the meta
device from above, stays near it, and lets the quick demo's spec through without that estimate's
first run (which imports torch._dynamo)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from search_spaces import load_spec
from tests.conftest import REPO
from workers.footprint import GIB, dense_ceiling, estimate, unaffordable

DENSE = [  # (experiment, overrides): every dense path of the estimate, its dropout and optimisers
    ("mnist_classification", {}),
    ("mnist_classification", {"dropout": [0.0], "model.depth": 1, "model.width": 7, "batch_size": 1}),
    ("mnist_classification", {"dropout": [0.5], "model.depth": 3, "model.width": 2048, "batch_size": 512}),
    ("mnist_classification", {"optimizer": "sgd", "momentum": 0.9, "dataset": "cifar10"}),
    ("mnist_7layer", {}),
    ("mnist_autoencoder", {}),
    ("elu_mnist_autoencoder", {}),
    ("elu_mnist_learning", {"optimizer": "sgd", "momentum": 0.0}),
    ("timit", {}),
]


@pytest.mark.parametrize("experiment, overrides", DENSE, ids=[f"{e}-{i}" for i, (e, _) in enumerate(DENSE)])
def test_the_ceiling_is_above_the_estimate_and_near_it(experiment, overrides):
    spec = load_spec(experiment, overrides=overrides or None)
    ceiling, found = dense_ceiling(spec), estimate(spec)
    assert ceiling is not None and found is not None
    assert ceiling.parameters == found.parameters and ceiling.state_bytes == found.state_bytes
    assert ceiling.data_bytes == found.data_bytes
    assert found.activation_bytes <= ceiling.activation_bytes <= 4 * found.activation_bytes
    assert found.flops_per_epoch <= ceiling.flops_per_epoch <= 1.5 * found.flops_per_epoch


def test_a_model_that_is_not_dense_has_no_ceiling():
    assert dense_ceiling(load_spec("cifar10_shallow")) is None
    assert dense_ceiling(load_spec("twitter_pos")) is None  # (token inputs: an embedding first)


def test_a_spec_over_the_ceiling_is_decided_by_the_estimate():
    spec = load_spec("mnist_classification", quick=True)
    ceiling, found = dense_ceiling(spec), estimate(spec)
    between = (found.memory_bytes + ceiling.memory_bytes) / 2  # over the estimate, under the ceiling
    assert unaffordable(spec, between, float("inf")) is None
    fields, why = unaffordable(spec, found.memory_bytes - 1, float("inf"))
    assert fields == "model" and f"{found.activation_bytes / GIB:,.1f} GiB of activations" in why
    work = spec.trial_count * spec.epochs * found.flops_per_epoch
    assert unaffordable(spec, float("inf"), work * 1.001) is None  # the ceiling's work is more: the estimate's is not
    assert unaffordable(spec, float("inf"), work * 0.999)[0] == "epochs"


def test_the_demos_spec_is_let_through_without_the_estimate_on_the_meta_device():
    code = ("import sys; from search_spaces import load_spec; from workers.footprint import unaffordable; "
            "assert unaffordable(load_spec('mnist_classification', quick=True), 2 ** 40, 1e18) is None; "
            "print('torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
