"""What every dataset loader returns: in-memory train / validation / test arrays."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

import numpy as np

SPLIT_SEED = 0  # fixed: the validation set must not depend on the trial seed


class DatasetNotFound(Exception):
    """The data is not in any place the loader knows; the message says how to provide it."""


class SplitError(ValueError):
    """A split the spec asks for that the dataset cannot give (a validation set as large as it);
    the message names the field."""


@dataclass
class Splits:
    name: str
    source: str  # where the data came from, recorded on the parent run
    train_x: np.ndarray
    train_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    n_classes: int  # classes or tags; 0 for reconstruction data
    vocab: list[str] = field(default_factory=list)  # token datasets: id → word
    embeddings: np.ndarray | None = None  # token datasets: a pretrained table, rows by id

    @property
    def in_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])

    @property
    def in_dim(self) -> int:
        return int(np.prod(self.in_shape))

    def with_validation_in_training(self) -> "Splits":
        """All the training data: the validation examples join the training set (they stay the
        validation set too, so its metrics are no longer held out)."""
        return replace(self, train_x=np.concatenate([self.train_x, self.val_x]),
                       train_y=np.concatenate([self.train_y, self.val_y]))

    def arrays(self) -> tuple:
        """The six arrays: train, validation and test inputs and targets."""
        return self.train_x, self.train_y, self.val_x, self.val_y, self.test_x, self.test_y

    def fingerprint(self) -> str:
        """A hash of what the data holds (the first rows of each split, their shapes and types), so
        that the same dataset from another source or scaled otherwise (k/255 against k/256) is
        another dataset to the trial cache."""
        digest = hashlib.sha256(self.name.encode())
        for array in self.arrays():
            if hasattr(array, "paths"):  # images read from files (workers.data.imagenet)
                digest.update("\n".join(array.paths[:256]).encode())
                continue
            head = np.ascontiguousarray(array[:256])
            digest.update(f"{array.shape}{array.dtype}".encode() + head.tobytes())
        return digest.hexdigest()[:16]

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train_y), "val": len(self.val_y), "test": len(self.test_y)}


def hold_out(x: np.ndarray, y: np.ndarray, val_size: int, train_subset: int | None):
    """A fixed validation split of ``val_size`` examples out of (x, y) (none: all of it trains),
    and the first ``train_subset`` of the rest as the training split."""
    order = np.random.default_rng(SPLIT_SEED).permutation(len(y))
    if not 0 <= val_size < len(y):
        raise SplitError(f"val_size: must be between 0 and {len(y) - 1} for this dataset (got {val_size})")
    val, train = order[:val_size], order[val_size:]
    if train_subset is not None:
        train = train[:train_subset]
    return x[train], y[train], x[val], y[val]


