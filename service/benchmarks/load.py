"""Load test of the REST API on loopback: many clients at once against a real ``actsweep serve``
(its own process, SQLite stores) with a real Ray head behind it.

Each client submits one small sweep (``--posting`` of them do; each sweep is a real Ray job: a
driver process on the head), then loops for ``--seconds`` over what a dashboard polls: the sweep
list, its sweep's detail, health. Afterwards every sweep that was accepted (202) must be readable
and in the list: no lost record. Prints requests per second, latency percentiles per route and
the status codes, and writes them as JSON.

    actsweep bench --workload load --clients 50 --seconds 30 --out docs/benchmarks/load.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import httpx

from service.control.jobs import dashboard_answers, ensure_ray_token
from service.local_servers import ApiServer, RayNode, free_port

SWEEP = {"experiment": "mnist_classification", "quick": True,
         "overrides": {"dataset": "digits", "val_size": 200, "epochs": 1, "model.depth": 2, "model.width": 32,
                       "activation": ["gelu"], "lr": [0.01], "dropout": 0, "seeds": 1, "execution.rerun": True}}


class Recorder:
    def __init__(self):
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.statuses: Counter = Counter()
        self.by_route: dict[str, Counter] = defaultdict(Counter)

    async def call(self, client: httpx.AsyncClient, route: str, method: str, url: str, **kwargs) -> httpx.Response | None:
        started = time.perf_counter()
        try:
            response = await client.request(method, url, **kwargs)
        except httpx.HTTPError as exc:
            self.statuses[f"error {type(exc).__name__}"] += 1
            return None
        self.latencies[route].append(time.perf_counter() - started)
        self.statuses[str(response.status_code)] += 1
        self.by_route[route][str(response.status_code)] += 1
        return response


async def client_loop(base: str, recorder: Recorder, posts: bool, stop_at: float, accepted: list[str]) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        mine = None
        if posts:
            response = await recorder.call(client, "POST /sweeps", "POST", "/sweeps", json=SWEEP)
            if response is not None and response.status_code == 202:
                mine = response.json()["id"]
                accepted.append(mine)
        while time.monotonic() < stop_at:
            await recorder.call(client, "GET /sweeps", "GET", "/sweeps", params={"limit": 20})
            if mine:
                await recorder.call(client, "GET /sweeps/{id}", "GET", f"/sweeps/{mine}")
            await recorder.call(client, "GET /healthz", "GET", "/healthz")


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 10) - 1] if len(values) > 1 else values[0]


async def run_load(base: str, clients: int, posting: int, seconds: float) -> dict:
    recorder, accepted = Recorder(), []
    started = time.monotonic()
    await asyncio.gather(*(client_loop(base, recorder, i < posting, started + seconds, accepted) for i in range(clients)))
    elapsed = time.monotonic() - started
    all_latencies = [x for xs in recorder.latencies.values() for x in xs]
    # no lost record: every accepted sweep is readable and listed
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        readable = [(await client.get(f"/sweeps/{i}")).status_code == 200 for i in accepted]
        listed = {s["id"] for s in (await client.get("/sweeps", params={"limit": 200})).json()["items"]}
        for sweep_id in accepted:  # stop the drivers still running
            await client.delete(f"/sweeps/{sweep_id}")
    return {
        "clients": clients, "seconds": round(elapsed, 1), "requests": len(all_latencies),
        "requests_per_s": round(len(all_latencies) / elapsed, 1),
        "p50_ms": round(1000 * percentile(all_latencies, 50), 1), "p99_ms": round(1000 * percentile(all_latencies, 99), 1),
        "by_route": {route: {"n": len(xs), "p50_ms": round(1000 * percentile(xs, 50), 1),
                             "p99_ms": round(1000 * percentile(xs, 99), 1)} for route, xs in recorder.latencies.items()},
        "statuses": dict(recorder.statuses), "statuses_by_route": {r: dict(c) for r, c in recorder.by_route.items()},
        # a 5xx from the API's own routes; /healthz's 503 is its answer "a dependency did not reply
        # within its 2 s deadline" (degraded), counted apart
        "server_errors": sum(n for route, c in recorder.by_route.items() for s, n in c.items()
                             if s.startswith("5") and route != "GET /healthz"),
        "healthz_degraded": recorder.by_route["GET /healthz"].get("503", 0),
        "sweeps_accepted": len(accepted), "sweeps_lost": sum(not ok for ok in readable) + len(set(accepted) - listed),
        "hardware": f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}",
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="actsweep bench --workload load", description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--posting", type=int, default=10, help="how many of the clients submit a sweep first")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)

    home = Path(tempfile.mkdtemp(prefix="actsweep-load-"))
    ensure_ray_token()
    port, dashboard = free_port(), free_port()
    head = RayNode.head(port, 2, "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard),
                        "--include-dashboard", "true", env={**os.environ, "RAY_AUTH_MODE": "token"})
    env = {**os.environ, "ACTSWEEP_HOME": str(home), "ACTSWEEP_DOWNLOAD": "false",
           "ACTSWEEP_RAY_DASHBOARD_URL": f"http://127.0.0.1:{dashboard}", "ACTSWEEP_RAY_ADDRESS": f"127.0.0.1:{port}",
           "ACTSWEEP_START_LOCAL_RAY": "false"}
    api = None
    try:
        for _ in range(120):  # the Ray head's job API, where the API submits sweeps
            if dashboard_answers(env["ACTSWEEP_RAY_DASHBOARD_URL"]):
                break
            time.sleep(1)
        api = ApiServer(env, log=home / "api.log").start()
        figures = asyncio.run(run_load(api.url, args.clients, args.posting, args.seconds))
    finally:
        if api:
            api.stop()
        head.stop()
    print(json.dumps(figures, indent=2))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return figures


if __name__ == "__main__":
    main()
