"""Fused trial packs: several grid points of one architecture trained at once as one batched model.

Small networks such as the GELU paper's 8 × 128 MLP are bound by per-step overhead, not by
arithmetic: one trial's 128 × 128 matmuls leave most of a CPU (or GPU) idle. A pack stacks the
weights of its P members into (P, fan_in, fan_out) tensors and runs each layer as one batched
matmul (``torch.baddbmm``), so P trials cost about as many kernel launches as one.

Each member stays the trial it would be alone, by construction:
- its weights are those of the reference network (workers.models) built under its seed;
- its data order comes from its own generator, seeded as in workers.train;
- its dropout and SOI masks are the lone trial's: a function of its seed, the step, the layer
  and the element (workers.masks), drawn for every member of the pack in one pass;
- its optimiser state, lr and activation are its own (Adam and SGD written out for the pack's
  one parameter buffer, with the update formulas of torch.optim, its lr a per-row column).
So a member and the same config trained alone follow the same trajectory up to floating-point
rounding (tests/workers/test_fused.py). A member whose training loss turns non-finite is reported
diverged and leaves the pack; the others continue unchanged (their slices never mix).
"""
from __future__ import annotations

import contextlib
from functools import lru_cache, partial
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim.adam import adam

from workers import graphs, masks
from workers.activations import Activation, elu, gelu_tanh, lrelu, normal_cdf, soi_map
from workers.data.splits import Splits
from workers.models import build_model
from workers.optim import BETAS, EPS
from workers.precision import forward_precision
from workers.registry import FUSABLE_MODELS
from workers.train import EVAL_BATCH, step_on_device, train_members
from workers.trial import TrialConfig

# Settings that must be equal across a pack's members (the rest may differ: activation, lr, dropout, seed).
SHARED = ("epochs", "batch_size", "task", "optimizer", "momentum", "nesterov", "weight_decay", "schedule", "augment",
          "eval_noise", "activation_stats", "eval_train", "model")


def fusable(cfg: TrialConfig) -> str | None:
    """Why ``cfg`` cannot run in a fused pack, or None if it can."""
    if cfg.model["kind"] not in FUSABLE_MODELS:
        return f"model.kind {cfg.model['kind']!r} (fused packs take {', '.join(FUSABLE_MODELS)})"
    if cfg.augment and any(cfg.augment.values()):
        return "augment (fused packs take vector inputs without augmentation)"
    if cfg.fine_tune:
        return "fine_tune (fused packs have no per-stack dropout)"
    if cfg.top5:
        return "top5 (fused packs measure the top-1 error)"
    return None


class StackedNet(nn.Module):
    """P networks of one architecture as stacked weights; a layer is one batched matmul.

    The architecture is read off the reference network: its ``Linear`` layers, each possibly
    followed by an activation and dropout (MLP and autoencoder of workers.models).

    Every parameter is a contiguous view of one flat buffer (``flat``), so that the optimiser can
    move the whole pack with one kernel (StackedOptimizer); gradients are autograd's own tensors.
    Masks are drawn for the rows that use them only: dropout's for members with p > 0, SOI's for
    the run of stochastic members (the pack is sorted by activation).
    """

    def __init__(self, references: list[nn.Module], activations: list[str], dropouts: list[float],
                 seeds: list[int] | None = None, device: torch.device | str = "cpu"):
        super().__init__()
        self.activations = activations
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        self.activated: list[bool] = []  # per Linear: is it followed by an activation (and dropout)?
        # per activated layer, each learnable activation parameter stacked over members, (P, 1, units
        # or 1) (key "<param>" per layer, "<param>__unit" per unit); a member without it holds 0 there
        # and gets no gradient. Each member's functions and fixed parameters come from its reference.
        self.learned = nn.ModuleList()
        self.layers: list[list[Activation]] = [[m for m in ref.modules() if isinstance(m, Activation)]
                                               for ref in references]
        linears = [[m for m in ref.modules() if isinstance(m, nn.Linear)] for ref in references]
        for depth, layer in enumerate(linears[0]):
            # (P, fan_in, fan_out): x @ W.T of each member becomes one baddbmm
            self.weights.append(nn.Parameter(torch.stack([ls[depth].weight.detach().t() for ls in linears]).contiguous()))
            self.biases.append(nn.Parameter(torch.stack([ls[depth].bias.detach() for ls in linears]).unsqueeze(1)))
            modules = list(references[0].modules())
            following = modules[modules.index(layer) + 1] if modules.index(layer) + 1 < len(modules) else None
            self.activated.append(isinstance(following, Activation))
        for depth in range(len(self.layers[0])):
            self.learned.append(self._stack_learned([layers[depth] for layers in self.layers]))
        self.widths = [w.shape[2] for w, active in zip(self.weights, self.activated) if active]
        # -- the masks (workers.masks): per row, the member's seed key and dropout; the rows that draw ----
        self.row_dropout = list(dropouts)
        self.row_stochastic = [bool(ls) and ls[0].definition.stochastic for ls in self.layers]
        self.seed_keys = masks.seed_keys(list(range(len(activations))) if seeds is None else seeds, device)
        self._mask_rows(torch.device(device))
        self._pack_storage(torch.device(device))

    def _mask_rows(self, device: torch.device) -> None:
        rates = self.row_dropout
        self.any_dropout, self.any_soi = any(rates), any(self.row_stochastic)
        rows = [j for j, p in enumerate(rates) if p > 0]
        # dropout: its rows (None: every row), their keep thresholds and scales, (R, 1, 1)
        self.drop_rows = None if len(rows) == len(rates) else torch.tensor(rows, dtype=torch.long, device=device)
        self._step_noise: dict = {}  # (batch, device): the noise forward fills each step (_noise_of_step)
        self.thresholds = torch.tensor([masks.keep_threshold(rates[j]) for j in rows], dtype=torch.int32, device=device)
        self.scales = torch.tensor([1.0 / (1.0 - rates[j]) for j in rows], device=device).view(-1, 1, 1)
        stochastic = [j for j, s in enumerate(self.row_stochastic) if s]
        self.soi_span = (stochastic[0], stochastic[-1] + 1) if stochastic else None  # (first, end) row

    # -- one buffer for every parameter ---------------------------------------------------------------
    def _slots(self) -> list[tuple[nn.Module, str | int]]:
        """(container, key) of every parameter, in a fixed order."""
        slots: list = [(self.weights, i) for i in range(len(self.weights))]
        slots += [(self.biases, i) for i in range(len(self.biases))]
        slots += [(stacked, key) for stacked in self.learned for key in stacked.keys()]
        return slots

    def _pack_storage(self, device: torch.device, rows: Tensor | None = None) -> None:
        """Move every parameter into one flat buffer (keeping only ``rows`` of each, if given)."""
        slots = self._slots()
        values = [container[key].detach() for container, key in slots]
        if rows is not None:
            values = [v[rows] for v in values]
        self.flat = torch.cat([v.reshape(-1) for v in values]).to(device)
        self.row_sizes = [v[0].numel() for v in values]  # per parameter, the elements of one member
        offset = 0
        for (container, key), value in zip(slots, values):
            container[key] = nn.Parameter(self.flat[offset:offset + value.numel()].view(value.shape))
            offset += value.numel()

    def per_element(self, column: Tensor) -> Tensor:
        """A per-member (P,) tensor spread over ``flat``'s elements (each element its member's value)."""
        column = column.to(self.flat.device)
        return torch.cat([column.repeat_interleave(n) for n in self.row_sizes])

    @staticmethod
    def _stack_learned(layers: list[Activation]) -> nn.ParameterDict:
        keys = sorted({_learned_key(key, value) for layer in layers for key, value in layer.learned.items()})
        stacked = nn.ParameterDict()
        for key in keys:
            name = key.removesuffix("__unit")
            values = [layer.learned[name].detach() if name in layer.learned
                      and _learned_key(name, layer.learned[name]) == key else None for layer in layers]
            like = next(v for v in values if v is not None)
            stacked[key] = nn.Parameter(torch.stack(
                [(v if v is not None else torch.zeros_like(like)).reshape(1, -1) for v in values]))
        return stacked

    def _groups(self, members: list[int]) -> list[tuple[str, int, int]]:
        """Runs of members with one activation, as (name, start, end) slices of the pack."""
        names = [self.activations[m] for m in members]
        return [(names[start], start, end) for start, end in _runs(names)]

    # -- the masks of a step: every site of every member that draws, in one pass per kind -----------
    def dropout_noise(self, batch: int, device, step: int | Tensor = 0) -> list[Tensor] | None:
        """Each activated layer's inverted-dropout noise (P, B, width) at ``step``: 1/(1 − p) where
        the member keeps the unit, else 0; 1 for members without dropout (their values pass
        unchanged). None where no member drops out (or in eval mode). One hash over every layer's
        counters side by side, for the dropout rows only (workers.masks). Always float32: a bf16 pack
        draws the masks of an fp32 one."""
        noise = self._noise_of_step(batch, device, step)
        return None if noise is None else list(noise.clone().split(self.widths, dim=-1))  # (theirs: not the buffer)

    def _noise_of_step(self, batch: int, device, step: int | Tensor) -> Tensor | None:
        """Each member's noise side by side, (P, B, Σ widths), in a buffer the net keeps per batch
        size: its rows without dropout are ones from the start, and each step writes the dropout rows
        only, where a new tensor of ones was made each step. The step's forward and backward read it;
        the next step's forward overwrites it (autograd's version counter would name a backward that
        came after). Made in an eager step, before any CUDA graph captures one (workers.graphs)."""
        rows = self._dropout_rows_noise(batch, device, step)
        if rows is None or self.drop_rows is None:
            return rows
        key = (batch, rows.device)
        if key not in self._step_noise:
            self._step_noise[key] = torch.ones((len(self.row_dropout), *rows.shape[1:]), device=rows.device)
        return self._step_noise[key].index_copy_(0, self.drop_rows, rows)

    def _dropout_rows_noise(self, batch: int, device, step: int | Tensor) -> Tensor | None:
        """The dropout rows' noise (R, B, Σ widths), in ``drop_rows`` order; None as dropout_noise."""
        if not self.training or not self.any_dropout:
            return None
        device = torch.device(device)
        sites = tuple((masks.site(layer, masks.DROPOUT), width) for layer, width in enumerate(self.widths))
        keys = self.seed_keys if self.drop_rows is None else self.seed_keys.index_select(0, self.drop_rows)
        counters = _joined_counters(batch, sites, device)
        return masks.kept_noise(masks.step_keys(keys, step), counters, self.thresholds, self.scales.view(-1))

    def soi_uniforms(self, batch: int, device, step: int | Tensor) -> list[Tensor] | None:
        """Each activated layer's U[0, 1) for SOI's masks, (S, B, width) for the span of
        stochastic rows (``soi_span``), or None without SOI members."""
        if self.soi_span is None:
            return None
        start, end = self.soi_span
        sites = tuple((masks.site(layer, masks.SOI), width) for layer, width in enumerate(self.widths))
        drawn = masks.uniforms(masks.step_keys(self.seed_keys[start:end], step), _joined_counters(batch, sites, torch.device(device)))
        return list(drawn.split(self.widths, dim=-1))

    def _groups_now(self, members: list[int]) -> list[tuple[str, int, int]]:
        groups = self._groups(members)  # one slice per activation when the pack is sorted by it
        if not self.training:  # SOI at test time is its expectation x·Φ(x), the GELU (§4)
            groups = [("gelu" if name == "soi" else name, start, end) for name, start, end in groups]
        return groups

    def _activate(self, x: Tensor, members: list[int], depth: int, soi_u: Tensor | None,
                  noise: Tensor | None = None) -> Tensor:
        """Layer ``depth``'s activations; with ``noise`` (:meth:`_noise_of_step` cut to this layer) the
        dropout too, inside _GroupedActivation (forward passes it only where that runs)."""
        groups = self._groups_now(members)
        offset = self.soi_span[0] if self.soi_span else 0  # (soi_u's first row is the span's)
        if _groupable(groups):  # the papers' activations at their defaults
            if len(groups) == 1 and groups[0][0] != "soi" and noise is None:
                return _PLAIN[groups[0][0]](x)
            return _GroupedActivation.apply(x, groups, soi_u, offset, noise)
        parts = []  # anything else: a slice each, joined (autograd then pays a copy per slice)
        for name, start, end in groups:
            layer = self.layers[members[start]][depth]
            if layer.definition.stochastic:
                u = None if soi_u is None else soi_u[start - offset:end - offset]
                parts.append(soi_map(x[start:end], self.training, u=u,
                                     mu=layer.fixed.get("mu", 0.0), sigma=layer.fixed.get("sigma", 1.0)))
                continue
            params = dict(layer.fixed)
            for key, value in layer.learned.items():
                params[key] = self.learned[depth][_learned_key(key, value)][start:end]
            parts.append(layer.function(x[start:end], **params))
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    def learned_values(self, position: int, member: int) -> dict[str, float]:
        """A member's learned activation parameters (workers.activations.learned_parameters' keys)."""
        found = {}
        for depth, layer in enumerate(self.layers[member], start=1):
            for key, value in layer.learned.items():
                stacked = self.learned[depth - 1][_learned_key(key, value)]
                found[f"learned_{key}_{depth}"] = stacked[position].detach().float().mean().item()
        return found

    def keep(self, index: Tensor) -> None:
        """Keep only the members at ``index`` (rows of every parameter, and of the masks' per-row data)."""
        self._pack_storage(self.flat.device, index)
        rows = index.tolist()
        self.row_dropout = [self.row_dropout[j] for j in rows]
        self.row_stochastic = [self.row_stochastic[j] for j in rows]
        self.seed_keys = self.seed_keys[index]
        self._mask_rows(self.flat.device)

    def forward(self, x: Tensor, members: list[int], collect: list | None = None, step: int | Tensor = 0) -> Tensor:
        """``x``: (P, B, D) per-member inputs, or (B, D) shared by all members; returns (P, B, out).
        In training mode the masks are those of optimiser step ``step`` (or of the step whose salt
        the 0-d tensor ``step`` holds: workers.masks.step_keys)."""
        batch = x.shape[-2]
        # Dropout inside the grouped activation where that runs (in place, no product allocated forward
        # or backward), else the noise multiplied in after the activation: the same values either way.
        inside = collect is None and _groupable(self._groups_now(members))
        noises = self._noise_of_step(batch, x.device, step) if inside else self.dropout_noise(batch, x.device, step)
        noises = noises.split(self.widths, dim=-1) if inside and noises is not None else noises
        soi = self.soi_uniforms(batch, x.device, step) if self.training else None
        depth = 0  # activated layers so far
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            if x.dim() == 2:  # shared input (evaluation): every member reads the same rows (a stride-0 batch)
                x = x.expand(len(weight), *x.shape)
            x = torch.baddbmm(bias, x, weight)
            if self.activated[i]:
                noise = noises[depth] if noises is not None else None
                x = self._activate(x, members, depth, soi[depth] if soi else None, noise if inside else None)
                if collect is not None:
                    collect.append(x)
                if noise is not None and not inside:
                    x = x * noise
                depth += 1
        return x


@lru_cache(maxsize=64)
def _joined_counters(batch: int, sites: tuple[tuple[int, int], ...], device: torch.device) -> Tensor:
    """The sites' counters (workers.masks.site_counters) side by side, (batch, Σ widths)."""
    return torch.cat([masks.site_counters(batch, width, site_id, device) for site_id, width in sites], dim=1)


# Out-variants of the aten kernels that F.gelu, F.relu, F.elu, ... run forward and backward, as a trial
# alone runs them, per activation: (forward(x, out), backward(grad, x, out)). Used by _GroupedActivation.
_aten = torch.ops.aten
_INTO: dict[str, tuple[Callable, Callable]] = {
    "gelu": (lambda x, o: _aten.gelu.out(x, out=o), lambda g, x, o: _aten.gelu_backward.grad_input(g, x, grad_input=o)),
    "gelu_tanh": (lambda x, o: _aten.gelu.out(x, approximate="tanh", out=o),
                  lambda g, x, o: _aten.gelu_backward.grad_input(g, x, approximate="tanh", grad_input=o)),
    "relu": (lambda x, o: torch.clamp_min(x, 0, out=o),
             lambda g, x, o: _aten.threshold_backward.grad_input(g, x, 0, grad_input=o)),
    "elu": (lambda x, o: _aten.elu.out(x, 1.0, 1, 1, out=o),
            lambda g, x, o: _aten.elu_backward.grad_input(g, 1.0, 1, 1, False, x, grad_input=o)),
    "lrelu": (lambda x, o: _aten.leaky_relu.out(x, 0.1, out=o),
              lambda g, x, o: _aten.leaky_relu_backward.grad_input(g, x, 0.1, False, grad_input=o)),
    "silu": (lambda x, o: _aten.silu.out(x, out=o), lambda g, x, o: _aten.silu_backward.grad_input(g, x, grad_input=o)),
}


_PLAIN: dict[str, Callable[[Tensor], Tensor]] = {"gelu": F.gelu, "gelu_tanh": gelu_tanh, "relu": F.relu, "elu": elu,
                                                 "lrelu": lrelu, "silu": F.silu}


def _groupable(groups: list[tuple[str, int, int]]) -> bool:
    """Whether _GroupedActivation runs these groups (each activation's own aten kernels, or SOI's map)."""
    return all(name in _INTO or name == "soi" for name, _, _ in groups)


def _learned_key(name: str, value: Tensor) -> str:
    return f"{name}__unit" if value.dim() else name


class _GroupedActivation(torch.autograd.Function):
    """Each run of members its own activation, written into one output (and one input gradient),
    and the dropout rows' inverted-dropout noise applied to it in place.

    Slicing the runs and joining them with torch.cat costs a copy forward and, backward, a zeroed
    full-size gradient per slice: about a fifth of a pack's training step for the paper's MLP.
    The kernels are the ones autograd runs for each activation alone, so the values are the same
    bit for bit (tests/workers/test_fused.py). SOI's run (training) is m·x with m = [u < Φ(x)]
    (workers.activations.soi_map), its gradient the incoming one where m = 1.

    Dropout (``noise``: (P, B, width), StackedNet._noise_of_step) scales the output in place, and
    backward the incoming gradient before the activation's backward: the products that a separate
    ``x * noise`` and its backward make, without allocating them."""

    @staticmethod
    def forward(ctx, x: Tensor, groups: list[tuple[str, int, int]], soi_u: Tensor | None, offset: int,
                noise: Tensor | None = None) -> Tensor:
        out = torch.empty_like(x)
        sizes = [end - start for _, start, end in groups]  # (split: one view op for all runs)
        kept = None
        for (name, start, end), xs, outs in zip(groups, x.split(sizes), out.split(sizes)):
            if name == "soi":
                with torch.no_grad():
                    kept = soi_u[start - offset:end - offset] < normal_cdf(xs)
                torch.mul(kept, xs, out=outs)
            else:
                _INTO[name][0](xs, outs)
        if noise is not None:
            out.mul_(noise)
        ctx.save_for_backward(x, kept, noise)
        ctx.groups, ctx.sizes = groups, sizes
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None, None]:
        (x, kept, noise), grad = ctx.saved_tensors, grad.contiguous()
        grad_in = torch.empty_like(x)
        if noise is not None:  # the gradient through the dropout into grad_in; the activation's backward in place
            grad = torch.mul(grad, noise, out=grad_in)
        for (name, _, _), gs, xs, ins in zip(ctx.groups, grad.split(ctx.sizes), x.split(ctx.sizes), grad_in.split(ctx.sizes)):
            if name == "soi":
                torch.mul(gs, kept, out=ins)
            else:
                _INTO[name][1](gs, xs, ins)
        return grad_in, None, None, None, None


class CompiledStep:
    """A pack's training forward and loss under ``torch.compile`` (``execution.compile``).

    The layers, activations, dropout and loss of a step are traced as one graph, so Inductor fuses
    each layer's bias, activation and mask into the matmul's neighbours and the backward into as
    few kernels. The dropout noise is drawn before the call, eagerly, from the counter-based
    generator (workers.masks), so compiled and eager packs see the same masks.
    It takes packs whose activations are all fixed functions (``_PLAIN``); for the others (SOI's
    sampled masks, learnable or expression activations) the pack steps eagerly. A new shape (the
    last, smaller batch; a member leaving the pack) compiles once more.
    """

    def __init__(self, net: StackedNet, task: str):
        self.net, self.task = net, task
        self.losses = torch.compile(_dense_losses, dynamic=False)

    def takes(self, members: list[int]) -> bool:
        return all(name in _PLAIN for name, _, _ in self.net._groups(members))

    def __call__(self, x: Tensor, y: Tensor, members: list[int], step: int) -> Tensor:
        net = self.net
        noises = net.dropout_noise(x.shape[1], x.device, step)
        noises = tuple(noises) if noises is not None else (None,) * len(net.widths)
        groups = tuple(net._groups(members))
        return self.losses(tuple(net.weights), tuple(net.biases), x, y, groups, tuple(net.activated), noises, self.task)


def _dense_losses(weights, biases, x: Tensor, y: Tensor, groups, activated, noises, task: str) -> Tensor:
    """StackedNet.forward in training mode, then the members' losses: the graph CompiledStep traces."""
    inputs, depth = x, 0
    for weight, bias, active in zip(weights, biases, activated):
        x = torch.baddbmm(bias, x, weight)
        if active:
            parts = [_PLAIN[name](x[start:end]) for name, start, end in groups]
            x = torch.cat(parts) if len(parts) > 1 else parts[0]
            if noises[depth] is not None:
                x = x * noises[depth]
            depth += 1
    return _losses(x, inputs, y, task)[0]


class StackedOptimizer:
    """Adam or SGD (momentum, Nesterov, weight decay) on a pack's stacked parameters, each member
    with its own lr: one update of a handful of kernels for the whole pack, whatever its size.

    - Adam, one lr for the pack: torch.optim's fused Adam over the parameters (one pass).
    - Adam, several lrs: the same fused Adam at lr 1 on a zeroed update buffer, which it leaves
      holding −m̂/(√v̂ + ε); the parameters then move by that times each member's lr, spread over
      the flat buffer (StackedNet.per_element): one ``addcmul_``. L2 weight decay joins the
      gradients first, as torch.optim.Adam adds it.
    - SGD: torch.optim.SGD's formulas (dampening 0) with the lrs spread alike, as foreach ops.

    The schedule's multiple of the lrs is a 0-d tensor on the device (``factor_now``), set by
    :meth:`set_factor` before a step where it moves: the update reads it there, so a CUDA graph of
    the step replays any schedule (workers.graphs). The lrs are float32(lr) × float32(factor), as
    the per-member lr tensor always gave them.
    """

    def __init__(self, cfg: TrialConfig, net: StackedNet, lrs: list[float]):
        self.cfg, self.net = cfg, net
        self.scheduled = cfg.schedule.get("kind", "constant") != "constant"  # (fixed: no per-step host branch)
        self.factor = 1.0  # the schedule's multiple of the base lr (host side; factor_now holds it on the device)
        self.factor_now = torch.ones((), device=net.flat.device)
        self.step_count = 0
        self.state: dict[str, Tensor] = {}
        if cfg.optimizer == "adam":
            self.state = {"exp_avg": torch.zeros_like(net.flat), "exp_avg_sq": torch.zeros_like(net.flat)}
        self._rows(list(lrs))

    def _rows(self, lrs: list[float]) -> None:
        """Per-member lrs, and what they need: the lr per element and the update buffer where they differ."""
        self.lrs = lrs
        self.single_lr = len(set(lrs)) == 1
        self.base_lr = torch.tensor(lrs[0], device=self.net.flat.device)  # (float32, as torch.optim's lr meets a tensor)
        self.lr_flat = None if self.single_lr else self.net.per_element(torch.tensor(lrs))
        # under a schedule: the lr now, lr × factor (one lr), or lr_flat × factor (SGD, several lrs)
        self.lr_scalar = torch.empty_like(self.base_lr) if self.scheduled and self.single_lr else None
        self.lr_now = torch.empty_like(self.lr_flat) if self.scheduled and not self.single_lr else None
        adam_ = self.cfg.optimizer == "adam"
        self.update = torch.zeros_like(self.net.flat) if adam_ and not self.single_lr else None
        self._bind()

    def _bind(self) -> None:
        """The views the update works on, made once (a view is an op per step otherwise)."""
        self.params = list(self.net.parameters())
        self.views = {key: self._views(buffer) for key, buffer in
                      {**self.state, "update": self.update, "lr_flat": self.lr_flat, "lr_now": self.lr_now}.items()
                      if buffer is not None}
        self.counters = [torch.full((), float(self.step_count), device=self.net.flat.device) for _ in self.params]

    def _views(self, flat: Tensor) -> list[Tensor]:
        """``flat`` cut as the parameters are (a view per parameter)."""
        views, offset = [], 0
        for param in self.net.parameters():
            views.append(flat[offset:offset + param.numel()].view(param.shape))
            offset += param.numel()
        return views

    def buffer_bytes(self) -> int:
        """Bytes the optimiser holds beside the parameters (state, update buffer, spread lrs)."""
        return sum(t.nbytes for t in self.state.values()) + sum(
            t.nbytes for t in (self.update, self.lr_flat, self.lr_now) if t is not None)

    def keep(self, index: Tensor) -> None:
        """Drop the members not in ``index`` (the net has kept its rows already)."""
        self.state = {key: torch.cat([view[index].reshape(-1) for view in self.views[key]]) for key in self.state}
        self._rows([self.lrs[i] for i in index.tolist()])

    def state_dict(self) -> dict:
        return {"flat_state": self.state, "step_count": self.step_count}

    def load_state_dict(self, saved: dict) -> None:
        device = self.net.flat.device
        if "flat_state" in saved:
            self.state = {k: v.to(device) for k, v in saved["flat_state"].items()}
        else:  # a checkpoint of the per-parameter layout: joined in StackedNet's order
            self.state = {key: torch.cat([s[key].to(device).reshape(-1) for s in saved["state"]])
                          for key in saved["state"][0]}
        self.step_count = saved["step_count"]
        self._bind()

    def set_factor(self, factor: float) -> None:
        """The schedule's multiple of the lrs for the next steps, written on the device where it moves."""
        if factor != self.factor:
            self.factor = factor
            self.factor_now.fill_(factor)

    def step(self) -> None:
        self.step_count += 1
        self.apply()

    def _single_lr(self) -> Tensor:
        """The one lr of the pack now, a 0-d tensor on the device."""
        if not self.scheduled:
            return self.base_lr
        return torch.mul(self.base_lr, self.factor_now, out=self.lr_scalar)

    @torch.no_grad()
    def apply(self) -> None:
        """The update itself, on the device (a CUDA graph replays it; workers.graphs): ``step`` without
        the host's step count."""
        cfg, params, views = self.cfg, self.params, self.views
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]  # (a parameter no member uses)
        if cfg.optimizer == "adam":  # (the fused Adam counts its steps in self.counters)
            m, v = views["exp_avg"], views["exp_avg_sq"]
            if self.single_lr:  # torch.optim's Adam as it is (its weight decay included)
                adam(params, grads, m, v, [], self.counters, fused=True, amsgrad=False, lr=self._single_lr(),
                     beta1=BETAS[0], beta2=BETAS[1], weight_decay=cfg.weight_decay, eps=EPS, maximize=False)
                return
            if cfg.weight_decay:
                grads = torch._foreach_add(grads, params, alpha=cfg.weight_decay)
            self.update.zero_()
            adam(views["update"], grads, m, v, [], self.counters, fused=True, amsgrad=False, lr=1.0,
                 beta1=BETAS[0], beta2=BETAS[1], weight_decay=0.0, eps=EPS, maximize=False)
            if self.scheduled:
                self.update.mul_(self.factor_now)
            self.net.flat.addcmul_(self.update, self.lr_flat)
            return
        if cfg.weight_decay:
            grads = torch._foreach_add(grads, params, alpha=cfg.weight_decay)
        if cfg.momentum:  # torch.optim.SGD, dampening 0
            if "momentum_buffer" not in self.state:
                self.state["momentum_buffer"] = torch.cat([g.reshape(-1) for g in grads])
                self._bind()
            else:
                torch._foreach_mul_(views["momentum_buffer"], cfg.momentum)
                torch._foreach_add_(views["momentum_buffer"], grads)
            buffers = self.views["momentum_buffer"]
            grads = torch._foreach_add(grads, buffers, alpha=cfg.momentum) if cfg.nesterov else buffers
        # grad × lr in float32, lr = float32(lr) × factor, as the per-member (P, 1, 1) lr tensor gave it
        if self.single_lr:
            lr = self._single_lr()
        elif not self.scheduled:
            lr = self.views["lr_flat"]
        else:
            torch.mul(self.lr_flat, self.factor_now, out=self.lr_now)
            lr = self.views["lr_now"]
        torch._foreach_sub_(params, torch._foreach_mul(grads, lr))


def _runs(values: list) -> list[tuple[int, int]]:
    """(start, end) of each run of equal consecutive values."""
    starts = [i for i, v in enumerate(values) if i == 0 or v != values[i - 1]]
    return list(zip(starts, starts[1:] + [len(values)]))


def _losses(out: Tensor, x: Tensor, y: Tensor, task: str) -> tuple[Tensor, Tensor]:
    """Per member: the mean loss (P,) and per-example errors (P, B)."""
    out = out.float()  # (a bf16 forward's outputs: losses in fp32)
    if task == "reconstruct":
        target = x if x.dim() == 3 else x.unsqueeze(0)  # per-member or shared inputs
        return ((out - target) ** 2).mean(dim=(1, 2)), torch.zeros(out.shape[:2], device=out.device)
    p, b, classes = out.shape
    targets = y.expand(p, b) if y.dim() == 1 else y
    losses = F.cross_entropy(out.reshape(p * b, classes), targets.reshape(p * b), reduction="none").view(p, b)
    return losses.mean(dim=1), (out.argmax(dim=2) != targets).float()


@torch.no_grad()
def evaluate_pack(net: StackedNet, members: list[int], x: Tensor, y: Tensor, task: str) -> tuple[list, list]:
    """Per member: mean loss and error rate in eval mode. ``x`` is shared, or per member (P, n, D)."""
    net.eval()
    loss_sum = torch.zeros(len(members), device=x.device)
    wrong = torch.zeros(len(members), device=x.device)
    n = x.shape[-2]
    for i in range(0, n, EVAL_BATCH):
        xb = x[..., i:i + EVAL_BATCH, :]
        losses, errors = _losses(net(xb, members), xb, y[i:i + EVAL_BATCH], task)
        loss_sum += losses * errors.shape[1]
        wrong += errors.sum(dim=1)
    net.train()
    return (loss_sum / n).tolist(), (wrong / n).tolist()


class StackedPack:
    """A fused pack for workers.train.train_members: the members' MLPs as one StackedNet and one
    StackedOptimizer, and which members are still in it. The masks need no state: they are a
    function of each member's seed and the step (workers.masks)."""

    def __init__(self, cfgs: list[TrialConfig], splits: Splits, device: torch.device):
        self.cfgs, self.first, self.device = cfgs, cfgs[0], device
        references = []
        for cfg in cfgs:  # per member: the reference network under its seed
            torch.manual_seed(cfg.seed)
            references.append(build_model(cfg.model, splits.in_shape, splits.n_classes, cfg.activation_def, cfg.dropout))
        self.net = StackedNet(references, [c.activation for c in cfgs], [c.dropout for c in cfgs],
                              [c.seed for c in cfgs], device)
        self.optimizer = StackedOptimizer(self.first, self.net, [c.lr for c in cfgs])
        self.members = list(range(len(cfgs)))
        self.compiled = CompiledStep(self.net, self.first.task) if self.first.compile else None
        self.graphed = graphs.GraphedStep(
            partial(step_on_device, self, partial(forward_precision, self.first.dtype, device, cache=False)),
            self.first.batch_size, graphs.refusal(self.first, device, compiled=self.first.compile), batch_dim=1)

    def place(self, arrays: list) -> list[Tensor]:
        """All of the data on the device, inputs as vectors (the pack's layers are matmuls)."""
        return [torch.as_tensor(a, device=self.device).flatten(1) if i % 2 == 0 else torch.as_tensor(a, device=self.device)
                for i, a in enumerate(arrays)]

    def batch(self, x: Tensor, y: Tensor, idx: Tensor, orders: list) -> tuple[Tensor, Tensor]:
        # (P, B): each member its own examples; index_select copies whole rows, ~3x faster than x[idx]
        return x.index_select(0, idx.flatten()).view(*idx.shape, -1), y.index_select(0, idx.flatten()).view(idx.shape)

    def train(self) -> None:
        self.net.train()

    def losses(self, x: Tensor, y: Tensor, step: int) -> Tensor:
        if self.compiled is not None and self.compiled.takes(self.members):
            return self.compiled(x, y, self.members, step)
        return _losses(self.net(x, self.members, step=step), x, y, self.first.task)[0]

    def zero_grad(self) -> None:
        for param in self.net.parameters():
            param.grad = None

    def begin_step(self, lr_factor: float) -> None:
        self.optimizer.step_count += 1  # (host side: a replayed step counts too)
        self.optimizer.set_factor(lr_factor)

    def update(self) -> None:
        self.optimizer.apply()

    def replay(self, x: Tensor, y: Tensor, step: int) -> Tensor | None:
        return self.graphed(x, y, step)

    def evaluate(self, x: Tensor, y: Tensor, top5: bool, per_member: bool) -> list[dict[str, float]]:
        losses, errors = evaluate_pack(self.net, self.members, x, y, self.first.task)  # (fusable: no top5)
        return [{"loss": loss, "error": error} for loss, error in zip(losses, errors)]

    def unit_means(self, x: Tensor) -> list[Tensor]:
        return _unit_activations(self.net, self.members, x)

    def learned(self, position: int) -> dict[str, float]:
        return self.net.learned_values(position, self.members[position])

    def set_dropout(self, on: bool, scale: float) -> None:
        raise ValueError("fine_tune: fused packs have no per-stack dropout")  # (fusable() refuses it first)

    def keep(self, positions: list[int]) -> None:
        index = torch.tensor(positions, device=self.device, dtype=torch.long)
        self.net.keep(index)
        self.optimizer.keep(index)
        self.members = [self.members[i] for i in positions]
        self.graphed.reset()  # (new shapes and buffers: captured again)

    def state(self) -> dict:
        return {"net": self.net.state_dict(), "optimizer": self.optimizer.state_dict()}

    def restore(self, state: dict) -> None:
        with torch.no_grad():  # into the buffer's views: the parameters stay rows of StackedNet.flat
            for name, param in self.net.named_parameters():
                param.copy_(state["net"][name])
        self.optimizer.load_state_dict(state["optimizer"])
        self.graphed.reset()


def train_pack(cfgs: list[TrialConfig], splits: Splits, device: torch.device | str = "cpu", *,
               resume: dict | None = None, on_state: Callable[[dict], None] | None = None) -> Iterator[list[dict | None]]:
    """Train the members of a pack together (workers.train.train_members with a StackedPack); yield,
    after every epoch, one metrics dict per member (the keys of workers.train.train_epochs), or None
    for a member that has left the pack. ``resume`` and ``on_state`` checkpoint it as one trial."""
    reasons = {fusable(cfg) for cfg in cfgs} - {None}
    if reasons:
        raise ValueError(f"execution.mode: fused cannot take {reasons.pop()}")
    differing = [k for k in SHARED if any(getattr(c, k) != getattr(cfgs[0], k) for c in cfgs)]
    if differing:
        raise ValueError(f"a fused pack shares {', '.join(differing)}; its members differ there")
    pack = StackedPack(cfgs, splits, torch.device(device))
    # (closed with this generator, not when the collector finds it: its run holds the process's TF32 switches)
    with contextlib.closing(train_members(pack, splits, resume=resume, on_state=on_state)) as epochs:
        for report in epochs:
            if pack.device.type == "cuda":  # how its steps ran: a CUDA graph, or eagerly and why (the run's tag)
                for metrics in report:
                    if metrics is not None:
                        metrics["step_mode"] = pack.graphed.mode
            yield report


@torch.no_grad()
def _unit_activations(net: StackedNet, members: list[int], x: Tensor) -> list[Tensor]:
    """Per layer: each member's units' mean activations (P, units), for
    workers.train.unit_activation_medians."""
    outputs: list[Tensor] = []
    net.eval()
    net(x, members, collect=outputs)
    net.train()
    return [out.float().mean(dim=1) for out in outputs]
