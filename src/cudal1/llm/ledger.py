"""Accounting of LLM calls: running totals, a spending cap, and an append-only JSONL record.

One ``Ledger`` may be shared by all backends of a run, so the run's cost and token use are in one
place; the JSONL file (one line per call, successful or not) is what a report or an audit reads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class CallRecord:
    """One line of the ledger: one call (all its n samples), successful or not."""

    ts: float
    backend: str
    model: str
    base_url: str | None
    request_id: str | None
    n: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    latency_s: float
    finish_reasons: tuple[str, ...]
    cost_usd: float | None
    error: str | None = None


class Ledger:
    """Running totals of every call, optionally mirrored to a JSONL file (one record per call).

    Safe to share between backends, threads and event loops: updates take a lock, and each record
    is appended with a single write so that concurrent writers do not interleave lines.
    ``budget_usd`` caps spending: once reached, ``LLMBackend.complete`` refuses new calls.
    """

    def __init__(self, path: str | Path | None = None, *, budget_usd: float | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.budget_usd = budget_usd
        self._lock = threading.Lock()
        self._totals: dict[str, float] = dict.fromkeys(
            (
                "calls",
                "samples",
                "errors",
                "unpriced_calls",
                "prompt_tokens",
                "completion_tokens",
                "cached_tokens",
            ),
            0,
        )
        self._cost = 0.0
        self._latency = 0.0
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def record(self, rec: CallRecord) -> None:
        line = json.dumps(dataclasses.asdict(rec)) + "\n"
        with self._lock:
            t = self._totals
            t["calls"] += 1
            t["errors"] += rec.error is not None
            t["samples"] += 0 if rec.error else rec.n
            # cost_usd in summary() is a lower bound when calls had no price
            t["unpriced_calls"] += rec.error is None and rec.cost_usd is None
            t["prompt_tokens"] += rec.prompt_tokens
            t["completion_tokens"] += rec.completion_tokens
            t["cached_tokens"] += rec.cached_tokens
            self._cost += rec.cost_usd or 0.0
            self._latency += rec.latency_s
            if self.path is not None:
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(line)

    @property
    def cost_usd(self) -> float:
        with self._lock:
            return self._cost

    def over_budget(self) -> bool:
        return self.budget_usd is not None and self.cost_usd >= self.budget_usd

    def summary(self) -> dict[str, Any]:
        """Totals so far (ints for counts, floats for cost and summed latency)."""
        with self._lock:
            out: dict[str, Any] = {k: int(v) for k, v in self._totals.items()}
            out["cost_usd"] = self._cost
            out["latency_s"] = self._latency
            return out


def ledger_totals(path: Path) -> dict[str, Any]:
    """Calls, tokens and cost recorded in a ledger file (every session that wrote to it); an unreadable
    line (a session killed mid-write) is skipped."""
    totals: dict[str, Any] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
    if not path.is_file():
        return totals
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            totals["calls"] += 1
            totals["prompt_tokens"] += int(rec.get("prompt_tokens") or 0)
            totals["completion_tokens"] += int(rec.get("completion_tokens") or 0)
            totals["cost_usd"] += float(rec.get("cost_usd") or 0.0)
    return totals
