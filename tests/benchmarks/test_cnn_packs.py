"""The convolutional-pack benchmark runs both ways in one process and prints what it measured."""
import json

from benchmarks.cnn_packs import main


def test_the_cnn_pack_benchmark_times_alone_and_vmap_steps(capsys):
    result = main(["--members", "2", "--rounds", "1", "--batch", "16", "--width", "8"])
    (row,) = result["rows"]
    assert result["net"].endswith("width 8)")
    assert row["members"] == 2 and row["alone_step_s"] > 0 and row["vmap_step_s"] > 0
    assert json.loads(capsys.readouterr().out) == result
