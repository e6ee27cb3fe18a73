import os
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Ray reads its auth mode once, when it is imported: the tests' clusters (and the local Rays that
# ray.init starts) use token auth, so a driver in this process can join a cluster a test started.
os.environ.setdefault("RAY_AUTH_MODE", "token")
# Test processes side by side (make test: pytest-xdist) share the cores: each gets its share of
# threads for torch's and NumPy's kernels, so that two of them do not each spin two threads on two
# cores. Set before any test module imports torch; the servers and drivers they start inherit it.
_TEST_PROCESSES = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _TEST_PROCESSES > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // _TEST_PROCESSES)))
    if "torch" in sys.modules:  # (a plugin imported it first: its OpenMP runtime read the variable then)
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


# Trials one after another in one reused worker process, for sweeps whose test is not about
# concurrency: a second process (importing torch and Tune) cost 6.4 CPU-s more per sweep, measured
# with psutil.
ONE_WORKER = {"execution.max_concurrent_trials": 1}
# A sweep that takes seconds: real digits, a small MLP, 2 activations × 2 seeds, its trials (well
# under a second each) in one worker.
TINY = {"dataset": "digits", "val_size": 200, "epochs": 2, "batch_size": 64, "model.depth": 2, "model.width": 32,
        "activation": ["gelu", "relu"], "lr": [0.01], "dropout": 0, "seeds": 2, **ONE_WORKER}
# A sweep long enough to be caught mid-run trains its trials side by side, as many as the head holds.
SIDE_BY_SIDE = {"execution.max_concurrent_trials": None}

# A test that needs one of these starts servers or trains a sweep end to end: it is slow (make test-fast
# leaves it out); the modules that train in-process say so with `pytestmark = pytest.mark.slow`.
SLOW_FIXTURES = {"ray_head", "server", "e2e", "cluster", "postgres"}


DEFAULT_BOUND_S = 120  # pyproject.toml's timeout: every test's bound unless it is marked long
TIME_BOUND = "time_bound_s"  # a test's report carries its bound (user_properties: they cross to xdist's controller)


def pytest_configure(config):
    from tests.machine_speed import SCALE_VARIABLE, session_bound_scale
    from tests.scheduling import register_module_clock

    register_module_clock(config)
    config.pluginmanager.import_plugin("tests.report_alarm")  # (pytest-timeout's alarm held while a report is written)
    # Measured once: the variable set here reaches the tests' own deadlines (tests.machine_speed.scaled)
    # and xdist's test processes, started after this, which read it back instead of measuring.
    config.bound_scale, config.bound_scale_says = session_bound_scale()
    os.environ[SCALE_VARIABLE] = str(config.bound_scale)
    if not hasattr(config, "workerinput"):  # once, before xdist's test processes start: each of them starts
        # Rays at once (heads, in-process), and Ray's ray.init writes a token of its own where none is yet;
        # the tests' heads (`ray start`: ray_head, the cluster faults') and their drivers authenticate with it
        from service.control.jobs import ensure_ray_token

        ensure_ray_token()


_TIMES: dict[str, list[float]] = {}  # test → [its seconds so far (setup, call, teardown), its time bound]


def pytest_runtest_logreport(report):
    """Each test's time beside its bound (the scaled one, which pytest-timeout holds its setup, call
    and teardown to together), summed in the process that prints the summary."""
    bound = dict(report.user_properties).get(TIME_BOUND)
    if bound is not None:
        _TIMES.setdefault(report.nodeid, [0.0, bound])[0] += report.duration


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config):
    if _TIMES:  # (docs/testing.md: no test may take half its bound)
        terminalreporter.write_line(half_bound_line(_TIMES))
    terminalreporter.write_line(config.bound_scale_says)  # (last, where a CI log keeps it)


def half_bound_line(times: dict[str, list[float]]) -> str:
    """The summary's line on ``times`` (test → [seconds, bound]): how many took more than half their
    bound, each of them, and the closest to its bound."""
    past = sorted(((spent / bound, spent, bound, test) for test, (spent, bound) in times.items() if spent > bound / 2),
                  reverse=True)
    share, spent, bound, test = max((spent / bound, spent, bound, test) for test, (spent, bound) in times.items())
    return (f"tests past half their time bound: {len(past)}"
            + "".join(f"\n  {test}: {spent:.1f} s of {bound:g}" for _, spent, bound, test in past)
            + f"\nthe closest to its bound: {test}, {spent:.1f} s of {bound:g} ({share:.0%})")


@pytest.hookimpl(optionalhook=True)  # (xdist's hooks: pytest -p no:xdist runs without them)
def pytest_xdist_make_scheduler(config, log):
    """make test's --dist loadfile: whole modules, the API modules in two lanes, the longest first (tests/scheduling.py)."""
    if config.getoption("dist") == "loadfile":
        from tests.scheduling import make_scheduler

        return make_scheduler(config, log)
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.slow)
        bound, long = item.get_closest_marker("timeout"), item.get_closest_marker("long")
        if bound and bound.args and bound.args[0] > DEFAULT_BOUND_S and not (long and long.args and long.args[0]):
            raise pytest.UsageError(f"{item.nodeid}: a bound over {DEFAULT_BOUND_S} s needs "
                                    "@pytest.mark.long(\"why it must take this long\") beside its @pytest.mark.timeout")
        if long:
            item.add_marker(pytest.mark.slow)
        if config.bound_scale != 1:  # (the machine's speed: tests/machine_speed.py)
            seconds = bound.args[0] if bound and bound.args else float(config.getini("timeout"))
            item.add_marker(pytest.mark.timeout(round(seconds * config.bound_scale), **(bound.kwargs if bound else {})),
                            append=False)
        timeout = item.get_closest_marker("timeout")
        item.user_properties.append((TIME_BOUND, float(timeout.args[0] if timeout and timeout.args
                                                       else config.getini("timeout"))))
        if "cuda" in item.fixturenames:  # (make gpu-check selects them with -m cuda)
            item.add_marker(pytest.mark.cuda)


def ensure_local_ray() -> None:
    """The session's one local Ray (2 CPUs, no dashboard) for in-process sweeps: started on first use
    and kept for the session; started again only after a test that needed another Ray (a
    cluster, a made-up GPU) shut it down. Starting a Ray costs seconds, and modules used to each."""
    import ray

    from service.control.local_head import HEAD_SYSTEM_CONFIG

    if not ray.is_initialized():  # (no idle worker processes kept between sweeps, as on a head `serve` starts)
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _system_config=HEAD_SYSTEM_CONFIG)


_MIGRATED_STORE: list[Path] = []


@pytest.fixture(scope="session", autouse=True)
def decoded_datasets(tmp_path_factory):
    """One folder of decoded datasets (workers.data.decoded) for every home the session makes, and
    for the servers and drivers it starts: MNIST's pickle is decoded once, not in every driver. The
    session's first load decodes and keeps it, the rest read it back."""
    folder = tmp_path_factory.mktemp("decoded")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ACTSWEEP_DATASET_CACHE_DIR", str(folder))
        yield folder
    shutil.rmtree(folder, ignore_errors=True)  # (220 MB)


def migrated_mlflow_store(folder: Path) -> str:
    """The URI of an MLflow store (SQLite) at ``folder/mlflow.db``, already migrated: a copy of one
    store made once per session, the way MLflow makes every new one. Making each store anew costs 1 to
    2 s of migrations, and the suite makes dozens. (A store already there is left as it is.)"""
    if not _MIGRATED_STORE:
        import atexit
        import tempfile

        from service.runs.store import RunStore

        made = tempfile.mkdtemp(prefix="actsweep-mlflow-template-")
        atexit.register(shutil.rmtree, made, True)  # (each test process made one, and left it in /tmp)
        template = Path(made) / "mlflow.db"
        RunStore(f"sqlite:///{template}").ping()  # (the first call creates and migrates the schema)
        _MIGRATED_STORE.append(template)
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "mlflow.db").exists():
        # (SQLite's backup, not a file copy: the store runs in WAL mode, and a page may still be in the log)
        source, target = sqlite3.connect(_MIGRATED_STORE[0]), sqlite3.connect(folder / "mlflow.db")
        source.backup(target)
        source.close(), target.close()
    return f"sqlite:///{folder / 'mlflow.db'}"


def new_home(home: Path) -> Path:
    """An empty actsweep home whose MLflow store is already migrated (migrated_mlflow_store)."""
    migrated_mlflow_store(home)
    return home


@pytest.fixture
def actsweep_env(tmp_path, monkeypatch) -> dict[str, str]:
    """Environment for an isolated actsweep: its own home (MLflow store, Ray results), a local
    2-CPU Ray without the dashboard. Applied to this process and returned for subprocesses."""
    values = {"ACTSWEEP_HOME": str(new_home(tmp_path / "home")), "ACTSWEEP_NUM_CPUS": "2",
              "ACTSWEEP_DASHBOARD": "false", "ACTSWEEP_DOWNLOAD": "false"}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return {**os.environ, **values}


def actsweep_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "service.cli", *args]


@pytest.fixture(scope="session")
def postgres() -> dict[str, str]:
    """A real PostgreSQL on loopback for the session: SQLAlchemy URLs of its databases
    ``actsweep`` (sweep records) and ``mlflow`` (an MLflow server's store)."""
    from service.local_servers import ServerUnavailable, postgres_server

    try:
        with postgres_server(("actsweep", "mlflow")) as urls:
            yield urls
    except ServerUnavailable as exc:
        (pytest.fail if os.environ.get("ACTSWEEP_REQUIRE_POSTGRES") else pytest.skip)(str(exc))


@pytest.fixture
def cuda() -> str:
    """A CUDA device, or a skip where there is none (a failure where ACTSWEEP_REQUIRE_CUDA=1: a GPU machine)."""
    import torch

    if not torch.cuda.is_available():
        (pytest.fail if os.environ.get("ACTSWEEP_REQUIRE_CUDA") else pytest.skip)("needs a CUDA device")
    return "cuda"


SHARED_TWPOS = REPO.parent / "shared" / "data"  # a copy of the Twitter POS data, for tests only


def require_twpos() -> None:
    """Skip where no Twitter POS copy sits beside the clone; fail instead where the CI says one must
    (ACTSWEEP_REQUIRE_TWPOS=1, as for Chromium and PostgreSQL)."""
    if not (SHARED_TWPOS / "twpos" / "oct27.train").is_file():
        (pytest.fail if os.environ.get("ACTSWEEP_REQUIRE_TWPOS") else pytest.skip)(
            f"no Twitter POS copy at {SHARED_TWPOS}/twpos")


@pytest.fixture
def twpos() -> Path:
    """The data folder holding the Twitter POS copy (``twpos/``), or a skip (or a failure: require_twpos)."""
    require_twpos()
    return SHARED_TWPOS


def make_cifar(data_dir: Path, name: str, per_batch: int = 200, test: int = 100, seed: int = 0) -> Path:
    """CIFAR files in torchvision's python-pickle layout, with random images (the real layout, made-up pixels)."""
    import pickle

    import numpy as np

    rng = np.random.default_rng(seed)
    if name == "cifar10":
        folder, files, key, classes = data_dir / "cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], b"labels", 10
        sizes = [per_batch] * 5 + [test]
        files = files + ["test_batch"]
    else:
        folder, files, key, classes = data_dir / "cifar-100-python", ["train", "test"], b"fine_labels", 100
        sizes = [per_batch * 5, test]
    folder.mkdir(parents=True, exist_ok=True)
    for file, size in zip(files, sizes):
        batch = {b"data": rng.integers(0, 256, (size, 3072), dtype=np.uint8),
                 key: rng.integers(0, classes, size).tolist()}
        with open(folder / file, "wb") as f:
            pickle.dump(batch, f)
    return data_dir


def make_timit(data_dir: Path, n: int = 600, seed: int = 0) -> Path:
    """A TIMIT feature file of the documented format: 11 frames × 26 features, 39 phone labels."""
    import numpy as np

    rng = np.random.default_rng(seed)
    (data_dir / "timit").mkdir(parents=True, exist_ok=True)
    arrays = {}
    for split, size in (("train", n), ("val", n // 4), ("test", n // 4)):
        arrays[f"y_{split}"] = rng.integers(0, 39, size)
        # features carry the label, so a network can learn something
        arrays[f"x_{split}"] = (rng.normal(size=(size, 11, 26)) + arrays[f"y_{split}"][:, None, None] / 10).astype(np.float32)
    np.savez(data_dir / "timit" / "timit_frames.npz", **arrays)
    return data_dir


def make_imagenet(data_dir: Path, classes: int = 3, per_class: int = 6, size: int = 48, seed: int = 0) -> Path:
    """ImageNet's ImageFolder layout (train/ and val/, a folder per class) with small generated PNGs."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for split, count in (("train", per_class), ("val", per_class // 2)):
        for c in range(classes):
            folder = data_dir / "imagenet" / split / f"n{c:08d}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (size, size + 8 * (i % 2), 3), dtype=np.uint8)  # not all square
                Image.fromarray(pixels).save(folder / f"{split}_{c}_{i}.png")
    return data_dir
