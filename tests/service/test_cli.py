"""The command line, end to end: a real local Ray, a real MLflow store, real data (digits)."""
import json
import re
import subprocess
import time

import pytest
from mlflow.tracking import MlflowClient

from search_spaces import catalog
from service.cli import main
from tests.conftest import REPO, actsweep_command, new_home
from tests.machine_speed import scaled

# 3 activations (one stochastic) × 2 lrs × 2 seeds on scikit-learn's real digits, 2 epochs each.
E2E_SET = ["dataset=digits", "val_size=200", "epochs=2", "batch_size=64", "model.depth=3", "model.width=32",
           "activation=gelu,relu,soi", "lr=0.01,0.001", "dropout=0", "seeds=2",
           "execution.max_concurrent_trials=1"]  # one reused worker process, as tests.conftest.TINY says why


def _run(env, *args, timeout=600):
    return subprocess.run(actsweep_command(*args), cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def _e2e_bound(test):
    """The first test on a test process to ask for e2e pays its sweep in its setup: a whole CLI run on
    a Ray of its own, 30-55 s in a full suite."""
    return pytest.mark.long("its setup may be the e2e sweep: a CLI run of 12 trials on its own Ray")(
        pytest.mark.timeout(160)(test))


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    import os

    home = tmp_path_factory.mktemp("e2e")
    env = {**os.environ, "ACTSWEEP_HOME": str(new_home(home)), "ACTSWEEP_NUM_CPUS": "2", "ACTSWEEP_DASHBOARD": "false"}
    args = ["run", "mnist_classification", "--quick", "--json"] + [a for s in E2E_SET for a in ("--set", s)]
    # in a session of its own: what is left of that session once the command has exited is what it left behind
    command = subprocess.Popen(actsweep_command(*args), cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    stdout, stderr = command.communicate(timeout=600)
    deadline, left = time.monotonic() + 5, _session_processes(command.pid)
    while left and time.monotonic() < deadline:  # (a process killed as the command ended may be on its way out)
        time.sleep(0.05)
        left = _session_processes(command.pid)
    E2E_LEFT_BEHIND.extend(left)
    assert command.returncode == 0, stderr[-1500:] + "\nstdout: " + stdout[-500:]
    return env, json.loads(stdout.strip().splitlines()[-1]), stderr


E2E_LEFT_BEHIND: list[str] = []


def _session_processes(session: int) -> list[str]:
    import os

    import psutil

    left = []
    for process in psutil.process_iter(["pid", "name"]):
        try:
            if process.pid != session and os.getsid(process.pid) == session and process.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{process.pid} {process.info['name']}")
        except (OSError, psutil.Error):
            continue
    return left


@_e2e_bound
def test_sweep_runs_every_trial_and_prints_medians(e2e):
    env, output, stderr = e2e
    rows = output["results"]
    assert {(r["activation"], r["lr"]) for r in rows} == {(a, lr) for a in ("gelu", "relu", "soi") for lr in (0.01, 0.001)}
    assert all(r["n_seeds"] == 2 and r["dropout"] == 0.0 for r in rows)
    assert all(0.0 <= r["test_error"] < 0.9 for r in rows)  # learned something on real digits
    for activation in ("gelu", "relu", "soi"):  # one lr chosen per activation, the lowest val_loss
        mine = [r for r in rows if r["activation"] == activation]
        assert [r["lr"] for r in mine if r["lr_chosen"]] == [min(mine, key=lambda r: r["val_loss"])["lr"]]
    assert "[12/12]" in stderr  # the live progress reported every trial
    # where the fixed start went, in the order it happened (docs/speed-gpu.md reads this line)
    wall = re.search(r"Wall time [\d.]+ s: ([\d.]+) s from the command to the first trial-epoch \(Ray ready at ([\d.]+) s, "
                     r"planned at ([\d.]+) s, first trial started at ([\d.]+) s\)", stderr)
    assert wall is not None, stderr[-2000:]
    first_epoch, ray_ready, planned, first_trial = map(float, wall.groups())
    assert 0 < ray_ready <= planned <= first_trial <= first_epoch


@_e2e_bound
def test_a_run_leaves_no_process_behind(e2e):
    # Ray's processes, its agents (which ray.shutdown alone left running in 2 of 4 runs) and Tune's
    # workers are gone once the command has exited: it kills what Ray's shutdown left, then exits
    assert E2E_LEFT_BEHIND == []


@_e2e_bound
def test_every_trial_is_a_child_run_with_per_epoch_metrics(e2e):
    env, output, _ = e2e
    client = MlflowClient(f"sqlite:///{env['ACTSWEEP_HOME']}/mlflow.db")
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, f"tags.sweep_id = '{output['sweep_id']}'")
    parents = [r for r in runs if r.data.tags["role"] == "sweep"]
    children = [r for r in runs if r.data.tags["role"] == "trial"]
    assert len(parents) == 1 and len(children) == 12
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    assert {(r.data.tags["activation"], r.data.tags["seed"]) for r in children} == {
        (a, s) for a in ("gelu", "relu", "soi") for s in ("0", "1")}
    child = children[0]
    assert child.info.status == "FINISHED" and child.data.params["model.depth"] == "3"
    history = client.get_metric_history(child.info.run_id, "val_loss")
    assert [m.step for m in history] == [1, 2]


@_e2e_bound
def test_mlflow_shows_training_runs_with_their_dataset_medians_and_report(e2e, tmp_path):
    env, output, _ = e2e
    client = MlflowClient(f"sqlite:///{env['ACTSWEEP_HOME']}/mlflow.db")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              f"tags.sweep_id = '{output['sweep_id']}'")
    parent = next(r for r in runs if r.data.tags["role"] == "sweep")
    # a model-training experiment: MLflow's UI opens it on its runs, not on the GenAI overview
    assert client.get_experiment(parent.info.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"
    children = [client.get_run(r.info.run_id) for r in runs if r.data.tags["role"] == "trial"]
    assert {r.info.run_name for r in children} == {f"{a} lr={lr} d=0 s={s}" for a in ("gelu", "relu", "soi")
                                                   for lr in ("0.01", "0.001") for s in (0, 1)}
    inputs = {(d.dataset.name, d.dataset.digest, d.dataset.profile) for r in children for d in r.inputs.dataset_inputs}
    assert len(inputs) == 1  # every trial trained on the same data, named, digested and sized
    name, digest, profile = inputs.pop()
    assert name == "digits" and len(digest) == 16 and json.loads(profile)["num_rows"]["val"] == 200
    # the parent run: each configuration's medians over seeds, as the report gives them, and the report
    medians = {k: v for k, v in parent.data.metrics.items() if k.startswith("median/")}
    for row in output["results"]:
        key = f"median/test_error/{row['activation']} lr:{row['lr']:g} d:{row['dropout']:g}"
        assert medians[key] == pytest.approx(row["test_error"])
    report = client.download_artifacts(parent.info.run_id, "report.md", str(tmp_path))
    assert "| activation" in open(report).read()


@_e2e_bound
def test_report_reads_the_same_numbers_back(e2e):
    env, output, _ = e2e
    report = _run(env, "report", output["sweep_id"], "--format", "json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["results"] == output["results"]
    markdown = _run(env, "report", output["sweep_id"], "--format", "md").stdout
    assert "| activation" in markdown and "val_loss (validation data, never test)" in markdown
    csv_lines = _run(env, "report", output["sweep_id"], "--format", "csv").stdout.strip().splitlines()
    assert csv_lines[0].startswith("activation,dropout,lr") and len(csv_lines) == 1 + 6


@_e2e_bound
def test_report_without_a_sweep_lists_the_newest_with_their_ids(e2e, tmp_path):
    env, output, _ = e2e
    listed = _run(env, "report")
    line = next((line for line in listed.stdout.splitlines() if output["sweep_id"] in line), "")
    assert listed.returncode == 0 and "mnist_classification (quick)" in line and "finished" in line, listed.stdout
    empty = _run({**env, "ACTSWEEP_HOME": str(tmp_path / "new")}, "report")
    lines = empty.stderr.strip().splitlines()
    assert empty.returncode == 2 and len(lines) == 1 and "no sweep in the MLflow store" in lines[0], empty.stderr


@_e2e_bound
def test_html_report_is_written_with_the_logged_figures(e2e, tmp_path):
    env, output, _ = e2e
    written = _run(env, "report", output["sweep_id"], "--format", "html", "--out", str(tmp_path))
    assert written.returncode == 0, written.stderr
    page = (tmp_path / f"{output['sweep_id']}.html").read_text()
    # the activations (f, f′), curves of train_loss_eval and val_loss, and robustness (Fig. 2's
    # classifiers are also measured under noise)
    assert page.count('<img src="data:image/png;base64,') == 4
    assert f"sweep {output['sweep_id']}" in page and "model:" in page


def test_bad_input_exits_2_with_one_line_naming_the_field(actsweep_env):
    done = _run(actsweep_env, "run", "mnist_classification", "--set", "activation=gelu,mish")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "activation: unknown 'mish'" in lines[0] and "gelu_tanh" in lines[0]


def test_a_spec_file_that_is_not_yaml_exits_2_naming_the_file_and_the_line(actsweep_env, tmp_path, capsys):
    spec = tmp_path / "broken.yaml"
    spec.write_text("name: broken\ndataset: [mnist\n  model: : :\n")
    assert main(["run", str(spec)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"experiment: {spec}: not valid YAML at line 3" in lines[0], lines


def test_a_bad_expression_exits_2_naming_its_part(actsweep_env, capsys):
    assert main(["run", "mnist_classification", "--set", "activation=gelu,boom",
                 "--set", "expressions.boom=exp(x) ** 16"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "boom: not finite" in lines[0], lines


@pytest.mark.parametrize("args, field", [
    (["--set", "lr=-0.1"], "lr[0]"),
    (["--set", "dropout=0,1.5"], "dropout"),
    (["--set", "learning_rate=0.1"], "learning_rate: unknown field"),
    (["--set", "dataset=cifar"], "dataset"),
])
def test_bad_values_exit_2(actsweep_env, capsys, args, field):
    assert main(["run", "mnist_classification", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err


@pytest.mark.parametrize("value, expected", [("[gelu,relu]", ["gelu", "relu"]), ("[gelu, relu]", ["gelu", "relu"]),
                                             ("[relu, gelu(sigma=0.5, mu=1)]", ["relu", "gelu(sigma=0.5, mu=1)"]),
                                             ("[elu]", ["elu"]), ("gelu,relu", ["gelu", "relu"])])
def test_a_yaml_flow_list_is_a_grid_axis(value, expected):
    from search_spaces import load_spec
    from search_spaces.catalog import parse_set_options

    assert parse_set_options([f"activation={value}"]) == {"activation": expected}
    spec = load_spec("mnist_classification", overrides=parse_set_options([f"activation={value}"]))
    assert len(spec.activation) == len(expected) and spec.activation[0] == expected[0]


@pytest.mark.parametrize("value", ["[gelu,relu", "{a", '"abc', ": :", "[a, {b]"])
def test_an_unreadable_value_exits_2_naming_the_field(actsweep_env, capsys, value):
    assert main(["run", "mnist_classification", "--set", f"activation={value}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("actsweep: error: activation: cannot read"), err


def test_run_pointed_at_no_cluster_fails_in_one_line_naming_the_address(actsweep_env):
    """Nothing listens at the address: the refusal is an answer, so the run fails after a short
    grace, not after the join timeout (kept for a head that does not answer yet)."""
    from service.local_servers import free_port

    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    env = {**actsweep_env, "ACTSWEEP_RAY_ADDRESS": address, "ACTSWEEP_RAY_JOIN_TIMEOUT_S": str(scaled(60))}
    started = time.monotonic()
    done = _run(env, "run", "mnist_classification", "--quick", "--set", "dataset=digits", "--set", "val_size=200",
                timeout=120)
    took = time.monotonic() - started
    assert done.returncode == 1
    lines = [line for line in done.stderr.strip().splitlines() if line.startswith("actsweep:")]
    assert len(lines) == 1 and address in lines[0] and "connection refused" in lines[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    print(f"a dead cluster address failed in {took:.1f} s, the process's start and imports included")
    assert took < scaled(30)  # the 60 s join timeout not waited out (the grace is 2 s; the rest is imports on a busy machine)


def test_a_host_that_does_not_answer_is_waited_for_the_join_timeout(monkeypatch):
    """A head still booting (or a slow network) does not refuse: it is given the join timeout."""
    import socket

    from service.ray_address import RayUnreachable, wait_for_ray

    def no_answer(address, timeout=None):  # injected fault: the connection attempt times out
        time.sleep(min(timeout or 0.1, 0.1))
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", no_answer)
    started = time.monotonic()
    with pytest.raises(RayUnreachable, match=r"no Ray cluster answers at 10\.1\.2\.3:6379 \(timed out; waited 3 s"):
        wait_for_ray("10.1.2.3:6379", 3)  # (longer than the 2 s a refusing host gets)
    assert time.monotonic() - started >= 3


def test_missing_dataset_exits_2_naming_the_directory(actsweep_env, tmp_path, monkeypatch, capsys):
    import workers.data.mnist as datasets
    from service import ray_session

    monkeypatch.setattr(datasets, "_mnist_from_package", lambda: None)  # injected fault: no offline copy
    monkeypatch.setenv("ACTSWEEP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ACTSWEEP_EARLY_RAY_CPUS", "100000")  # a machine of few cores: Ray after the checks
    monkeypatch.setattr(ray_session, "_connection", None)
    assert main(["run", "mnist_classification", "--quick"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{tmp_path}/data/MNIST/raw" in err and "dataset: mnist not found" in err
    assert ray_session._connection is None  # no Ray started for a refused spec


@pytest.mark.slow  # starts a Ray (8 s): make test only
def test_on_many_cores_ray_starts_before_the_checks_and_a_refusal_still_names_the_dataset(
        actsweep_env, tmp_path, monkeypatch, capsys):
    import ray

    import workers.data.mnist as datasets
    from service import ray_session

    monkeypatch.setattr(datasets, "_mnist_from_package", lambda: None)  # injected fault: no offline copy
    monkeypatch.setenv("ACTSWEEP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ACTSWEEP_EARLY_RAY_CPUS", "1")  # any machine counts as many-core
    monkeypatch.setenv("ACTSWEEP_NUM_CPUS", "1")
    monkeypatch.setenv("ACTSWEEP_DASHBOARD", "false")
    ray.shutdown()  # (the session's Ray, where a test left it: this test starts one of its own)
    monkeypatch.setattr(ray_session, "_connection", None)
    try:
        assert main(["run", "mnist_classification", "--quick"]) == 2
        assert ray_session._connection is not None  # begun before the dataset was found missing
        assert "dataset: mnist not found" in capsys.readouterr().err
        ray_session._connection.result(timeout=120)  # (a real start: it comes up, and is shut down below)
        assert ray.is_initialized()
    finally:
        if ray_session._connection is not None:
            ray_session._connection.exception(timeout=120)
            ray.shutdown()


def test_unknown_sweep_exits_2(actsweep_env, capsys):
    assert main(["report", "0000deadbeef"]) == 2
    assert "no sweep '0000deadbeef'" in capsys.readouterr().err


def test_a_new_home_answers_in_one_line_without_mlflows_own(actsweep_env, tmp_path):
    """A home with no MLflow store yet: the command makes one, and says nothing of its tables."""
    done = _run({**actsweep_env, "ACTSWEEP_HOME": str(tmp_path / "new")}, "report", "0000deadbeef", timeout=120)
    assert done.returncode == 2 and (tmp_path / "new" / "mlflow.db").exists(), done.stderr
    assert done.stderr.strip().splitlines() == ["actsweep: error: sweep_id: no sweep '0000deadbeef' in the MLflow store"]


def test_an_out_that_cannot_be_written_is_one_line_and_exit_2(actsweep_env, capsys, tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("kept")
    for args, message in ((["activations", "--plot", "relu", "--out", str(tmp_path / "no" / "x.png")],
                           f"cannot write {tmp_path / 'no' / 'x.png'} (no folder {tmp_path / 'no'})"),
                          (["activations", "--plot", "relu", "--out", str(tmp_path)], "(a folder)"),
                          (["export", "0000deadbeef", "--out", str(a_file)], "(a file, not a folder)")):
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("actsweep: error: --out: ") and message in err[0], err
    assert a_file.read_text() == "kept"


def test_an_mlflow_store_that_does_not_answer_is_exit_3_naming_it_not_an_empty_report(actsweep_env, capsys,
                                                                                    monkeypatch):
    from service.local_servers import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("ACTSWEEP_TRACKING_URI", url)
    assert main(["report", "0000deadbeef"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and url in err[0] and "did not answer" in err[0]


def test_experiments_json_lists_the_catalog(actsweep_env):
    done = _run(actsweep_env, "experiments", "--json")
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert rows == {r["name"]: r for r in catalog()}  # the catalog as it is, every field


def test_the_catalog_and_the_activations_print_a_whole_row_per_line_into_a_pipe(actsweep_env):
    listed = _run(actsweep_env, "experiments").stdout.splitlines()
    for row in catalog():  # (rich wraps at 80 columns where it sees no terminal)
        line = next((line for line in listed if f"│ {row['name']} " in line), "")
        assert row["section"] in line and f"│ {row['trials']} " in line, (row["name"], listed[:8])
    listed = _run(actsweep_env, "activations").stdout
    assert "│ gelu      │ built-in │ mu=0, sigma=1 " in listed and "(GELU paper §2)" in listed, listed[:2000]


# A clear claim (relu against an activation that zeroes everything) and a null one (relu against the
# same function written as an expression: the same trials, differences 0), on the real digits.
UNTIL_DECIDED_SPEC = """
name: until_decided_check
paper: custom
dataset: digits
val_size: 200
model: {kind: mlp, depth: 2, width: 32}
optimizer: adam
epochs: 2
batch_size: 64
activation: [relu, {name: zero, expr: "x * 0"}, {name: relu_again, expr: "relu(x)"}]
lr: [0.01]
seeds: 3
execution: {max_concurrent_trials: 1}  # one reused worker process a round, as tests.conftest.TINY says why
protocol: {select_lr_by: val_loss, headline_metric: test_error}
ranking_claims:
  - {best: relu, against: [zero]}
  - {best: relu, against: [relu_again]}
"""


INTERRUPTED_SET = ["dataset=digits", "val_size=200", "epochs=100", "batch_size=64", "model.depth=2", "model.width=32",
                   "activation=gelu,relu", "lr=0.01", "dropout=0", "seeds=2", "execution.mode=per_trial",
                   "execution.max_concurrent_trials=1"]  # four trials of a few seconds each, one after another


@pytest.mark.long("a CLI sweep stopped by Ctrl-C after its first trial, then the same command again")
@pytest.mark.timeout(360)  # 45-59 s alone, 83.7 s in a full suite (58caef2); 97 s alone on a slow hour (2f3c097)
def test_ctrl_c_ends_a_sweep_killed_with_exit_130_and_the_same_command_trains_only_the_rest(tmp_path):
    import contextlib
    import os
    import signal

    env = {**os.environ, "ACTSWEEP_HOME": str(new_home(tmp_path / "home")), "ACTSWEEP_NUM_CPUS": "2", "ACTSWEEP_DASHBOARD": "false"}
    cli = ["run", "mnist_classification", "--quick", *[a for s in INTERRUPTED_SET for a in ("--set", s)]]
    # In a session of its own, as a terminal's foreground job: Ctrl-C reaches the command and the Ray it
    # started, and never this test process. Its output goes to files (a pipe left unread can fill and block it).
    stderr_file, stdout_file = tmp_path / "stderr.txt", tmp_path / "stdout.txt"
    with stderr_file.open("w") as stderr, stdout_file.open("w") as stdout:
        command = subprocess.Popen(actsweep_command(*cli), cwd=REPO, env=env, stdout=stdout, stderr=stderr,
                                   start_new_session=True)
    # Its own deadlines (150 + 60 + 120 s, scaled) end a slow run inside its bound: pytest-timeout's alarm
    # may otherwise go off while pytest writes a report, outside any test, which ends the test process and
    # make test with it (xdist's "assert not crashitem").
    try:
        deadline = time.monotonic() + scaled(150)
        while "[1/4] done" not in stderr_file.read_text():  # the live progress: a line per finished trial
            assert command.poll() is None and time.monotonic() < deadline, stderr_file.read_text()[-2000:]
            time.sleep(0.1)
        os.killpg(command.pid, signal.SIGINT)  # (Tune's own handler stops the trials, their state saved)
        assert command.wait(timeout=scaled(60)) == 130, stderr_file.read_text()[-3000:]
        left, deadline = _session_processes(command.pid), time.monotonic() + 10
        while left and time.monotonic() < deadline:  # (a Ray process on its way out)
            time.sleep(0.1)
            left = _session_processes(command.pid)
        assert left == []  # nothing of the interrupted sweep keeps running
    finally:
        if command.poll() is None or _session_processes(command.pid):
            with contextlib.suppress(ProcessLookupError):  # (its last process may be gone by now)
                os.killpg(command.pid, signal.SIGKILL)
            command.wait()
    rest, printed = stderr_file.read_text(), stdout_file.read_text()
    sweep_id = re.search(r"sweep ([0-9a-f]{12}) interrupted", rest).group(1)
    assert "Median over" not in printed and "Tuner.restore" not in rest  # no empty tables, no advice that is Tune's
    client = MlflowClient(f"sqlite:///{tmp_path / 'home' / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], f"tags.sweep_id = '{sweep_id}'")
    status = {r.data.tags["role"]: set() for r in runs}
    for r in runs:
        status[r.data.tags["role"]].add(r.info.status)
    assert status["sweep"] == {"KILLED"} and "FINISHED" in status["trial"], status
    again = _run(env, *cli, timeout=scaled(120))
    assert again.returncode == 0, again.stderr[-2000:]
    assert "reused" in again.stderr and "[4/4]" in again.stderr and "Median over 2 seeds" in again.stdout


@pytest.mark.long("a sweep through the command line until its claims are decided, then its report in two formats")
@pytest.mark.timeout(200)  # 48-77 s in a full suite
def test_until_decided_stops_a_clear_claim_and_a_tie_at_the_first_look(tmp_path):
    """relu against x·0 is a clear order; relu against the same function written as an expression
    trains identically (the same seeds), a tie that TOST shows at once: both decided at the first
    look, and no configuration gets more seeds. (The run to the budget on an undecided null is in
    tests/service/reporting/test_statistics.py.)"""
    import os

    spec = tmp_path / "spec.yaml"
    spec.write_text(UNTIL_DECIDED_SPEC)
    env = {**os.environ, "ACTSWEEP_HOME": str(new_home(tmp_path / "home")), "ACTSWEEP_NUM_CPUS": "2", "ACTSWEEP_DASHBOARD": "false"}
    done = _run(env, "run", str(spec), "--until-decided", "--max-seeds", "5", "--seeds-per-round", "1", "--json")
    assert done.returncode == 0, done.stderr[-1500:] + "\nstdout: " + done.stdout[-500:]
    seeds = {r["activation"]: r["n_seeds"] for r in json.loads(done.stdout.strip().splitlines()[-1])["results"]}
    assert seeds == {"relu": 3, "relu_again": 3, "zero": 3}  # decided claims' configurations get no more seeds
    assert "look 1 at 3 seeds (budget 5): 0 claims open" in done.stderr
    assert "relu < zero on test_error: reproduced" in done.stderr
    assert "relu < relu_again on test_error: equivalent" in done.stderr and "look 2" not in done.stderr
    sweep_id = json.loads(done.stdout.strip().splitlines()[-1])["sweep_id"]
    report = _run(env, "report", sweep_id).stdout
    assert "### Looks (seeds until decided)" in report and "equivalent" in report
    section = report.split("### Looks (seeds until decided)")[1].split("\n\n")[1]
    looks = [line for line in section.splitlines() if " ✓" in line]
    assert len(looks) == 1 and looks[0].split("|")[1].strip() == "1"  # decided at the first look
    assert _run(env, "report", sweep_id, "--format", "html", "--out", str(tmp_path / "html")).returncode == 0
    assert "Looks (seeds until decided)" in (tmp_path / "html" / f"{sweep_id}.html").read_text()


def test_until_decided_flags_need_each_other(tmp_path):
    import os

    env = {**os.environ, "ACTSWEEP_HOME": str(tmp_path / "home")}
    done = _run(env, "run", "mnist_classification", "--quick", "--max-seeds", "5")
    assert done.returncode == 2 and "--until-decided" in done.stderr
    done = _run(env, "run", "mnist_classification", "--quick", "--until-decided", "--max-seeds", "2")
    assert done.returncode == 2 and "until_decided.max_seeds" in done.stderr


def test_plan_prints_every_part_of_the_plan_without_training(actsweep_env, capsys):
    """`actsweep plan`: the devices, each setting as resolved and why, the packs and their members,
    the GPU share, the memory each holds, the trial-epochs; as JSON and as text; no sweep made."""
    args = ["plan", "mnist_classification", "--quick", "--set", "dataset=digits", "--set", "val_size=200"]
    assert main([*args, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["mode"], plan["device"], plan["gpus_per_trial"]) == ("fused", "cpu", 0.0)
    assert sum(plan["units"]) == 24 and plan["trial_epochs"] == 24 * 4 and plan["unit_bytes"] > 0
    assert {"mode", "pack_size", "gpus_per_trial"} <= set(plan["why"]) and plan["devices"].endswith("on 1 node")
    assert main(args) == 0
    text = capsys.readouterr().out
    for part in ("devices:", "execution.mode", "execution.pack_size", "execution.gpus_per_trial", "GiB on its device",
                 "96 trial-epochs"):
        assert part in text, part


@pytest.mark.parametrize("args, field", [(["--set", "execution.mode=fast"], "execution.mode"),
                                         (["--set", "execution.gpus_per_trial=lots"], "execution.gpus_per_trial"),
                                         (["--slice", "seed=9"], "slice.seed"),
                                         (["--slice", "seed"], "--slice: expected AXIS=VALUES"),
                                         (["--set", "epochs"], "--set: expected NAME=VALUE"),
                                         (["--set", "execution.gpus_per_trial=64"], "execution.gpus_per_trial: each pack"),
                                         (["--set", "val_size=60000"], "val_size: must be between 0 and 59999")])
def test_plan_exits_2_with_one_line_on_bad_input(actsweep_env, capsys, args, field):
    assert main(["plan", "mnist_classification", "--quick", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0], err
