"""Weight initialisations named by the specs."""
from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def unit_norm_rows_(layer: nn.Linear | nn.Conv2d) -> nn.Module:
    """GELU paper §3.1: each unit's incoming weight vector has L2 norm 1; biases 0. For a
    convolution, each filter (all its input channels and taps) has norm 1 (the earlier
    version's "unit-norm filters").

    Rows are drawn from a standard normal and divided by their norm, which makes each row a
    uniformly random direction on the unit sphere.
    """
    layer.weight.normal_()
    rows = layer.weight.view(layer.weight.shape[0], -1)
    rows.div_(rows.norm(dim=1, keepdim=True))
    if layer.bias is not None:
        layer.bias.zero_()
    return layer


@torch.no_grad()
def he_normal_(layer: nn.Linear | nn.Conv2d) -> nn.Module:
    """ELU paper §4.1: He et al. (2015) initialisation, N(0, 2/fan_in); biases 0."""
    nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
    if layer.bias is not None:
        layer.bias.zero_()
    return layer


INITS = {"unit_norm_rows": unit_norm_rows_, "he": he_normal_, "torch_default": lambda layer: layer}
