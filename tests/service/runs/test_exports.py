"""Exports (tidy per-trial, per-epoch data) and reports built from them, on sweeps written to a real
MLflow store by the real trial logger, through the real command line."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from search_spaces import load_spec
from service.cli import main
from service.reporting.figures import render_figures
from service.reporting.render import render
from service.reporting.report import to_json
from service.reporting.results import results_from_exports, sweep_results
from service.runs.exports import ExportError
from tests.service.constructed_runs import log_trial, sweep_logger

GRID = {"activation": ["gelu_tanh", "relu"], "lr": [1e-3, 1e-4], "dropout": [0.0, 0.5], "seeds": 2,
        "eval_noise": [0.0, 1.0], "epochs": 3}


def _metrics(activation: str, lr: float, dropout: float, seed: int, epoch: int) -> dict:
    base = (0.1 if activation == "gelu_tanh" else 0.2) + (0.3 if lr < 1e-3 else 0) + dropout / 10 + seed / 100
    metrics = {"epoch": epoch, "lr": lr, "train_loss": base / epoch + 0.05, "train_loss_eval": base / epoch,
               "val_loss": base / epoch + 0.01, "val_error": base / 10, "test_loss": base / epoch + 0.02,
               "test_error": base / 10 + 0.001, "diverged": 0}
    if epoch == 3:
        metrics.update({"test_error_noise_0": base / 10, "test_error_noise_1": base / 5,
                        "test_loss_noise_0": base, "test_loss_noise_1": 2 * base})
    return metrics


def _sweep(root, sweep_id: str, spec, tracking=None):
    """Every grid point of ``spec`` (its slice only) as a trial run of sweep ``sweep_id``."""
    uri, logger = sweep_logger(root, sweep_id, spec.name, {"code_version": "git test",
                                                           **({"slice": spec.slice.label()} if spec.slice.label() else {})},
                               spec.model_dump(mode="json"))
    for n, point in enumerate(spec.grid_points()):
        config = {**spec.trial_base(), **point.as_dict()}
        log_trial(logger, f"{sweep_id}-{n}", config, [_metrics(**point.as_dict(), epoch=e) for e in (1, 2, 3)])
    return uri


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One store holding the whole grid (sweep w) and the same grid in two seed slices (s0, s1),
    each exported through the command line."""
    root = tmp_path_factory.mktemp("exports")
    whole = load_spec("mnist_classification", quick=True, overrides=GRID)
    uri = _sweep(root, "w", whole)
    _sweep(root, "s0", load_spec("mnist_classification", quick=True, overrides={**GRID, "slice.seed": [0]}))
    _sweep(root, "s1", load_spec("mnist_classification", quick=True, overrides={**GRID, "slice.seed": [1]}))
    out = root / "out"
    mp = pytest.MonkeyPatch()
    mp.setenv("ACTSWEEP_TRACKING_URI", uri)
    mp.setenv("ACTSWEEP_HOME", str(root / "home"))
    for sweep_id in ("w", "s0", "s1"):
        assert main(["export", sweep_id, "--out", str(out)]) == 0
    assert main(["export", "w", "--out", str(out / "parquet"), "--format", "parquet"]) == 0
    assert main(["export", "w", "--out", str(out / "gz"), "--format", "csv.gz"]) == 0
    yield uri, out
    mp.undo()


def test_export_is_tidy_one_row_per_trial_and_epoch_with_every_param(exported):
    _, out = exported
    frame = pd.read_csv(out / "w.csv")
    assert len(frame) == 16 * 3 and frame.groupby("run_id")["epoch"].apply(sorted).tolist() == [[1, 2, 3]] * 16
    assert {"activation", "dropout", "lr", "seed", "epoch", "train_loss_eval", "test_error_noise_1",
            "param.model.depth", "param.batch_size", "param.optimizer", "scheduled_lr"} <= set(frame.columns)
    assert (frame["param.model.depth"] == 8).all()  # as pandas reads it: a number
    assert frame.loc[frame["epoch"] < 3, "test_error_noise_1"].isna().all()  # logged after the last epoch only
    meta = json.loads((out / "w.json").read_text())
    assert meta["spec"]["name"] == "mnist_classification" and meta["tags"]["code_version"] == "git test"
    parquet = pd.read_parquet(out / "parquet" / "w.parquet")
    assert list(parquet.columns) == list(frame.columns) and len(parquet) == len(frame)


def _comparable(table: pd.DataFrame) -> pd.DataFrame:
    return table.sort_values(["activation", "dropout", "lr"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def live_report(exported):
    """The report of sweep w read from the store: its table, its JSON and its figures' names (built
    once; each export format's test compares against it)."""
    uri, _ = exported
    live = sweep_results(uri, "w")
    return live.table, to_json(live), sorted(render_figures(live))


@pytest.mark.parametrize("files", [["w.csv"], ["s0.csv", "s1.csv"], ["parquet/w.parquet"], ["gz/w.csv.gz"]])
def test_a_report_from_exports_equals_the_live_one(exported, live_report, files):
    _, out = exported
    live_table, theirs, live_figures = live_report
    found = results_from_exports([out / f for f in files])
    pd.testing.assert_frame_equal(_comparable(found.table), _comparable(live_table), check_like=True)
    mine = to_json(found)
    assert mine["reported"] == theirs["reported"] and mine["verdicts"] == theirs["verdicts"]
    assert mine["claim_verdicts"] == theirs["claim_verdicts"] and len(mine["claim_verdicts"]) == 2
    assert sorted(render_figures(found)) == live_figures
    if len(files) == 2:
        assert [s["slice"] for s in found.sources] == ["seed=0", "seed=1"]


def test_report_from_exports_on_the_command_line(exported, tmp_path, capsys):
    _, out = exported
    assert main(["report", "--from-export", str(out / "s0.csv"), str(out / "s1.csv"), "--out", str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert "mnist_classification.md" in written and "mnist_classification_robustness.png" in written
    text = (tmp_path / "mnist_classification.md").read_text()
    assert "## In the paper's terms" in text and "gelu_tanh < relu on train_loss_eval (dropout 0.5)" in text


def test_another_spec_reads_the_trials_on_its_own_grid(exported):
    _, out = exported
    robustness = load_spec("mnist_robustness", overrides={**{k: v for k, v in GRID.items() if k != "dropout"},
                                                          "train_subset": 20000})
    found = results_from_exports([out / "w.csv"], robustness)
    assert set(found.runs["dropout"]) == {0.0} and len(found.runs) == 8
    assert found.experiment == "mnist_robustness" and "test_error_noise_mean" in found.table


def test_exports_that_do_not_belong_together_are_refused(exported, tmp_path):
    uri, out = exported
    with pytest.raises(ExportError, match=r"trial \(gelu_tanh, lr 0.0001, dropout 0, seed 0, grid\) is in more than one .* \(sweeps s0, w\)"):
        results_from_exports([out / "w.csv", out / "s0.csv"])
    other = load_spec("mnist_classification", quick=True, overrides={**GRID, "epochs": 4})
    _sweep(tmp_path, "e4", other)
    mp = pytest.MonkeyPatch()
    mp.setenv("ACTSWEEP_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    try:
        assert main(["export", "e4", "--out", str(tmp_path)]) == 0
    finally:
        mp.undo()
    with pytest.raises(ExportError, match=r"e4.csv is not a slice of the same grid .* differs in epochs \(3 vs 4\)"):
        results_from_exports([out / "s0.csv", tmp_path / "e4.csv"])
    with pytest.raises(ExportError, match="differs in epochs"):  # under another spec: the training must agree
        results_from_exports([tmp_path / "e4.csv"], load_spec("mnist_robustness"))
    (tmp_path / "lonely.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ExportError, match="lonely.csv has no sidecar lonely.json"):
        results_from_exports([tmp_path / "lonely.csv"])


@pytest.mark.slow  # the whole record rebuilt, every experiment's report and figures (15 s): make test only
def test_the_record_is_rebuilt_from_its_manifest(exported, tmp_path, capsys, monkeypatch):
    import shutil

    from service.reporting import record as record_module

    monkeypatch.setattr(record_module, "environment_lock", lambda: "sha256:00000000000000bb")  # the rebuilding one

    _, out = exported
    record = tmp_path / "record"
    (record / "mnist_classification" / "data").mkdir(parents=True)
    for name in ("s0.csv", "s0.json", "s1.csv", "s1.json"):
        shutil.copy(out / name, record / "mnist_classification" / "data" / name)
    (record / "campaign.yaml").write_text(
        "machine: a test machine\nintro: Every experiment.\nexperiments:\n"
        "  - name: mnist_classification\n    spec: mnist_classification\n"
        "    exports: [mnist_classification/data/s0.csv, mnist_classification/data/s1.csv]\n"
        "    commands: [actsweep run mnist_classification --slice seed=0]\n"
        "    deviations: [quick grid]\n")
    assert main(["record", str(record / "campaign.yaml")]) == 2  # the catalog spec has 50 epochs, these ran 3
    assert "differs in epochs (50 vs 3)" in capsys.readouterr().err
    (record / "campaign.yaml").write_text((record / "campaign.yaml").read_text().replace(
        "spec: mnist_classification", f"spec: {tmp_path / 'grid.yaml'}"))
    import yaml

    spec = load_spec("mnist_classification", quick=True, overrides=GRID).model_dump(mode="json")
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(spec))
    spec["protocol"]["select_lr_by"] = "val_error"  # a stated hypothesis, tested on the same data
    (record / "by_error.yaml").write_text(yaml.safe_dump(spec))
    (record / "campaign.yaml").write_text((record / "campaign.yaml").read_text() + (
        "    hypotheses:\n      - {name: by_error, question: 'does choosing by error change it?', spec: by_error.yaml}\n"))
    assert main(["record", str(record / "campaign.yaml")]) == 0
    folder = record / "mnist_classification"
    assert {"report.md", "report.json", "spec.yaml", "curves_train_loss_eval.png"} <= {p.name for p in folder.iterdir()}
    assert "Built from the exports of sweeps s0, s1" in (folder / "report.md").read_text()
    assert "MLflow: experiment" not in (folder / "report.md").read_text()  # a record has no parent run
    index = (record / "README.md").read_text()
    assert "a test machine" in index and "[mnist_classification](mnist_classification/README.md)" in index
    assert "quick grid" in index and "`actsweep run mnist_classification --slice seed=0`" in index
    assert "reproduced" in index and "git test" not in index and "test" in index  # commit column: 'test'
    assert "[by_error](mnist_classification/hypotheses/by_error.md)" in index
    assert "lowest median val_error" in (folder / "hypotheses" / "by_error.md").read_text()
    page = (folder / "README.md").read_text()
    assert "does choosing by error change it?" in page and "actsweep run mnist_classification --slice seed=0" in page
    assert "no lock recorded" in page and "sha256:00000000000000bb" in page  # exports made before the lock

    # exports made under a lock: the page names it, and says so where the rebuilding environment's differs
    for lock, says in (("sha256:00000000000000aa", "ran under requirements.lock sha256:00000000000000aa; this record "
                                                   "was rebuilt under requirements.lock sha256:00000000000000bb"),
                       ("sha256:00000000000000bb", "sha256:00000000000000bb, the lock this record was rebuilt under")):
        for name in ("s0.json", "s1.json"):
            sidecar = folder / "data" / name
            meta = json.loads(sidecar.read_text())
            meta["tags"]["environment_lock"] = lock
            sidecar.write_text(json.dumps(meta))
        assert main(["record", str(record / "campaign.yaml")]) == 0
        assert says in (folder / "README.md").read_text()

    # a hypothesis tested by a script: its page must be in the folder, and the index links it with its verdict
    (record / "campaign.yaml").write_text((record / "campaign.yaml").read_text() + (
        "    analyses:\n      - {page: gaps.md, question: 'is it the epochs?', verdict: 'no: the gap stays',"
        " finding: 'gaps.md follows the gap.'}\n"))
    assert main(["record", str(record / "campaign.yaml")]) == 2
    err = capsys.readouterr().err
    assert "mnist_classification: analyses needs" in err and "(missing: gaps.md)" in err
    (folder / "gaps.md").write_text("# the gap, epoch by epoch\n")
    assert main(["record", str(record / "campaign.yaml")]) == 0
    assert "[gaps](mnist_classification/gaps.md): no: the gap stays" in (record / "README.md").read_text()
    assert "- [is it the epochs?](gaps.md): no: the gap stays. gaps.md follows the gap." in (folder / "README.md").read_text()


def test_exports_read_under_an_until_decided_spec_keep_the_rounds_seeds(exported):
    """Seed 1 lies past the spec's own seed (seeds: 1) but within its until_decided budget: it is a
    round's seed, so it counts, and the report has a look per round."""
    _, out = exported
    spec = load_spec("mnist_classification", quick=True,
                     overrides={**GRID, "seeds": 1, "until_decided": {"max_seeds": 2, "seeds_per_round": 1}})
    found = results_from_exports([out / "s0.csv", out / "s1.csv"], spec)
    assert set(found.table["n_seeds"]) == {2}
    markdown = render(found, "md")
    looks = markdown.split("### Looks (seeds until decided)")[1].split("\n\n")[1].splitlines()
    assert [row.split("|")[2].strip() for row in looks[2:]] == ["1", "2"]  # seeds at each look
