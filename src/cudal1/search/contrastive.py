"""The per-task contrastive loop: propose, evaluate, remember, and ask again with the numbers.

``Search`` runs it, ``Budget`` stops it, ``seed_candidates`` gives round 0 and ``choose_best`` picks
what a task reports; ``optimize.py`` runs one ``Search`` session in a run directory.

Per task, round 0 seeds the candidate database with the built-in proposer's baselines
(``proposer.py``) and with the reference itself as a candidate labelled ``reference``: an A-vs-A measurement
whose speedup should be 1.0, so that every other number of the task can be read against the
evaluator's own noise on this machine. Each later round (only with an LLM) selects exemplars
from what the task has, renders the contrastive prompt (the one-shot generation prompt while
the task has no correct variant yet), draws ``samples`` completions from one call, extracts
each reply's ``ModelNew``, stores it (or the parse failure), evaluates the new candidates on
the pool and records the results; the next round sees them. With no LLM, round 0 is the search.

Concurrency: every task runs as its own asyncio task, so one task's LLM call overlaps another
task's evaluations; evaluations are pool futures awaited through ``asyncio.wrap_future``, at
most ``pool.capacity`` in flight so that a budget stops the run promptly instead of after a
queue drains. A task's rounds are sequential: a round's prompt needs the previous round's numbers.

Resume: the database is the state. A task first evaluates whatever is stored but pending
(samples of a round that was killed mid-evaluation), then continues at ``rounds_done``; a round
whose samples are already stored is not sampled again. Budgets (``BudgetConfig``) are checked
before every LLM call and every evaluation; work already under way finishes and is recorded.
An ``LLMError`` the backend could not retry stops the whole run (everything stored stays).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast

from cudal1.config import BudgetConfig, ExemplarConfig, OptimizeConfig
from cudal1.eval.pool import Pool
from cudal1.llm import BudgetExceeded, Completion, Ledger, LLMBackend, Message, SamplingParams
from cudal1.schema import EvalRequest, EvalResult, Severity, Stage, Task
from cudal1.search.database import CandidateDB, CandidateRow, DuplicateSourceError, Provenance
from cudal1.search.exemplars import select_exemplars
from cudal1.search.parsing import extract
from cudal1.search.prompts import prompt_hash, render_contrastive_prompt, render_generation_prompt
from cudal1.search.proposer import baseline_candidates

log = logging.getLogger(__name__)

REFERENCE_LABEL = "reference"
# Stages that occupy the timing device; static checks and compilation are CPU work.
DEVICE_STAGES = frozenset({Stage.LOAD, Stage.CORRECTNESS, Stage.TIMING})

EventKind = Literal["run_start", "evaluated", "parse_failed", "round_done", "stopped", "final", "run_done"]


class ProgressCallback(Protocol):
    """Receives ``(kind, payload)`` events from the event-loop thread; raising aborts the run."""

    def __call__(self, kind: EventKind, payload: dict[str, Any]) -> None: ...


def device_seconds(result: EvalResult) -> float:
    """Seconds a result held the timing device (what ``max_gpu_seconds`` counts)."""
    return sum(s.seconds for s in result.stages if s.stage in DEVICE_STAGES)


# Limits that stop evaluations as well as LLM calls; token and cost limits stop only LLM calls,
# so that samples already paid for are still evaluated.
EVALUATION_LIMITS = ("max_wall_s", "max_gpu_seconds")


@dataclass
class Budget:
    """Running use against ``BudgetConfig``; ``*_before`` carry what earlier sessions spent."""

    config: BudgetConfig
    ledger: Ledger
    tokens_before: int = 0
    cost_before: float = 0.0
    gpu_seconds: float = 0.0
    clock: Callable[[], float] = time.monotonic
    reached: list[str] = field(default_factory=list)
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()

    @property
    def stop_reason(self) -> str | None:
        return self.reached[0] if self.reached else None

    def tokens(self) -> int:
        s = self.ledger.summary()
        return self.tokens_before + int(s["prompt_tokens"]) + int(s["completion_tokens"])

    def add(self, result: EvalResult) -> None:
        self.gpu_seconds += device_seconds(result)

    def stop(self, reason: str, detail: str = "") -> None:
        if reason not in self.reached:
            self.reached.append(reason)
            scope = "evaluations and LLM calls" if reason in EVALUATION_LIMITS else "LLM calls"
            log.warning("budget %s reached%s; no new %s", reason, detail, scope)

    def exhausted(self, *, llm: bool = True) -> str | None:
        """The first limit reached (they stay reached) that stops the next LLM call, or with
        ``llm=False`` the next evaluation; None while it may go ahead."""
        c = self.config
        for name, limit, used in (
            ("max_wall_s", c.max_wall_s, lambda: self.clock() - self.started),
            ("max_gpu_seconds", c.max_gpu_seconds, lambda: self.gpu_seconds),
            ("max_tokens_total", c.max_tokens_total, lambda: float(self.tokens())),
            ("max_cost_usd", c.max_cost_usd, lambda: self.cost_before + self.ledger.cost_usd),
        ):
            if not llm and name not in EVALUATION_LIMITS:
                continue
            if name not in self.reached and limit is not None and (value := used()) >= limit:
                self.stop(name, f" ({value:.6g} >= {limit})")
            if name in self.reached:
                return name
        return None


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        if node.name == self.old:
            node.name = self.new
        self.generic_visit(node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == self.old:
            node.id = self.new
        return node


def reference_anchor(task: Task) -> str:
    """The task's own program as a candidate: ``class Model`` renamed ``ModelNew`` (by ``ast``)."""
    return ast.unparse(_Rename("Model", "ModelNew").visit(ast.parse(task.source))) + "\n"


def seed_candidates(task: Task, labels: Sequence[str] | None) -> list[tuple[str, str]]:
    """Round 0's (label, source): the chosen built-in baselines, then the reference anchor."""
    seeds = [(lbl, src) for lbl, src in baseline_candidates(task) if labels is None or lbl in labels]
    return [*seeds, (REFERENCE_LABEL, reference_anchor(task))]


def choose_best(rows: Sequence[CandidateRow]) -> CandidateRow | None:
    """Fastest accepted candidate; the reference anchor only when no other candidate beats it."""
    ok = [r for r in rows if r.speedup is not None and r.correct]
    anchors = [r for r in ok if r.label == REFERENCE_LABEL]
    others = [r for r in ok if r.label != REFERENCE_LABEL]
    anchor = max(anchors, key=lambda r: r.speedup or 0.0, default=None)
    best = max(others, key=lambda r: (r.speedup or 0.0, -r.id), default=None)
    if best is None or (anchor is not None and (best.speedup or 0.0) <= (anchor.speedup or 0.0)):
        return anchor
    return best


@dataclass(frozen=True)
class TaskPrompt:
    """The prompt a task gets next: contrastive when it has a correct variant, else one-shot."""

    messages: list[dict[str, str]]
    contrastive: bool
    parents: tuple[int, ...]  # database ids of the exemplars shown (empty for a one-shot prompt)
    exemplar_labels: tuple[str, ...]


def task_prompt(
    task: Task, rows: Sequence[CandidateRow], config: ExemplarConfig, rng: random.Random
) -> TaskPrompt:
    """The prompt for ``task`` from its evaluated candidates ``rows``: exemplars selected with
    ``rng``, rendered contrastively once one of them is correct (the search and GRPO share this)."""
    exemplars = select_exemplars(rows, config, rng)
    if not any(e.correct for e in exemplars):
        return TaskPrompt(render_generation_prompt(task), False, (), ())
    return TaskPrompt(
        render_contrastive_prompt(task, exemplars),
        True,
        tuple(e.candidate_id for e in exemplars if e.candidate_id is not None),
        tuple(e.label for e in exemplars),
    )


def store_reply(
    db: CandidateDB, task: Task, text: str, provenance: Provenance, *, label: str
) -> tuple[int, str | None]:
    """Store one model reply: its ``ModelNew`` as a pending candidate, or the reply as a parse
    failure. Returns the row's id (the existing one when the task already has this source) and
    the parse error (None when a candidate was stored or already existed)."""
    ex = extract(text)
    if not ex.ok or ex.code is None:
        error = ex.error or "no code"
        return db.record_parse_failure(task, text, error, provenance, analysis=ex.analysis), error
    try:
        return db.add_candidate(task, ex.code, provenance, label=label, analysis=ex.analysis), None
    except DuplicateSourceError as exc:
        log.info("%s: %s repeats candidate %d", task.name, label, exc.existing_id)
        return exc.existing_id, None


def device_held_seconds(result: EvalResult) -> float:
    """Seconds a result held the timing device: the evaluator's phases (``environment["device_s"]``)
    where it recorded them, else its device stages (``device_seconds``)."""
    phases = result.environment.device_s
    if isinstance(phases, dict) and phases:
        return float(sum(phases.values()))
    return device_seconds(result)


def beats_reference(label: str, result: EvalResult | None) -> bool:
    """Whether a variant is worth recommending: not the reference itself, accepted, and faster
    than the reference beyond its interval (the lower end of its 95% CI above 1.0)."""
    return (
        label != REFERENCE_LABEL
        and result is not None
        and result.ok
        and result.timing is not None
        and result.timing.ci_low > 1.0
    )


def final_event(task: str, label: str | None, result: EvalResult | None) -> dict[str, Any]:
    """The payload of a ``final`` event: a task's re-measured best (None: nothing correct)."""
    timing = result.timing if result is not None and result.ok else None
    return {
        "task": task,
        "label": label,
        "ok": result is not None and result.ok,
        "speedup": result.speedup if result is not None else None,
        "ci_low": timing.ci_low if timing else None,
        "ci_high": timing.ci_high if timing else None,
        "faster": label is not None and beats_reference(label, result),
    }


class Search:
    """One session of the loop over a set of tasks; ``await run(tasks)`` inside an event loop."""

    def __init__(
        self,
        db: CandidateDB,
        pool: Pool,
        config: OptimizeConfig,
        budget: Budget,
        *,
        backend: LLMBackend | None = None,
        progress: ProgressCallback | None = None,
        run_id: int | None = None,
    ) -> None:
        self.db, self.pool, self.config, self.budget = db, pool, config, budget
        self.backend, self.progress, self.run_id = backend, progress, run_id
        self._slots: asyncio.Semaphore | None = None
        self._reported: set[str] = set()

    def emit(self, kind: EventKind, **payload: Any) -> None:
        if self.progress is not None:
            self.progress(kind, payload)

    def _exhausted(self, *, llm: bool) -> bool:
        """Whether a budget forbids the next LLM call (``llm``) or evaluation; reported once each."""
        reason = self.budget.exhausted(llm=llm)
        if reason and reason not in self._reported:
            self._reported.add(reason)
            self.emit("stopped", reason=reason)
        return reason is not None

    async def run(self, tasks: Sequence[Task]) -> None:
        self._slots = asyncio.Semaphore(self.pool.capacity)
        try:
            async with asyncio.TaskGroup() as group:
                for task in tasks:
                    group.create_task(self.run_task(task), name=f"search:{task.name}")
        except BaseExceptionGroup as failures:
            raise _first_leaf(failures) from None
        finally:
            if self.backend is not None:
                await self.backend.aclose()

    async def run_task(self, task: Task) -> None:
        last_round = self.config.rounds if self.backend is not None else 0
        await self._evaluate(task, self.db.pending(task.name))
        while (r := self.db.rounds_done(task.name)) <= last_round:
            if self._exhausted(llm=r > 0):
                break
            finished = await (self._seed_round(task) if r == 0 else self._llm_round(task, r))
            if not finished:
                break

    # -- rounds ----------------------------------------------------------------------------------

    async def _seed_round(self, task: Task) -> bool:
        with self.db.transaction():
            for label, source in seed_candidates(task, self.config.baseline_labels):
                with contextlib.suppress(DuplicateSourceError):  # seeded by an earlier session
                    self.db.add_candidate(
                        task, source, Provenance(round=0, backend="baseline", run_id=self.run_id), label=label
                    )
        await self._evaluate(task, self.db.pending(task.name))
        return self._finish_round(task, 0)

    async def _llm_round(self, task: Task, r: int) -> bool:
        assert self.backend is not None
        stored = any(row.round == r for row in self.db.evaluated(task.name) + self.db.pending(task.name))
        if not stored:  # a killed session may have stored this round's samples already
            prompt = task_prompt(
                task,
                self.db.evaluated(task.name),
                self.config.exemplars,
                random.Random(f"{self.config.seed}:{task.name}:{r}"),
            )
            messages = prompt.messages
            log.info(
                "%s round %d: %s prompt, exemplars %s",
                task.name,
                r,
                "contrastive" if prompt.contrastive else "generation",
                list(prompt.exemplar_labels),
            )
            llm = self.config.llm
            params = SamplingParams(
                temperature=llm.temperature, top_p=llm.top_p, max_tokens=llm.max_tokens, n=self.config.samples
            )
            try:
                completions = await self.backend.complete(_chat(messages), params)
            except BudgetExceeded:
                self.budget.stop("max_cost_usd")
                return False
            self._store(task, r, completions, prompt.parents, prompt_hash(messages))
        await self._evaluate(task, self.db.pending(task.name))
        return self._finish_round(task, r)

    def _store(
        self, task: Task, r: int, completions: list[Completion], parents: tuple[int, ...], phash: str
    ) -> None:
        """A round's replies in one transaction: a kill leaves all of them or none."""
        assert self.backend is not None
        failures: list[str | None] = []
        with self.db.transaction():
            for i, c in enumerate(completions):
                prov = Provenance(
                    round=r,
                    parent_ids=parents,
                    prompt_hash=phash,
                    backend=self.backend.name,
                    model=c.model,
                    prompt_tokens=c.prompt_tokens,
                    completion_tokens=c.completion_tokens,
                    run_id=self.run_id,
                )
                _, error = store_reply(self.db, task, c.text, prov, label=f"llm-r{r}-s{i}")
                if error is not None:
                    log.info("%s round %d sample %d: %s", task.name, r, i, error)
                    failures.append(error)
        for error in failures:  # after the commit: a callback that raises cannot undo the round
            self.emit("parse_failed", task=task.name, round=r, error=error, done=self._done(task))

    def _finish_round(self, task: Task, r: int) -> bool:
        left = [row.id for row in self.db.pending(task.name) if row.round == r]
        if left:
            if not self._exhausted(llm=False):
                log.error(
                    "%s round %d: candidates %s left pending; a resumed run retries them", task.name, r, left
                )
            return False
        self.db.finish_round(task.name, r)
        self.emit("round_done", task=task.name, round=r)
        return True

    # -- evaluation ------------------------------------------------------------------------------

    async def _evaluate(self, task: Task, rows: Sequence[CandidateRow]) -> None:
        if rows:
            async with asyncio.TaskGroup() as group:
                for row in rows:
                    group.create_task(self._evaluate_one(task, row))

    async def _evaluate_one(self, task: Task, row: CandidateRow) -> None:
        assert self._slots is not None
        async with self._slots:
            if self._exhausted(llm=False):
                return
            result = await evaluate_and_record(self.pool, self.db, task, row)
            if result is None:
                return
        self.budget.add(result)
        best = choose_best(self.db.evaluated(task.name))
        self.emit(
            "evaluated",
            task=task.name,
            id=row.id,
            label=row.label,
            round=row.round,
            **result_fields(result),
            best_speedup=best.speedup if best else None,
            best_label=best.label if best else None,
            done=self._done(task),
        )

    def _done(self, task: Task) -> int:
        """Samples dealt with so far (evaluated or unparseable): a progress bar's position."""
        counts = self.db.counts(task.name)
        return counts.evaluated + counts.parse_failed


async def evaluate_and_record(
    pool: Pool, db: CandidateDB, task: Task, row: CandidateRow
) -> EvalResult | None:
    """Evaluate one stored candidate on the pool and record its result, as every stage does (the
    search, collect, self-supervised rounds, GRPO rewards). An exception from the evaluator itself
    leaves the candidate pending, for a resumed run: None."""
    future = pool.submit(EvalRequest(task, row.source, request_id=str(row.id)))
    try:
        result = await asyncio.wrap_future(future)
    except Exception:
        log.exception("evaluator raised on %s candidate %d; left pending", task.name, row.id)
        return None
    db.record_result(row.id, result)
    verdict = f"{result.speedup:.3f}x" if result.speedup is not None else f"not ok: {why_not_ok(result)}"
    log.info("%s #%d %s (round %d, step %s): %s", task.name, row.id, row.label, row.round, row.step, verdict)
    return result


def result_fields(result: EvalResult) -> dict[str, Any]:
    """What an ``evaluated`` event says of a result: its verdict and speedup, the interval of a
    verified one, and why another is not ok."""
    timing = result.timing if result.ok else None
    return {
        "ok": result.ok,
        "speedup": result.speedup,
        "ci_low": timing.ci_low if timing else None,
        "ci_high": timing.ci_high if timing else None,
        "error": None if result.ok else why_not_ok(result),
    }


def why_not_ok(result: EvalResult) -> str:
    if result.failed_stage is not None:
        lines = result.error.strip().splitlines() or ["no message"]
        return f"{result.failed_stage} stage: {lines[-1][:200]}"
    if result.rejected:
        return "rejected: " + "; ".join(f.code for f in result.findings if f.severity is Severity.REJECT)
    return "incorrect outputs" if not result.correct else "not timed"


def _chat(messages: list[dict[str, str]]) -> list[Message]:
    return [Message(cast(Any, m["role"]), m["content"]) for m in messages]


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
