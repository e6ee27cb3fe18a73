"""Whether a spec can run at all, decided before anything is recorded or started: each activation's
f and f′ finite on a probe tensor (workers.activations.probe), and one trial's memory and the
sweep's work within bounds (workers.footprint, on the meta device). The API asks its worker process
(service.control.worker) for this, so the API itself never imports torch."""
from __future__ import annotations

from workers.activation_defs import ActivationError
from workers.activations import probe
from workers.footprint import unaffordable


def refusal(spec, node_memory_bytes: float, max_sweep_flops: float) -> tuple[str, str] | None:
    """Why ``spec`` cannot run, as (the spec's field to change, the reason), or None where it can."""
    for name in spec.activation:
        try:
            probe(spec.activation_def(name))
        except ActivationError as exc:
            return "activation", str(exc).removeprefix("activation: ")
    return unaffordable(spec, node_memory_bytes, max_sweep_flops)
