"""A run's log file: while a run lasts, ``cudal1`` records at INFO and above go to ``run.log`` in
its directory as well as wherever the caller's logging sends them."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path


class _Forward(logging.Handler):
    """Passes records on to the parent logger's handlers, at the level the caller had configured."""

    def __init__(self, parent: logging.Logger, level: int) -> None:
        super().__init__(level)
        self.parent = parent

    def emit(self, record: logging.LogRecord) -> None:
        self.parent.handle(record)


@contextlib.contextmanager
def run_log(path: Path) -> Iterator[None]:
    """``cudal1`` records at INFO and above go to ``path`` while the context lasts.

    The package logger is lowered to INFO for that, without changing what the caller's own
    handlers show: propagation is replaced by a forwarder that keeps the caller's level.
    """
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    package = logging.getLogger("cudal1")
    level, propagate = package.level, package.propagate
    forward = _Forward(package.parent or logging.getLogger(), package.getEffectiveLevel())
    package.addHandler(handler)
    if propagate:
        package.addHandler(forward)
        package.propagate = False
    package.setLevel(min(logging.INFO, package.getEffectiveLevel()))
    try:
        yield
    finally:
        package.removeHandler(handler)
        package.removeHandler(forward)
        package.setLevel(level)
        package.propagate = propagate
        handler.close()
