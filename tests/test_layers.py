"""The code's layers point one way: api and the CLI → the control plane and the driver → reporting →
runs and records → spec and plan → workers, and the developer's scripts (benchmarks/) above them all;
the control plane never reaches the driver, and the API and the CLI start without torch, Ray Tune or
matplotlib, and the sweep's driver without torch or matplotlib; the spec and the trial types load
without torch or Ray; only service.runs talks to MLflow; and nothing in the product imports the
tests or the scripts."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("service", "workers", "search_spaces", "benchmarks")
PRODUCT = ("service", "workers", "search_spaces")  # what the package installs (pyproject.toml)
# the layer of each room: a module may import its own layer and those below it
LAYERS = [("workers", 0), ("search_spaces", 1), ("service.settings", 1), ("service.patience", 1),
          ("service.ports", 1), ("service.ray_address", 1), ("service.ray_session", 1), ("service.background", 1), ("service.lock", 1), ("service.runs", 2), ("service.records", 2), ("service.records_migrations", 2),
          ("service.reporting", 3), ("service.control", 4), ("service.driver", 4), ("service.api", 5), ("service.cli", 5), ("service.warm_run", 5), ("service.benchmarks", 5),
          ("service.local_servers", 5),
          ("benchmarks", 6)]  # investigations a developer reruns (python benchmarks/NAME.py): they import the product


def layer_of(module: str) -> int:
    return max((rank for prefix, rank in LAYERS if module == prefix or module.startswith(prefix + ".")), default=-1)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_every_room_has_a_layer():
    assert [name for name in modules() if layer_of(name) < 0 and name != "service"] == []


@pytest.mark.parametrize("name", sorted(modules()))
def test_imports_point_down_the_layers(name):
    path, mine = modules()[name], layer_of(name)
    for imported in imports(path):
        assert not imported.startswith("tests"), f"{name} imports {imported}"
        if name.split(".")[0] in PRODUCT:
            assert not imported.startswith("bench"), f"{name} imports {imported}"
        if imported.split(".")[0] in PACKAGES and imported != "service":
            assert layer_of(imported) <= mine, f"{name} (layer {mine}) imports {imported} (layer {layer_of(imported)})"


def import_graph() -> dict[str, set[str]]:
    """Each module and the package's modules it imports, at its top or inside a function."""
    names = modules()
    graph = {}
    for name, path in names.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:  # (from a package, its modules too)
                found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        graph[name] = {i for i in found if i in names and i != name}
    return graph


def test_no_module_imports_itself_through_others():
    """No import circle, not even through an import inside a function: each module can be read
    (and changed) knowing only the ones below it."""
    graph = import_graph()

    def circle_from(start: str) -> list[str] | None:
        stack, seen = [(start, [start])], set()
        while stack:
            name, path = stack.pop()
            for nxt in graph[name]:
                if nxt == start:
                    return path + [start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
        return None

    circles = [c for c in (circle_from(name) for name in sorted(graph)) if c]
    assert not circles, " → ".join(circles[0])


def test_the_spec_and_the_trial_types_load_without_torch_or_ray():
    code = ("import sys, search_spaces, workers.trial, workers.registry, search_spaces.plan\n"
            "from search_spaces import load_spec\n"
            "spec = load_spec('mnist_classification')\n"
            "assert len(spec.plan().grid) == spec.trial_count > 0\n"
            "loaded = [m for m in ('torch', 'ray', 'mlflow') if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_control_plane_never_reaches_the_driver_or_the_training_code():
    """The API and the control plane (submit, read, cancel, reconcile) import nothing of the driver
    (service.driver) or of the code that trains, not even inside a function: work that needs torch
    goes to the worker process by name (service.control.worker)."""
    graph, reached, todo = import_graph(), set(), [m for m in modules() if m.startswith(("service.api", "service.control"))]
    while todo:
        name = todo.pop()
        for imported in graph[name] - reached:
            reached.add(imported)
            todo.append(imported)
    training = {"workers.activations", "workers.models", "workers.train", "workers.fused", "workers.footprint",
                "workers.trainable", "service.reporting.figures"}
    assert sorted(m for m in reached if m.startswith("service.driver") or m in training) == []


TRAINING_STACK = ("torch", "ray.tune", "matplotlib")


@pytest.mark.parametrize("code, unused", [
    # the API reads a sweep's results (the report's statistics, scipy among them) only where one is asked
    ("from service.api.main import create_app; create_app()", (*TRAINING_STACK, "scipy.stats")),
    # nor MLflow, pandas or scipy, which the commands that read runs import (and the API's worker
    # process, which imports the CLI's module again)
    ("from service.cli import main; main(['--help'])", (*TRAINING_STACK, "mlflow", "pandas", "scipy")),
    # a sweep's driver (a Ray job) hands Tune the trainable by name and has its footprints measured
    # by Ray tasks: it draws no figures and trains nothing itself
    ("import service.driver.__main__", ("torch", "matplotlib")),
], ids=["api", "cli-help", "driver"])
def test_the_api_the_cli_and_the_driver_start_without_what_they_do_not_use(code, unused, tmp_path):
    check = (f"import sys\ntry:\n    {code}\nexcept SystemExit:\n    pass\n"
             f"loaded = [m for m in {unused!r} if m in sys.modules]\n"
             "assert not loaded, loaded\n")
    done = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ACTSWEEP_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]


# MLflow's API, its filter strings, and the tag names of actsweep's runs
MLFLOW = re.compile(r"^\s*(import|from) mlflow|MlflowClient|tags\.\w+ *=|attributes\.status|mlflow\.parentRunId|"
                    r"[\"'](role|trial_key|reused_from|trial_id|node_ids)[\"']")


def test_only_the_runs_room_talks_to_mlflow():
    outside = []
    for name, path in modules().items():
        if name.startswith("service.runs") or name == "service.local_servers":  # (it starts an mlflow server)
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            code = line.split("#")[0]
            if MLFLOW.search(code):
                outside.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert outside == []
