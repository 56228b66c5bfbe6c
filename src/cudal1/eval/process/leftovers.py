"""What a worker can leave behind it, found by a scan of /proc and killed: the processes it
started that left its process group, and the sandboxes (and processes still running out of them)
of a run killed outright, which could not remove its own.

A sandbox is known by its name and a process by its environment's TMPDIR, which names its
worker's sandbox: a process that rewrote its environment after leaving the group is not found
(``sandbox`` says what else is not covered).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
from pathlib import Path

log = logging.getLogger(__name__)

# A sandbox is ``cudal1-ROLE-PID-XXXX`` in the temporary directory, PID the evaluator's: a run
# killed with SIGKILL cannot remove its sandboxes (and on a GPU they hold built extensions), so
# the next run removes those whose evaluator is gone.
SANDBOX_NAME = re.compile(r"cudal1-(?:candidate|reference)-(\d+)-")


def remove_orphaned_sandboxes(root: Path) -> list[Path]:
    """Remove the sandboxes under ``root`` whose evaluator process no longer exists; returns them.
    A live evaluator's, another user's (no permission to signal it) and any directory not named
    by ``WorkerProcess`` are kept."""
    removed = []
    for path in root.glob("cudal1-*-*-*"):
        match = SANDBOX_NAME.match(path.name)
        if match is None or not path.is_dir() or process_exists(int(match.group(1))):
            continue
        removed.append(path)
    killed = kill_leftovers(removed) if removed else 0
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    if removed:
        also = f", and killed {killed} process(es) started from them" if killed else ""
        log.info("removed %d sandbox(es) of killed runs from %s%s", len(removed), root, also)
    return removed


def kill_leftovers(sandboxes: list[Path]) -> int:
    """Kill the processes still running out of ``sandboxes`` (their TMPDIR is one of them): what
    a killed run's workers had started, such as a compiler a quiet window had stopped, which the
    parent-death signal does not reach (``launch``). Returns how many."""
    marks = [f"\0TMPDIR={path}\0".encode() for path in sandboxes]
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = b"\0" + (entry / "environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        if any(mark in environ for mark in marks):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGCONT)
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed


def processes_outside_group(pid: int, sandbox: Path) -> list[int]:
    """Live processes started from worker ``pid`` that are not in its process group (``setsid``):
    its descendants, and any process whose environment names ``sandbox`` as TMPDIR (what a double
    fork leaves behind, with init as its parent). A scan of /proc: a few ms."""
    mark = f"\0TMPDIR={sandbox}\0".encode()
    parent: dict[int, int] = {}
    found: set[int] = set()
    try:
        entries = list(Path("/proc").iterdir())
    except OSError:  # no /proc: not Linux
        return []
    for entry in entries:
        if not entry.name.isdigit():
            continue
        other = int(entry.name)
        try:
            state, ppid, pgrp = (entry / "stat").read_text().rpartition(")")[2].split()[:3]
        except (OSError, ValueError):  # gone meanwhile
            continue
        parent[other] = int(ppid)
        if int(pgrp) == pid or state in ("Z", "X"):
            continue
        found.add(other)  # outside the group; kept below if it came from the worker
    started = set()
    for other in found:
        with contextlib.suppress(OSError):
            if mark in b"\0" + (Path("/proc") / str(other) / "environ").read_bytes():
                started.add(other)
                continue
        ancestor, hops = parent.get(other, 0), 0
        while ancestor > 1 and hops < 64:  # a loop in a racing /proc ends here
            if ancestor == pid:
                started.add(other)
                break
            ancestor, hops = parent.get(ancestor, 0), hops + 1
    return sorted(started)


def process_exists(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0; one this user may not signal exists too)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def kill_all(pids: list[int]) -> None:
    """SIGKILL (after SIGCONT) to each of ``pids``, found a moment ago."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
