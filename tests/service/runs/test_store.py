"""One contract for the MLflow store of runs, run against every kind of backend: an SQLite file (the
default), a folder (MLflow's file store, in maintenance mode in MLflow 3: allowed by
MLFLOW_ALLOW_FILE_STORE), and a real ``mlflow server`` over HTTP with served artifacts."""
from __future__ import annotations

import time

import pytest

from service.local_servers import mlflow_server
from service.runs.store import Provenance, RunStore, SweepNotFound
from workers.trial import GridPoint

SECRET = b"a test secret"


# the server backend starts a real ``mlflow server`` (seconds of CPU): slow, as every test that starts a server
@pytest.fixture(scope="module", params=["sqlite", "folder", pytest.param("server", marks=pytest.mark.slow)])
def runs(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "server":
        with mlflow_server(f"sqlite:///{root / 'server.db'}", root / "artifacts", root / "mlflow.log") as url:
            yield RunStore(url, SECRET), root
        return
    if request.param == "sqlite":
        yield RunStore(f"sqlite:///{root / 'mlflow.db'}", SECRET), root
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        yield RunStore((root / "mlruns").as_uri(), SECRET), root


def _sweep(runs: RunStore, root, sweep_id: str) -> tuple[str, str]:
    exp = runs.experiment_id("actsweep/contract", root / "artifacts")
    assert runs.experiment_id("actsweep/contract", root / "artifacts") == exp  # created once
    provenance = Provenance(sweep_id, "contract", True, "generated", "val_loss", "test_error", "git abc",
                            "sha256:0123456789abcdef", "a cpu", "seed=0")
    return exp, runs.start_sweep(exp, f"contract-{sweep_id}", provenance, {"epochs": 2}, {"name": "contract"})


def _trial(runs: RunStore, exp: str, parent: str, sweep_id: str, point: GridPoint, key: str, epochs=(1, 2)) -> str:
    run_id = runs.create_trial(exp, parent, {"sweep_id": sweep_id, "phase": "grid", "trial_id": f"t-{point.seed}",
                                             "trial_key": key}, point, {"epochs": "2", "model.depth": "8"})
    for epoch in epochs:
        runs.log_epoch(run_id, epoch, {"train_loss": 2.0 / epoch, "val_loss": 1.0 / epoch, "lr": 0.5 / epoch},
                       {"node_id": "n1"})
    return run_id


def test_a_sweep_and_its_trials_round_trip(runs, monkeypatch):
    runs, root = runs
    monkeypatch.setattr("service.runs.store.SEARCH_PAGE", 1)  # every search crosses pages: each run is read once
    exp, parent = _sweep(runs, root, "c1")
    sweep = runs.sweep("c1")
    assert sweep.run_id == parent and sweep.experiment_id == exp
    assert sweep.provenance == Provenance("c1", "contract", True, "generated", "val_loss", "test_error", "git abc",
                                          "sha256:0123456789abcdef", "a cpu", "seed=0")
    assert runs.spec(parent) == {"name": "contract"}
    first = _trial(runs, exp, parent, "c1", GridPoint("gelu", 0.01, 0.5, 0), "k1")
    runs.end_run(first, "FINISHED")
    _trial(runs, exp, parent, "c1", GridPoint("relu", 0.01, 0.5, 1), "k2", epochs=(1,))  # still running

    table = runs.trial_runs("c1").set_index("seed")
    assert table.loc[0, "status"] == "FINISHED" and table.loc[1, "status"] == "RUNNING"
    assert (table.loc[0, "activation"], table.loc[0, "lr"], table.loc[0, "dropout"]) == ("gelu", 0.01, 0.5)
    assert table.loc[0, "val_loss"] == 0.5 and table.loc[0, "scheduled_lr"] == 0.25  # each metric's last value
    history = runs.histories(table.reset_index(), ["val_loss"])
    assert sorted(history[history["seed"] == 0]["epoch"]) == [1, 2]
    run_id, tags, last = runs.trial_run("c1", "t-0")
    assert (run_id, tags["node_id"], last) == (first, "n1", 2)
    assert runs.trial_run("c1", "t-9") is None
    assert {t: run for t, (run, _) in runs.trial_runs_by_trial_id("c1").items()} == {
        "t-0": first, "t-1": runs.trial_run("c1", "t-1")[0]}
    assert (runs.last_epoch(first), runs.last_epoch(runs.trial_run("c1", "t-1")[0])) == (2, 1)
    tidy = runs.tidy_frame("c1", ["trial_key"])
    assert len(tidy) == 3 and set(tidy["trial_key"]) == {"k1", "k2"} and "param.model.depth" in tidy

    assert runs.end_open_runs("c1") == 2  # the running trial and the sweep's parent run
    assert set(runs.trial_runs("c1")["status"]) == {"FINISHED", "KILLED"}
    assert runs.client.get_run(parent).info.status == "KILLED"


def test_the_newest_sweeps_are_listed_newest_first_without_their_trials(runs):
    runs, root = runs
    exp, older = _sweep(runs, root, "n1")
    _trial(runs, exp, older, "n1", GridPoint("gelu", 0.01, 0.5, 0), "kn1")
    time.sleep(0.01)  # (start times are in ms)
    _, newer = _sweep(runs, root, "n2")
    runs.end_run(newer, "FINISHED")
    listed = runs.newest_sweeps(2)
    assert [(s["sweep_id"], s["experiment"], s["quick"], s["state"]) for s in listed] == [
        ("n2", "contract", True, "FINISHED"), ("n1", "contract", True, "RUNNING")]
    assert listed[0]["name"] == "contract-n2" and listed[0]["start_time"] >= listed[1]["start_time"]
    assert [s["sweep_id"] for s in runs.newest_sweeps(1)] == ["n2"]


def test_a_finished_trial_is_found_by_its_key_and_copied_whole(runs):
    runs, root = runs
    exp, parent = _sweep(runs, root, "c2")
    source = _trial(runs, exp, parent, "c2", GridPoint("elu", 0.1, 0.0, 3), "k3", epochs=(1, 2, 3))
    assert runs.finished_with_key("k3") is None  # not finished yet
    runs.end_run(source, "FINISHED")
    assert runs.finished_with_key("k3") is None  # finished, but nobody vouched for it
    runs.sign(source, "k3")
    found = runs.finished_with_key("k3")
    assert found.info.run_id == source and runs.finished_with_key("k3", sweep_id="elsewhere") is None
    _, other_parent = _sweep(runs, root, "c3")
    copy = runs.copy_run(found, exp, other_parent, {"sweep_id": "c3", "trial_id": "reused-1"})
    copied = runs.trial_runs("c3")
    assert list(copied["run_id"]) == [copy] and copied["val_loss"].item() == pytest.approx(1 / 3)
    assert sorted(runs.histories(copied, ["val_loss"])["epoch"]) == [1, 2, 3]
    assert runs.finished_with_key("k3").info.run_id == source  # the run that trained, not its copy


def test_figures_are_stored_with_the_parent_run(runs):
    runs, root = runs
    _, parent = _sweep(runs, root, "c4")
    assert runs.figures(parent) == {}
    runs.log_figures(parent, {"curves_val_loss.png": b"\x89PNG one", "robustness.png": b"\x89PNG two"})
    assert runs.figures(parent) == {"curves_val_loss.png": b"\x89PNG one", "robustness.png": b"\x89PNG two"}


def test_unknown_and_malformed_sweep_ids_are_not_found(runs):
    runs, _ = runs
    with pytest.raises(SweepNotFound, match="no sweep 'nope'"):
        runs.sweep("nope")
    with pytest.raises(SweepNotFound, match="is not an id"):
        runs.sweep("x' or tags.role = 'sweep")


def test_a_planted_or_relabelled_run_is_never_reused(runs):
    runs, root = runs
    exp, parent = _sweep(runs, root, "c5")
    honest = _trial(runs, exp, parent, "c5", GridPoint("relu", 0.1, 0.0, 1), "k5")
    runs.end_run(honest, "FINISHED")
    runs.sign(honest, "k5")
    # someone with write access to the store plants a finished run under the same key, copies the
    # honest run's signature onto it, or signs it with another secret
    planted = _trial(runs, exp, parent, "c5", GridPoint("relu", 0.1, 0.0, 1), "k5", epochs=(1, 2, 3))
    runs.end_run(planted, "FINISHED")
    runs.client.set_tag(planted, "trial_signature", runs.client.get_run(honest).data.tags["trial_signature"])
    assert runs.finished_with_key("k5").info.run_id == honest
    RunStore(runs.tracking_uri, b"another secret").sign(planted, "k5")
    assert runs.finished_with_key("k5").info.run_id == honest
    assert RunStore(runs.tracking_uri).finished_with_key("k5") is None  # no secret: no reuse at all


def test_a_server_that_dies_mid_answer_is_an_outage_not_a_failure(monkeypatch):
    """A tracking server killed while it sends a response: the client reads a broken chunked body
    (requests' ChunkedEncodingError, inside MLflow's exception). That is the store not answering, which a
    driver waits out, not an error that fails the sweep (seen when an outage test killed MLflow by pid)."""
    import socket
    import threading

    from service.runs.store import RunsUnavailable

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    listener = socket.create_server(("127.0.0.1", 0))
    answered = []

    def half_answer():  # the headers of a chunked answer, then the connection closed before its body ends
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"10\r\n{\"experiments\"")
            answered.append(conn)
            conn.close()

    threading.Thread(target=half_answer, daemon=True).start()
    try:
        with pytest.raises(RunsUnavailable, match="did not answer"):
            RunStore(f"http://127.0.0.1:{listener.getsockname()[1]}").ping()
    finally:
        listener.close()
    assert answered  # the request reached the server, which died mid-answer


@pytest.mark.parametrize("wal, journal, synchronous", [("true", "wal", 1), ("false", "delete", 2)])
def test_a_sqlite_store_writes_without_an_fsync_per_commit_where_asked(tmp_path, monkeypatch, wal, journal,
                                                                                 synchronous):
    """ACTSWEEP_SQLITE_WAL=true: WAL mode with synchronous=NORMAL (1); false (the default): SQLite's
    rollback journal with synchronous=FULL (2). Either way the runs read back."""
    import sqlite3

    monkeypatch.setenv("ACTSWEEP_SQLITE_WAL", wal)
    path = tmp_path / f"wal-{wal}" / "mlflow.db"
    runs = RunStore(f"sqlite:///{path}", SECRET)
    exp, parent = _sweep(runs, tmp_path, f"wal-{wal}")
    _trial(runs, exp, parent, f"wal-{wal}", GridPoint("gelu", 0.01, 0.0, 0), "k0")
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == journal
    engine = runs.client._client._tracking_client.store.engine
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == synchronous
    assert len(runs.trial_runs(f"wal-{wal}")) == 1
