"""Outages waited out: an Outbox keeps writes in order while their store is away, and the caller
never waits on them. The store here fails on purpose (an injected fault: "connection refused")."""
from __future__ import annotations

import time

import pytest

from service.patience import Outbox, is_outage, patiently


class FlakyStore:
    """Refuses connections until ``back_at`` (monotonic seconds); records what it was sent."""

    def __init__(self, away_for_s: float):
        self.back_at, self.received, self.calls = time.monotonic() + away_for_s, [], 0

    def write(self, value) -> None:
        self.calls += 1
        if time.monotonic() < self.back_at:
            raise ConnectionError("could not connect to server: Connection refused")
        self.received.append(value)


def test_writes_wait_in_order_while_the_store_is_away_and_the_caller_does_not():
    store = FlakyStore(away_for_s=1.0)
    outbox = Outbox(is_outage, patience_s=30)
    started = time.monotonic()
    for value in range(50):
        outbox.put(store.write, value)
    assert time.monotonic() - started < 0.5 and store.received == [] and len(outbox.pending) == 50
    assert store.calls < 5  # backoff: not one attempt per write
    outbox.flush(wait=True)
    assert store.received == list(range(50)) and not outbox.pending


def test_an_outage_longer_than_the_patience_is_raised():
    outbox = Outbox(is_outage, patience_s=0.5)
    store = FlakyStore(away_for_s=60)
    outbox.put(store.write, 1)
    with pytest.raises(ConnectionError):
        outbox.flush(wait=True)
    assert store.received == [] and len(outbox.pending) == 1  # kept, not dropped


def test_an_error_that_is_no_outage_stops_the_writer_and_the_next_call_raises_it():
    def full(_):
        raise OSError("database or disk is full")

    store = FlakyStore(away_for_s=0)
    outbox = Outbox(is_outage, patience_s=30)
    outbox.put(full, 1)
    with pytest.raises(OSError, match="disk is full"):
        outbox.flush(wait=True)
    with pytest.raises(OSError, match="disk is full"):  # every later call, and nothing more is sent
        outbox.put(store.write, 2)
    assert store.received == [] and len(outbox.pending) == 1
    with pytest.raises(OSError, match="disk is full"):
        patiently(full, is_outage, 30, 1)


def test_patiently_retries_until_the_store_answers():
    store = FlakyStore(away_for_s=1.0)
    patiently(store.write, is_outage, 30, "x")
    assert store.received == ["x"] and 1 < store.calls < 6


def test_a_postgresql_still_starting_is_an_outage_to_wait_out():
    """Seen in a fresh-clone run: the sweep database restarted after a kill answered before it took
    connections, and the driver gave up instead of waiting."""
    said = ('(psycopg.OperationalError) connection failed: connection to server at "127.0.0.1", port 33413 '
            "failed: FATAL:  the database system is not yet accepting connections")
    assert is_outage(RuntimeError(said))
    assert is_outage(RuntimeError("FATAL:  the database system is starting up"))


def test_a_caller_waits_for_the_writer_only_while_the_store_answers():
    """``wait_for(key)``: while the store is away it returns at once (the trials go on training);
    once the store answers it returns when the key's writes are sent."""
    store = FlakyStore(away_for_s=1.0)
    outbox = Outbox(is_outage, patience_s=30)
    outbox.put(store.write, "a", weights={"run": 3})
    started = time.monotonic()
    outbox.wait_for("run")
    assert time.monotonic() - started < 0.5 and outbox.unsent("run") == 3 and store.received == []
    outbox.flush(wait=True)

    def slow(value):  # a store that answers, slowly
        time.sleep(0.3)
        store.received.append(value)

    started = time.monotonic()
    outbox.put(slow, "b", weights={"run": 1})
    outbox.wait_for("run")
    assert time.monotonic() - started >= 0.3 and outbox.unsent("run") == 0 and store.received == ["a", "b"]


def test_a_process_that_exits_without_flushing_still_sends_what_it_holds(tmp_path):
    """The writer is a daemon thread: a driver that exits without the sweep's end (an error in
    Tune's loop) still sends its writes before the interpreter stops."""
    import subprocess
    import sys

    script = f"""
import time
from service.patience import Outbox, is_outage

def slow(value):
    time.sleep(0.2)
    with open({str(tmp_path / "sent")!r}, "a") as f:
        f.write(value)

outbox = Outbox(is_outage, patience_s=30)
for value in "abc":
    outbox.put(slow, value)
"""  # (and exits at once)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert (tmp_path / "sent").read_text() == "abc"


def test_a_write_of_several_keys_counts_for_each_until_sent():
    """One write may carry several runs' epochs: each key's unsent weight counts it until it is sent."""
    store = FlakyStore(away_for_s=0.5)
    outbox = Outbox(is_outage, patience_s=30)
    outbox.put(store.write, "ab", weights={"a": 2, "b": 3})
    outbox.put(store.write, "b", weights={"b": 1})
    assert (outbox.unsent("a"), outbox.unsent("b")) == (2, 4)
    outbox.flush(wait=True)
    assert (outbox.unsent("a"), outbox.unsent("b")) == (0, 0) and store.received == ["ab", "b"]
