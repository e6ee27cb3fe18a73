"""A trial's matmul precision (``execution.dtype``): where its forward passes run in bfloat16 or TF32.

- fp32: everything in float32.
- bf16: matmuls (and convolutions) under ``torch.autocast`` in bfloat16; the weights, their
  gradients and the optimiser state stay float32 (the "master weights"), and losses are taken in
  float32. Dropout and SOI masks are drawn in float32 from the same streams as in fp32, so a bf16
  trial sees the same masks and data order as its fp32 twin and differs only by rounding.
- tf32: CUDA's TF32 tensor-core matmuls (fp32 storage, 10-bit mantissa products); on a CPU there
  is no TF32 and the trial runs in fp32.
"""
from __future__ import annotations

import contextlib

import torch

DTYPES = ("fp32", "bf16", "tf32")


def forward_precision(dtype: str, device: torch.device, cache: bool = True):
    """The context a trial's forward passes (training and evaluation) run in. ``cache`` False: bf16's
    autocast keeps no casts between calls (what a CUDA graph's capture needs; the values are the same)."""
    if dtype not in DTYPES:
        raise ValueError(f"execution.dtype: unknown {dtype!r}; accepted: {', '.join(DTYPES)}")
    if dtype == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, cache_enabled=cache)
    if dtype == "tf32" and device.type == "cuda":
        return _TF32()
    return contextlib.nullcontext()


class _TF32:
    """TF32 matmuls inside, the previous setting after (re-enterable, as torch.autocast)."""

    def __enter__(self):
        self.saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved


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
