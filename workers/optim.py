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
worker process; the functional updates do not import it (docs/testing.md, the seventh round).

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

    ``lr`` is the base learning rate; ``step(lr)`` takes the scheduled one. Parameters without a
    gradient (a learnable activation parameter no layer used) are skipped, as torch.optim does.
    """

    def __init__(self, kind: str, params, *, lr: float, weight_decay: float = 0.0,
                 momentum: float = 0.0, nesterov: bool = False):
        if kind not in ("adam", "sgd"):
            raise ValueError(f"optimizer: unknown {kind!r}; accepted: adam, sgd")
        if kind == "sgd" and nesterov and momentum <= 0:
            raise ValueError("nesterov: needs a momentum above 0 (torch.optim.SGD)")
        self.kind, self.lr, self.weight_decay = kind, lr, weight_decay
        self.momentum, self.nesterov = momentum, nesterov
        self.params: list[nn.Parameter] = list(params)
        self.state: list[dict[str, Tensor]] = [{} for _ in self.params]

    def zero_grad(self) -> None:
        for param in self.params:
            param.grad = None

    @torch.no_grad()
    def step(self, lr: float | None = None) -> None:
        lr = self.lr if lr is None else lr
        stepped = [i for i, p in enumerate(self.params) if p.grad is not None]
        params = [self.params[i] for i in stepped]
        grads = [p.grad for p in params]
        states = [self.state[i] for i in stepped]
        if self.kind == "adam":
            for param, state in zip(params, states):
                if not state:  # created at a parameter's first step, as torch.optim.Adam does
                    state["step"] = torch.tensor(0.0, dtype=torch.get_default_dtype())
                    state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            adam(params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [],
                 [s["step"] for s in states], has_complex=any(torch.is_complex(p) for p in params),
                 amsgrad=False, beta1=BETAS[0], beta2=BETAS[1], lr=lr, weight_decay=self.weight_decay,
                 eps=EPS, maximize=False)
            return
        buffers = [s.get("momentum_buffer") for s in states]
        sgd(params, grads, buffers, weight_decay=self.weight_decay, momentum=self.momentum, lr=lr,
            dampening=0.0, nesterov=self.nesterov, maximize=False)
        if self.momentum:  # the first step creates each buffer (a copy of the gradient)
            for state, buffer in zip(states, buffers):
                state["momentum_buffer"] = buffer

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
            # moments go where their parameter is; Adam's step count stays a CPU scalar (torch.optim)
            self.state[position] = {key: value if key == "step" else value.to(param.device, param.dtype)
                                    for key, value in state.items()}
