"""Which live threads a candidate's own code started (runs inside the candidate's worker).

A thread count taken around each call misses a thread started at import or construction (it is
older than the call) and counts library threads as the candidate's: torch.compile's first call
starts tqdm's monitor. So ``Thread.start`` is wrapped before the candidate is imported, and a
thread belongs to the candidate when the innermost frame outside the threading machinery that
started it is in the candidate's file (its own ``Thread`` or executor; not Inductor's pools).

Like every observation from the candidate's process this can be forged or bypassed (the
candidate may restore ``Thread.start``); it only ever adds a warning, while the trusted clock and
the reference's separate process decide what hidden work could gain.
"""

from __future__ import annotations

import concurrent.futures.thread
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

_MACHINERY = {threading.__file__, concurrent.futures.thread.__file__, __file__}


class ThreadWatch:
    def __init__(self, candidate_file: str) -> None:
        self.file = candidate_file
        self._mine: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
        self._original: Callable[..., Any] | None = None

    def install(self) -> None:
        if self._original is not None:
            return
        original = self._original = threading.Thread.start
        watch = self

        def start(thread: threading.Thread, *args: Any, **kwargs: Any) -> Any:
            if watch._started_by_candidate():
                watch._mine.add(thread)
            return original(thread, *args, **kwargs)

        threading.Thread.start = start  # type: ignore[method-assign,assignment]

    def _started_by_candidate(self) -> bool:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename in _MACHINERY:
            frame = frame.f_back  # type: ignore[assignment]
        return frame is not None and frame.f_code.co_filename == self.file

    def alive(self) -> list[str]:
        """Names of the candidate's threads still running."""
        return sorted(t.name for t in list(self._mine) if t.is_alive())
