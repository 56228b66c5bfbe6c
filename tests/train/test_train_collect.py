"""``cudal1 collect`` on CPU: two models (scripted, and openai: against the fake server) answer the
generation prompt, every answer is evaluated and stored with its provenance; a killed run resumes
without asking a finished model again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from run_fixtures import GELU, GOOD, NO_CODE, Killed, Recorder, fake_server_module, scripted
from typer.testing import CliRunner

from cudal1.cli import app
from cudal1.config import CollectConfig
from cudal1.llm import create_backend
from cudal1.run.database import CandidateDB
from cudal1.train.collect import collect


def config(eval_config: dict[str, Any], **extra: Any) -> CollectConfig:
    data = {"samples": 2, "eval": eval_config, "pool": {"workers": 2, "spares": 1}, "size": "cpu", **extra}
    return CollectConfig.model_validate(data)


def test_collect_from_two_models_with_kill_and_resume(tmp_path: Path, eval_config: dict[str, Any]) -> None:
    server = fake_server_module().FakeOpenAIServer(replies=[GOOD.replace("{i}", "100")]).start()
    run, cfg = tmp_path / "run", config(eval_config)
    try:

        def models() -> list[Any]:
            fake = create_backend("openai:fake-model", base_url=server.url, max_retries=0)
            return [scripted([GOOD, NO_CODE]), fake]

        with pytest.raises(Killed):
            collect([GELU], run, cfg, backends=models(), progress=Recorder(kill_after=1))
        with CandidateDB(run / "candidates.db") as db:
            killed_wall = float(db.get_meta("wall_s") or 0)
        assert killed_wall > 0  # the killed session's time is kept
        first_session = models()
        counts = collect([GELU], run, cfg, resume=True, backends=first_session, progress=Recorder())
    finally:
        server.close()

    assert counts[GELU.name]["evaluated"] == 2 and counts[GELU.name]["parse_failed"] == 1
    assert first_session[0].calls == 0  # the scripted model's round was stored before the kill
    assert len(server.requests) == 1 and server.requests[0]["n"] == 2
    with CandidateDB(run / "candidates.db") as db:
        rows = db.evaluated(GELU.name)
        assert db.rounds_done(GELU.name) == 3  # round 0 (no seeds) and one round per model
        assert float(db.get_meta("wall_s") or 0) > killed_wall  # both sessions counted
    by_round = {r.round: r for r in rows}
    assert by_round[1].backend == "scripted" and by_round[2].backend == "openai"
    assert by_round[2].model == "fake-model" and by_round[2].prompt_hash and by_round[2].completion_tokens
    assert all(r.correct for r in rows)
    assert len((run / "llm-calls.jsonl").read_text().splitlines()) == 2


def test_cli_collect_with_a_scripted_model(tmp_path: Path, eval_config: dict[str, Any]) -> None:
    replies = tmp_path / "replies.yaml"
    wrong = GOOD.replace("{i}", "2").replace("F.gelu(x)", "F.relu(x)")
    replies.write_text(yaml.safe_dump([GOOD.replace("{i}", "1"), wrong]))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(config(eval_config).model_dump(mode="json")))
    run = tmp_path / "run"
    args = ["collect", GELU.name, "--llm", f"scripted:{replies}", "--out", str(run), "--config", str(cfg)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"{GELU.name}: 2 evaluated, 1 correct" in result.output
    assert result.output.count(f"s] {GELU.name} ") == 2  # progress: a line per finished evaluation
    assert "not ok: correctness stage: input set 1/2: output differs" in result.output  # and why
    no_model = CliRunner().invoke(
        app, ["collect", GELU.name, "--out", str(tmp_path / "x"), "--config", str(cfg)]
    )
    assert no_model.exit_code == 2 and "at least one model" in no_model.output
