"""What a sweep trains, phase by phase: the grid, the lr searches, the retraining on all the data.

:meth:`search_spaces.SweepSpec.plan` gives the :class:`Plan`; the driver (service.driver)
runs it. Torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from workers.trial import GridPoint, Pack


@dataclass(frozen=True)
class LrSearch:
    """An Optuna search over the lr for one (activation, dropout): ``num_samples`` suggestions,
    each run once per seed (Tune's Repeater), learning from the mean over seeds of ``metric``."""

    activation: str
    dropout: float
    lr_low: float
    lr_high: float
    log: bool
    num_samples: int
    metric: str
    sampler_seed: int
    seeds: tuple[int, ...]

    @property
    def trials(self) -> int:
        return self.num_samples * len(self.seeds)


@dataclass(frozen=True)
class Plan:
    """The phases of a sweep. ``grid`` and ``searches`` run first; with ``retrain_on_full`` the lr
    chosen on validation per (activation, dropout) is trained again on all the training data
    (GELU paper §3.5), once per seed: :meth:`retrain_points`."""

    settings: dict  # what every trial shares (SweepSpec.trial_base())
    grid: list[GridPoint] = field(default_factory=list)
    searches: list[LrSearch] = field(default_factory=list)
    retrain_on_full: bool = False
    seeds: tuple[int, ...] = ()

    @property
    def trials(self) -> int:
        """Trials of the first phase (the retraining's count depends on what it chooses)."""
        return len(self.grid) + sum(s.trials for s in self.searches)

    def retrain_points(self, chosen: list[tuple[str, float, float]]) -> list[GridPoint]:
        """The retraining phase: each chosen (activation, dropout, lr), once per seed."""
        return [GridPoint(a, float(lr), float(d), seed) for a, d, lr in chosen for seed in self.seeds]


def packs(points: list[GridPoint], pack_size: int, slots: int = 1) -> list[Pack]:
    """Grid points in fused packs of at most ``pack_size``, so that no slot idles while the last pack
    trains: the number of packs is a multiple of ``slots`` (the packs the cluster runs at once), and
    their sizes differ by one at most.

    Members with one seed share a pack where they can: the points are taken seed by seed, in
    contiguous runs, so a pack holds one seed, or two where a seed's points span two packs. Members
    with one seed draw one data order and one set of noisy test copies (workers.train), which a
    pack then draws once. Within a seed the activations come innermost, so each pack has about the
    same mix of them (an ELU costs more than a ReLU). Within a pack, members are sorted by
    activation and lr: one activation kernel and one Adam update per run of them."""
    ordered = sorted(points, key=lambda p: (p.seed, p.lr, p.dropout, p.activation))
    count = -(-len(ordered) // pack_size)
    count = min(len(ordered), -(-count // slots) * slots)
    size, extra = divmod(len(ordered), count)
    bounds = [k * size + min(k, extra) for k in range(count + 1)]  # the first `extra` packs one larger
    return [Pack(tuple(sorted(ordered[start:end], key=lambda p: (p.activation, p.lr, p.dropout, p.seed))))
            for start, end in zip(bounds, bounds[1:])]
