"""A person's review of the rewards a run held (``cudal1 audit RUN``).

With no reward-checking model configured, GRPO holds a suspicious reward (``auditing.py``): it
is capped to its group's median and listed in the run's ``reward_audits``. Here a person rules
on it, which is what the judge would have done:

- confirm: the candidate is a hack. It joins the run's hacking-case database (its source, why
  it was held and its findings), which every later judge is shown, and its reward is the reject
  reward from then on;
- clear: the candidate is honest. Its reward counts in full in every later read: a resumed GRPO
  session, its exemplars, ``dataset export``.

A ruling is final: ruling the same way again changes nothing, the other way is an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cudal1.audit import open_case_db
from cudal1.config import ConfigError, GRPOStageConfig
from cudal1.run.database import CandidateDB
from cudal1.run.directory import RunDirectory
from cudal1.run.rows import Review, RewardAudit
from cudal1.schema import Severity
from cudal1.train.auditing import case_db_path, hack_case

Status = Literal["held", "confirmed", "cleared"]


class ReviewError(Exception):
    """A ruling that cannot be made: not a held reward of the run, or ruled the other way."""


@dataclass(frozen=True)
class HeldReward:
    """One reward a run held, with what a person needs to rule on it."""

    audit: RewardAudit
    speedup: float | None  # the measured speedup over eager (None: not timed)
    findings: tuple[str, ...]  # "severity: code: message" of every WARNING or REJECT finding

    @property
    def status(self) -> Status:
        if self.audit.review == "confirmed":
            return "confirmed"
        return "cleared" if self.audit.review == "cleared" else "held"

    def to_dict(self) -> dict[str, Any]:
        a = self.audit
        return {
            "candidate_id": a.candidate_id,
            "task": a.task,
            "status": self.status,
            "speedup": self.speedup,
            "reward": a.reward,
            "reasons": list(a.reasons),
            "findings": list(self.findings),
            "audited_at": a.audited_at,
            "reviewed_at": a.reviewed_at,
        }


@dataclass(frozen=True)
class Reviewed:
    held: list[HeldReward]  # every reward the run held, after the rulings
    cases: Path | None  # the hacking-case database confirmed cases went to (None: none confirmed)


def held_rewards(db: CandidateDB) -> list[HeldReward]:
    """Every reward the run held, by candidate id, with its measurement."""
    out = []
    for audit in db.audits():
        if audit.action != "hold":
            continue
        result = db.get(audit.candidate_id).result
        timing = result.timing if result is not None else None
        findings = () if result is None else tuple(
            f"{f.severity}: {f.code}: {f.message}"
            for f in result.findings
            if f.severity in (Severity.WARNING, Severity.REJECT)
        )  # fmt: skip
        out.append(HeldReward(audit, timing.speedup if timing else None, findings))
    return out


def review(run: RunDirectory, confirm: Sequence[int] = (), clear: Sequence[int] = ()) -> Reviewed:
    """Confirm and clear held rewards of ``run``; nothing changes unless every ruling can be made."""
    with run.open_db() as db:
        held = {h.audit.candidate_id: h for h in held_rewards(db)}
        rulings: dict[int, Review] = {
            **dict.fromkeys(clear, "cleared"),
            **dict.fromkeys(confirm, "confirmed"),
        }
        for cand_id, ruling in rulings.items():
            _check(cand_id, ruling, held, both=cand_id in confirm and cand_id in clear)
        new = {c: r for c, r in rulings.items() if held[c].audit.review is None}
        cases = _add_cases(run, db, [held[c] for c, r in new.items() if r == "confirmed"])
        with db.transaction():
            for cand_id, ruling in new.items():
                db.review_audit(cand_id, ruling)
        return Reviewed(held_rewards(db), cases)


def _check(cand_id: int, ruling: Review, held: dict[int, HeldReward], *, both: bool) -> None:
    if both:
        raise ReviewError(f"candidate {cand_id}: both --confirm and --clear")
    if cand_id not in held:
        listed = ", ".join(map(str, held)) or "none"
        raise ReviewError(f"candidate {cand_id} is not a reward this run held (held: {listed})")
    earlier = held[cand_id].audit.review
    if earlier is not None and earlier != ruling:
        raise ReviewError(f"candidate {cand_id} was already {earlier}; a ruling is final")


def _add_cases(run: RunDirectory, db: CandidateDB, confirmed: list[HeldReward]) -> Path | None:
    """Each confirmed hack as a case of the run's hacking-case database (before the rulings are
    stored: a failure here leaves the rewards held, and a repeat replaces the same case)."""
    if not confirmed:
        return None
    try:
        path = case_db_path(run.path, run.read_config(GRPOStageConfig).audit)
    except ConfigError as exc:
        raise ReviewError(f"{run.config_file}: not a GRPO run's config: {'; '.join(exc.problems)}") from None
    with open_case_db(path) as cases:
        for h in confirmed:
            row = db.get(h.audit.candidate_id)
            assert row.result is not None  # an audited candidate was evaluated
            why = (
                f"Held by GRPO in {run.path} (candidate {row.id}): {'; '.join(h.audit.reasons)}. "
                f"Findings: {'; '.join(h.findings) or 'none'}. Confirmed as a hack in review."
            )
            cases.add(hack_case(row.task, row.source, row.result, why, "confirmed in review"))
    return path
