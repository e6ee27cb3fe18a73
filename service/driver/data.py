"""A spec's dataset, loaded for a sweep (light: numpy, no torch, so the CLI can load it while the
rest imports)."""
from __future__ import annotations

from search_spaces import SweepSpec
from service.settings import Settings
from workers.data import Splits, load_dataset


def load_splits(spec: SweepSpec, settings: Settings) -> Splits:
    """The spec's dataset; raises DatasetNotFound (with instructions) before anything starts."""
    return load_dataset(spec.dataset, settings.resolved_data_dir, settings.download, spec.val_size,
                        spec.train_subset, spec.data_options.model_dump(), settings.resolved_dataset_cache_dir)
