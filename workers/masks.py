"""Dropout and SOI masks from a counter-based generator: the same bits for a member alone, in any
pack, on any device.

A mask element is a pure function of (the trial's seed, the optimiser step, the draw site, the
element's position), not a position in some generator's stream:

    u = top 24 bits of mix(counters[site][b, i] ^ key(seed, step)) / 2**24      (float32, in [0, 1))

- ``key(seed, step)`` mixes the trial's seed (:func:`seed_key`) with the step, per member: one
  (P,) int32 tensor per step for a whole pack;
- ``counters[site]`` hashes the element's flat index within the site's (batch, width) block
  together with the site (:func:`site_counters`); it depends on shapes only, so it is made once
  and kept;
- a site is one draw of one layer: ``2 * layer`` for SOI's Bernoulli(Φ(x)) mask, ``2 * layer + 1``
  for dropout's (layers counted from 0, in forward order; :func:`site`).

``mix`` is Chris Wellons' ``lowbias32`` integer hash (two multiply-xorshift rounds), written
as int32 torch operations: multiplication wraps modulo 2**32 on every device, and a logical shift
is an arithmetic one masked. So the CPU and a GPU draw the same bits (integer arithmetic has no
rounding), a pack of 360 members draws every mask of a step in one pass of about a dozen kernels
(workers.fused), and a member's masks do not depend on who shares its pack. A lone trial draws
the same elements site by site (workers.activations.Dropout, soi_map).

Dropout keeps an element where u < 1 − p, as before (and as ``torch.rand`` did), decided on the
bits (:func:`keep_threshold`); SOI keeps it where u < Φ(x). 24 bits is float32's mantissa: every u
is exact and P(u < t) = t to 2**-24.
Statistical checks (rates, independence across members, steps, layers and elements):
tests/workers/test_masks.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import math
from functools import lru_cache

import torch
from torch import Tensor

_M1, _M2 = 0x7FEB352D, 0x846CA68B  # lowbias32's multipliers
GOLDEN = 0x9E3779B9  # 2**32 / φ: spreads consecutive integers (sites, steps) over the 32 bits
_U32 = 0xFFFFFFFF
SOI, DROPOUT = 0, 1  # a site's kind: site = 2 * layer + kind


def site(layer: int, kind: int) -> int:
    """The draw site of activation layer ``layer`` (0-based): SOI's mask or the dropout mask after it."""
    return 2 * layer + kind


def _signed(value: int) -> int:
    value &= _U32
    return value - (1 << 32) if value >= 1 << 31 else value


def mix32_int(value: int) -> int:
    """lowbias32 on a Python int (unsigned 32-bit result): keys and salts, computed once."""
    value &= _U32
    value ^= value >> 16
    value = (value * _M1) & _U32
    value ^= value >> 15
    value = (value * _M2) & _U32
    return value ^ (value >> 16)


def mix32_(h: Tensor, scratch: Tensor | None = None) -> Tensor:
    """lowbias32 in place on an int32 tensor (bits as unsigned): wrapping multiplies and logical shifts."""
    scratch = torch.empty_like(h) if scratch is None else scratch
    for shift, multiplier in ((16, _M1), (15, _M2), (16, None)):
        torch.bitwise_right_shift(h, shift, out=scratch)
        scratch &= (1 << (32 - shift)) - 1  # an arithmetic shift of a negative int32, made logical
        h ^= scratch
        if multiplier is not None:
            h *= _signed(multiplier)
    return h


def seed_key(seed: int) -> int:
    """A trial seed as a 32-bit key (seeds of any size: the high bits are mixed in)."""
    return mix32_int(mix32_int(seed & _U32) ^ mix32_int((seed >> 32) + GOLDEN))


def step_salt(step: int) -> int:
    """What a step mixes into every seed key (a signed int32)."""
    return _signed(mix32_int(step * GOLDEN + 1))


def step_keys(seed_keys: Tensor, step: int | Tensor) -> Tensor:
    """The (P,) int32 keys of a step: each member's seed key mixed with the step. ``step`` is the
    step, or a 0-d int32 tensor holding its :func:`step_salt` (a CUDA graph's input, which the
    replay sets: workers.graphs)."""
    return mix32_(seed_keys ^ (step if isinstance(step, Tensor) else step_salt(step)))


def seed_keys(seeds: list[int], device) -> Tensor:
    """The members' seed keys as an int32 tensor on ``device``."""
    return torch.tensor([_signed(seed_key(s)) for s in seeds], dtype=torch.int32, device=device)


@lru_cache(maxsize=256)
def site_counters(batch: int, width: int, site_id: int, device: torch.device) -> Tensor:
    """The hashed positions of a site's (batch, width) block (int32); depends on shapes only."""
    salt = _signed(mix32_int((site_id + 1) * GOLDEN))
    index = torch.arange(batch * width, dtype=torch.int32, device=device).view(batch, width)
    return mix32_(index ^ salt)


def hashes(keys: Tensor, counters: Tensor) -> Tensor:
    """The 32 random bits of every element (int32, bits as unsigned), (P, *counters.shape):
    element [j, ...] from member j's key. About a dozen elementwise kernels whatever P is."""
    h = counters.unsqueeze(0) ^ keys.view(-1, *([1] * counters.dim()))
    return mix32_(h)


def uniforms(keys: Tensor, counters: Tensor) -> Tensor:
    """U[0, 1) in float32 from the top 24 bits of :func:`hashes` (SOI's u, compared with Φ(x))."""
    h = hashes(keys, counters)
    torch.bitwise_right_shift(h, 8, out=h)
    h &= 0xFFFFFF
    return h.float().mul_(2.0 ** -24)


def keep_threshold(p: float) -> int:
    """The signed int32 t with [u < 1 − p] = [(h ^ 0x80000000) ≤ t] for u from the top 24 bits of h:
    dropout decided on the bits, without making the uniforms (four passes fewer). 1 − p is taken in
    float32, as ``u < 1 - p`` compares it."""
    q = torch.tensor(1.0 - p, dtype=torch.float32).item()
    return math.ceil(q * 2 ** 24) * 256 - 1 - 2 ** 31


def kept(keys: Tensor, counters: Tensor, thresholds: Tensor) -> Tensor:
    """Dropout's keep mask (bool, (P, *counters.shape)): member j keeps an element where its
    u < 1 − p_j, ``thresholds`` (P,) from :func:`keep_threshold`."""
    h = hashes(keys, counters)
    h ^= -2 ** 31  # unsigned order as signed order
    return h <= thresholds.view(-1, *([1] * counters.dim()))


def kept_noise(keys: Tensor, counters: Tensor, thresholds: Tensor, scales: Tensor, out: Tensor | None = None) -> Tensor:
    """Inverted dropout's noise (float32, (P, *counters.shape)): member j's ``scales[j]`` (1/(1 − p_j))
    where :func:`kept` keeps the element, else 0; written into ``out`` where given. The same values
    as ``torch.where(kept(...), scales, 0)`` (1·s and 0·s are exact), in two passes instead of a
    broadcast select, which on a CPU took ten times as long (docs/speed-cpu.md)."""
    h = hashes(keys, counters)
    h ^= -2 ** 31  # unsigned order as signed order
    per_row = (-1, *([1] * counters.dim()))
    out = torch.empty(h.shape, dtype=torch.float32, device=h.device) if out is None else out
    return torch.le(h, thresholds.view(per_row), out=out).mul_(scales.view(per_row))


@dataclass
class MaskClock:
    """Where a lone network's masks stand: its seed's key and the optimiser step. A model built by
    workers.models carries one (``mask_clock``) shared by its Dropout and SOI layers; the training
    loop sets ``step`` before each forward. ``key`` None: the layers draw from the global generator
    (a network used outside the training loop)."""

    key: Tensor | None = None
    step: int = 0
    _cached: dict = field(default_factory=dict)

    def start(self, seed: int, device) -> None:
        self.key = seed_keys([seed], device)

    def _keys(self, device) -> Tensor:
        if self._cached.get("step") != self.step:
            self._cached = {"step": self.step, "keys": step_keys(self.key.to(device), self.step)}
        return self._cached["keys"]

    @staticmethod
    def _counters(site_id: int, shape, device) -> Tensor:
        return site_counters(shape[0], int(torch.Size(shape[1:]).numel()), site_id, torch.device(device))

    def draw(self, site_id: int, shape, device) -> Tensor | None:
        """U[0, 1) of ``shape`` (batch first) at this step and site; None without a key."""
        if self.key is None:
            return None
        return uniforms(self._keys(device), self._counters(site_id, shape, device))[0].view(shape)

    def keep(self, site_id: int, shape, device, p: float) -> Tensor | None:
        """Dropout's keep mask of ``shape`` at this step and site (u < 1 − p); None without a key."""
        if self.key is None:
            return None
        counters = self._counters(site_id, shape, device)
        threshold = torch.tensor([keep_threshold(p)], dtype=torch.int32, device=device)
        return kept(self._keys(device), counters, threshold)[0].view(shape)
