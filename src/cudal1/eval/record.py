"""What one evaluation has found so far, and the frozen ``EvalResult`` it makes at the end.

The stages record themselves here as they run (``stage``: passed, or failed with the reason and
whose failure it was), the phases that work on the device their seconds (``phase``), the checks their
findings, and everyone their environment facts (``note``). The result is assembled once, by
``result``; what a pool learns afterwards goes on a copy (``EvalResult.with_environment``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudal1.eval.checks.stage_failure import StageFailed
from cudal1.eval.process.protocol import Role
from cudal1.eval.process.sandbox import RemoteError, WorkerError
from cudal1.eval.workers import is_resource_error
from cudal1.schema import (
    Correctness,
    DevicePhase,
    Environment,
    EvalResult,
    Finding,
    SpeedOfLight,
    Stage,
    StageRecord,
    Timing,
    source_hash,
)


@functools.cache
def evaluator_digest() -> str:
    """12 hex digits of SHA-256 over the evaluator's code and its config's defaults (every ``.py``
    under ``cudal1/eval`` and ``cudal1/config``, by path): results of one run measured before and
    after a change to either (a session resumed on newer code) can be told apart."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(p for part in ("eval", "config") for p in (root / part).rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


@dataclass
class EvaluationRecord:
    """Stages, findings, measurements and environment facts of one evaluation, as they arrive."""

    stages: list[StageRecord] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    correctness: Correctness | None = None
    timing: Timing | None = None
    sol: SpeedOfLight | None = None
    environment: Environment = field(default_factory=lambda: Environment(evaluator=evaluator_digest()))
    failed: bool = False

    @contextmanager
    def stage(self, stage: Stage) -> Iterator[None]:
        """Run one stage; a failure is recorded against it, unless the trusted side failed (a
        reference worker that died or ran out of device memory): then it is an evaluator error."""
        start = time.perf_counter()
        try:
            yield
        except StageFailed as exc:
            trusted = exc.reference and is_resource_error(str(exc))
            self._record(Stage.EVALUATOR if trusted else exc.stage, False, start, str(exc))
            self.failed = True
        except WorkerError as exc:
            tail = _last_lines(exc.log_tail)
            trusted = exc.role is Role.REFERENCE
            # What the worker logged first, what happened last: the run's one-line summaries
            # take a failed stage's last line (``run.selection.why_not_ok``).
            self._record(
                Stage.EVALUATOR if trusted else stage, False, start, (f"{tail}\n" if tail else "") + f"{exc}"
            )
            self.failed = True
        except RemoteError as exc:
            if is_resource_error(str(exc)):
                # The candidate's own process ran out of device memory: on a shared device that
                # may be its neighbours' doing, so the pool tries it once more with the device alone.
                self.note(out_of_memory=True)
            # The traceback ends with the error's own line: the message once, below its frames.
            self._record(stage, False, start, _last_lines(exc.traceback, 24) or str(exc))
            self.failed = True
        else:
            self._record(stage, True, start, "")

    def fail(self, stage: Stage, message: str) -> None:
        """A stage that failed before it could run (the task's reference did not load)."""
        self.stages.append(StageRecord(stage, False, 0.0, message))
        self.failed = True

    def _record(self, stage: Stage, ok: bool, start: float, message: str) -> None:
        self.stages.append(StageRecord(stage, ok, round(time.perf_counter() - start, 4), message.strip()))

    @contextmanager
    def phase(self, name: DevicePhase) -> Iterator[None]:
        """Seconds per phase that works on the device, in ``environment.device_s``: what a
        throughput figure is made of (``schema.DevicePhase`` says which phases hold it)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            spent = dict(self.environment.device_s)
            spent[name] = round(spent.get(name, 0.0) + time.perf_counter() - start, 4)
            self.note(device_s=spent)

    def note(self, **facts: Any) -> None:
        """Environment facts (``schema.Environment``'s fields), replacing earlier values."""
        self.environment = dataclasses.replace(self.environment, **facts)

    def note_probe(self, probe: str, facts: dict[str, Any]) -> None:
        """What a behavioural probe did or why it was skipped (``checks.probes``); a probe's later
        facts join its earlier ones."""
        self.note(probes={**self.environment.probes, probe: {**self.environment.probes.get(probe, {}), **facts}})

    def result(self, task: str, source: str, device: str) -> EvalResult:
        return EvalResult(
            task=task,
            candidate_hash=source_hash(source),
            device=device,
            stages=tuple(self.stages),
            correctness=self.correctness,
            timing=self.timing,
            findings=tuple(self.findings),
            environment=self.environment,
            sol=self.sol,
        )


def _last_lines(text: str, n: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-n:])
