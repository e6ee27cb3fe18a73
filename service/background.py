"""Work started now and waited for later, in a daemon thread: the seconds a command spends waiting
on one thing (a Ray starting, a dataset decoding, an MLflow store making its tables) overlap with
another's."""
from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Callable


def in_background(function: Callable, *args, **kwargs) -> Future:
    """``function(*args, **kwargs)`` in a daemon thread; its Future (``result()`` raises what it raised)."""
    done: Future = Future()

    def call() -> None:
        try:
            done.set_result(function(*args, **kwargs))
        except BaseException as exc:
            done.set_exception(exc)

    threading.Thread(target=call, name=f"actsweep-{getattr(function, '__name__', 'work')}", daemon=True).start()
    return done
