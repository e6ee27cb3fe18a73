"""What the bench tests share."""
from __future__ import annotations

import pytest


@pytest.fixture
def one_torch_thread():
    """This test process on one torch thread (its share under make test) for the test, and its own count
    after it: a bench measures on every core, and must give its caller's threads back."""
    from service.benchmarks.peaks import torch_threads

    with torch_threads(1):
        yield
