"""Networks of the experiments. The spine has the fully connected classifier (GELU paper §3.1)."""
from __future__ import annotations

from torch import Tensor, nn

from workers.activations import make_activation
from workers.init import INITS


class MLP(nn.Module):
    """``depth`` hidden layers of ``width`` units, each Linear → activation → dropout, then a
    linear read-out. GELU paper §3.1: depth 8, width 128, dropout 0 or 0.5 on hidden layers."""

    def __init__(self, in_dim: int, n_classes: int, depth: int, width: int, activation: str,
                 dropout: float = 0.0, init: str = "unit_norm_rows"):
        super().__init__()
        layers: list[nn.Module] = []
        dims = [in_dim] + [width] * depth
        for fan_in, fan_out in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(fan_in, fan_out), make_activation(activation)]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
        layers.append(nn.Linear(dims[-1], n_classes))
        self.net = nn.Sequential(*layers)
        for module in self.net:
            if isinstance(module, nn.Linear):
                INITS[init](module)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


def build_model(model: dict, in_dim: int, n_classes: int, activation: str, dropout: float) -> nn.Module:
    """The network a spec's ``model`` block describes, for one grid point."""
    kind = model["kind"]
    if kind == "mlp":
        return MLP(in_dim, n_classes, model["depth"], model["width"], activation, dropout, model["init"])
    raise ValueError(f"model.kind: unknown {kind!r}; accepted: mlp")
