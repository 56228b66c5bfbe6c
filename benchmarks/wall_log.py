"""A benchmark's own wall time, kept call by call in a JSON-lines file of its run directory.

Evaluations per GPU-hour need the time the GPU was held. The benchmarked run records its wall
time when a session ends, and a GPU session killed by its time limit ends nothing: that call's
time was lost and the rate came out too high. ``WallLog`` appends a line when a call starts and
at each progress step (``tick``; ``wait`` ticks every ``TICK_S`` while a child process runs),
each with the call's number and its seconds so far, so a killed call leaves its time up to its
last step (at most ``TICK_S`` short). ``total_wall_s`` sums every call's latest line: calls
under ``--resume`` append to the file, a fresh start replaces it.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

WALL_FILE = "wall.jsonl"
TICK_S = 15.0  # a killed call loses at most this much of its time


class WallLog:
    """One call's wall time, appended to ``path`` at its start and at every ``tick``."""

    def __init__(self, path: Path, *, fresh: bool, clock: Callable[[], float] = time.monotonic) -> None:
        if fresh:
            path.unlink(missing_ok=True)
        self.path, self.clock = path, clock
        self.call = 1 + max(call_seconds(path), default=0)
        self.started = clock()
        self._append({"started": datetime.now(UTC).isoformat(timespec="seconds")})

    def tick(self) -> float:
        """Record the call's seconds so far; returns them."""
        return self._append({})

    def wait(self, proc: subprocess.Popen[bytes], step_s: float = TICK_S) -> int:
        """``proc``'s exit status, ticking every ``step_s`` while it runs and once when it ends."""
        while True:
            try:
                rc = proc.wait(timeout=step_s)
            except subprocess.TimeoutExpired:
                self.tick()
                continue
            self.tick()
            return rc

    def _append(self, extra: dict[str, str]) -> float:
        elapsed = self.clock() - self.started
        line = {"call": self.call, "wall_s": round(elapsed, 3), **extra}
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
        return elapsed


def call_seconds(path: Path) -> dict[int, float]:
    """Each call's latest recorded seconds, by call number (empty when nothing is recorded)."""
    calls: dict[int, float] = {}
    if not path.exists():
        return calls
    for text in path.read_text(encoding="utf-8").splitlines():
        try:
            line = json.loads(text)
            call, seconds = int(line["call"]), float(line["wall_s"])
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by the kill
        calls[call] = max(calls.get(call, 0.0), seconds)
    return calls


def total_wall_s(path: Path) -> float | None:
    """The benchmark's wall time over every call; None when it recorded none (an older run)."""
    calls = call_seconds(path)
    return sum(calls.values()) if calls else None
