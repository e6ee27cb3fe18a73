"""Networks of the experiments, one builder per ``model.kind`` of a spec.

Every network takes the grid point's ``activation`` (one ActivationDef, or its name, for all its
nonlinearities; a per-unit learnable parameter gets one value per unit or channel) and
``dropout`` (p, the probability of dropping; what it applies to is said per network).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from workers.activations import Activation, Dropout
from workers.init import INITS
from workers.masks import DROPOUT, SOI, MaskClock, keep_threshold, kept, site, step_keys
from workers.registry import MODELS


def _init(module: nn.Module, init: str) -> None:
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            INITS[init](layer)


class MLP(nn.Module):
    """``depth`` hidden layers of ``width`` units, each Linear → activation → dropout, then a
    linear read-out. GELU paper §3.1: depth 8, width 128, dropout 0 or 0.5 on hidden layers;
    §3.4 (TIMIT): 5 × 2048; ELU paper §4.1: 5 × 256."""

    def __init__(self, in_dim: int, n_classes: int, depth: int, width: int, activation,
                 dropout: float = 0.0, init: str = "unit_norm_rows"):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        dims = [in_dim] + [width] * depth
        for fan_in, fan_out in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(fan_in, fan_out), Activation(activation, fan_out)]
            if dropout > 0:
                layers.append(Dropout(dropout))
        layers.append(nn.Linear(dims[-1], n_classes))
        self.net = nn.Sequential(*layers)
        _init(self.net, init)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class Autoencoder(nn.Module):
    """Encoder ``hidden`` (e.g. 1000-500-250-30) and its mirror as decoder; the activation after
    every hidden layer but the code layer, which is linear; a linear output, trained with MSE
    (GELU paper §3.2, ELU paper §4.1.2). Neither paper says whether the 30-unit code layer
    has a nonlinearity; a linear code layer is Hinton & Salakhutdinov's (2006) autoencoder, the one
    both papers' architecture follows."""

    def __init__(self, in_dim: int, hidden: list[int], activation, dropout: float = 0.0,
                 init: str = "torch_default"):
        super().__init__()
        dims = [in_dim, *hidden, *reversed(hidden[:-1]), in_dim]
        code = len(hidden)  # index in dims of the code layer
        layers: list[nn.Module] = [nn.Flatten()]
        for i, (fan_in, fan_out) in enumerate(zip(dims[:-1], dims[1:]), start=1):
            layers.append(nn.Linear(fan_in, fan_out))
            if i not in (code, len(dims) - 1):
                layers.append(Activation(activation, fan_out))
                if dropout > 0:
                    layers.append(Dropout(dropout))
        self.net = nn.Sequential(*layers)
        _init(self.net, init)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class WindowTagger(nn.Module):
    """Twitter POS tagging (GELU paper §3.3): the embeddings of a word and its left and right
    neighbours, concatenated, then ``depth`` × ``width`` hidden layers with dropout, then tags."""

    def __init__(self, vocab_size: int, window: int, n_tags: int, embedding_dim: int, depth: int, width: int,
                 activation, dropout: float, init: str = "torch_default"):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.mlp = MLP(window * embedding_dim, n_tags, depth, width, activation, dropout, init)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.mlp(self.embedding(tokens).flatten(1))


def _conv(c_in: int, c_out: int, kernel: int, activation, batch_norm: bool, padding: str | int = "same"):
    layers: list[nn.Module] = [nn.Conv2d(c_in, c_out, kernel, padding=padding, bias=not batch_norm)]
    if batch_norm:
        layers.append(nn.BatchNorm2d(c_out))
    layers.append(Activation(activation, c_out))
    return layers


class GaussianNoise(nn.Module):
    """Adds N(0, std²) to the input in training only (GELU paper §3.5: σ = 0.15)."""

    def __init__(self, std: float):
        super().__init__()
        self.std = std

    def forward(self, x: Tensor) -> Tensor:
        return x + self.std * torch.randn_like(x) if self.training and self.std > 0 else x


class ShallowCIFARNet(nn.Module):
    """GELU paper §3.5, Table 1: 3×(3×3 conv 96), max pool, dropout, 3×(3×3 conv 192), max pool,
    dropout, 3×3 conv 192 (valid), 2×(1×1 conv 192), global average pool, linear read-out; batch
    norm after every conv; Gaussian input noise. ``dropout`` is the rate after each pool (0.5)."""

    def __init__(self, in_channels: int, n_classes: int, activation, dropout: float, width: int = 96,
                 input_noise: float = 0.15, init: str = "torch_default"):
        super().__init__()
        w1, w2 = width, 2 * width
        layers: list[nn.Module] = [GaussianNoise(input_noise)]
        for c_in in (in_channels, w1, w1):
            layers += _conv(c_in, w1, 3, activation, True)
        layers += [nn.MaxPool2d(2), nn.Dropout(dropout)]
        for c_in in (w1, w2, w2):
            layers += _conv(c_in, w2, 3, activation, True)
        layers += [nn.MaxPool2d(2), nn.Dropout(dropout)]
        layers += _conv(w2, w2, 3, activation, True, padding=0)
        layers += _conv(w2, w2, 1, activation, True) + _conv(w2, w2, 1, activation, True)
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w2, n_classes)]
        self.net = nn.Sequential(*layers)
        _init(self.net, init)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class SmallCIFARNet(nn.Module):
    """The GELU paper's earlier version: stacks (2 × 3×3 conv 32) and (2 × 3×3 conv 64), max pool
    after each, then 512 and 256 fully connected. ``dropout`` p gives the paper's (0.25, 0.25, 0.5)
    at p = 0.5: p/2 after each stack, p before the read-out; p = 0 is the no-dropout net."""

    def __init__(self, in_channels: int, n_classes: int, activation, dropout: float, image_size: int = 32,
                 init: str = "unit_norm_rows"):
        super().__init__()
        layers: list[nn.Module] = []
        c_in = in_channels
        for width in (32, 64):
            layers += _conv(c_in, width, 3, activation, False) + _conv(width, width, 3, activation, False)
            layers += [nn.MaxPool2d(2), nn.Dropout(dropout / 2)]
            c_in = width
        flat = 64 * (image_size // 4) ** 2
        layers += [nn.Flatten(), nn.Linear(flat, 512), Activation(activation, 512),
                   nn.Linear(512, 256), Activation(activation, 256), nn.Dropout(dropout), nn.Linear(256, n_classes)]
        self.net = nn.Sequential(*layers)
        _init(self.net, init)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class StackedConvNet(nn.Module):
    """The ELU paper's convnets (§4.2, §4.3, §4.3.1), from the spec's ``model.stacks``: stacks of
    convolution groups ``[layers, channels, receptive field]``, each layer followed by the
    activation; a 2×2 max pool after each stack; dropout after each stack's last layer at the
    stack's rate (``stack_dropout``; :meth:`set_dropout` moves it to every layer of the stack for
    fine-tuning). The grid's ``dropout`` is unused: the paper fixes it per stack.

    Without ``fc`` (CIFAR) the last stack is the read-out: its width becomes the number of
    classes, it has no activation, and a global average pool gives the logits. With ``fc``
    (ImageNet) a spatial pyramid pooling of ``spp_levels`` follows the convolutions, then fully
    connected layers (activation, dropout ``fc_dropout``) and a linear read-out."""

    def __init__(self, in_channels: int, n_classes: int, activation, stacks: list, stack_dropout: list[float],
                 width_scale: float = 1.0, init: str = "he", first_stride: int = 1, spp_levels: list[int] = (),
                 fc: list[int] = (), fc_dropout: float = 0.0):
        super().__init__()
        self.stack_dropout = list(stack_dropout)
        self.dropouts: list[list[Dropout]] = []  # per stack, one per layer
        layers: list[nn.Module] = []
        c_in, first = in_channels, True
        for s, stack in enumerate(stacks):
            readout = not fc and s == len(stacks) - 1
            self.dropouts.append([])
            for count, channels, kernel in stack:
                for _ in range(count):
                    c_out = n_classes if readout else max(1, round(channels * width_scale))
                    stride = first_stride if first else 1
                    layers.append(nn.Conv2d(c_in, c_out, kernel, stride=stride,
                                            padding="same" if stride == 1 else kernel // 2))
                    if not readout:
                        layers.append(Activation(activation, c_out))
                        self.dropouts[-1].append(Dropout(0.0))
                        layers.append(self.dropouts[-1][-1])
                    c_in, first = c_out, False
            layers.append(nn.MaxPool2d(2, ceil_mode=True))
        if fc:
            layers.append(SpatialPyramidPool(spp_levels or [1]))
            widths = [c_in * sum(level * level for level in (spp_levels or [1])), *fc]
            for fan_in, fan_out in zip(widths[:-1], widths[1:]):
                layers += [nn.Linear(fan_in, fan_out), Activation(activation, fan_out), Dropout(fc_dropout)]
            layers.append(nn.Linear(widths[-1], n_classes))
        else:
            layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.net = nn.Sequential(*layers)
        self.set_dropout("last_layer", 1.0)
        _init(self.net, init)

    def set_dropout(self, on: str, scale: float = 1.0) -> None:
        """Each stack's rate (× ``scale``) after its last layer (``last_layer``) or after every
        layer of it (``every_layer``): ELU paper §4.3's fine-tuning."""
        for rate, modules in zip(self.stack_dropout, self.dropouts):
            for i, module in enumerate(modules):
                active = on == "every_layer" or i == len(modules) - 1
                module.p = min(rate * scale, 0.95) if active else 0.0

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class SpatialPyramidPool(nn.Module):
    """He et al. (2014): max pooling into level × level bins for each level, concatenated; the
    output size does not depend on the image size (ELU §4.3.1: 3 levels before the first FC)."""

    def __init__(self, levels: list[int]):
        super().__init__()
        self.levels = list(levels)

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([nn.functional.adaptive_max_pool2d(x, level).flatten(1) for level in self.levels], dim=1)


class WideBlock(nn.Module):
    """GELU paper §3.5: Conv-Act-Conv-Act-BatchNorm, dropout between the convolutions, plus the
    shortcut (a 1×1 convolution where the shape changes)."""

    def __init__(self, c_in: int, c_out: int, stride: int, activation, dropout: float):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False), Activation(activation, c_out),
            nn.Dropout(dropout), nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), Activation(activation, c_out),
            nn.BatchNorm2d(c_out))
        self.shortcut = (nn.Identity() if c_in == c_out and stride == 1
                         else nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False))

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x) + self.shortcut(x)


class WideResNet(nn.Module):
    """WRN-depth-k (Zagoruyko & Komodakis) with the GELU paper's blocks; WRN-40-4 for CIFAR-100."""

    def __init__(self, in_channels: int, n_classes: int, activation, dropout: float, depth: int = 40,
                 widen_factor: int = 4, init: str = "he"):
        super().__init__()
        if (depth - 4) % 6:
            raise ValueError(f"model.depth: a wide ResNet needs depth = 6n + 4 (got {depth})")
        n = (depth - 4) // 6
        widths = [16, 16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        layers: list[nn.Module] = [nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False)]
        c_in = widths[0]
        for group, width in enumerate(widths[1:]):
            for b in range(n):
                layers.append(WideBlock(c_in, width, 2 if group > 0 and b == 0 else 1, activation, dropout))
                c_in = width
        layers += [nn.BatchNorm2d(c_in), Activation(activation, c_in), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                   nn.Linear(c_in, n_classes)]
        self.net = nn.Sequential(*layers)
        _init(self.net, init)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


# -- builders, one per model.kind (workers.registry.MODELS): (model block, in_shape, n_out, activation,
# dropout, vocab_size). in_shape is one example's shape (C, H, W for images, (D,) for vectors,
# (window,) for token windows); n_out the number of classes (the autoencoder ignores it).

def _in_dim(in_shape: tuple[int, ...]) -> int:
    return math.prod(in_shape)


def build_mlp(model: dict, in_shape, n_out: int, activation, dropout: float, vocab_size: int = 0) -> nn.Module:
    return MLP(_in_dim(in_shape), n_out, model["depth"], model["width"], activation, dropout, model["init"])


def build_autoencoder(model: dict, in_shape, n_out: int, activation, dropout: float,
                      vocab_size: int = 0) -> nn.Module:
    return Autoencoder(_in_dim(in_shape), model["hidden"], activation, dropout, model["init"])


def build_window_tagger(model: dict, in_shape, n_out: int, activation, dropout: float,
                        vocab_size: int = 0) -> nn.Module:
    return WindowTagger(vocab_size, in_shape[0], n_out, model["embedding_dim"], model["depth"], model["width"],
                        activation, dropout, model["init"])


def build_cifar_shallow(model: dict, in_shape, n_out: int, activation, dropout: float,
                        vocab_size: int = 0) -> nn.Module:
    return ShallowCIFARNet(in_shape[0], n_out, activation, dropout, model["width"], model["input_noise"], model["init"])


def build_cifar_small(model: dict, in_shape, n_out: int, activation, dropout: float,
                      vocab_size: int = 0) -> nn.Module:
    return SmallCIFARNet(in_shape[0], n_out, activation, dropout, in_shape[-1], model["init"])


def build_stacked_conv(model: dict, in_shape, n_out: int, activation, dropout: float,
                       vocab_size: int = 0) -> nn.Module:
    return StackedConvNet(in_shape[0], n_out, activation, model["stacks"], model["stack_dropout"],
                          model.get("width_scale", 1.0), model["init"], model.get("first_stride", 1),
                          model.get("spp_levels", []), model.get("fc", []), model.get("fc_dropout", 0.0))


def build_wide_resnet(model: dict, in_shape, n_out: int, activation, dropout: float,
                      vocab_size: int = 0) -> nn.Module:
    return WideResNet(in_shape[0], n_out, activation, dropout, model["depth"], model["widen_factor"], model["init"])


def build_model(model: dict, in_shape: tuple[int, ...], n_out: int, activation, dropout: float,
                vocab_size: int = 0) -> nn.Module:
    """The network a spec's ``model`` block describes, for one grid point (its ``kind`` picks the builder)."""
    model = {"init": "torch_default", **model}
    return attach_mask_clock(MODELS.get(model["kind"])(model, tuple(in_shape), n_out, activation, dropout, vocab_size))


@dataclass
class StepMaskClock(MaskClock):
    """A MaskClock whose ``step`` may also be a 0-d int32 tensor holding the step's salt
    (workers.masks.step_salt): the input a CUDA graph's replay sets (workers.graphs), so that a
    captured lone network draws each replayed step's masks, as a fused pack does. The same keys
    either way (tests/workers/test_graphs.py). Dropout's keep thresholds are made once per rate and
    device (a host-to-device copy at every draw could not be captured)."""

    _thresholds: dict = field(default_factory=dict)

    def _keys(self, device) -> Tensor:
        if isinstance(self.step, Tensor):
            return step_keys(self.key.to(device), self.step)
        return super()._keys(device)

    def keep(self, site_id: int, shape, device, p: float) -> Tensor | None:
        if self.key is None:
            return None
        threshold = self._thresholds.get((p, device))
        if threshold is None:
            threshold = self._thresholds[(p, device)] = torch.tensor([keep_threshold(p)], dtype=torch.int32, device=device)
        return kept(self._keys(device), self._counters(site_id, shape, device), threshold)[0].view(shape)


def attach_mask_clock(net: nn.Module) -> nn.Module:
    """Give ``net`` one StepMaskClock (``net.mask_clock``) shared by its SOI and Dropout layers, each at
    its site (workers.masks.site): the k-th activation layer draws SOI's mask at site(k, SOI), the
    k-th Dropout at site(k, DROPOUT), as the layers of a fused pack do (workers.fused)."""
    net.mask_clock = StepMaskClock()
    activations = [m for m in net.modules() if isinstance(m, Activation)]
    dropouts = [m for m in net.modules() if isinstance(m, Dropout)]
    for layers, kind in ((activations, SOI), (dropouts, DROPOUT)):
        for k, layer in enumerate(layers):
            layer.mask_clock, layer.mask_site = net.mask_clock, site(k, kind)
    return net
