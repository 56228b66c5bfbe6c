"""The one config base and the one override mechanism: typos, finite choices and overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from cudal1.config import (
    EvalConfig,
    OptimizeConfig,
    PoolConfig,
    apply_overrides,
    dump_config,
    load_config,
)
from cudal1.llm import BackendOptions


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:0", "cuda:12"])
def test_device_accepts_torch_device_names(device: str) -> None:
    assert EvalConfig(device=device).device == device


@pytest.mark.parametrize("device", ["gpu0", pytest.param("gpu", id="gpu-word"), "cuda:", "cuda:x", "CPU", ""])
def test_device_typo_is_an_error_at_load(device: str) -> None:
    with pytest.raises(ValidationError):
        load_config(EvalConfig, overrides=[f"device={device}"])
    with pytest.raises(ValidationError):
        PoolConfig(devices=(device,))


def test_size_is_a_finite_choice() -> None:
    assert load_config(OptimizeConfig, values={"size": "cpu"}).size == "cpu"
    with pytest.raises(ValidationError):
        load_config(OptimizeConfig, values={"size": "huge"})


def test_strings_and_typed_values_take_one_path(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"rounds": 5, "eval": {"device": "cpu"}}))
    cfg = load_config(
        OptimizeConfig,
        path,
        ["eval.timing.budget_s=2.5", "llm.options.base_url=http://x"],
        {"rounds": 7, "eval.device": None, "llm.spec": "openai:m"},
    )
    assert cfg.rounds == 7 and cfg.eval.device == "cpu" and cfg.eval.timing.budget_s == 2.5
    assert cfg.llm.spec == "openai:m" and cfg.llm.options == {"base_url": "http://x"}
    # The quick suite fills only what the file leaves unset (its 1 s timing budget here).
    expected = OptimizeConfig.model_validate({"rounds": 5, "eval": {"device": "cpu"}})
    assert load_config(OptimizeConfig, path) == expected and expected.eval.timing.budget_s == 1.0


def test_override_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="expected key=value"):
        apply_overrides({}, ["rounds"])
    with pytest.raises(ValueError, match="not a section"):
        apply_overrides({"eval": 3}, ["eval.device=cpu"])
    with pytest.raises(ValidationError, match="rounds_typo"):
        load_config(OptimizeConfig, overrides=["rounds_typo=3"])


def test_dump_reads_back_equal(tmp_path: Path) -> None:
    cfg = load_config(OptimizeConfig, overrides=["eval.device=cuda:1", "pool.devices=[cuda:0, cuda:1]"])
    path = tmp_path / "c.yaml"
    path.write_text(dump_config(cfg))
    assert load_config(OptimizeConfig, path) == cfg


def test_backend_options_share_the_strict_base() -> None:
    with pytest.raises(ValidationError):
        BackendOptions.model_validate({"max_concurency": 2})
    with pytest.raises(ValidationError):
        BackendOptions(max_concurrency=2).model_copy(update={}).__setattr__("max_concurrency", 3)


def test_final_reads_like_the_eval_config_it_overrides() -> None:
    cfg = load_config(
        OptimizeConfig, overrides=["suite=full", "final.timing.budget_s=3", "final.correctness_trials=4"]
    )
    final = cfg.final.apply(cfg.eval)
    assert (final.timing.budget_s, final.correctness_trials) == (3.0, 4)
    assert (cfg.eval.timing.budget_s, cfg.eval.correctness_trials) == (10.0, 5)
    quick = load_config(OptimizeConfig)
    assert quick.final.timing.budget_s == 2.0 and quick.eval.timing.budget_s == 1.0


@pytest.mark.parametrize("suite", ["quick", "full"])
def test_a_saved_config_with_the_old_final_key_still_loads(tmp_path: Path, suite: str) -> None:
    """Runs saved before the rename wrote ``final.timing_budget_s``; ``--resume`` reads it back."""
    path = tmp_path / "config.yaml"
    old = {"suite": suite, "final": {"enabled": True, "timing_budget_s": 7.5, "correctness_trials": 3}}
    path.write_text(yaml.safe_dump(old))
    cfg = load_config(OptimizeConfig, path)
    assert cfg.final.timing.budget_s == 7.5 and cfg.final.correctness_trials == 3
    assert "timing_budget_s" not in dump_config(cfg)
    with pytest.raises(ValidationError, match="give only one"):
        load_config(OptimizeConfig, path, ["final.timing.budget_s=1"])
