"""The one config base and the one override mechanism: typos, finite choices and overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from cudal1.config import (
    CollectConfig,
    ConfigError,
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
    with pytest.raises(ConfigError, match="^device: "):
        load_config(EvalConfig, overrides=[f"device={device}"])
    with pytest.raises(ValidationError):
        PoolConfig(devices=(device,))


def test_size_is_a_finite_choice() -> None:
    assert load_config(OptimizeConfig, values={"size": "cpu"}).size == "cpu"
    with pytest.raises(ConfigError, match="size: Input should be"):
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
    with pytest.raises(ConfigError, match="expected key=value"):
        apply_overrides({}, ["rounds"])
    with pytest.raises(ConfigError, match="not a section"):
        apply_overrides({"eval": 3}, ["eval.device=cpu"])
    with pytest.raises(ConfigError, match="rounds_typo"):
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
    with pytest.raises(ConfigError, match="give only one"):
        load_config(OptimizeConfig, path, ["final.timing.budget_s=1"])


def test_config_errors_name_the_key_and_what_is_wrong_one_line_each(tmp_path: Path) -> None:
    """Pydantic's dumps (input repeated, a link per error) became one line per bad key."""
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump({"eval": {"timing": {"budget": 3}}, "llms": [{"spec": "x", "temprature": 1}]})
    )
    with pytest.raises(ConfigError) as caught:
        load_config(CollectConfig, path, ["samples=many", "pool.devices=[gpu1]"])
    problems = {p.partition(": ")[0]: p.partition(": ")[2] for p in caught.value.problems}
    assert problems["eval.timing.budget"].startswith(
        "unknown key (did you mean budget_s?); valid keys here: warmup_calls,"
    )
    assert problems["llms.0.temprature"].startswith(
        "unknown key (did you mean temperature?); valid keys here: spec, options, temperature,"
    )
    assert (
        problems["samples"]
        == "Input should be a valid integer, unable to parse string as an integer (got 'many')"
    )
    assert (
        problems["pool.devices.0"].startswith("String should match pattern")
        and "'gpu1'" in problems["pool.devices.0"]
    )
    assert len(problems) == 4 and all("\n" not in p and "http" not in p for p in caught.value.problems)
    assert str(caught.value) == "\n".join(caught.value.problems)


def test_a_broken_or_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("eval: {device: [x}\n")
    with pytest.raises(ConfigError, match=r"c.yaml: not valid YAML: line 1, column 18: expected"):
        load_config(EvalConfig, path)
    with pytest.raises(ConfigError, match="nothing.yaml: cannot read: No such file"):
        load_config(EvalConfig, tmp_path / "nothing.yaml")
    with pytest.raises(ConfigError, match="override 'seed=\\[3': the value is not YAML"):
        load_config(EvalConfig, overrides=["seed=[3"])
