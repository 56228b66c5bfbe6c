"""The bar GRPO's reward counts a speedup over (``RewardConfig.bar``), per task, from the run's
own baselines.

``eager``: the speedup the evaluator measured, over the reference as written. ``best-baseline``:
over the faster of eager and the task's torch.compile baselines (``run.selection.best_baseline``)
measured in this run on this pool: round 0's built-in baselines, evaluated before the first
prompt (``grpo.run_grpo``). Why: a policy rewarded for beating eager learns kernels that
torch.compile beats for free (it beat the published CUDA-L1 kernel on 11 of 17 verified tasks on
an H100). Until one of those baselines has verified (none seeded, still pending, or every one
failed), the bar is eager and ``Bar.note`` says why; ``PoolReward`` writes it to the step log.
"""

from __future__ import annotations

import logging

from cudal1.config import RewardBar
from cudal1.run.database import CandidateDB
from cudal1.run.rows import CandidateRow
from cudal1.run.selection import COMPILE_LABELS, EAGER, Bar, best_baseline

log = logging.getLogger(__name__)

EAGER_BAR = Bar(EAGER, 1.0)


def compile_baselines(rows: list[CandidateRow]) -> dict[str, float | None]:
    """The task's evaluated torch.compile baselines (round 0's built-in ones, not a policy's
    completion that happens to share a label) with their speedup over eager (None: not ok)."""
    return {
        r.label: r.speedup
        for r in rows
        if r.round == 0 and r.backend == "baseline" and r.label in COMPILE_LABELS
    }


class RewardBars:
    """Each task's bar. A bar set by a verified or failed baseline is kept: a stored result never
    changes. One still unmeasured is read again at the next call."""

    def __init__(self, db: CandidateDB, kind: RewardBar) -> None:
        self.db, self.kind = db, kind
        self._kept: dict[str, Bar] = {}
        self._told: set[tuple[str, str]] = set()

    def bar(self, task: str) -> Bar:
        if self.kind == "eager":
            return EAGER_BAR
        if task in self._kept:
            return self._kept[task]
        measured = compile_baselines(self.db.evaluated(task))
        bar = best_baseline(measured)
        if measured:
            self._kept[task] = bar
        if bar.note and (task, bar.note) not in self._told:
            self._told.add((task, bar.note))
            log.info("%s: reward over eager, not the best baseline: %s", task, bar.note)
        return bar
