"""A floor under one trial's memory, known without torch: for the dense models (MLP, autoencoder),
the parameters of their Linear layers counted from the spec, each holding its weight, its gradient
and the optimiser's state in float32. Where that floor alone exceeds the largest node's memory, a
spec is refused at once, before torch is imported (seconds on a busy CPU); otherwise the full
estimate on the meta device (workers.footprint) decides. The floor never refuses what the full
estimate would accept: it leaves out activations, data and learnable activation parameters."""
from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 2 ** 30


@dataclass(frozen=True)
class DatasetShape:
    """A dataset as the estimates see it: one example's shape, classes, examples held in memory
    (all splits), examples evaluated each epoch (validation and test), and the input's dtype."""

    in_shape: tuple[int, ...]
    n_out: int
    resident: int  # examples held in memory (0: read from files a batch at a time)
    evaluated: int
    token_ids: bool = False
    vocab: int = 0


# Upper bounds of the real datasets (workers/data), so that an estimate errs towards refusing.
DATASET_SHAPES = {
    "mnist": DatasetShape((784,), 10, 70_000, 20_000),
    "fashion_mnist": DatasetShape((784,), 10, 70_000, 20_000),
    "digits": DatasetShape((64,), 10, 1_797, 1_400),
    "cifar10": DatasetShape((3, 32, 32), 10, 60_000, 20_000),
    "cifar100": DatasetShape((3, 32, 32), 100, 60_000, 20_000),
    "twitter_pos": DatasetShape((3,), 25, 27_000, 12_000, token_ids=True, vocab=30_000),
    "timit": DatasetShape((286,), 39, 1_500_000, 300_000),
    "imagenet": DatasetShape((3, 224, 224), 1000, 0, 100_000),
}


def dense_dims(spec) -> list[int] | None:
    """The widths from input to output of a spec's ``mlp`` or ``autoencoder`` (workers.models.MLP,
    Autoencoder) on its dataset's examples, one Linear layer between each two; None for other
    models and datasets."""
    shape = DATASET_SHAPES.get(spec.dataset)
    if shape is None:
        return None
    model, in_dim = spec.model.model_dump(), math.prod(shape.in_shape)
    if model["kind"] == "mlp":
        return [in_dim] + [model["width"]] * model["depth"] + [in_dim if spec.task == "reconstruct" else shape.n_out]
    if model["kind"] == "autoencoder":
        hidden = list(model["hidden"])
        return [in_dim, *hidden, *reversed(hidden[:-1]), in_dim]
    return None


def dense_parameters(dims: list[int]) -> int:
    """Weights and biases of the Linear layers between ``dims`` (:func:`dense_dims`)."""
    return sum(fan_in * fan_out + fan_out for fan_in, fan_out in zip(dims[:-1], dims[1:]))


def state_bytes(parameters: int, optimizer: str, momentum: float = 0.0) -> int:
    """A trained parameter's bytes: weight and gradient, and Adam's two moments or SGD's momentum."""
    states = 2 if optimizer == "adam" else (1 if momentum else 0)
    return parameters * 4 * (2 + states)


def memory_floor_refusal(spec, node_memory_bytes: float) -> tuple[str, str] | None:
    """(the fields to change, the reason) where one trial's parameters alone need more memory than
    the largest node has; None where they fit or the model is not dense (the full estimate decides)."""
    dims = dense_dims(spec)
    if dims is None:
        return None
    parameters = dense_parameters(dims)
    floor = state_bytes(parameters, spec.optimizer, spec.momentum)
    if floor <= node_memory_bytes:
        return None
    return ("model", f"model.width, model.depth (or model.hidden), batch_size: one trial needs at least "
                     f"{floor / GIB:,.1f} GiB: {parameters:,} parameters with their gradients and optimiser state, "
                     f"before any activation or data; the largest node has {node_memory_bytes / GIB:,.1f} GiB")
