"""Self-supervised sampling through any backend of llm/: an OpenAI-compatible server (the fake one
on loopback) with a bounded number of prompts in flight, a scripted model from the command line,
a dead endpoint, and specs that cannot work, refused before the pool starts."""

from __future__ import annotations

import itertools
import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from run_fixtures import CONV, GELU, NO_CODE, SUM, fake_server_module
from train_fixtures import GOOD_ANSWER
from typer.testing import CliRunner

from cudal1.cli import app
from cudal1.config import ConfigError, SelfSupConfig, load_config
from cudal1.run.database import CandidateDB
from cudal1.train.models import TrainError
from cudal1.train.selfsup import run_selfsup


def config(eval_config: dict[str, Any], **llm: Any) -> SelfSupConfig:
    """One round, two samples per task; replies without code are parse failures, so nothing is
    evaluated or trained on and the test measures sampling only."""
    return SelfSupConfig.model_validate(
        {
            "rounds": 1,
            "samples": 2,
            "llm": llm,
            "optim": {"report_to": "none", "max_steps": 1},
            "device": "cpu",
            "eval": eval_config,
            "pool": {"workers": 1, "spares": 0},
        }
    )


def test_server_samples_tasks_concurrently_within_the_bound_and_resume_asks_nothing_again(
    tiny_model: Path, tmp_path: Path, eval_config: dict[str, Any]
) -> None:
    server = fake_server_module().FakeOpenAIServer(replies=[NO_CODE]).start()
    # The first two requests wait for each other: they pass only if both are in flight at once.
    meeting, arrivals, reply = threading.Barrier(2, timeout=60), itertools.count(), server.completion_body

    def together(request: dict[str, Any]) -> dict[str, Any]:
        if next(arrivals) < 2:
            meeting.wait()
        return reply(request)

    server.completion_body = together
    cfg = config(
        eval_config, spec="openai:{model}", options={"base_url": server.url, "max_retries": 0}, concurrency=2
    )
    out = tmp_path / "selfsup"
    try:
        run_selfsup(tiny_model, [GELU, SUM, CONV], out, cfg)
        assert len(server.requests) == 3 and server.max_in_flight == 2
        run_selfsup(tiny_model, [GELU, SUM, CONV], out, cfg, resume=True)
    finally:
        server.close()
    assert len(server.requests) == 3  # round 1's samples were stored: the resumed round asks nothing
    # {model} is the checkpoint the round trains from, by its absolute path (vLLM's served name)
    assert {r["model"] for r in server.requests} == {str(tiny_model.resolve())}
    assert all(r["n"] == 2 for r in server.requests)
    with CandidateDB(out / "candidates.db") as db:
        rows = db._query("SELECT * FROM candidates ORDER BY task")
        stats = json.loads(db.get_meta("selfsup:round-1") or "{}")
    assert [r.task for r in rows] == sorted([GELU.name, SUM.name, CONV.name] * 2)
    assert {(r.round, r.backend, r.model, r.status) for r in rows} == {
        (1, "openai", str(tiny_model.resolve()), "parse_failed")
    }
    assert stats == {"samples": 6, "kept": 0, "success_rate": 0.0}
    assert len((out / "llm-calls.jsonl").read_text().splitlines()) == 3  # the ledger, one line per call


def test_dead_endpoint_stops_the_round_with_the_endpoint_named(
    tiny_model: Path, tmp_path: Path, eval_config: dict[str, Any], closed_port_url: str, caplog: Any
) -> None:
    cfg = config(eval_config, spec="openai:served", options={"base_url": closed_port_url, "max_retries": 0})
    with caplog.at_level(logging.WARNING), pytest.raises(TrainError) as err:
        run_selfsup(tiny_model, [GELU], tmp_path / "selfsup", cfg)
    assert "round 1: sampling through openai:served failed" in str(err.value)
    assert f"endpoint {closed_port_url} unreachable" in str(err.value) and "--resume" in str(err.value)
    # a fixed model is not the one being trained: said before the first round
    assert "every round samples openai:served" in caplog.text
    with CandidateDB(tmp_path / "selfsup" / "candidates.db") as db:
        assert db.tasks_in_round(1) == set()


def test_cli_samples_through_a_scripted_model_and_refuses_a_bad_spec_before_any_work(
    tiny_model: Path, tmp_path: Path, eval_config: dict[str, Any]
) -> None:
    replies = tmp_path / "replies.yaml"
    replies.write_text(yaml.safe_dump([GOOD_ANSWER, NO_CODE]))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(config(eval_config).model_dump(mode="json")))
    out = tmp_path / "selfsup"
    base = ["train", "selfsup", "--model", str(tiny_model), "--tasks", GELU.name, "--config", str(cfg)]
    result = CliRunner().invoke(app, [*base, "--out", str(out), "--llm", f"scripted:{replies}"])
    assert result.exit_code == 0, result.output
    with CandidateDB(out / "candidates.db") as db:
        rows = db._query("SELECT * FROM candidates ORDER BY id")
    assert [(r.status, r.label) for r in rows] == [("evaluated", "selfsup-r1-s0"), ("parse_failed", "")]
    assert {(r.backend, r.round) for r in rows} == {("scripted", 1)} and rows[0].correct
    assert (out / "round-1" / "model" / "config.json").is_file()  # it trained on the correct one

    for spec, why in [("nope:x", "unknown LLM backend 'nope'"), ("hf:/no/such/dir", "not a local model")]:
        bad = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "bad"), "--llm", spec])
        assert bad.exit_code == 2 and why in bad.output, bad.output
        assert not (tmp_path / "bad").exists()


def test_llm_options_are_checked_by_the_backend_and_concurrency_has_one_key(
    tiny_model: Path, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="llm.concurrency"):
        load_config(SelfSupConfig, overrides=["llm.options.max_concurrency=4"])
    with pytest.raises(ConfigError, match="PREFIX:TARGET"):
        load_config(SelfSupConfig, overrides=["llm.spec=openai"])
    typo = load_config(SelfSupConfig, overrides=["llm.spec=openai:m", "llm.options.base_ur=http://x"])
    with pytest.raises(TrainError, match="invalid options for LLM backend 'openai'.*base_ur"):
        run_selfsup(tiny_model, [GELU], tmp_path / "selfsup", typo)
    assert not (tmp_path / "selfsup").exists()
