"""A session's spending against ``BudgetConfig``: wall time, device time, LLM tokens and cost.

Limits are checked before every LLM call and every evaluation; work already under way finishes
and is recorded. Token and cost limits stop only LLM calls, so that samples already paid for are
still evaluated; wall and device limits stop evaluations too. A resumed session starts from what
the run's earlier sessions spent (``Budget.resumed``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cudal1.config import BudgetConfig
from cudal1.llm import Ledger
from cudal1.run.database import CandidateDB
from cudal1.run.selection import device_seconds
from cudal1.schema import EvalResult, Task

log = logging.getLogger(__name__)

# Limits that stop evaluations as well as LLM calls.
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

    @classmethod
    def resumed(
        cls,
        config: BudgetConfig,
        ledger: Ledger,
        before: dict[str, float],
        db: CandidateDB,
        tasks: Sequence[Task],
    ) -> Budget:
        """A session's budget, counting the ledger totals ``before`` it and the device time of
        every result the run already holds for ``tasks``."""
        spent = sum(device_seconds(r.result) for t in tasks for r in db.evaluated(t.name) if r.result)
        return cls(
            config,
            ledger,
            tokens_before=int(before["prompt_tokens"] + before["completion_tokens"]),
            cost_before=float(before["cost_usd"]),
            gpu_seconds=spent,
        )

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
