"""What a local pool's evaluations are doing now, counted by state: what ``EvalPool.activity``
reports and a throughput benchmark samples."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, get_args

# What one of the pool's evaluations is doing: working off the device (static checks, the
# compile, ModelNew, the first calls), waiting (for memory admission or the device lock), or
# holding the device (correctness and timing).
PoolState = Literal["building", "waiting", "on_device"]
POOL_STATES: tuple[PoolState, ...] = get_args(PoolState)


class Activity:
    """How many of a pool's evaluations are in each ``PoolState`` now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(POOL_STATES, 0)

    @contextmanager
    def state(self, state: PoolState) -> Iterator[None]:
        with self._lock:
            self._counts[state] += 1
        try:
            yield
        finally:
            with self._lock:
                self._counts[state] -= 1

    def snapshot(self) -> dict[PoolState, int]:
        with self._lock:
            return dict(self._counts)
