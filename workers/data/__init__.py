"""Datasets as in-memory arrays, split into train / validation / test.

Every loader (one module each, named in workers.registry.DATASETS) returns a :class:`Splits` of
float32 feature arrays and int64 labels. The arrays travel to Ray workers through the object
store once per sweep, and the training loop moves them to the trial's device once and batches by
indexing (no per-sample DataLoader); ImageNet's files are read batch by batch instead.

The validation split is held out of the training set with a fixed generator, independent of
the trial seed, so every trial of a sweep is validated on the same examples (GELU paper §3.1:
"5k validation examples held out of the training set").
"""
from __future__ import annotations

from pathlib import Path

from workers.data.decoded import cache_in
from workers.data.splits import DatasetNotFound, Splits, SplitError
from workers.registry import DATASETS

__all__ = ["DatasetNotFound", "SplitError", "Splits", "load_dataset"]


def load_dataset(name: str, data_dir: Path, download: bool, val_size: int,
                 train_subset: int | None = None, options: dict | None = None,
                 cache_dir: Path | None = None) -> Splits:
    """The named dataset's splits; raises :class:`DatasetNotFound` with instructions if absent.

    ``options`` are the spec's ``data_options`` (preprocessing, embeddings file, image size, ...).
    ``cache_dir`` keeps decoded copies of compressed files (workers.data.decoded: MNIST's pickle).
    """
    with cache_in(cache_dir):
        return DATASETS.get(name)(Path(data_dir), download, val_size, train_subset, options or {})
