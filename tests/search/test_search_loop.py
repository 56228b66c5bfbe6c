"""The optimisation loop end to end on CPU: scripted and fake-OpenAI LLMs, baselines only, budgets,
kill and resume, and the ``optimize`` / ``runs show`` commands. Budgets are tiny: the point is the
loop's bookkeeping, not the numbers."""

from __future__ import annotations

import importlib.util
import itertools
import json
import socket
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer
import yaml
from search_fixtures import GEMM_TASK, make_result
from typer.testing import CliRunner

from cudal1.cli_optimize import register
from cudal1.llm import LLMError, Message, SamplingParams, ScriptedBackend
from cudal1.schema import EvalResult, Stage, StageRecord
from cudal1.search.database import CandidateDB, Provenance
from cudal1.search.loop import (
    REFERENCE_LABEL,
    Budget,
    BudgetConfig,
    OptimizeConfig,
    choose_best,
    reference_anchor,
)
from cudal1.search.run import OptimizeError, RunSummary, load_run_config, load_run_summary, optimize
from cudal1.tasks import bundled_tasks

TASKS = {t.name: t for t in bundled_tasks("cpu")}
GELU, SUM = TASKS["5_gelu"], TASKS["6_sum_reduction"]
PREFLIGHT = "Reply with OK."

GOOD = """## Performance analysis
GELU is memory-bound; one fused elementwise pass is all it needs.

## Implementation
```python
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x)  # variant {i}
```
"""
NO_CODE = "## Performance analysis\nThe reference is already optimal; I would not change it."
TRUNCATED = "## Implementation\n```python\nimport torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.nn.functional.gelu(x"
SYNTAX_ERROR = "```python\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module)\n    pass\n```\n"


def _fake_server_module() -> ModuleType:
    """tests/llm/fake_openai_server.py, whether or not tests/llm is on sys.path."""
    if "fake_openai_server" in sys.modules:
        return sys.modules["fake_openai_server"]
    path = Path(__file__).resolve().parents[1] / "llm" / "fake_openai_server.py"
    spec = importlib.util.spec_from_file_location("fake_openai_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fake_openai_server"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _no_real_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(var, "127.0.0.1,localhost")


@pytest.fixture
def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def config_data(tmp_path: Path, **update: Any) -> dict[str, Any]:
    """An OptimizeConfig as YAML-able data, with evaluation budgets small enough for CPU tests."""
    base = {
        "rounds": 1,
        "samples": 4,
        "baseline_labels": [],
        "size": "cpu",
        "eval": {
            "device": "cpu",
            "correctness_trials": 2,
            "build_cache": str(tmp_path / "builds"),
            "timing": {
                "warmup_ms": 1,
                "min_samples": 3,
                "max_samples": 6,
                "budget_s": 0.5,
                "bootstrap_resamples": 100,
            },
            "sandbox": {"call_timeout_s": 8, "import_timeout_s": 60},
        },
        "pool": {"workers": 2, "spares": 1},
        "final": {"timing_budget_s": 0.5, "correctness_trials": 2},
    }
    return _merge(base, update)


def fast_config(tmp_path: Path, **update: Any) -> OptimizeConfig:
    return OptimizeConfig.model_validate(config_data(tmp_path, **update))


def scripted(replies: Sequence[str]) -> ScriptedBackend:
    """Replies in order (cycled), numbered into GOOD; the preflight call gets its own answer."""
    cycle, counter = itertools.cycle(replies), itertools.count()

    def reply(messages: Sequence[Message], params: SamplingParams) -> str:
        if messages[-1].content == PREFLIGHT:
            return "OK"
        return next(cycle).replace("{i}", str(next(counter)))

    return ScriptedBackend(reply)


class Killed(Exception):
    """Stands for a kill: raised from the progress callback, it aborts the run where it is."""


class Recorder:
    def __init__(self, kill_after: int | None = None) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.kill_after = kill_after

    def __call__(self, kind: str, payload: dict[str, Any]) -> None:
        self.events.append((kind, payload))
        if self.kill_after is not None and self.count("evaluated") >= self.kill_after:
            raise Killed("simulated kill")

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.events if k == kind)


@pytest.fixture
def open_db() -> Iterator[Any]:
    opened: list[CandidateDB] = []

    def _open(run: Path) -> CandidateDB:
        opened.append(CandidateDB(run / "candidates.db"))
        return opened[-1]

    yield _open
    for db in opened:
        db.close()


# -- the loop, end to end ------------------------------------------------------------------------


def test_scripted_loop_stores_results_failures_and_final(tmp_path: Path, open_db: Any) -> None:
    run = tmp_path / "run"
    cfg = fast_config(tmp_path, rounds=2, baseline_labels=["cudnn-benchmark"])
    backend = scripted([GOOD, NO_CODE, TRUNCATED, SYNTAX_ERROR])
    events = Recorder()
    summary = optimize([GELU], run, cfg, backend=backend, progress=events)

    db = open_db(run)
    counts = db.counts(GELU.name)
    # round 0: cudnn-benchmark + reference; rounds 1 and 2: one parseable reply of four each
    assert (counts.evaluated, counts.parse_failed, counts.pending) == (4, 6, 0)
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
    assert (task.evaluated, task.parse_failed) == (4, 6)
    assert summary.complete and summary.stop_reason is None and summary.llm == "scripted:reply"

    assert (run / "best" / f"{GELU.name}.py").read_text() == finals[0].source
    assert RunSummary.from_dict(json.loads((run / "summary.json").read_text())) == summary
    assert load_run_config(run) == cfg
    assert len((run / "llm-calls.jsonl").read_text().splitlines()) == 3  # preflight + 2 rounds
    assert summary.llm_calls == 3 and summary.prompt_tokens > 0
    assert "round 2: contrastive prompt" in (run / "run.log").read_text()
    assert load_run_summary(run) == summary
    kinds = {k for k, _ in events.events}
    assert kinds == {"run_start", "evaluated", "parse_failed", "round_done", "final", "run_done"}


def test_loop_against_fake_openai_server(tmp_path: Path, open_db: Any) -> None:
    server = _fake_server_module().FakeOpenAIServer(replies=[GOOD.replace("{i}", "0"), NO_CODE]).start()
    try:
        llm = {"spec": "openai:fake-model", "options": {"base_url": server.url, "max_retries": 0}}
        cfg = fast_config(tmp_path, samples=2, llm=llm)
        summary = optimize([GELU], tmp_path / "run", cfg)
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
    cfg = fast_config(tmp_path, baseline_labels=["cudnn-benchmark", "cuda-graph"])
    with pytest.raises(Killed):
        optimize([GELU], run, cfg, progress=Recorder(kill_after=1))
    db = open_db(run)
    before = {r.id: r.evaluated_at for r in db.evaluated(GELU.name)}
    pending = len(db.pending(GELU.name))
    assert len(before) >= 1 and pending >= 1 and len(before) + pending == 3
    killed = load_run_summary(run)
    assert not killed.complete and killed.tasks[0].pending == pending

    with pytest.raises(OptimizeError, match="--resume"):
        optimize([GELU], run, cfg)
    events = Recorder()
    summary = optimize([GELU], run, load_run_config(run), resume=True, progress=events)
    assert events.count("evaluated") == pending
    assert {r.id: r.evaluated_at for r in db.evaluated(GELU.name) if r.id in before} == before
    assert db.counts(GELU.name).evaluated == 3 and db.rounds_done(GELU.name) == 1
    assert summary.complete and summary.tasks[0].final

    again = Recorder()
    optimize([GELU], run, load_run_config(run), resume=True, progress=again)
    assert again.count("evaluated") == again.count("final") == 0  # nothing left to do


def test_baselines_only_gives_every_task_a_result(tmp_path: Path, open_db: Any) -> None:
    run = tmp_path / "run"
    summary = optimize([GELU, SUM], run, fast_config(tmp_path, baseline_labels=["cudnn-benchmark"]))
    db = open_db(run)
    for task in (GELU, SUM):
        labels = {r.label for r in db.evaluated(task.name)}
        assert labels == {"cudnn-benchmark", REFERENCE_LABEL}
        assert (run / "best" / f"{task.name}.py").is_file()
    assert [t.task for t in summary.tasks] == [GELU.name, SUM.name]
    assert all(t.final and t.correct and t.evaluated == 2 for t in summary.tasks)
    assert summary.llm is None and summary.llm_calls == 0


def test_wall_budget_stops_before_evaluating(tmp_path: Path, open_db: Any) -> None:
    cfg = fast_config(tmp_path, budget={"max_wall_s": 1e-6})
    events = Recorder()
    summary = optimize([GELU], tmp_path / "run", cfg, progress=events)
    assert summary.stop_reason == "max_wall_s" and summary.complete
    assert events.count("stopped") == 1 and events.count("evaluated") == 0
    db = open_db(tmp_path / "run")
    assert db.counts(GELU.name).total == 0 and db.rounds_done(GELU.name) == 0
    assert summary.tasks[0].best_id is None and not summary.tasks[0].final


def test_token_budget_stops_further_rounds(tmp_path: Path) -> None:
    backend = scripted([GOOD])
    cfg = fast_config(tmp_path, rounds=3, samples=1, budget={"max_tokens_total": 100})
    summary = optimize([GELU], tmp_path / "run", cfg, backend=backend)
    assert backend.calls == 2  # preflight (4 tokens), then round 1 spends far more than 100
    # the sample already paid for is still evaluated; no further round is sampled
    assert summary.stop_reason == "max_tokens_total" and summary.tasks[0].rounds_done == 2
    assert summary.tasks[0].evaluated == 2 and summary.tasks[0].pending == 0


# -- the parts -----------------------------------------------------------------------------------


def _result(seconds: float) -> EvalResult:
    stages = tuple(
        StageRecord(stage, True, seconds)
        for stage in (Stage.STATIC, Stage.COMPILE, Stage.LOAD, Stage.CORRECTNESS, Stage.TIMING)
    )
    return EvalResult(task="t", candidate_hash="", device="cpu", stages=stages)


def test_budget_counts_device_stages_only() -> None:
    from cudal1.llm import Ledger

    now = [0.0]
    budget = Budget(BudgetConfig(max_gpu_seconds=5.0), Ledger(), gpu_seconds=1.0, clock=lambda: now[0])
    budget.add(_result(1.0))  # load + correctness + timing: 3 s; static and compile do not count
    assert budget.gpu_seconds == 4.0 and budget.exhausted() is None
    budget.add(_result(1.0))
    assert budget.exhausted() == "max_gpu_seconds"
    tokens = Budget(BudgetConfig(max_tokens_total=10), Ledger(), tokens_before=20)
    assert tokens.exhausted() == "max_tokens_total" and tokens.exhausted(llm=False) is None
    wall = Budget(BudgetConfig(max_wall_s=10), Ledger(), clock=lambda: now[0])
    now[0] = 9.9
    assert wall.exhausted() is None
    now[0] = 10.0
    assert wall.exhausted() == "max_wall_s"


def test_reference_anchor_is_chosen_only_when_nothing_beats_it(tmp_path: Path) -> None:
    with CandidateDB(tmp_path / "c.db") as db:

        def add(label: str, source: str, speedup: float | None, correct: bool = True) -> int:
            cid = db.add_candidate(GEMM_TASK, source, Provenance(), label=label)
            db.record_result(cid, make_result(GEMM_TASK.name, source, speedup, correct=correct))
            return cid

        anchor = add(REFERENCE_LABEL, reference_anchor(GEMM_TASK), 1.02)
        slow = add("slow", "class ModelNew: A = 1\n", 0.9)
        assert choose_best(db.evaluated(GEMM_TASK.name)).id == anchor  # type: ignore[union-attr]
        add("wrong", "class ModelNew: A = 2\n", 3.0, correct=False)
        assert choose_best(db.evaluated(GEMM_TASK.name)).id == anchor  # type: ignore[union-attr]
        fast = add("fast", "class ModelNew: A = 3\n", 1.5)
        assert choose_best(db.evaluated(GEMM_TASK.name)).id == fast  # type: ignore[union-attr]
        assert slow != fast


def test_reference_anchor_renames_every_use_of_model() -> None:
    source = reference_anchor(GEMM_TASK)  # uses super(Model, self)
    namespace: dict[str, Any] = {}
    exec(compile(source, "<anchor>", "exec"), namespace)
    assert "Model" not in namespace and "ModelNew" in namespace
    model = namespace["ModelNew"](*namespace["get_init_inputs"]())
    assert model(*namespace["get_inputs"]()).shape == (4, 8)


def test_config_rejects_unknown_keys_and_applies_final_budget(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="extra"):
        OptimizeConfig.model_validate({"rounds": 1, "budget": {"max_wall": 3}})
    cfg = fast_config(tmp_path)
    final = cfg.final.apply(cfg.eval)
    assert final.timing.budget_s == 0.5 and final.correctness_trials == 2
    assert final.timing.max_samples == cfg.eval.timing.max_samples


# -- the commands --------------------------------------------------------------------------------


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def test_cli_optimize_and_runs_show(tmp_path: Path, cli: typer.Typer) -> None:
    runner = CliRunner()
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(config_data(tmp_path)))
    run = tmp_path / "run"
    args = ["optimize", GELU.name, "--out", str(run), "--config", str(cfg_file)]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert GELU.name in result.output and "reference" in result.output

    shown = runner.invoke(cli, ["runs", "show", str(run)])
    assert shown.exit_code == 0 and GELU.name in shown.output and "reference" in shown.output
    data = json.loads(runner.invoke(cli, ["runs", "show", str(run), "--json"]).stdout)
    assert data["complete"] and data["tasks"][0]["task"] == GELU.name and data["tasks"][0]["final"]

    again = runner.invoke(cli, args)
    assert again.exit_code == 2 and "--resume" in again.output
    resumed = runner.invoke(cli, ["optimize", "--out", str(run), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert runner.invoke(cli, ["runs", "show", str(tmp_path / "nowhere")]).exit_code == 2


def test_cli_reports_bad_input_with_exit_2(tmp_path: Path, cli: typer.Typer, closed_port_url: str) -> None:
    runner = CliRunner()
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(config_data(tmp_path)))
    base = ["optimize", GELU.name, "--config", str(cfg_file)]

    bad_spec = runner.invoke(cli, [*base, "--out", str(tmp_path / "a"), "--llm", "bogus:x"])
    assert bad_spec.exit_code == 2 and "unknown LLM backend" in bad_spec.output
    no_task = runner.invoke(cli, ["optimize", "no_such_task", "--out", str(tmp_path / "b"), "--size", "cpu"])
    assert no_task.exit_code == 2 and "no bundled task" in no_task.output
    dead = [
        *base,
        "--out",
        str(tmp_path / "c"),
        "--llm",
        "openai:m",
        "--set",
        f"llm.options.base_url={closed_port_url}",
        "--set",
        "llm.options.max_retries=0",
    ]
    result = runner.invoke(cli, dead)
    assert result.exit_code == 2 and "unreachable" in result.output
    bad_key = runner.invoke(cli, [*base, "--out", str(tmp_path / "d"), "--set", "rounds_typo=3"])
    assert bad_key.exit_code == 2 and "rounds_typo" in bad_key.output
    assert not any((tmp_path / name).exists() for name in "abcd")


def test_sigterm_saves_the_run_and_exits_like_an_interrupt(tmp_path: Path) -> None:
    """`timeout` or a scheduler stops a run with SIGTERM: the wall time so far is kept and the
    run resumes (seen on the H200 device, where a killed run reported 0 s wall)."""
    import signal
    import subprocess
    import sys
    import time

    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(config_data(tmp_path)))
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "cudal1.cli", "optimize", GELU.name, "--out", str(run), "--config", str(cfg_file)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not (run / "candidates.db").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2.0)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the run finished before SIGTERM arrived")
    assert "--resume" in output, output
    summary = load_run_summary(run)
    assert not summary.complete and summary.wall_s > 0
