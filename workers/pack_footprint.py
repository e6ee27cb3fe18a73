"""A fused pack's memory footprint as a value (measured by workers.pack_memory): torch-free, so the
sweep's driver reads a measurement made elsewhere (a Ray task) without importing torch."""
from __future__ import annotations

from dataclasses import dataclass

MIB = 2 ** 20


@dataclass(frozen=True)
class PackFootprint:
    """A pack of P members holds ``fixed + P * per_member`` bytes on its device."""

    fixed: int       # bytes: the dataset on the device, once per pack
    per_member: int  # bytes: weights, gradients, optimiser state, saved activations, eval buffers

    def bytes(self, members: int) -> int:
        return self.fixed + members * self.per_member

    def largest_pack(self, budget: int) -> int:
        """The most members whose pack fits in ``budget`` bytes (0 if not even one does)."""
        return max(0, (budget - self.fixed) // self.per_member)

    def describe(self) -> str:
        return f"{self.fixed / MIB:.0f} MiB of data + {self.per_member / MIB:.1f} MiB per member"
