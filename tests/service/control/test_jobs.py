"""Ray's token, made once however many processes ask for it at the same moment."""
from __future__ import annotations

import multiprocessing
import stat


def _ask_for_a_token(start, seen) -> None:
    from service.control.jobs import ensure_ray_token, ray_auth_headers

    start.wait()  # all at once, as make test's three test processes start their Rays on a new machine
    ensure_ray_token()
    seen.put(ray_auth_headers()["Authorization"])


def test_processes_asking_at_once_for_a_token_all_get_the_one_made(tmp_path, monkeypatch):
    token = tmp_path / "ray" / "auth_token"
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))  # (inherited by the processes forked below)
    context = multiprocessing.get_context("fork")
    start, seen = context.Barrier(8), context.Queue()
    processes = [context.Process(target=_ask_for_a_token, args=(start, seen)) for _ in range(8)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
    answers = [seen.get(timeout=5) for _ in processes]
    made = token.read_text()
    assert len(made) == 64 and int(made, 16) >= 0  # 256 bits in hex, as Ray makes them
    assert answers == [f"Bearer {made}"] * 8  # one token, the same for all
    assert stat.S_IMODE(token.stat().st_mode) == 0o600  # readable by its owner only
    assert sorted(p.name for p in token.parent.iterdir()) == ["auth_token", "auth_token.lock"]  # no stray file
