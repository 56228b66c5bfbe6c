"""``cudal1 verify``: re-measure released candidates against their references on this machine.

A record (CUDA-L1 release line or cudal1 export) carries a reference, a candidate and the speedup
its authors claim. Claims were measured elsewhere, on another GPU and by another evaluator; this
module evaluates every candidate again through the one evaluator (``EvalPool``) and puts claim and
measurement side by side, with every finding.

Rows stream out as evaluations finish, and each is appended to a JSON Lines file at once, so a
run that is killed loses nothing it finished; the summary JSON is written at the end.

Statuses: ``verified`` (correct, timed, no rejecting finding), ``incorrect`` (failed the
correctness stage), ``rejected`` (otherwise, a finding rejects it: a static hack check, or an
integrity guard at run time, whether or not a later stage failed too), ``failed`` (failed another
stage without a rejecting finding: compile, load, timing), ``untimed`` (correct, timing switched
off), ``no code`` (the record holds no candidate: the release's "None") and ``not run`` (the
run's deadline passed before its evaluation could start).
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from cudal1.config import EvalConfig
from cudal1.report.runs import fmt_ms
from cudal1.schema import Candidate, EvalRequest, EvalResult, Severity, Stage, Task
from cudal1.tasks.source import TaskError

Record = tuple[Task, Candidate | None]
STATUSES = ("verified", "rejected", "incorrect", "failed", "untimed", "no code", "not run")


@dataclass(frozen=True)
class Selection:
    """Which records to verify: level and name filters, then a seeded random sample, then the
    first N."""

    levels: frozenset[int] = frozenset()
    names: frozenset[str] = frozenset()  # task names as the table prints them, e.g. "L2_4"
    sample: int | None = None
    seed: int = 0
    limit: int | None = None


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
    return chosen


@dataclass(frozen=True)
class Row:
    """One record's verdict: claim against measurement."""

    index: int
    level: int
    task: str
    status: str
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
        stage=(failed or (result.stages[-1].stage if result.stages else Stage.STATIC)).value,
        reason=_reason(result),
        findings=tuple(f"{f.code} ({f.severity.value})" for f in result.findings),
        candidate_hash=result.candidate_hash,
    )


def _status(r: EvalResult) -> str:
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


# -- running ------------------------------------------------------------------------------------
def verify_records(
    chosen: list[tuple[int, Task, Candidate | None]],
    config: EvalConfig,
    *,
    workers: int = 2,
    spares: int = 1,
    deadline: float | None = None,
) -> Iterator[tuple[Row, EvalResult | None]]:
    """(row, full result) per record: records without code first, then evaluations as they finish.

    At most ``workers`` evaluations are in flight. Past ``deadline`` (a ``time.monotonic()``
    value) no new evaluation starts: those in flight finish, the rest come back as "not run".
    """
    from cudal1.eval.pool import EvalPool

    todo: list[tuple[int, Task, Candidate]] = []
    for index, task, cand in chosen:
        if cand is None:
            yield row_for(index, task, None, None), None
        else:
            todo.append((index, task, cand))
    if not todo:
        return
    with EvalPool(config, workers=workers, spares=spares) as pool:
        running: dict[Future[EvalResult], tuple[int, Task, Candidate]] = {}
        while todo or running:
            while todo and len(running) < workers and (deadline is None or time.monotonic() < deadline):
                index, task, cand = todo.pop(0)
                running[pool.submit(EvalRequest(task, cand.source, str(index)))] = (index, task, cand)
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
                            "failed",
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
    """Appends each finished row (with its full result) to a JSON Lines file, flushed per line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("w", encoding="utf-8")

    def append(self, row: Row, result: EvalResult | None) -> None:
        line = {"row": asdict(row), "result": result.to_dict() if result else None}
        self._file.write(json.dumps(line, default=_jsonable) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def rows_log_path(json_path: Path) -> Path:
    """Where the per-row log of ``--json PATH`` goes: PATH with suffix ``.rows.jsonl``."""
    return json_path.with_name(json_path.stem + ".rows.jsonl")


def run_verify(
    records_path: Path,
    selection: Selection,
    config: EvalConfig,
    *,
    workers: int = 2,
    json_path: Path | None = None,
    deadline_s: float | None = None,
    echo: Callable[[str], None] = print,
) -> tuple[list[Row], dict[int, EvalResult]]:
    """Load, select, evaluate; echo a line per finished record; with ``json_path``, log rows as
    they finish and write the final JSON at the end (also when interrupted, marked incomplete).
    ``deadline_s`` (from now): start no evaluation later than this. Raises ``TaskError`` for a
    missing or broken records file."""
    from cudal1.tasks.cuda_l1 import load_cuda_l1_records

    deadline = time.monotonic() + deadline_s if deadline_s is not None else None

    chosen = select_records(load_cuda_l1_records(records_path), selection)
    with_code = sum(c is not None for _, _, c in chosen)
    echo(f"verifying {len(chosen)} records from {records_path} ({with_code} with code) on {config.device}")
    rows: list[Row] = []
    results: dict[int, EvalResult] = {}
    log = RowLog(rows_log_path(json_path)) if json_path else None
    complete = False
    try:
        for row, result in verify_records(
            chosen, config, workers=workers, spares=min(workers, 2), deadline=deadline
        ):
            rows.append(row)
            if result is not None:
                results[row.index] = result
            if log:
                log.append(row, result)
            echo(progress_line(len(rows), len(chosen), row))
        complete = True
    finally:
        if log:
            log.close()
        if json_path:
            meta = {
                "complete": complete,
                "selection": asdict(selection),
                "config": config.model_dump(mode="json"),
                "environment": next(iter(results.values())).environment if results else {},
            }
            write_json(json_path, report_json(records_path, rows, results, meta))
    return rows, results


# -- summary ------------------------------------------------------------------------------------
@dataclass
class Summary:
    records: int
    counts: dict[str, int]
    compared: int  # verified records with a claim: the ones the statistics below cover
    claimed: dict[str, float | None] = field(default_factory=dict)
    measured: dict[str, float | None] = field(default_factory=dict)
    ratio_geomean: float | None = None  # geomean of measured / claimed
    within_ci: int = 0  # claims inside the measured 95% interval


def summarize(rows: Iterable[Row]) -> Summary:
    rows = list(rows)
    counts = {s: sum(r.status == s for r in rows) for s in STATUSES}
    pairs = [(r.claimed, r.measured, r) for r in rows if r.status == "verified" and r.claimed and r.measured]
    claimed = [c for c, _, _ in pairs]
    measured = [m for _, m, _ in pairs]
    ratios = [m / c for c, m, _ in pairs]
    return Summary(
        records=len(rows),
        counts=counts,
        compared=len(pairs),
        claimed=_stats(claimed),
        measured=_stats(measured),
        ratio_geomean=_geomean(ratios),
        within_ci=sum(
            r.ci_low is not None and r.ci_high is not None and r.ci_low <= c <= r.ci_high for c, _, r in pairs
        ),
    )


def _stats(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"mean": None, "median": None, "geomean": None}
    return {"mean": statistics.fmean(xs), "median": statistics.median(xs), "geomean": _geomean(xs)}


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x > 0]
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else None


def report_json(source: Path, rows: list[Row], results: dict[int, EvalResult], meta: dict[str, Any]) -> dict:
    """The final JSON: options and environment, summary, rows in file order, full results."""
    ordered = sorted(rows, key=lambda r: r.index)
    return {
        "records_file": str(source),
        **meta,
        "summary": asdict(summarize(ordered)),
        "rows": [asdict(r) for r in ordered],
        "results": {str(i): results[i].to_dict() for i in sorted(results)},
    }


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_jsonable) + "\n", encoding="utf-8")
    tmp.replace(path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)  # Path and anything else


# -- rendering ----------------------------------------------------------------------------------
_STYLE = {
    "verified": "green",
    "rejected": "red",
    "incorrect": "red",
    "failed": "red",
    "no code": "dim",
    "not run": "dim",
}


def progress_line(done: int, total: int, row: Row) -> str:
    """One line per finished record, for long runs."""
    claim = f"claimed {_x(row.claimed)}"
    measured = f"measured {_x(row.measured)}" + (
        f" [{row.ci_low:.3f}, {row.ci_high:.3f}]"
        if row.ci_low is not None and row.ci_high is not None
        else ""
    )
    tail = f"  {row.reason[:100]}" if row.reason and row.status != "verified" else ""
    codes = f"  findings: {', '.join(row.findings)}" if row.findings else ""
    return f"[{done}/{total}] L{row.level} {row.task}: {row.status}; {claim}, {measured}{codes}{tail}"


def render_rows(rows: list[Row]) -> Table:
    table = Table(title=f"verify: {len(rows)} records")
    for col in (
        "#",
        "level",
        "task",
        "status",
        "claimed",
        "measured",
        "95% CI",
        "ref ms",
        "cand ms",
        "stage / reason",
        "findings",
    ):
        table.add_column(
            col, justify="right" if col in ("#", "claimed", "measured", "ref ms", "cand ms") else "left"
        )
    for r in sorted(rows, key=lambda r: r.index):
        ci = f"[{r.ci_low:.3f}, {r.ci_high:.3f}]" if r.ci_low is not None and r.ci_high is not None else ""
        stage = ": ".join(x for x in (r.stage, r.reason[:60]) if x)
        table.add_row(
            str(r.index),
            str(r.level),
            r.task,
            Text(r.status, style=_STYLE.get(r.status, "")),
            _x(r.claimed),
            _x(r.measured),
            ci,
            fmt_ms(r.ref_ms),
            fmt_ms(r.cand_ms),
            stage,
            ", ".join(r.findings),
        )
    return table


def render_summary(s: Summary) -> Table:
    counts = ", ".join(f"{k} {v}" for k, v in s.counts.items())
    table = Table(title=f"summary: {s.records} records ({counts})")
    for col in ("over verified records with a claim", "mean", "median", "geomean"):
        table.add_column(col, justify="left" if col.startswith("over") else "right")
    for name, st in (("claimed", s.claimed), ("measured", s.measured)):
        table.add_row(f"{name} ({s.compared} records)", _x(st["mean"]), _x(st["median"]), _x(st["geomean"]))
    table.add_row("measured / claimed", "", "", _x(s.ratio_geomean))
    table.add_row("claims inside the measured 95% CI", "", "", f"{s.within_ci}/{s.compared}")
    return table


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"
