"""Reading CUDA-L1 release files and cudal1's own exports: (task, candidate) pairs with claims.

The CUDA-L1 release (github.com/deepreinforce-ai/CUDA-L1, ``optimized_cuda_code/<gpu>.json``)
is JSON Lines despite its suffix: one object per line with ``level_id``, ``task_id``,
``ref_code``, ``custom_code`` and speedup fields (``score_default`` = reference time / custom
time; ``score_torch_compile_default``, ``score_cuda_graph``, ... against other baselines).
``custom_code`` is null or the string "None" where the RL found nothing faster than the
reference (release README). ``optimized_cuda_code/codes/<gpu>.json`` holds the same codes as
one JSON object keyed by level, each a list of records with a string ``score``. Both are read,
as are a JSON list of records and cudal1's export records
``{"task", "level", "ref_code", "custom_code", "claimed_speedup"}`` (optional ``label``, ``origin``:
the task's origin, ``provenance``: the candidate's chain; ``run.export`` writes them).
A release record's candidate has the origin ``cuda-l1:<gpu>`` (the file's stem, ``h100``), an
export record's the chain under ``provenance``.

The suffix does not say which layout a file has, so the content decides. Claimed speedups are
only claims: they were measured elsewhere, on another GPU, by another evaluator.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cudal1.schema import TASK_ORIGINS, Candidate, Task, TaskOrigin
from cudal1.tasks.source import TaskError, check_task_source

logger = logging.getLogger(__name__)

Record = dict[str, Any]
_NO_CODE = ("", "None")  # spellings of "no custom code" in the release
_CLAIM_FIELDS = ("claimed_speedup", "score_default", "score")


def load_cuda_l1_records(path: str | Path) -> list[tuple[Task, Candidate | None]]:
    """Every record of a CUDA-L1 release or cudal1 export file, in file order."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{path}: cannot read: {exc}") from exc
    pairs = [_pair(record, where, path) for where, record in _records(text, path)]
    if not pairs:
        raise TaskError(f"{path}: no records")
    _check_consistent(pairs, path)
    logger.info("loaded %d records from %s", len(pairs), path)
    return pairs


def _records(text: str, path: Path) -> Iterator[tuple[str, Record]]:
    """(where, record) for each record, whatever the layout of the file."""
    head = text.lstrip()[:1]
    if head == "[":
        data = _parse_json(text, path)
        yield from _listed(data, f"{path} record", {})
        return
    if head == "{":
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None  # more than one object: JSON Lines
        if isinstance(data, dict):
            yield from _single_or_by_level(data, path)
            return
    yield from _json_lines(text, path)


def _parse_json(text: str, path: Path) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TaskError(f"{path}: malformed JSON at line {exc.lineno}: {exc.msg}") from exc


def _listed(data: Any, where: str, extra: Record) -> Iterator[tuple[str, Record]]:
    if not isinstance(data, list):
        raise TaskError(f"{where}: expected a list of records, got {type(data).__name__}")
    for i, record in enumerate(data):
        if not isinstance(record, dict):
            raise TaskError(f"{where} {i}: expected a JSON object, got {type(record).__name__}")
        yield f"{where} {i}", {**extra, **record}


def _single_or_by_level(data: Record, path: Path) -> Iterator[tuple[str, Record]]:
    if "ref_code" in data:
        yield f"{path} record 0", data
        return
    for key, records in data.items():
        if not str(key).isdigit():
            raise TaskError(f"{path}: expected a record or records keyed by level, found key {key!r}")
        yield from _listed(records, f"{path} level {key} record", {"level_id": int(key)})


def _json_lines(text: str, path: Path) -> Iterator[tuple[str, Record]]:
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskError(f"{where}: malformed JSON: {exc.msg}") from exc
        if not isinstance(record, dict):
            raise TaskError(f"{where}: expected a JSON object, got {type(record).__name__}")
        yield where, record


def _pair(record: Record, where: str, path: Path) -> tuple[Task, Candidate | None]:
    if "task" in record:  # cudal1 export
        name, level = str(record["task"]), _integer(record.get("level", 0), "level", where)
        origin, label = _origin(record.get("origin") or "cuda-l1", where), str(record.get("label") or "")
        chain = str(record.get("provenance") or label)
    elif "level_id" in record and "task_id" in record:  # CUDA-L1 release
        level = _integer(record["level_id"], "level_id", where)
        name = f"L{level}_{_integer(record['task_id'], 'task_id', where)}"
        origin, label = "cuda-l1", release_label(path)
        chain = label
    else:
        raise TaskError(f"{where}: record has neither 'task' nor 'level_id' and 'task_id'")
    ref_code = record.get("ref_code")
    if not isinstance(ref_code, str) or not ref_code.strip():
        raise TaskError(f"{where}: task {name}: ref_code is missing or empty")
    check_task_source(ref_code, f"{where}: task {name} ref_code")
    task = Task(name=name, source=ref_code, level=level, path=None, origin=origin)
    code = record.get("custom_code")
    if code is None or (isinstance(code, str) and code.strip() in _NO_CODE):
        return task, None
    if not isinstance(code, str):
        raise TaskError(f"{where}: task {name}: custom_code is {type(code).__name__}, not a string")
    claim = _claim(record, where)
    return task, Candidate(task_name=name, source=code, label=label, claimed_speedup=claim, origin=chain)


def release_label(path: Path) -> str:
    """``cuda-l1:<gpu>`` for a release file: its stem (``h100.json``), without a ``cuda-l1-``
    prefix that a local copy's name may carry (``cuda-l1-h100.jsonl``)."""
    stem = path.stem
    for prefix in ("cuda-l1-", "cuda_l1_"):
        stem = stem.removeprefix(prefix)
    return f"cuda-l1:{stem}"


def _origin(value: Any, where: str) -> TaskOrigin:
    """A record's ``origin``, one of the task origins cudal1 writes."""
    for origin in TASK_ORIGINS:
        if value == origin:
            return origin
    raise TaskError(f"{where}: origin {value!r} is not one of {', '.join(TASK_ORIGINS)}")


def _integer(value: Any, field: str, where: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise TaskError(f"{where}: {field} {value!r} is not an integer") from exc


def _claim(record: Record, where: str) -> float | None:
    field = next((f for f in _CLAIM_FIELDS if f in record), None)
    value = record.get(field) if field else None
    if value is None or value == "None":
        return None
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise TaskError(f"{where}: {field} {value!r} is not a number") from exc


def _check_consistent(pairs: list[tuple[Task, Candidate | None]], path: Path) -> None:
    # Several candidates may share a task, but a name must always mean the same reference.
    sources: dict[str, str] = {}
    for task, _ in pairs:
        if sources.setdefault(task.name, task.source) != task.source:
            raise TaskError(f"{path}: task {task.name} appears with two different ref_code sources")
