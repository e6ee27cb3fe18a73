"""Calls that wait out an outage: retried with exponential backoff (tenacity) for as long as the
caller's patience lasts, then the last error is raised.

A sweep's driver is patient with MLflow and with the sweep database (ACTSWEEP_OUTAGE_PATIENCE_S):
while either is away, the Tune loop waits in the call that failed, the trials keep training (Ray
holds their results until the driver takes them), and once the store answers again every epoch
is logged, in order. The API is not patient: a request answers 503 at once.
"""
from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import Counter, deque

from tenacity import (Retrying, before_sleep_log, retry_if_exception, retry_if_result, stop_after_delay, wait_exponential,
                      wait_fixed)

logger = logging.getLogger("actsweep.patience")


# what a store away says (a server stopped, a network cut); a full disk or a bad query is no outage
_OUTAGE_SIGNS = ("could not connect", "connection refused", "connection reset", "server closed the connection",
                 "terminating connection", "connection timed out", "timeout expired", "database is locked",
                 "unable to open database", "connection is closed", "ssl syscall error", "no connection to the server",
                 # PostgreSQL coming back after a crash: it answers, but not yet (psycopg 3's words)
                 "the database system is not yet accepting connections", "the database system is starting up",
                 "the database system is in recovery mode")


# what a store that answers but cannot write says: waiting will not help
_NO_OUTAGE_SIGNS = ("disk is full", "no space left on device", "read-only file system", "disk quota exceeded")


def poll(check, timeout_s: float, every_s: float = 1.0):
    """``check()`` asked every ``every_s`` seconds until its answer is true, for ``timeout_s`` at most
    (asked once where that is 0); its last answer (false where the time ran out)."""
    return Retrying(stop=stop_after_delay(timeout_s), wait=wait_fixed(every_s), retry=retry_if_result(lambda a: not a),
                    retry_error_callback=lambda state: state.outcome.result())(check)


def is_outage(exc: BaseException) -> bool:
    """Whether an error says that a store is away (worth waiting out), not that the request is wrong
    or that its disk is full."""
    text = str(exc).lower()
    return any(sign in text for sign in _OUTAGE_SIGNS) and not cannot_write(exc)


def cannot_write(exc: BaseException) -> bool:
    """Whether an error says that a store's disk is full (or read-only)."""
    text = str(exc).lower()
    return any(sign in text for sign in _NO_OUTAGE_SIGNS)


def patiently(call, retry_on, patience_s: float, *args, **kwargs):
    """``call(*args, **kwargs)``, tried again while ``retry_on(error)`` (0.5 s, 1 s, 2 s, ... at most
    15 s apart) until it succeeds or ``patience_s`` has passed; with no patience, tried once."""
    if patience_s <= 0:
        return call(*args, **kwargs)
    retrying = Retrying(retry=retry_if_exception(retry_on), stop=stop_after_delay(patience_s),
                        wait=wait_exponential(multiplier=0.5, max=15), reraise=True,
                        before_sleep=before_sleep_log(logger, logging.WARNING))
    return retrying(call, *args, **kwargs)


class Outbox:
    """Writes to a store, sent in order by one writer thread, so that the caller (the Tune loop of
    a sweep's driver) never waits on them and the trials keep training. While the store is away they
    wait here and are sent again with backoff. ``flush(wait=True)`` (at the end of a sweep) waits
    until all are sent. An outage longer than ``patience_s``, or an error that is no outage, stops
    the writer; the caller's next call raises it, and what was not sent stays in ``pending``.

    A write may carry ``weights``, {key: weight} (the runs it writes, and the epochs of each):
    ``unsent(key)`` is the weight not yet sent, and ``wait_for(key)`` lets a caller that must bound it
    wait for the writer (docs/load.md)."""

    def __init__(self, is_away, patience_s: float, max_delay_s: float = 15.0):
        self.is_away, self.patience_s, self.max_delay_s = is_away, patience_s, max_delay_s
        self.pending: deque = deque()  # (send, args, weights); the first is the one being sent
        self.away_since: float | None = None
        self._unsent: Counter = Counter()
        self._error: BaseException | None = None
        self._changed = threading.Condition()
        self._writer: threading.Thread | None = None

    def put(self, send, *args, weights: dict | None = None) -> None:
        with self._changed:
            self._raise()
            self.pending.append((send, args, weights or {}))
            self._unsent.update(weights or {})
            if self._writer is None:
                self._writer = threading.Thread(target=self._write, name="actsweep-outbox", daemon=True)
                self._writer.start()
                atexit.register(self._drain_at_exit)
            self._changed.notify_all()

    def unsent(self, key) -> int:
        """The weight of ``key``'s writes not sent yet."""
        return self._unsent[key]

    def wait_for(self, key) -> None:
        """Waits until every write of ``key`` is sent; while the store is away, returns at once."""
        with self._changed:
            while self._unsent[key] and self.away_since is None and self._error is None:
                self._changed.wait()
            self._raise()

    def flush(self, wait: bool = False) -> None:
        """Raises what stopped the writer; with ``wait``, first waits until every write is sent."""
        with self._changed:
            while wait and self.pending and self._error is None:
                self._changed.wait()
            self._raise()

    def _drain_at_exit(self, timeout_s: float = 30.0) -> None:
        # a process that exits without the sweep's end (an error in Tune's loop) still sends what it
        # holds, for a while: the writer is a daemon thread, stopped at exit
        with self._changed:
            if not self._changed.wait_for(lambda: not self.pending or self._error is not None, timeout_s):
                logger.warning("exiting with %d write(s) not sent", len(self.pending))

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _write(self) -> None:
        delay = 0.5
        while True:
            with self._changed:
                while not self.pending:
                    self._changed.wait()
                send, args, weights = self.pending[0]
            try:
                send(*args)
            except Exception as exc:
                now = time.monotonic()
                with self._changed:
                    if self.is_away(exc) and self.away_since is None:
                        self.away_since = now
                        logger.warning("%s: keeping %d write(s) until it answers", exc, len(self.pending))
                    if not self.is_away(exc) or now - self.away_since > self.patience_s:
                        self._error = exc
                    self._changed.notify_all()
                    if self._error is not None:
                        return
                time.sleep(delay)
                delay = min(2 * delay, self.max_delay_s)
                continue
            with self._changed:
                self.pending.popleft()
                for key, weight in weights.items():
                    self._unsent[key] -= weight
                    if not self._unsent[key]:  # (a key per run: none kept once its writes are sent)
                        del self._unsent[key]
                if self.away_since is not None:
                    logger.warning("the store answers again after %.0f s", time.monotonic() - self.away_since)
                self.away_since, delay = None, 0.5
                self._changed.notify_all()
