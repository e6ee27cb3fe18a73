"""One trial's optimiser: Adam or SGD on torch.optim's functional updates.

The arithmetic is torch.optim.Adam's and torch.optim.SGD's, bit for bit: each step calls the same
functional update (``torch.optim.adam.adam``, ``torch.optim.sgd.sgd``) on the same lists that the
classes build (the parameters with a gradient, their lazily created state), with the same
defaults (no AMSGrad, L2 weight decay into the gradient, dampening 0, torch's choice of the
single-tensor or multi-tensor kernel for the device). tests/workers/test_optim.py checks that
against the classes step by step, and the committed records are reproduced by
tests/workers/test_rerun_matches_records.py.

Why not the classes: building a torch.optim optimiser imports ``torch._dynamo`` (its
``add_param_group`` and ``state_dict`` are wrapped to disable Dynamo), about 1 CPU-s in every trial
worker process; the functional updates do not import it (docs/testing.md, "Where the time goes").

On a GPU the optimiser runs "on the device" (``on_device``): the lr is a 0-d float32 tensor there,
set by :meth:`TrialOptimizer.set_lr` before each step, and Adam's step counts live there too, so
that one step's update is a CUDA graph's to capture, schedule included (workers.graphs). Adam is
then torch's fused Adam (its arithmetic, in one kernel, counting on the device), SGD the same
formulas as foreach ops with the lr a tensor (torch's SGD reads a tensor lr back to the host).
On a CPU it runs as above, the lr a float (the committed records were trained so).

Checkpoints keep torch.optim's ``state_dict`` layout (``state`` by parameter index, one entry in
``param_groups``), so a trial checkpointed by either resumes with the other.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.optim.adam import adam
from torch.optim.sgd import sgd

BETAS = (0.9, 0.999)  # torch.optim.Adam's defaults, as the papers' Adam (Kingma & Ba)
EPS = 1e-8


class TrialOptimizer:
    """Adam or SGD (momentum, Nesterov, L2 weight decay) over one list of parameters.

    ``lr`` is the base learning rate; ``step(lr)`` takes the scheduled one (or ``set_lr(lr)`` then
    ``step()``). Parameters without a gradient (a learnable activation parameter no layer used) are
    skipped, as torch.optim does. ``on_device``: the lr and Adam's step counts are tensors on the
    parameters' device, and a step makes no host-side decision once every state exists (the
    module's docstring).
    """

    def __init__(self, kind: str, params, *, lr: float, weight_decay: float = 0.0,
                 momentum: float = 0.0, nesterov: bool = False, on_device: bool = False):
        if kind not in ("adam", "sgd"):
            raise ValueError(f"optimizer: unknown {kind!r}; accepted: adam, sgd")
        if kind == "sgd" and nesterov and momentum <= 0:
            raise ValueError("nesterov: needs a momentum above 0 (torch.optim.SGD)")
        self.kind, self.lr, self.weight_decay = kind, lr, weight_decay
        self.momentum, self.nesterov = momentum, nesterov
        self.params: list[nn.Parameter] = list(params)
        self.state: list[dict[str, Tensor]] = [{} for _ in self.params]
        self.on_device = on_device
        device = self.params[0].device if self.params else torch.device("cpu")
        self.lr_now = torch.full((), float(lr), device=device) if on_device else None  # float32, as torch's fused Adam reads it
        self.lr_set = float(lr)  # (the value lr_now holds: written again only when it moves)

    def set_lr(self, lr: float) -> None:
        """The lr of the next steps: written into the device's lr tensor when it moves (one small
        kernel, no wait), or kept as a float on a CPU."""
        if lr != self.lr_set:
            self.lr_set = lr
            if self.lr_now is not None:
                self.lr_now.fill_(lr)

    def zero_grad(self) -> None:
        for param in self.params:
            param.grad = None

    @torch.no_grad()
    def step(self, lr: float | None = None) -> None:
        """One update at ``lr`` (None: the lr of :meth:`set_lr`, at first the base lr)."""
        if lr is not None:
            self.set_lr(lr)
        stepped = [i for i, p in enumerate(self.params) if p.grad is not None]
        params = [self.params[i] for i in stepped]
        grads = [p.grad for p in params]
        states = [self.state[i] for i in stepped]
        if self.kind == "adam":
            for param, state in zip(params, states):
                if not state:  # created at a parameter's first step, as torch.optim.Adam does
                    # (its step count on the device where the optimiser runs there: fused Adam counts there)
                    state["step"] = (torch.zeros((), dtype=torch.float32, device=param.device) if self.on_device
                                     else torch.tensor(0.0, dtype=torch.get_default_dtype()))
                    state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            kernel = {"fused": True, "lr": self.lr_now} if self.on_device else {
                "has_complex": any(torch.is_complex(p) for p in params), "lr": self.lr_set}
            adam(params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [],
                 [s["step"] for s in states], amsgrad=False, beta1=BETAS[0], beta2=BETAS[1],
                 weight_decay=self.weight_decay, eps=EPS, maximize=False, **kernel)
            return
        if self.on_device:
            return self._sgd_on_device(params, grads, states)
        buffers = [s.get("momentum_buffer") for s in states]
        sgd(params, grads, buffers, weight_decay=self.weight_decay, momentum=self.momentum, lr=self.lr_set,
            dampening=0.0, nesterov=self.nesterov, maximize=False)
        if self.momentum:  # the first step creates each buffer (a copy of the gradient)
            for state, buffer in zip(states, buffers):
                state["momentum_buffer"] = buffer

    def _sgd_on_device(self, params: list, grads: list, states: list) -> None:
        """SGD with the lr tensor: what a CUDA graph captures (no host-side branch once the momentum
        buffers exist: a graph's warm-up steps make them)."""
        # SGD, torch.optim.SGD's formulas (dampening 0): g += wd·p; b = μ·b + g (b = g at first);
        # Nesterov: g + μ·b, else b; then p −= lr·(that), the lr read on the device
        if self.weight_decay:
            grads = torch._foreach_add(grads, params, alpha=self.weight_decay)
        if self.momentum:
            if any("momentum_buffer" not in s for s in states):  # the first step (eager: a warm-up)
                for state, grad in zip(states, grads):
                    state["momentum_buffer"] = torch.clone(grad).detach()
            else:
                buffers = [s["momentum_buffer"] for s in states]
                torch._foreach_mul_(buffers, self.momentum)
                torch._foreach_add_(buffers, grads)
            buffers = [s["momentum_buffer"] for s in states]
            grads = torch._foreach_add(grads, buffers, alpha=self.momentum) if self.nesterov else buffers
        torch._foreach_sub_(params, torch._foreach_mul(grads, self.lr_now))

    def state_dict(self) -> dict:
        """torch.optim's layout: ``state`` by parameter index (only those stepped), one group."""
        group = {"lr": self.lr, "weight_decay": self.weight_decay, "params": list(range(len(self.params)))}
        group |= ({"betas": BETAS, "eps": EPS, "amsgrad": False} if self.kind == "adam" else
                  {"momentum": self.momentum, "nesterov": self.nesterov, "dampening": 0.0})
        return {"state": {i: dict(s) for i, s in enumerate(self.state) if s}, "param_groups": [group]}

    def load_state_dict(self, saved: dict) -> None:
        """Restore from :meth:`state_dict` or a torch.optim optimiser's over the same parameters."""
        (group,) = saved["param_groups"]
        if len(group["params"]) != len(self.params):
            raise ValueError(f"optimizer state: {len(group['params'])} parameters saved, "
                             f"{len(self.params)} in this model")
        self.state = [{} for _ in self.params]
        for index, state in saved["state"].items():
            position = group["params"].index(int(index))  # torch.optim maps saved ids by position
            param = self.params[position]
            # moments go where their parameter is; Adam's step count stays a CPU scalar (torch.optim),
            # or goes to the device with them where the optimiser runs there
            self.state[position] = {key: (value.to(param.device, torch.float32) if self.on_device else value.cpu())
                                    if key == "step" else value.to(param.device, param.dtype)
                                    for key, value in state.items()}
