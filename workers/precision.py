"""A trial's matmul precision (``execution.dtype``): where its matmuls and convolutions run in
bfloat16 or TF32.

- fp32: everything in float32: TF32 is off for cuBLAS matmuls and for cuDNN convolutions for the
  whole trial. (PyTorch's own default leaves ``torch.backends.cudnn.allow_tf32`` on, so without this
  an "fp32" convolution on an Ampere or Hopper GPU runs in TF32.)
- bf16: matmuls (and convolutions) under ``torch.autocast`` in bfloat16; the weights, their
  gradients and the optimiser state stay float32 (the "master weights"), and losses are taken in
  float32; what autocast leaves in float32 is true fp32 (TF32 off). Dropout and SOI masks are
  drawn in float32 from the same streams as in fp32, so a bf16 trial sees the same masks and data
  order as its fp32 twin and differs only by rounding.
- tf32: CUDA's TF32 tensor cores for matmuls and convolutions (fp32 storage, 10-bit mantissa
  products), forward and backward; on a CPU there is no TF32 and the trial runs in fp32.

:func:`trial_precision` sets the switches for a trial (workers.train.train_members holds it for the
trial's whole run: the backward pass reads them too); :func:`forward_precision` is the context of
its forward passes (bf16's autocast).
"""
from __future__ import annotations

import contextlib

import torch

DTYPES = ("fp32", "bf16", "tf32")


def _check(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"execution.dtype: unknown {dtype!r}; accepted: {', '.join(DTYPES)}")


def forward_precision(dtype: str, device: torch.device, cache: bool = True):
    """The context a trial's forward passes (training and evaluation) run in. ``cache`` False: bf16's
    autocast keeps no casts between calls (what a CUDA graph's capture needs; the values are the same)."""
    _check(dtype)
    if dtype == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, cache_enabled=cache)
    if dtype == "tf32" and device.type == "cuda":
        return _TF32()
    return contextlib.nullcontext()


def tf32_switches() -> dict[str, object]:
    """The three process-wide settings that decide whether float32 matmuls and convolutions may use
    TF32: cuBLAS's, cuDNN's, and torch's float32 matmul precision ("highest" is none)."""
    return {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32,
            "precision": torch.get_float32_matmul_precision()}


def set_tf32(on: bool) -> dict[str, object]:
    """TF32 on (or off) for matmuls and cuDNN convolutions alike; returns the settings before, for
    :func:`restore_tf32`. Settable without a GPU: they are flags read when a kernel is chosen."""
    saved = tf32_switches()
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    torch.set_float32_matmul_precision("high" if on else "highest")
    return saved


def restore_tf32(saved: dict[str, object]) -> None:
    """Put back what :func:`set_tf32` found."""
    torch.set_float32_matmul_precision(saved["precision"])
    torch.backends.cuda.matmul.allow_tf32 = saved["matmul"]
    torch.backends.cudnn.allow_tf32 = saved["cudnn"]


@contextlib.contextmanager
def trial_precision(dtype: str, device: torch.device):
    """For a trial's run: TF32 on for ``tf32`` on a GPU, off otherwise (``fp32`` means fp32, and bf16's
    float32 parts too); the process's settings come back after."""
    _check(dtype)
    saved = set_tf32(dtype == "tf32" and torch.device(device).type == "cuda")
    try:
        yield
    finally:
        restore_tf32(saved)


@contextlib.contextmanager
def cudnn_benchmark(device: torch.device):
    """On a GPU, cuDNN's benchmark mode for a trial's run: it times the convolution algorithms once
    per shape and keeps the fastest (the same arithmetic to rounding; the choice can differ between
    runs, as the algorithm of any one cuDNN call can). Off again after."""
    if torch.device(device).type != "cuda":
        yield
        return
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved


class _TF32:
    """TF32 matmuls and convolutions inside, the previous settings after (re-enterable, as torch.autocast)."""

    def __enter__(self):
        self.saved = set_tf32(True)

    def __exit__(self, *exc):
        restore_tf32(self.saved)


def has_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 dot products in hardware (AVX512-BF16 or AMX); without
    it bf16 matmuls are emulated and usually slower than fp32."""
    flags = set()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    return bool(flags & {"avx512_bf16", "amx_bf16"})
