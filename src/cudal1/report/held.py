"""The rewards a run held for review, as a table (``cudal1 audit``)."""

from __future__ import annotations

from collections.abc import Sequence

from cudal1.report.runs import fmt_x
from cudal1.report.tables import Col, TableSpec
from cudal1.train.review import HeldReward


def held_table(held: Sequence[HeldReward], run: str) -> TableSpec:
    """One row per held reward, those still waiting for a ruling first."""
    rows = tuple(
        (
            str(h.audit.candidate_id), h.audit.task, h.status, fmt_x(h.speedup), f"{h.audit.reward:.3f}",
            "; ".join(h.audit.reasons), "; ".join(h.findings) or "-",
        )
        for h in sorted(held, key=lambda h: (h.status != "held", h.audit.candidate_id))
    )  # fmt: skip
    columns = (
        Col("candidate", "id", right=True),
        Col("task", wrap=True),
        Col("status"),
        Col("speedup", right=True),
        Col("reward", drop=1, right=True),
        Col("why held", "why", wrap=True),
        Col("findings", wrap=True),
    )
    waiting = sum(h.status == "held" for h in held)
    caption = (
        f"{waiting} waiting for a ruling: cudal1 audit {run} --confirm ID (a hack) or --clear ID (honest); "
        "reward: before the hold, which capped it to its group's median"
        if held
        else "no reward was held"
    )
    return TableSpec(f"rewards held for review in {run}", columns, rows, caption=caption)
