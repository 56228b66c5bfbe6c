"""Seeds and export through the command line on CPU: optimize -> export -> verify reads the file ->
optimize --seed starts from it; every task's seeds are evaluated before anything else; and the
one-line exit 2 of every unusable seed file or export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from candidate_fixtures import make_result
from run_fixtures import CONV, GELU, SUM, config_data
from typer.testing import CliRunner

from cudal1.cli import app
from cudal1.run.database import CandidateDB
from cudal1.run.directory import remember_tasks
from cudal1.search.seeds import reference_anchor
from cudal1.search.verify import STATUSES

# The smallest budgets that still give every step a result; one baseline, no final re-evaluation.
# channels_last: the one baseline a CPU run proposes that costs seconds (on the conv task).
TINY = ["--set", "baseline_labels=[channels-last]", "--set", "final.enabled=false"]
VERIFY_FAST = [
    "--device", "cpu", "--workers", "1", "--budget-s", "0.5",
    "--set", "correctness_trials=2", "--set", "timing.min_samples=3", "--set", "timing.max_samples=6",
    "--set", "timing.bootstrap_resamples=100",
]  # fmt: skip


@pytest.fixture
def cfg_file(tmp_path: Path) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config_data(tmp_path, rounds=0)))
    return path


def one_error(output: str, text: str) -> bool:
    flat = " ".join(output.split())
    return output.count("error:") == 1 and text in flat


def test_optimize_export_verify_and_seed_a_new_run(tmp_path: Path, cfg_file: Path) -> None:
    runner = CliRunner()
    first, exported = tmp_path / "first", tmp_path / "kernels.jsonl"
    base = ["optimize", CONV.name, "--config", str(cfg_file), *TINY]
    done = runner.invoke(app, [*base, "--out", str(first)])
    assert done.exit_code == 0, done.output

    export = runner.invoke(app, ["export", str(first), "--out", str(exported), "--all"])
    assert export.exit_code == 0, export.output
    assert "wrote 1 verified candidates of 1 task(s)" in " ".join(export.output.split())
    (record,) = [json.loads(line) for line in exported.read_text().splitlines()]
    assert (record["task"], record["label"], record["provenance"], record["origin"]) == (
        CONV.name,
        "channels-last",
        "channels-last",
        "bundled",
    )
    assert record["claimed_speedup"] == record["speedup"] and record["device"] == "cpu"

    verify = runner.invoke(app, ["verify", str(exported), *VERIFY_FAST, "--format", "json"])
    assert verify.exit_code == 0, verify.output
    (row,) = json.loads(verify.stdout)["rows"]
    assert row["task"] == CONV.name and row["status"] in STATUSES and row["status"] != "no code"
    assert row["claimed"] == record["claimed_speedup"]

    seeded = tmp_path / "seeded"
    args = ["optimize", CONV.name, "--config", str(cfg_file), "--set", "baseline_labels=[]"]
    started = runner.invoke(
        app, [*args, "--set", "final.enabled=false", "--out", str(seeded), "--seed", str(exported)]
    )
    assert started.exit_code == 0, started.output
    assert "seeds: 1 kernel for 1 of 1 tasks from kernels.jsonl" in " ".join(started.output.split())
    with CandidateDB(seeded / "candidates.db") as db:
        (seed,) = [r for r in db.evaluated(CONV.name) if r.backend == "seed"]
    assert (seed.label, seed.origin, seed.round) == ("seed:channels-last", "seed channels-last", 0)
    assert seed.claimed_speedup == record["claimed_speedup"] and seed.source == record["custom_code"]
    saved = yaml.safe_load((seeded / "config.yaml").read_text())
    assert saved["seed_files"] == [str(exported.absolute())]  # a resumed session finds it anywhere


def test_every_tasks_seed_is_evaluated_before_any_other_candidate(tmp_path: Path, cfg_file: Path) -> None:
    """One worker, two tasks, a seed each: both seeds come before either task's reference anchor,
    in the database's ids and times and in the run's log (a run cut short has measured them)."""
    seeds = tmp_path / "published"
    seeds.mkdir()
    for task in (GELU, SUM):
        (seeds / f"{task.name}.py").write_text(reference_anchor(task) + "# published\n")
    run = tmp_path / "run"
    one_worker = ["--set", "pool.workers=1", "--set", "final.enabled=false"]
    tasks = f"{GELU.name},{SUM.name}"
    args = ["optimize", tasks, "--config", str(cfg_file), "--out", str(run), "--seed", str(seeds)]
    result = CliRunner().invoke(app, [*args, *one_worker])
    assert result.exit_code == 0, result.output
    with CandidateDB(run / "candidates.db") as db:
        rows = sorted(db.evaluated(GELU.name) + db.evaluated(SUM.name), key=lambda r: r.id)
    assert [(r.backend, r.label) for r in rows] == [
        ("seed", "seed:published"),
        ("seed", "seed:published"),
        ("baseline", "reference"),
        ("baseline", "reference"),
    ]
    assert max(r.evaluated_at or "" for r in rows[:2]) <= min(r.evaluated_at or "" for r in rows[2:])
    logged = [line for line in (run / "run.log").read_text().splitlines() if "(round 0, step" in line]
    assert [" seed:published " in line for line in logged] == [True, True, False, False], logged
    assert "round 0: 2 seed kernel(s) go before" in (run / "run.log").read_text()


def test_unusable_seed_files_exit_2_with_one_line_before_anything_runs(
    tmp_path: Path, cfg_file: Path
) -> None:
    runner = CliRunner()
    malformed, unrelated = tmp_path / "bad.jsonl", tmp_path / "other.jsonl"
    malformed.write_text('{"level_id": 1, "task_id": \n')
    other_ref = GELU.source.replace("F.gelu(x)", "F.relu(x)")
    unrelated.write_text(
        json.dumps({"level_id": 1, "task_id": 1, "ref_code": other_ref, "custom_code": "x = 1"}) + "\n"
    )
    out = tmp_path / "run"
    base = ["optimize", GELU.name, "--config", str(cfg_file), "--out", str(out), "--seed"]
    for path, message in [
        (tmp_path / "missing.jsonl", "no such seed file"),
        (malformed, "line 1: malformed JSON"),
        (unrelated, f"seeds none of the run's tasks ({GELU.name})"),
    ]:
        result = runner.invoke(app, [*base, str(path)])
        assert result.exit_code == 2 and one_error(result.output, message), result.output
    assert not out.exists()

    collect = ["collect", GELU.name, "--out", str(out), "--size", "cpu", "--seed", str(unrelated)]
    result = runner.invoke(app, collect)
    assert result.exit_code == 2 and one_error(result.output, "seeds none"), result.output
    grpo = ["train", "grpo", "--model", str(tmp_path), "--out", str(out), "--tasks", GELU.name]
    result = runner.invoke(app, [*grpo, "--set", "size=cpu", "--seed", str(malformed)])
    assert result.exit_code == 2 and one_error(result.output, "malformed JSON"), result.output
    assert not out.exists()


def test_export_of_no_run_or_to_an_unwritable_file_exits_2(tmp_path: Path) -> None:
    runner = CliRunner()
    nowhere = runner.invoke(app, ["export", str(tmp_path / "nowhere"), "--out", str(tmp_path / "k.jsonl")])
    assert nowhere.exit_code == 2 and one_error(nowhere.output, "not a cudal1 run directory"), nowhere.output
    run = tmp_path / "run"
    with CandidateDB(run / "candidates.db") as db:
        remember_tasks(db, [GELU])
        nothing = runner.invoke(app, ["export", str(run), "--out", str(tmp_path / "k.jsonl")])
        assert nothing.exit_code == 2 and one_error(nothing.output, "nothing to export"), nothing.output
        source = "class ModelNew: pass\n"
        db.record_result(db.add_candidate(GELU, source, label="v"), make_result(GELU.name, source, 1.3))
    unwritable = runner.invoke(app, ["export", str(run), "--out", str(tmp_path / "no" / "k.jsonl")])
    assert unwritable.exit_code == 2 and one_error(unwritable.output, "k.jsonl: cannot write"), (
        unwritable.output
    )
    written = runner.invoke(app, ["export", str(run), "--out", str(tmp_path / "k.jsonl")])
    assert written.exit_code == 0 and "wrote 1 kept kernels of 1 task(s)" in " ".join(written.output.split())
