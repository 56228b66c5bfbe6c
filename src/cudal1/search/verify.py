"""Re-measure released candidates against their references on this machine (``cudal1 verify``).

A record (CUDA-L1 release line or cudal1 export) carries a reference, a candidate and the speedup
its authors claim. Claims were measured elsewhere, on another GPU and by another evaluator; this
module evaluates every candidate again through the one evaluator (``EvalPool``) and puts claim and
measurement side by side, with every finding.

Rows stream out as evaluations finish, and each is appended to a JSON Lines file at once, so a
run that is killed loses nothing it finished. Statistics over the rows and their rendering (the
final JSON report included) live in ``report.verify``.

Statuses: ``verified`` (correct, timed, no rejecting finding), ``incorrect`` (failed the
correctness stage), ``rejected`` (otherwise, a finding rejects it: a static hack check, or an
integrity guard at run time, whether or not a later stage failed too), ``failed`` (failed another
stage without a rejecting finding: compile, load, timing), ``untimed`` (correct, timing switched
off), ``no code`` (the record holds no candidate: the release's "None") and ``not run`` (the
run's deadline passed before its evaluation could start).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from cudal1.config import EvalConfig, PoolConfig
from cudal1.eval.pool_kinds import make_pool
from cudal1.schema import Candidate, EvalRequest, EvalResult, Severity, Stage, Task, TimingClock
from cudal1.tasks import TaskError, load_cuda_l1_records
from cudal1.tasks.shard import Shard, part_of

Record = tuple[Task, Candidate | None]
# A row's verdict (the module docstring says what each means), in the order reports list them.
VerifyStatus = Literal[
    "verified", "rejected", "incorrect", "failed", "untimed", "evaluator error", "no code", "not run"
]
STATUSES: tuple[VerifyStatus, ...] = get_args(VerifyStatus)
# Rows a resumed run evaluates again: never finished, or the evaluator's fault.
UNFINISHED: frozenset[VerifyStatus] = frozenset({"not run", "evaluator error"})


@dataclass(frozen=True)
class Selection:
    """Which records to verify: level and name filters, then a seeded random sample, then the
    first N, then the K-th of N parts (every N-th record from the K-th: each lane of a machine
    of several GPUs verifies one, and their rows files put together are the whole)."""

    levels: frozenset[int] = frozenset()
    names: frozenset[str] = frozenset()  # task names as the table prints them, e.g. "L2_4"
    sample: int | None = None
    seed: int = 0
    limit: int | None = None
    shard: Shard | None = None


def select_records(records: list[Record], sel: Selection) -> list[tuple[int, Task, Candidate | None]]:
    """(index in file, task, candidate) of the chosen records, in file order. A name in
    ``sel.names`` that no record has is a ``TaskError`` (a typo must not verify nothing quietly)."""
    unknown = sel.names - {t.name for t, _ in records}
    if unknown:
        raise TaskError(f"no record named {', '.join(sorted(unknown))}")
    chosen = [
        (i, t, c)
        for i, (t, c) in enumerate(records)
        if (not sel.levels or t.level in sel.levels) and (not sel.names or t.name in sel.names)
    ]
    if sel.sample is not None and sel.sample < len(chosen):
        chosen = sorted(random.Random(sel.seed).sample(chosen, sel.sample), key=lambda r: r[0])
    if sel.limit is not None:
        chosen = chosen[: sel.limit]
    return part_of(chosen, sel.shard)


@dataclass(frozen=True)
class Row:
    """One record's verdict: claim against measurement."""

    index: int
    level: int
    task: str
    status: VerifyStatus
    claimed: float | None = None
    measured: float | None = None  # median paired speedup, whenever timing ran
    ci_low: float | None = None
    ci_high: float | None = None
    ref_ms: float | None = None
    cand_ms: float | None = None
    stage: str = ""  # the last stage reached (the failing one, if any)
    reason: str = ""
    findings: tuple[str, ...] = ()  # "code (severity)"
    candidate_hash: str = ""
    # The clock whose figure ``measured`` is (``Timing.clock``), and the events' figure beside it.
    clock: TimingClock | None = None
    events: float | None = None


def row_for(index: int, task: Task, cand: Candidate | None, result: EvalResult | None) -> Row:
    if cand is None or result is None:
        return Row(index, task.level, task.name, "no code", reason="the record holds no custom code")
    t = result.timing
    failed = result.failed_stage
    return Row(
        index=index,
        level=task.level,
        task=task.name,
        status=_status(result),
        claimed=cand.claimed_speedup,
        measured=t.speedup if t else None,
        ci_low=t.ci_low if t else None,
        ci_high=t.ci_high if t else None,
        ref_ms=t.ref_median_ms if t else None,
        cand_ms=t.cand_median_ms if t else None,
        clock=t.clock if t else None,
        events=t.events_figure if t else None,
        stage=(failed or (result.stages[-1].stage if result.stages else Stage.STATIC)).value,
        reason=_reason(result),
        findings=tuple(f"{f.code} ({f.severity.value})" for f in result.findings),
        candidate_hash=result.candidate_hash,
    )


def _status(r: EvalResult) -> VerifyStatus:
    if r.evaluator_error:  # the trusted side failed twice: no verdict on the candidate
        return "evaluator error"
    if r.ok:
        return "verified"
    if r.rejected:  # static hack checks, integrity guards; a stage may also have failed after it
        return "rejected"
    if r.failed_stage is Stage.CORRECTNESS:
        return "incorrect"
    if r.correct and r.timing is None:
        return "untimed"
    return "failed"


def _reason(r: EvalResult) -> str:
    rejecting = [f"{f.code}: {f.message}" for f in r.findings if f.severity is Severity.REJECT]
    if rejecting and r.failed_stage is not Stage.CORRECTNESS:
        return "; ".join(rejecting)[:200]
    return r.error.strip().splitlines()[0][:200] if r.error else ""


# -- running ----------------------------------------------------------------------------------


def verify_records(
    chosen: list[tuple[int, Task, Candidate | None]],
    config: EvalConfig,
    *,
    pool: PoolConfig | None = None,
    deadline: float | None = None,
) -> Iterator[tuple[Row, EvalResult | None]]:
    """(row, full result) per record: records without code first, then evaluations as they finish.

    At most the pool's ``capacity`` evaluations are in flight. Past ``deadline`` (a ``time.monotonic()``
    value) no new evaluation starts: those in flight finish, the rest come back as "not run".
    """
    todo: list[tuple[int, Task, Candidate]] = []
    for index, task, cand in chosen:
        if cand is None:
            yield row_for(index, task, None, None), None
        else:
            todo.append((index, task, cand))
    if not todo:
        return
    with make_pool(config, pool) as evaluator:
        running: dict[Future[EvalResult], tuple[int, Task, Candidate]] = {}
        while todo or running:
            while (
                todo
                and len(running) < evaluator.capacity
                and (deadline is None or time.monotonic() < deadline)
            ):
                index, task, cand = todo.pop(0)
                request = EvalRequest(task, cand.source, str(index), label=cand.label)
                running[evaluator.submit(request)] = (index, task, cand)
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                index, task, cand = running.pop(fut)
                try:
                    result = fut.result()
                except Exception as exc:  # an evaluator bug must not lose the rest of a long run
                    reason = f"evaluator error: {type(exc).__name__}: {exc}"
                    yield (
                        Row(
                            index,
                            task.level,
                            task.name,
                            "evaluator error",
                            claimed=cand.claimed_speedup,
                            reason=reason,
                        ),
                        None,
                    )
                    continue
                yield row_for(index, task, cand, result), result
    for index, task, cand in todo:
        reason = "the run's deadline passed before it started"
        yield Row(index, task.level, task.name, "not run", claimed=cand.claimed_speedup, reason=reason), None


class RowLog:
    """Appends each finished row (with its full result) to a JSON Lines file, flushed per line;
    ``append_to`` keeps what a killed run wrote (``--resume``)."""

    def __init__(self, path: Path, *, append_to: bool = False) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a" if append_to else "w", encoding="utf-8")

    def append(self, row: Row, result: EvalResult | None) -> None:
        line = {"row": asdict(row), "result": result.to_dict() if result else None}
        self._file.write(json.dumps(line, default=_jsonable) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def rows_log_path(json_path: Path) -> Path:
    """Where the per-row log of ``verify --json-out PATH`` goes: PATH with suffix ``.rows.jsonl``."""
    return json_path.with_name(json_path.stem + ".rows.jsonl")


@dataclass
class VerifyRun:
    """One verify run: the records chosen, and rows and full results as evaluations finish."""

    records_path: Path
    selection: Selection
    config: EvalConfig
    chosen: list[tuple[int, Task, Candidate | None]]
    rows: list[Row] = field(default_factory=list)
    results: dict[int, EvalResult] = field(default_factory=dict)
    complete: bool = False

    @classmethod
    def load(cls, records_path: Path, selection: Selection, config: EvalConfig) -> VerifyRun:
        """Load and select the records; a missing or broken records file is a ``TaskError``."""
        chosen = select_records(load_cuda_l1_records(records_path), selection)
        return cls(records_path, selection, config, chosen)

    def resume(self, rows_log: Path) -> int:
        """Take the finished rows of an earlier run's rows file (the last line per record wins)
        for this run's records; those are not evaluated again. Rows never finished and
        evaluator errors are. Returns how many were taken."""
        wanted = {index for index, _, _ in self.chosen}
        kept: dict[int, tuple[Row, EvalResult | None]] = {}
        for line in rows_log.read_text(encoding="utf-8").splitlines() if rows_log.is_file() else []:
            try:
                data = json.loads(line)
                row = Row(**{**data["row"], "findings": tuple(data["row"].get("findings") or ())})
                result = EvalResult.from_dict(data["result"]) if data.get("result") else None
            except (ValueError, TypeError, KeyError):
                continue  # a line cut short by the kill
            if row.index in wanted:
                kept[row.index] = (row, result)
        for index, (row, result) in sorted(kept.items()):
            if row.status in UNFINISHED:
                continue
            self.rows.append(row)
            if result is not None:
                self.results[index] = result
        return len(self.rows)

    @property
    def with_code(self) -> int:
        return sum(c is not None for _, _, c in self.chosen)

    def meta(self) -> dict[str, Any]:
        """Options and environment of the run, for its report."""
        return {
            "complete": self.complete,
            "selection": asdict(self.selection),
            "config": self.config.model_dump(mode="json"),
            "environment": next(iter(self.results.values())).environment.to_dict() if self.results else {},
        }


def run_verify(
    run: VerifyRun,
    *,
    pool: PoolConfig | None = None,
    rows_log: Path | None = None,
    deadline_s: float | None = None,
    on_row: Callable[[Row], None] | None = None,
) -> VerifyRun:
    """Evaluate ``run``'s records, adding each finished row (and result) to ``run`` and, with
    ``rows_log``, to that JSON Lines file at once; ``on_row`` sees each row after that.
    ``deadline_s`` (from now): start no evaluation later than this. ``run.complete`` is set
    only when every record is done, so a caller that reports in ``finally`` can tell."""
    deadline = time.monotonic() + deadline_s if deadline_s is not None else None
    done = {row.index for row in run.rows}  # taken from an earlier run (VerifyRun.resume)
    log = RowLog(rows_log, append_to=bool(done)) if rows_log else None
    todo = [entry for entry in run.chosen if entry[0] not in done]
    try:
        for row, result in verify_records(todo, run.config, pool=pool, deadline=deadline):
            run.rows.append(row)
            if result is not None:
                run.results[row.index] = result
            if log:
                log.append(row, result)
            if on_row:
                on_row(row)
        run.complete = True
    finally:
        if log:
            log.close()
    return run


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_jsonable) + "\n", encoding="utf-8")
    tmp.replace(path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)  # Path and anything else


def load_verify_report(path: Path) -> dict[str, Any]:
    """A report ``cudal1 verify`` wrote (``--json-out PATH``, or ``--format json`` on stdout); a
    file that is not one is a ``TaskError``, and a records file (what verify reads) says to run
    ``cudal1 verify`` on it first."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        if _is_records_file(path):
            raise TaskError(_RECORDS_HINT.format(path=path)) from None
        raise TaskError(f"{path}: cannot read a verify report: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        if _is_records_file(path):
            raise TaskError(_RECORDS_HINT.format(path=path)) from None
        raise TaskError(f"{path}: not a verify report (no rows)")
    return data


_RECORDS_HINT = (
    "{path}: this is a records file (a CUDA-L1 release or a cudal1 export), not a verify report;"
    " run `cudal1 verify {path} --format json > report.json` (or --json-out report.json) first,"
    " then `cudal1 report report.json`"
)


def _is_records_file(path: Path) -> bool:
    """Whether ``path`` reads as records (asked only of a file that is not a verify report)."""
    try:
        return bool(load_cuda_l1_records(path))
    except TaskError:
        return False
