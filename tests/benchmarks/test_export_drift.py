"""export_drift compares two exports of one grid point by point, with the seeds' spread for scale."""
import pandas as pd
import pytest

from benchmarks.export_drift import drift


def _export(seed: int, scale: float = 1.0) -> pd.DataFrame:
    rows = []
    for activation in ("gelu", "elu"):
        for lr in (1e-3, 1e-4):
            for epoch in (1, 2):
                loss = (0.5 + seed / 10) / epoch * (scale if activation == "elu" else 1.0)
                rows.append({"activation": activation, "lr": lr, "dropout": 0.0, "seed": seed, "epoch": epoch,
                             "train_loss": loss, "test_error": 0.02 + seed / 100})
    return pd.DataFrame(rows)


def test_a_rerun_differs_where_it_moved_and_the_seeds_give_the_scale():
    old, moved = _export(0), _export(0, scale=1.01)  # ELU's losses 1% higher, GELU's unchanged
    found = drift(old, moved, [_export(1), _export(2)])
    assert found["train_loss"]["gelu"]["largest"] == 0
    assert found["train_loss"]["elu"]["largest"] == pytest.approx(0.01)
    assert found["test_error"]["elu"]["largest"] == 0
    # seeds 0-2: losses 0.25, 0.3, 0.35 after the last epoch, a range of 0.1 around a median of 0.3
    assert found["train_loss"]["gelu"]["seed_range_median"] == pytest.approx(0.1 / 0.3)
    assert found["test_error"]["gelu"]["seed_range_median"] == pytest.approx(0.02)  # error rates: absolute
    assert drift(old, moved, epoch=1)["train_loss"]["elu"]["largest"] == pytest.approx(0.01)


def test_exports_of_other_grid_points_are_refused():
    with pytest.raises(ValueError, match="different grid points"):
        drift(_export(0), _export(1))
