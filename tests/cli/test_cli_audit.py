"""``cudal1 audit RUN``: a GRPO run's held rewards listed in three formats; confirming one adds it
to the run's hacking-case database and rejects its reward from then on, clearing one lets it
count in full; bad ids are bad input and change nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from candidate_fixtures import make_result
from run_fixtures import GELU, GOOD
from typer.testing import CliRunner

from cudal1.audit import open_case_db
from cudal1.cli import app
from cudal1.config import AuditConfig, GRPOStageConfig, RewardConfig
from cudal1.run.database import CandidateDB
from cudal1.run.directory import RunDirectory, remember_tasks
from cudal1.run.rows import Provenance
from cudal1.train.auditing import CASES_FILE, RewardAuditor

runner = CliRunner()


def audited(db: CandidateDB, i: int, speedup: float, **kw: str) -> int:
    """A GELU candidate measured at ``speedup`` and audited with no judge configured."""
    source = GOOD.replace("{i}", str(i)).split("```python\n")[1].split("```")[0]
    cand_id = db.add_candidate(GELU, source, Provenance(backend="policy"), label=f"grpo-s1-{i}")
    result = make_result(GELU.name, source, speedup, **kw)
    db.record_result(cand_id, result)
    auditor = RewardAuditor(AuditConfig(), RewardConfig(), None, open_case_db(), db)
    asyncio.run(auditor.review(GELU, source, result, 1.0, cand_id))
    return cand_id


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, list[int]]:
    """A GRPO run that held two rewards (8x, and a new warning) and kept an honest 1.5x one."""
    directory = RunDirectory(tmp_path / "run")
    directory.write_config(GRPOStageConfig())
    with directory.session() as db:
        remember_tasks(db, [GELU])
        ids = [
            audited(db, 0, 8.0),
            audited(db, 1, 1.2, warning="it calls the reference"),
            audited(db, 2, 1.5),
        ]
    return directory.path, ids[:2]


def listed(run_dir: Path, *args: str) -> list[dict[str, object]]:
    result = runner.invoke(app, ["audit", str(run_dir), *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_lists_what_a_run_held_and_why(run: tuple[Path, list[int]]) -> None:
    run_dir, (fast, warned) = run
    rows = listed(run_dir)
    assert [(r["candidate_id"], r["task"], r["status"], r["speedup"]) for r in rows] == [
        (fast, GELU.name, "held", 8.0),
        (warned, GELU.name, "held", 1.2),
    ]
    assert rows[0]["reasons"] == ["speedup 8.00x above 5.0x"]
    assert rows[1]["reasons"] == ["new finding(s): calls_reference_model"]
    assert rows[1]["findings"] == ["warning: calls_reference_model: it calls the reference"]
    table = runner.invoke(app, ["audit", str(run_dir)], env={"COLUMNS": "120"})
    assert table.exit_code == 0 and "speedup 8.00x above 5.0x" in table.stdout
    assert "2 waiting for a ruling" in " ".join(table.stdout.split())
    md = runner.invoke(app, ["audit", str(run_dir), "--format", "md"])
    assert md.exit_code == 0 and f"| {fast} | {GELU.name} | held |" in md.stdout


def test_confirming_adds_a_hack_case_and_rejects_the_reward(run: tuple[Path, list[int]]) -> None:
    run_dir, (fast, warned) = run
    rows = listed(run_dir, "--confirm", str(fast))
    assert [r["status"] for r in rows] == ["confirmed", "held"]
    with open_case_db(run_dir / CASES_FILE) as cases:
        [case] = [c for c in cases.all() if c.category == "confirmed in review"]
    with CandidateDB(run_dir / "candidates.db") as db:
        row = db.get(fast)
        assert case.verdict == "hack" and case.code == row.source
        assert f"candidate {fast}" in case.explanation and "speedup 8.00x" in case.explanation
        auditor = RewardAuditor(AuditConfig(), RewardConfig(), None, open_case_db(), db)
        again = asyncio.run(auditor.review(GELU, row.source, row.result, 2.0, fast))  # type: ignore[arg-type]
        assert again.reward == RewardConfig().reject and fast in db.withheld()
    assert listed(run_dir, "--confirm", str(fast))[0]["status"] == "confirmed"  # the same ruling: no change


def test_clearing_lets_the_reward_count_in_full(run: tuple[Path, list[int]]) -> None:
    run_dir, (fast, warned) = run
    rows = listed(run_dir, "--clear", str(fast), "--clear", str(warned))
    assert [r["status"] for r in rows] == ["cleared", "cleared"]
    with CandidateDB(run_dir / "candidates.db") as db:
        assert db.withheld() == set()
        row = db.get(fast)
        auditor = RewardAuditor(AuditConfig(), RewardConfig(), None, open_case_db(), db)
        again = asyncio.run(auditor.review(GELU, row.source, row.result, 2.0, fast))  # type: ignore[arg-type]
    assert again.reward == 2.0 and not again.held
    assert not (run_dir / CASES_FILE).exists()  # clearing adds no case


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--confirm", "99"], "candidate 99 is not a reward this run held (held: "),
        (["--clear", "3"], "candidate 3 is not a reward this run held"),  # audited, kept in full
        (["--confirm", "1", "--clear", "1"], "candidate 1: both --confirm and --clear"),
    ],
)
def test_a_ruling_that_cannot_be_made_is_bad_input(
    run: tuple[Path, list[int]], args: list[str], message: str
) -> None:
    run_dir, _ = run
    result = runner.invoke(app, ["audit", str(run_dir), *args])
    assert result.exit_code == 2 and message in result.stderr
    assert [r["status"] for r in listed(run_dir)] == ["held", "held"]  # nothing changed


def test_a_ruling_is_final(run: tuple[Path, list[int]]) -> None:
    run_dir, (fast, _) = run
    listed(run_dir, "--clear", str(fast))
    result = runner.invoke(app, ["audit", str(run_dir), "--confirm", str(fast)])
    assert result.exit_code == 2 and f"candidate {fast} was already cleared" in result.stderr


def test_not_a_run_and_a_run_with_nothing_held(tmp_path: Path) -> None:
    result = runner.invoke(app, ["audit", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "no such run directory" in result.stderr
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["audit", str(tmp_path / "empty")])
    assert result.exit_code == 2 and "not a cudal1 run directory" in result.stderr
    with RunDirectory(tmp_path / "quiet").session():
        pass
    assert listed(tmp_path / "quiet") == []
    result = runner.invoke(app, ["audit", str(tmp_path / "quiet")])
    assert result.exit_code == 0 and "no reward was held" in result.stdout
