"""Who else used the GPU, and at what clock, while a candidate was timed?

    python benchmarks/gpu_sharing.py runs/verify/p1.rows.jsonl --host host.tar.gz --gpus gpu.txt
    python benchmarks/gpu_sharing.py runs/best-known --host host.tar.gz --gpus gpu.txt [--all]

Issue 22's open question: identical code timed in two processes reads a few percent apart inside
a loaded run, and level-3 references moved 2-3x on plateaus lasting seconds, as lower SM clocks or
other contexts sharing the GPU would make them. Each result now records its timed window
(``environment.timed_window``: wall-clock start and end, the timed pair's pids, the GPU's uuid),
and the GPU check's lanes log every GPU each second with dated lines (``nvidia-smi dmon -o DT``:
clocks, power and thermal violations; ``pmon -o DT``: each process's SM share), archived as the
call's ``host.tar.gz``; ``gpu.txt`` maps the uuids to indices. This joins them: for each timed
window, the GPU's SM clock range and violations over its seconds, and the processes other than the
pair that used the GPU's SMs then (a process the quiet window should have stopped, another
evaluation's leftover work, another lane's process on the wrong GPU). "wait ms": how long the
reference's worker waited, before the window, for other processes' queued GPU work to finish
(``timed_window.settled``, ``eval/process/drain.py``; "-" for results from before it).

RESULTS: verify rows files (``*.rows.jsonl``) or run directories (any ``candidates.db`` below; a
run's final re-measurements, kept apart from its candidates, are not read).
The logs' dates are the GPU machine's local time: ``--utc-offset-h`` if it is not UTC. Prints a
table of the windows where something else ran or the clock was below its top (``--all``: every
window) and a summary line.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sqlite3
import sys
import tarfile
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cudal1.schema import EvalResult  # noqa: E402


@dataclass(frozen=True)
class Window:
    task: str
    label: str
    start: float  # epoch seconds
    end: float
    pids: tuple[int, ...]
    uuid: str
    speedup: float | None
    settled_ms: float | None = None  # how long the GPU took to come quiet before (``drain``)


@dataclass
class Seen:
    """What the logs hold for one window."""

    seconds: int = 0
    clocks: list[int] = field(default_factory=list)  # SM MHz, seconds the GPU was busy
    violations: int = 0  # seconds with a power or thermal violation
    others: dict[int, int] = field(default_factory=dict)  # pid: peak SM %
    # pids seen in a logged second wholly inside the window: a sample at second T covers (T-1, T],
    # so one at the window's edges may be work that ended before the window began or began after
    # it ended (another check's turn, per the quiet window), while one inside cannot be.
    inside: set[int] = field(default_factory=set)


def read_log(text: str) -> Iterator[dict[str, str]]:
    """The rows of an ``nvidia-smi dmon``/``pmon`` log as dicts keyed by the header's names."""
    names: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            if names is None:
                names = [n.lower() for n in line.lstrip("#").split()]
            continue
        values = line.split()
        if names and len(values) >= len(names) - 1:  # pmon's command may be missing
            yield dict(zip(names, values, strict=False))


def second_of(row: dict[str, str], utc_offset_h: float) -> int | None:
    try:
        local = datetime.strptime(row["date"] + row["time"], "%Y%m%d%H:%M:%S")
    except (KeyError, ValueError):
        return None
    return int((local.replace(tzinfo=UTC) - timedelta(hours=utc_offset_h)).timestamp())


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "-") else None
    except ValueError:
        return None


def gpu_indices(text: str) -> dict[str, int]:
    """uuid (without ``GPU-``) -> index, from ``nvidia-smi --query-gpu=index,uuid,... --format=csv``."""
    found = {}
    for row in csv.DictReader(io.StringIO(text), skipinitialspace=True):
        if row.get("index") and row.get("uuid"):
            found[row["uuid"].strip().removeprefix("GPU-")] = int(row["index"])
    return found


def load_logs(host: Path) -> tuple[str, str]:
    """dmon and pmon logs from a lanes call's ``host.tar.gz`` or a folder holding them."""
    texts = dict.fromkeys(("dmon.txt", "pmon.txt"), "")  # a log the call did not keep stays empty
    if host.is_dir():
        for name in texts:
            if (host / name).is_file():
                texts[name] = (host / name).read_text()
    else:
        with tarfile.open(host) as tar:
            for name in texts:
                try:
                    member = tar.extractfile(name)
                except KeyError:
                    continue
                texts[name] = member.read().decode() if member else ""
    return texts["dmon.txt"], texts["pmon.txt"]


@dataclass(frozen=True)
class Stored:
    """One stored result and where it came from."""

    source: str  # the rows file's name, or the run directory holding the database
    task: str
    label: str  # the candidate's label in a run ("" for a verify row)
    origin: str  # its provenance chain in a run ("" for a verify row)
    result: dict[str, Any]  # ``EvalResult.to_dict`` form


def stored_results(paths: list[Path]) -> Iterator[Stored]:
    """Every stored result under ``paths``: verify rows files (``*.rows.jsonl``) and run
    directories (each ``candidates.db`` below, opened read-only: an analysis must not migrate or
    lock a run's database)."""
    for path in paths:
        if path.is_file():
            for line in path.read_text().splitlines():
                data = json.loads(line)
                if data.get("result"):
                    yield Stored(path.name, str(data["row"].get("task")), "", "", data["result"])
            continue
        for db_path in sorted(path.rglob("candidates.db")):
            with closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as db:
                query = "SELECT task, label, origin, result FROM candidates WHERE result IS NOT NULL"
                for task, label, origin, result in db.execute(query):
                    yield Stored(db_path.parent.parent.name, task, label or "", origin or "", json.loads(result))


def windows(paths: list[Path]) -> Iterator[Window]:
    for s in stored_results(paths):
        yield from _window(EvalResult.from_dict(s.result), s.task, s.label)


def _window(result: EvalResult, task: str, label: str) -> Iterator[Window]:
    w: dict[str, Any] = dict(result.environment.timed_window)
    if "start" not in w:
        return
    speedup = result.timing.speedup if result.timing else None
    uuid = str(w.get("gpu_uuid") or "").removeprefix("GPU-")
    settled = w.get("settled") or {}
    waited = settled.get("waited_ms") if isinstance(settled, dict) else None
    yield Window(
        task, label, float(w["start"]), float(w["end"]), tuple(w.get("pids") or ()), uuid, speedup,
        None if waited is None else float(waited),
    )


def join(found: list[Window], dmon: str, pmon: str, index: dict[str, int], utc_offset_h: float) -> list[Seen]:
    by_second: dict[tuple[int, int], dict[str, str]] = {}
    for row in read_log(dmon):
        if (t := second_of(row, utc_offset_h)) is not None and (g := _int(row.get("gpu"))) is not None:
            by_second[(g, t)] = row
    procs: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for row in read_log(pmon):
        t, g, pid, sm = (
            second_of(row, utc_offset_h),
            _int(row.get("gpu")),
            _int(row.get("pid")),
            _int(row.get("sm")),
        )
        if t is not None and g is not None and pid is not None and sm:
            procs.setdefault((g, t), []).append((pid, sm))
    seen = []
    for w in found:
        s = Seen()
        gpu = index.get(w.uuid)
        for t in range(math.floor(w.start) + 1, math.ceil(w.end) + 1):  # the seconds (t-1, t] it overlaps
            if gpu is None or (gpu, t) not in by_second:
                continue
            row = by_second[(gpu, t)]
            s.seconds += 1
            if (_int(row.get("sm")) or 0) > 0 and (clock := _int(row.get("pclk"))):
                s.clocks.append(clock)
            s.violations += bool(_int(row.get("pviol")) or _int(row.get("tviol")))
            for pid, sm in procs.get((gpu, t), []):
                if pid not in w.pids:
                    s.others[pid] = max(sm, s.others.get(pid, 0))
                    if t - 1 >= w.start and t <= w.end:
                        s.inside.add(pid)
        seen.append(s)
    return seen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", type=Path, help="verify rows files or run directories")
    ap.add_argument("--host", type=Path, required=True, help="a lanes call's host.tar.gz (or its folder)")
    ap.add_argument("--gpus", type=Path, required=True, help="the call's gpu.txt (index, uuid, ...)")
    ap.add_argument("--utc-offset-h", type=float, default=0.0, help="the GPU machine's local time less UTC")
    ap.add_argument("--all", action="store_true", help="every window, not only those with something to see")
    args = ap.parse_args(argv)
    dmon, pmon = load_logs(args.host)
    index = gpu_indices(args.gpus.read_text())
    found = list(windows(args.results))
    seen = join(found, dmon, pmon, index, args.utc_offset_h)
    top = max((c for s in seen for c in s.clocks), default=None)
    table = Table(title="timed windows against the GPUs' per-second log")
    cols = ("task", "label", "s", "wait ms", "logged", "SM MHz", "viol", "other pids (peak SM %)", "speedup")
    for col in cols:
        table.add_column(col, justify="left" if col in ("task", "label", "SM MHz", "other pids (peak SM %)") else "right")
    logged = [(w, s) for w, s in zip(found, seen, strict=True) if s.seconds]
    for w, s in logged:
        low = min(s.clocks, default=None)
        if not args.all and not s.others and not s.violations and (low is None or low == top):
            continue
        clocks = "-" if low is None else f"{low}-{max(s.clocks)}"
        others = ", ".join(f"{p} ({sm}){'*' * (p in s.inside)}" for p, sm in sorted(s.others.items())) or "-"
        speed = "-" if w.speedup is None else f"{w.speedup:.3f}"
        table.add_row(
            w.task,
            w.label,
            f"{w.end - w.start:.1f}",
            "-" if w.settled_ms is None else f"{w.settled_ms:.1f}",
            str(s.seconds),
            clocks,
            str(s.violations),
            others,
            speed,
        )
    Console(width=int(os.environ.get("COLUMNS", 100))).print(table)
    shared = sum(bool(s.others) for _, s in logged)
    inside = sum(bool(s.inside) for _, s in logged)
    print("*: seen in a logged second wholly inside the window (the others only at its edges)")
    slow = sum(any(c < (top or 0) for c in s.clocks) for _, s in logged)
    print(
        f"{len(found)} timed windows, {len(logged)} inside the log; other processes on the GPU in {shared} "
        f"({inside} inside a whole second of the window); "
        f"SM clock below its top ({top or '-'} MHz) in {slow}; power or thermal violations in "
        f"{sum(bool(s.violations) for _, s in logged)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
