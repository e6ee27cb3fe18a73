"""Fused trial packs: several grid points of one architecture trained at once as one batched model.

Small networks such as the GELU paper's 8 × 128 MLP are bound by per-step overhead, not by
arithmetic: one trial's 128 × 128 matmuls leave most of a CPU (or GPU) idle. A pack stacks the
weights of its P members into (P, fan_in, fan_out) tensors and runs each layer as one batched
matmul (``torch.baddbmm``), so P trials cost about as many kernel launches as one.

Each member stays the trial it would be alone, by construction:
- its weights are those of the reference network (workers.models) built under its seed;
- its data order comes from its own generator, seeded as in workers.train;
- its dropout and SOI masks come from its own generator, which starts where the reference
  trial's global generator stands after building the network, and draws the same shapes in the
  same order (workers.activations.dropout_noise, soi_map);
- its optimiser state, lr and activation are its own (Adam and SGD written out for stacked
  tensors, with the update formulas of torch.optim).
So a member and the same config trained alone follow the same trajectory up to floating-point
rounding (tests/workers/test_fused.py). A member whose training loss turns non-finite is reported
diverged and leaves the pack; the others continue unchanged (their slices never mix).
"""
from __future__ import annotations

from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim.adam import adam

from workers.activations import Activation, elu, elu_into, gelu_tanh, lrelu, soi_map, uniform
from workers.data.splits import Splits
from workers.models import build_model
from workers.optim import BETAS, EPS
from workers.registry import FUSABLE_MODELS
from workers.train import EVAL_BATCH, train_members
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
    """

    def __init__(self, references: list[nn.Module], activations: list[str], dropouts: list[float]):
        super().__init__()
        self.activations, self.dropouts = activations, dropouts
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
        self.generators: list[torch.Generator] = []  # per member: masks (set by the pack)

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

    def _activate(self, x: Tensor, members: list[int], depth: int) -> Tensor:
        groups = self._groups(members)  # one slice per activation when the pack is sorted by it
        if all(name in _INTO for name, _, _ in groups):  # the papers' activations at their defaults
            if len(groups) == 1:
                return _PLAIN[groups[0][0]](x)
            return _GroupedActivation.apply(x, groups)
        parts = []  # anything else: a slice each, joined (autograd then pays a copy per slice)
        for name, start, end in groups:
            layer = self.layers[members[start]][depth]
            if layer.definition.stochastic:
                u = (self._uniforms(torch.empty(x[start:end].shape, device=x.device), members[start:end])
                     if self.training else None)  # (float32, as dropout_noise)
                parts.append(soi_map(x[start:end], self.training, u=u, mu=layer.fixed.get("mu", 0.0),
                                     sigma=layer.fixed.get("sigma", 1.0)))
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

    def _uniforms(self, out: Tensor, members: list[int]) -> Tensor:
        """``out`` filled with U[0, 1), slice j from member j's stream."""
        for j, m in enumerate(members):
            uniform(out.shape[1:], out.device, self.generators[m], out=out[j])
        return out

    def _dropout(self, x: Tensor, members: list[int]) -> Tensor:
        noise = self.dropout_noise(x.shape, x.device, members)
        return x if noise is None else x * noise

    def dropout_noise(self, shape, device, members: list[int]) -> Tensor | None:
        """One layer's inverted-dropout noise (P, B, units), or None where no member drops out (or
        in eval mode). Per member as dropout_noise: 1/(1 − p) where u < 1 − p, else 0; members
        without dropout draw nothing (as alone) and keep everything. Always float32, from the
        members' own streams: a bf16 pack draws the same masks as an fp32 one."""
        rates = [self.dropouts[m] for m in members]
        if not self.training or not any(rates):
            return None
        noise = torch.empty(shape, device=device)
        for start, end in _runs(rates):  # one run of equal rates at a time, in place
            p, part = rates[start], noise[start:end]
            if p == 0:
                part.fill_(1.0)
            else:
                self._uniforms(part, members[start:end]).lt_(1.0 - p).mul_(1.0 / (1.0 - p))
        return noise

    def keep(self, index: Tensor) -> None:
        """Keep only the members at ``index`` (new parameters: autograd keeps each one's shape)."""
        for params in (self.weights, self.biases):
            for i, param in enumerate(params):
                params[i] = nn.Parameter(param.detach()[index].contiguous())
        for stacked in self.learned:
            for key, param in stacked.items():
                stacked[key] = nn.Parameter(param.detach()[index].contiguous())

    def forward(self, x: Tensor, members: list[int], collect: list | None = None) -> Tensor:
        """``x``: (P, B, D) per-member inputs, or (B, D) shared by all members; returns (P, B, out)."""
        depth = 0  # activated layers so far
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            if x.dim() == 2:  # shared input (evaluation): every member reads the same rows (a stride-0 batch)
                x = x.expand(len(weight), *x.shape)
            x = torch.baddbmm(bias, x, weight)
            if self.activated[i]:
                x = self._activate(x, members, depth)
                depth += 1
                if collect is not None:
                    collect.append(x)
                x = self._dropout(x, members)
        return x


# Out-variants of the aten kernels that F.gelu, F.relu, F.elu, ... run forward and backward (ELU forward
# on the CPU: workers.activations.elu_into, as a trial alone runs it), per
# activation: (forward(x, out), backward(grad, x, out)). Used by _GroupedActivation.
_aten = torch.ops.aten
_INTO: dict[str, tuple[Callable, Callable]] = {
    "gelu": (lambda x, o: _aten.gelu.out(x, out=o), lambda g, x, o: _aten.gelu_backward.grad_input(g, x, grad_input=o)),
    "gelu_tanh": (lambda x, o: _aten.gelu.out(x, approximate="tanh", out=o),
                  lambda g, x, o: _aten.gelu_backward.grad_input(g, x, approximate="tanh", grad_input=o)),
    "relu": (lambda x, o: torch.clamp_min(x, 0, out=o),
             lambda g, x, o: _aten.threshold_backward.grad_input(g, x, 0, grad_input=o)),
    "elu": (lambda x, o: elu_into(x, o) if x.device.type == "cpu" else _aten.elu.out(x, 1.0, 1, 1, out=o),
            lambda g, x, o: _aten.elu_backward.grad_input(g, 1.0, 1, 1, False, x, grad_input=o)),
    "lrelu": (lambda x, o: _aten.leaky_relu.out(x, 0.1, out=o),
              lambda g, x, o: _aten.leaky_relu_backward.grad_input(g, x, 0.1, False, grad_input=o)),
    "silu": (lambda x, o: _aten.silu.out(x, out=o), lambda g, x, o: _aten.silu_backward.grad_input(g, x, grad_input=o)),
}


_PLAIN: dict[str, Callable[[Tensor], Tensor]] = {"gelu": F.gelu, "gelu_tanh": gelu_tanh, "relu": F.relu, "elu": elu,
                                                 "lrelu": lrelu, "silu": F.silu}


def _learned_key(name: str, value: Tensor) -> str:
    return f"{name}__unit" if value.dim() else name


class _GroupedActivation(torch.autograd.Function):
    """Each run of members its own activation, written into one output (and one input gradient).

    Slicing the runs and joining them with torch.cat costs a copy forward and, backward, a zeroed
    full-size gradient per slice: about a fifth of a pack's training step for the paper's MLP.
    The kernels are the ones autograd runs for each activation alone, so the values are the same
    bit for bit (tests/workers/test_fused.py)."""

    @staticmethod
    def forward(ctx, x: Tensor, groups: list[tuple[str, int, int]]) -> Tensor:
        out = torch.empty_like(x)
        for name, start, end in groups:
            _INTO[name][0](x[start:end], out[start:end])
        ctx.save_for_backward(x)
        ctx.groups = groups
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (x,), grad = ctx.saved_tensors, grad.contiguous()
        grad_in = torch.empty_like(x)
        for name, start, end in ctx.groups:
            _INTO[name][1](grad[start:end], x[start:end], grad_in[start:end])
        return grad_in, None


class CompiledStep:
    """A pack's training forward and loss under ``torch.compile`` (``execution.compile``).

    The layers, activations, dropout and loss of a step are traced as one graph, so Inductor fuses
    each layer's bias, activation and mask into the matmul's neighbours and the backward into as
    few kernels. The dropout noise is drawn before the call, eagerly, from the members' own
    streams in the order the eager step draws it, so compiled and eager packs see the same masks.
    It takes packs whose activations are all fixed functions (``_PLAIN``); for the others (SOI's
    sampled masks, learnable or expression activations) the pack steps eagerly. A new shape (the
    last, smaller batch; a member leaving the pack) compiles once more.
    """

    def __init__(self, net: StackedNet, task: str):
        self.net, self.task = net, task
        self.losses = torch.compile(_dense_losses, dynamic=False)

    def takes(self, members: list[int]) -> bool:
        return all(name in _PLAIN for name, _, _ in self.net._groups(members))

    def __call__(self, x: Tensor, y: Tensor, members: list[int]) -> Tensor:
        net, batch = self.net, x.shape[1]
        widths = [w.shape[2] for w, active in zip(net.weights, net.activated) if active]
        noises = tuple(net.dropout_noise((len(members), batch, width), x.device, members) for width in widths)
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
    """Adam or SGD (momentum, Nesterov, weight decay) on stacked parameters, with a per-member lr.

    The formulas are torch.optim's (single-tensor Adam and SGD), applied to all members at once.
    """

    def __init__(self, cfg: TrialConfig, params: list[nn.Parameter], lrs: list[float]):
        self.cfg, self.params = cfg, params
        self.lrs = list(lrs)
        self.base_lr = torch.tensor(lrs, device=params[0].device)
        self.factor = 1.0  # the schedule's multiple of the base lr
        self.step_count = 0
        self.state = [{} for _ in params]
        if cfg.optimizer == "adam":
            for state, param in zip(self.state, params):
                state["exp_avg"], state["exp_avg_sq"] = torch.zeros_like(param), torch.zeros_like(param)

    def keep(self, index: Tensor, params: list[nn.Parameter]) -> None:
        """Drop the members not in ``index``; ``params`` are the sliced parameters."""
        self.params = params
        self.base_lr = self.base_lr[index]
        self.lrs = [self.lrs[i] for i in index.tolist()]
        self.state = [{k: v[index] for k, v in state.items()} for state in self.state]

    def state_dict(self) -> dict:
        return {"state": self.state, "step_count": self.step_count}

    def load_state_dict(self, saved: dict) -> None:
        device = self.params[0].device
        self.state = [{k: v.to(device) for k, v in state.items()} for state in saved["state"]]
        self.step_count = saved["step_count"]

    @torch.no_grad()
    def step(self) -> None:
        cfg = self.cfg
        for param in self.params:  # (a learnable activation parameter no member in the pack uses)
            if param.grad is None:
                param.grad = torch.zeros_like(param)
        self.step_count += 1
        if cfg.optimizer == "adam":
            # torch.optim's functional Adam with its fused kernel (one pass over each tensor), once per
            # run of members with one lr: the update of torch.optim.Adam's default (m, v, bias
            # corrections, L2 weight decay into the gradient). Members step together, so their step
            # counts are equal: each call gets fresh counters at the count before this step.
            for start, end in _runs(self.lrs):
                part = slice(start, end)
                counters = [torch.full((), float(self.step_count - 1), device=self.params[0].device) for _ in self.params]
                adam([p[part] for p in self.params], [p.grad[part] for p in self.params],
                     [s["exp_avg"][part] for s in self.state], [s["exp_avg_sq"][part] for s in self.state], [],
                     counters, fused=True, amsgrad=False, lr=self.lrs[start] * self.factor, beta1=BETAS[0],
                     beta2=BETAS[1], weight_decay=cfg.weight_decay, eps=EPS, maximize=False)
            return
        for param, state in zip(self.params, self.state):
            lr = (self.base_lr * self.factor).view(-1, *([1] * (param.dim() - 1)))
            grad = param.grad if not cfg.weight_decay else param.grad.add(param, alpha=cfg.weight_decay)
            if cfg.momentum:  # torch.optim.SGD, dampening 0
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = grad.clone()
                else:
                    state["momentum_buffer"].mul_(cfg.momentum).add_(grad)
                buffer = state["momentum_buffer"]
                grad = grad.add(buffer, alpha=cfg.momentum) if cfg.nesterov else buffer
            param.sub_(grad * lr)


def _runs(values: list) -> list[tuple[int, int]]:
    """(start, end) of each run of equal consecutive values."""
    starts = [i for i, v in enumerate(values) if i == 0 or v != values[i - 1]]
    return list(zip(starts, starts[1:] + [len(values)]))


def _mask_stream(seed: int, device: torch.device) -> torch.Generator:
    """The stream the reference trial's masks come from: the global generator after the
    network was built under ``seed`` (CPU), or the device's generator seeded with it (CUDA)."""
    if device.type == "cpu":
        return torch.Generator().set_state(torch.get_rng_state())
    return torch.Generator(device=device).manual_seed(seed)


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
    StackedOptimizer, each member's mask stream, and which members are still in it."""

    def __init__(self, cfgs: list[TrialConfig], splits: Splits, device: torch.device):
        self.cfgs, self.first, self.device = cfgs, cfgs[0], device
        references, self.masks = [], []
        for cfg in cfgs:  # per member: the reference network under its seed, then its mask stream
            torch.manual_seed(cfg.seed)
            references.append(build_model(cfg.model, splits.in_shape, splits.n_classes, cfg.activation_def, cfg.dropout))
            self.masks.append(_mask_stream(cfg.seed, device))
        self.net = StackedNet(references, [c.activation for c in cfgs], [c.dropout for c in cfgs]).to(device)
        self.net.generators = self.masks
        self.optimizer = StackedOptimizer(self.first, list(self.net.parameters()), [c.lr for c in cfgs])
        self.members = list(range(len(cfgs)))
        self.compiled = CompiledStep(self.net, self.first.task) if self.first.compile else None

    def place(self, arrays: list) -> list[Tensor]:
        """All of the data on the device, inputs as vectors (the pack's layers are matmuls)."""
        return [torch.as_tensor(a, device=self.device).flatten(1) if i % 2 == 0 else torch.as_tensor(a, device=self.device)
                for i, a in enumerate(arrays)]

    def batch(self, x: Tensor, y: Tensor, idx: Tensor, orders: list) -> tuple[Tensor, Tensor]:
        # (P, B): each member its own examples; index_select copies whole rows, ~3x faster than x[idx]
        return x.index_select(0, idx.flatten()).view(*idx.shape, -1), y.index_select(0, idx.flatten()).view(idx.shape)

    def train(self) -> None:
        self.net.train()

    def losses(self, x: Tensor, y: Tensor) -> Tensor:
        if self.compiled is not None and self.compiled.takes(self.members):
            return self.compiled(x, y, self.members)
        return _losses(self.net(x, self.members), x, y, self.first.task)[0]

    def zero_grad(self) -> None:
        for param in self.net.parameters():
            param.grad = None

    def step(self, lr_factor: float) -> None:
        self.optimizer.factor = lr_factor
        self.optimizer.step()

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
        self.optimizer.keep(index, list(self.net.parameters()))
        self.members = [self.members[i] for i in positions]

    def state(self) -> dict:
        return {"net": self.net.state_dict(), "optimizer": self.optimizer.state_dict(),
                "masks": [g.get_state() for g in self.masks]}

    def restore(self, state: dict) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        for generator, saved in zip(self.masks, state["masks"]):
            generator.set_state(saved)


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
    yield from train_members(StackedPack(cfgs, splits, torch.device(device)), splits, resume=resume, on_state=on_state)


@torch.no_grad()
def _unit_activations(net: StackedNet, members: list[int], x: Tensor) -> list[Tensor]:
    """Per layer: each member's units' mean activations (P, units), for
    workers.train.unit_activation_medians."""
    outputs: list[Tensor] = []
    net.eval()
    net(x, members, collect=outputs)
    net.train()
    return [out.float().mean(dim=1) for out in outputs]
