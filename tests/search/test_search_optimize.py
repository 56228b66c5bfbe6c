"""One optimisation run end to end on CPU: scripted and fake-OpenAI LLMs, baselines only,
budgets, kill and resume. Budgets are tiny: the point is the run's bookkeeping, not the numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from run_fixtures import (
    CONV,
    GELU,
    GOOD,
    NO_CODE,
    SUM,
    SYNTAX_ERROR,
    TRUNCATED,
    Killed,
    Recorder,
    fake_server_module,
    fast_config,
    scripted,
)

from cudal1.config import OptimizeConfig
from cudal1.llm import LLMError
from cudal1.report.runs import summarize_run
from cudal1.run import records as records_module
from cudal1.run.directory import RunDirectory, RunError
from cudal1.run.events import Evaluated, ParseFailed, RoundDone, RunDone, RunStarted, Stopped, TaskFinal
from cudal1.run.records import load_run
from cudal1.run.selection import REFERENCE_LABEL, choose_best
from cudal1.schema import Task
from cudal1.search import optimize as optimize_module
from cudal1.search.optimize import optimize
from cudal1.search.seeds import reference_anchor

# -- the loop, end to end ------------------------------------------------------------------------


def test_scripted_loop_stores_results_failures_and_final(tmp_path: Path, open_db: Any) -> None:
    run = tmp_path / "run"
    cfg = fast_config(tmp_path, rounds=2)
    backend = scripted([GOOD, NO_CODE, TRUNCATED, SYNTAX_ERROR])
    events = Recorder()
    summary = summarize_run(optimize([GELU], run, cfg, backend=backend, progress=events))

    db = open_db(run)
    counts = db.counts(GELU.name)
    # round 0: the reference; rounds 1 and 2: one parseable reply of four each
    assert (counts.evaluated, counts.parse_failed, counts.pending) == (3, 6, 0)
    assert db.rounds_done(GELU.name) == 3
    failures = db._query("SELECT * FROM candidates WHERE status = 'parse_failed'")
    errors = " | ".join(r.parse_error or "" for r in failures)
    assert "reply has no code block" in errors and "truncated" in errors and "expected ':'" in errors
    llm_rows = [r for r in db.evaluated(GELU.name) if r.round > 0]
    assert all(r.backend == "scripted" and r.prompt_hash and r.parent_ids for r in llm_rows)
    # round 0 gave correct variants, so every LLM round was contrastive
    assert all("measured speedups" in p[1].content for p in backend.prompts[1:])

    finals = [r for r in db.evaluated(GELU.name) if r.final]
    assert len(finals) == 1 and finals[0].id == choose_best(db.evaluated(GELU.name)).id  # type: ignore[union-attr]
    task = summary.tasks[0]
    assert task.final and task.correct and task.best_id == finals[0].id
    assert task.speedup is not None and task.ci_low is not None and task.ref_ms is not None
    assert (task.evaluated, task.parse_failed) == (3, 6)
    assert summary.complete and summary.stop_reason is None and summary.llm == "scripted:reply"

    kept = finals[0].source if load_run(run).tasks[0].faster else reference_anchor(GELU)
    assert (run / "best" / f"{GELU.name}.py").read_text() == kept
    assert not (run / "summary.json").exists()  # the command writes it (tests/cli/test_cli_optimize.py)
    assert RunDirectory(run).read_config(OptimizeConfig) == cfg
    assert len((run / "llm-calls.jsonl").read_text().splitlines()) == 3  # preflight + 2 rounds
    assert summary.llm_calls == 3 and summary.prompt_tokens > 0
    assert "round 2: contrastive prompt" in (run / "run.log").read_text()
    assert summarize_run(load_run(run)) == summary
    kinds = {type(e) for e in events.events}
    assert kinds == {RunStarted, Evaluated, ParseFailed, RoundDone, TaskFinal, RunDone}


def test_loop_against_fake_openai_server(tmp_path: Path, open_db: Any) -> None:
    server = fake_server_module().FakeOpenAIServer(replies=[GOOD.replace("{i}", "0"), NO_CODE]).start()
    try:
        llm = {"spec": "openai:fake-model", "options": {"base_url": server.url, "max_retries": 0}}
        cfg = fast_config(tmp_path, samples=2, llm=llm)
        summary = summarize_run(optimize([GELU], tmp_path / "run", cfg))
    finally:
        server.close()
    assert len(server.requests) == 2  # preflight + one round
    assert server.requests[1]["n"] == 2 and server.requests[1]["model"] == "fake-model"
    db = open_db(tmp_path / "run")
    counts = db.counts(GELU.name)
    assert (counts.evaluated, counts.parse_failed) == (2, 1)  # reference + one reply; one without code
    assert {r.backend for r in db.evaluated(GELU.name) if r.round == 1} == {"openai"}
    assert summary.llm == "openai:fake-model" and summary.llm_calls == 2
    assert summary.prompt_tokens == 22  # the fake server's 11 per request
    assert summary.tasks[0].final


def test_dead_endpoint_fails_before_anything_is_written(tmp_path: Path, closed_port_url: str) -> None:
    llm = {"spec": "openai:m", "options": {"base_url": closed_port_url, "max_retries": 0}}
    with pytest.raises(LLMError, match="unreachable"):
        optimize([GELU], tmp_path / "run", fast_config(tmp_path, llm=llm))
    assert not (tmp_path / "run").exists()


def test_kill_then_resume_evaluates_only_what_is_left(tmp_path: Path, open_db: Any) -> None:
    run = tmp_path / "run"
    cfg = fast_config(tmp_path, baseline_labels=["channels-last"])
    with pytest.raises(Killed):
        optimize([CONV], run, cfg, progress=Recorder(kill_after=1))
    db = open_db(run)
    before = {r.id: r.evaluated_at for r in db.evaluated(CONV.name)}
    pending = len(db.pending(CONV.name))
    assert len(before) >= 1 and pending >= 1 and len(before) + pending == 2
    killed = summarize_run(load_run(run))
    assert not killed.complete and killed.tasks[0].pending == pending

    with pytest.raises(RunError, match="--resume"):
        optimize([CONV], run, cfg)
    events = Recorder()
    summary = summarize_run(
        optimize([CONV], run, RunDirectory(run).read_config(OptimizeConfig), resume=True, progress=events)
    )
    assert events.count(Evaluated) == pending
    assert {r.id: r.evaluated_at for r in db.evaluated(CONV.name) if r.id in before} == before
    assert db.counts(CONV.name).evaluated == 2 and db.rounds_done(CONV.name) == 1
    assert summary.complete and summary.tasks[0].final

    again = Recorder()
    optimize([CONV], run, RunDirectory(run).read_config(OptimizeConfig), resume=True, progress=again)
    assert again.count(Evaluated) == again.count(TaskFinal) == 0  # nothing left to do


def test_baselines_only_gives_every_task_a_result(tmp_path: Path, open_db: Any) -> None:
    """On a CPU the CUDA-only baselines are not proposed: they would be the reference renamed."""
    run = tmp_path / "run"
    cfg = fast_config(tmp_path, baseline_labels=["channels-last", "cudnn-benchmark", "cuda-graph"])
    summary = summarize_run(optimize([CONV, SUM], run, cfg))
    db = open_db(run)
    assert {r.label for r in db.evaluated(CONV.name)} == {"channels-last", REFERENCE_LABEL}
    assert {r.label for r in db.evaluated(SUM.name)} == {REFERENCE_LABEL}  # no convolution: no NHWC
    for task in (CONV, SUM):
        assert (run / "best" / f"{task.name}.py").is_file()
    assert [t.task for t in summary.tasks] == [CONV.name, SUM.name]
    assert all(t.final and t.correct for t in summary.tasks)
    assert [t.evaluated for t in summary.tasks] == [2, 1]
    assert summary.llm is None and summary.llm_calls == 0


def test_wall_budget_stops_before_evaluating(tmp_path: Path, open_db: Any) -> None:
    cfg = fast_config(tmp_path, budget={"max_wall_s": 1e-6})
    events = Recorder()
    summary = summarize_run(optimize([GELU], tmp_path / "run", cfg, progress=events))
    assert summary.stop_reason == "max_wall_s" and summary.complete
    assert events.count(Stopped) == 1 and events.count(Evaluated) == 0
    db = open_db(tmp_path / "run")
    assert db.counts(GELU.name).total == 0 and db.rounds_done(GELU.name) == 0
    assert summary.tasks[0].best_id is None and not summary.tasks[0].final


def test_token_budget_stops_further_rounds(tmp_path: Path) -> None:
    backend = scripted([GOOD])
    cfg = fast_config(tmp_path, rounds=3, samples=1, budget={"max_tokens_total": 100})
    summary = summarize_run(optimize([GELU], tmp_path / "run", cfg, backend=backend))
    assert backend.calls == 2  # preflight (4 tokens), then round 1 spends far more than 100
    # the sample already paid for is still evaluated; no further round is sampled
    assert summary.stop_reason == "max_tokens_total" and summary.tasks[0].rounds_done == 2
    assert summary.tasks[0].evaluated == 2 and summary.tasks[0].pending == 0


# -- a run never recommends a slowdown (issue 12) ------------------------------------------------

SLOW_REFERENCE = Task(
    "chain_of_multiplies",
    """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        y = x
        for _ in range(60):
            y = y * 1.0
        return y + 1.0


def get_inputs():
    return [torch.randn(256, 256)]


def get_init_inputs():
    return []
""",
    level=1,
)


def reply(body: str) -> str:
    head = (
        "## Implementation\n```python\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
    )
    return head + "    def forward(self, x):\n" + body + "```\n"


ONE_ADD = reply("        return x + 1.0  # the 60 multiplies by 1.0 change nothing\n")
SIXTY_GELUS = reply(
    "        y = x\n        for _ in range(60):\n            y = torch.nn.functional.gelu(x)\n        return y\n"
)


def test_a_variant_faster_beyond_its_interval_is_exported(tmp_path: Path) -> None:
    run = tmp_path / "run"
    # The variant's 0.05 ms calls hide in the ~2 ms of overhead a CPU sample has: only the trusted
    # clock can confirm its speedup (about 1.3-2x of its 13x), and 6 samples left that interval's
    # low end at 1.0 in one run of three.
    config = fast_config(tmp_path, samples=1, eval={"timing": {"min_samples": 10, "max_samples": 20}})
    record = optimize([SLOW_REFERENCE], run, config, backend=scripted([ONE_ADD]))
    task = record.tasks[0]
    assert task.faster and task.final is not None and task.final.timing.ci_low > 1.0  # type: ignore[union-attr]
    assert summarize_run(record).tasks[0].outcome == "faster"
    assert "return x + 1.0" in (run / "best" / "chain_of_multiplies.py").read_text()


def test_a_final_measurement_not_above_the_reference_exports_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search's pick is re-measured; when that measurement does not beat the reference beyond
    its interval (here a variant 60 times the work), the task keeps the reference. A noisy search
    measurement that ranked the slow variant first is simulated by making it the search's pick."""

    def pick_llm(rows):  # type: ignore[no-untyped-def]
        return next((r for r in rows if r.label.startswith("llm")), None)

    monkeypatch.setattr(optimize_module, "choose_best", pick_llm)
    monkeypatch.setattr(records_module, "choose_best", pick_llm)
    run = tmp_path / "run"
    record = optimize([GELU], run, fast_config(tmp_path, samples=1), backend=scripted([SIXTY_GELUS]))
    task = record.tasks[0]
    assert task.best is not None and task.best.label == "llm-r1-s0"
    assert task.final is not None and task.final.ok and task.final.timing.ci_low <= 1.0  # type: ignore[union-attr]
    assert not task.faster
    summary = summarize_run(record).tasks[0]
    assert summary.outcome == "no faster variant found" and summary.best_label == "llm-r1-s0"
    assert (run / "best" / f"{GELU.name}.py").read_text() == reference_anchor(GELU)
