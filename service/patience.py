"""Calls that wait out an outage: retried with exponential backoff (tenacity) for as long as the
caller's patience lasts, then the last error is raised.

A sweep's driver is patient with MLflow and with the sweep database (ACTSWEEP_OUTAGE_PATIENCE_S):
while either is away, the Tune loop waits in the call that failed, the trials keep training (Ray
holds their results until the driver takes them), and once the store answers again every epoch
is logged, in order. The API is not patient: a request answers 503 at once.
"""
from __future__ import annotations

import logging
import time
from collections import deque

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
    """Writes to a store, sent in order; while the store is away they wait here and are sent again
    with backoff, so that the caller (the Tune loop of a sweep's driver) never waits on them and
    the trials keep training. ``flush(wait=True)`` (at the end of a sweep) waits until all are sent.
    An outage longer than ``patience_s``, or an error that is no outage, is raised."""

    def __init__(self, is_away, patience_s: float, max_delay_s: float = 15.0):
        self.is_away, self.patience_s, self.max_delay_s = is_away, patience_s, max_delay_s
        self.pending: deque = deque()
        self.away_since: float | None = None
        self.retry_at, self.delay = 0.0, 0.5

    def put(self, send, *args) -> None:
        self.pending.append((send, args))
        self.flush()

    def flush(self, wait: bool = False) -> None:
        while self.pending:
            now = time.monotonic()
            if now < self.retry_at:
                if not wait:
                    return
                time.sleep(self.retry_at - now)
            send, args = self.pending[0]
            try:
                send(*args)
            except Exception as exc:
                if not self.is_away(exc):
                    raise
                now = time.monotonic()
                if self.away_since is None:
                    self.away_since = now
                    logger.warning("%s: keeping %d write(s) until it answers", exc, len(self.pending))
                if now - self.away_since > self.patience_s:
                    raise
                self.retry_at, self.delay = now + self.delay, min(2 * self.delay, self.max_delay_s)
                continue
            self.pending.popleft()
            if self.away_since is not None:
                logger.warning("the store answers again after %.0f s", time.monotonic() - self.away_since)
            self.away_since, self.retry_at, self.delay = None, 0.0, 0.5
