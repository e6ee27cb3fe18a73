"""``actsweep run`` through a home's running service: where ``actsweep serve`` runs for this
ACTSWEEP_HOME, the CLI submits the sweep to it (POST /sweeps), as REST users do, and follows it to
its end. The sweep then takes the home's queue, its warm driver and its Ray head; nothing is started
for it. Where no service answers, the CLI runs the sweep itself (service.cli.cmd_run).

``actsweep serve`` records where it listens in HOME/api.json; that is how the CLI finds it.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from service.settings import Settings

POLL_S = 0.1  # the sweep's record is read this often while the CLI waits (a GET: milliseconds)
ANSWER_S = 1.0  # a recorded service that does not answer this soon is taken for gone
TERMINAL = ("succeeded", "failed", "cancelled", "interrupted")


def api_file(settings: Settings) -> Path:
    return settings.root / "api.json"


def record_api(settings: Settings, host: str, port: int) -> None:
    """Where this home's API listens, for the CLI (written by ``actsweep serve`` as it starts)."""
    reachable = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    api_file(settings).parent.mkdir(parents=True, exist_ok=True)
    api_file(settings).write_text(json.dumps({"url": f"http://{reachable}:{port}", "pid": os.getpid()}) + "\n")


def forget_api(settings: Settings) -> None:
    """The record removed as ``actsweep serve`` exits (where it is still this process's)."""
    try:
        if json.loads(api_file(settings).read_text()).get("pid") == os.getpid():
            api_file(settings).unlink()
    except (OSError, ValueError):
        pass


def running_api(settings: Settings) -> str | None:
    """The URL of this home's running API, where one is recorded, alive and answering; else None."""
    try:
        recorded = json.loads(api_file(settings).read_text())
        url, pid = recorded["url"], int(recorded["pid"])
        os.kill(pid, 0)  # (a recorded API whose process is gone: no answer to wait for)
        answer = httpx.get(f"{url}/experiments", headers=_headers(settings), timeout=ANSWER_S)
    except (OSError, ValueError, KeyError, TypeError, httpx.HTTPError):
        return None
    return url if answer.status_code == 200 else None


def _headers(settings: Settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {settings.api_token}"} if settings.api_token else {}


def request_body(experiment: str, quick: bool, overrides: dict, name: str | None) -> dict:
    """The POST /sweeps body for a ``run`` command: a catalog experiment by name, or a spec file's text."""
    body = {"quick": quick, "overrides": overrides, "name": name}
    path = Path(experiment)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        return {**body, "spec": path.read_text()}
    return {**body, "experiment": experiment}


def run_via_api(url: str, settings: Settings, body: dict, as_json: bool, started: float) -> int:
    """Submit the sweep to the home's API, show its place in the queue and its progress until it
    ends, then print the same tables as a sweep run here. Ctrl-C cancels it. The exit code: 0 when
    it succeeded, 1 when it failed, 130 when cancelled."""
    console = Console(stderr=True, soft_wrap=True)
    headers = _headers(settings)
    with httpx.Client(base_url=url, headers=headers, timeout=30.0) as client:
        answer = client.post("/sweeps", json=body)
        if answer.status_code >= 400:
            console.print(f"[red]actsweep run: the service at {url} refused the sweep (HTTP {answer.status_code}):[/] "
                          f"{_detail(answer)}")
            return 2 if answer.status_code == 422 else 1
        sweep = answer.json()
        sweep_id = sweep["id"]
        total = sweep["progress"]["trial_epochs_total"]
        console.print(f"[bold]{sweep['experiment']}[/] sweep {sweep_id}{' (quick)' if sweep['quick'] else ''}: "
                      f"{sweep['progress']['trials_total']} trials, submitted to the service at {url} "
                      f"(Ray dashboard: {sweep['links']['ray_dashboard'] or 'not running'})")
        marks: dict[str, float] = {}
        progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} "
                            "trial-epochs"), TimeElapsedColumn(), console=console, transient=True)
        task = progress.add_task("queued", total=total)
        try:
            with progress:
                while sweep["state"] not in TERMINAL:
                    marks.setdefault(sweep["state"], time.time())
                    counts = sweep["progress"]
                    place = sweep.get("queue_position")
                    progress.update(task, completed=counts["trial_epochs_done"], description=(
                        f"waiting: place {place} in the queue" if place else
                        f"{sweep['state']}: {counts['trials_done']}/{counts['trials_total']} trials done"))
                    time.sleep(POLL_S)
                    sweep = client.get(f"/sweeps/{sweep_id}").json()
        except KeyboardInterrupt:
            client.delete(f"/sweeps/{sweep_id}")
            print(f"actsweep: sweep {sweep_id} cancelled; the trials that finished are kept in the MLflow store, and "
                  f"the same command again trains only the rest (the trial cache)", file=sys.stderr)
            return 130
    ended = time.time()
    if sweep["state"] != "succeeded":
        console.print(f"[red]sweep {sweep_id} {sweep['state']}[/]" + (f": {sweep['error']}" if sweep["error"] else ""))
        if sweep["state"] == "cancelled":
            return 130
        if not sweep["progress"]["trials_done"]:
            return 1
    if as_json:
        from service.reporting.results import sweep_results

        results = sweep_results(settings.resolved_tracking_uri, sweep_id)  # read back from MLflow, as a run here does
        print(json.dumps({"sweep_id": sweep_id, "results": results.rows()}))
    else:  # the same tables, rendered by the service (its MLflow and pandas imported already)
        tables = httpx.get(f"{url}/sweeps/{sweep_id}/results", params={"format": "md"}, headers=headers, timeout=120.0)
        tables.raise_for_status()
        print(tables.text)
        serve = ("" if settings.resolved_tracking_uri.startswith(("http://", "https://"))
                 else f"mlflow ui --backend-store-uri {settings.resolved_tracking_uri}, then open ")
        console.print(f"Report again: actsweep report {sweep_id}\nMLflow UI: {serve}"
                      f"{sweep['links']['mlflow_parent_run']}", soft_wrap=True)
    running = marks.get("running")
    console.print(f"Wall time {time.time() - started:.1f} s: submitted to the service at "
                  f"{marks.get('queued', ended) - started:.1f} s"
                  + (f", its driver running at {running - started:.1f} s" if running else "")
                  + f", ended at {ended - started:.1f} s, {time.time() - ended:.1f} s for the tables")
    return 0 if sweep["state"] == "succeeded" else 1


def _detail(answer: httpx.Response) -> str:
    try:
        detail = answer.json().get("detail")
    except ValueError:
        return answer.text[:500]
    if isinstance(detail, list):
        return "; ".join(f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}" for d in detail)
    return str(detail)
