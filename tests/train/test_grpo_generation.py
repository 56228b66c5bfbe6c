"""GRPO's generation backend as configuration: ``generation`` becomes TRL's ``use_vllm`` /
``vllm_mode`` and their knobs; a vLLM backend without the ``vllm`` package fails before a pool
starts or a model loads, naming the install (and, for server mode, the ``trl vllm-serve``
command); a typo in the section is an error at load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cudal1.cli import app
from cudal1.config import ConfigError, GRPOStageConfig, load_config
from cudal1.train import grpo
from cudal1.train.models import TrainError


def config(*overrides: str) -> GRPOStageConfig:
    return load_config(GRPOStageConfig, overrides=["optim.report_to=none", *overrides])


@pytest.fixture
def with_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grpo, "vllm_installed", lambda: True)


@pytest.fixture
def without_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grpo, "vllm_installed", lambda: False)


def test_default_generates_with_transformers_and_needs_no_vllm(without_vllm: None, tmp_path: Path) -> None:
    args = grpo.grpo_arguments(config(), tmp_path, "cpu")
    assert args.use_vllm is False


def test_server_mode_sets_trls_server_fields(with_vllm: None, tmp_path: Path) -> None:
    cfg = config(
        "generation.backend=vllm-server",
        "generation.server.host=10.0.0.2",
        "generation.server.port=8123",
        "generation.server.group_port=51300",
        "generation.server.timeout_s=600",
        "generation.importance_sampling=false",
    )
    args = grpo.grpo_arguments(cfg, tmp_path, "cpu")
    assert (args.use_vllm, args.vllm_mode) == (True, "server")
    assert (args.vllm_server_host, args.vllm_server_port, args.vllm_group_port) == ("10.0.0.2", 8123, 51300)
    assert args.vllm_server_timeout == 600.0 and args.vllm_server_base_url is None
    assert args.vllm_importance_sampling_correction is False


def test_server_base_url_is_passed_as_given(with_vllm: None, tmp_path: Path) -> None:
    cfg = config("generation.backend=vllm-server", "generation.server.base_url=http://gen:9000")
    assert grpo.grpo_arguments(cfg, tmp_path, "cpu").vllm_server_base_url == "http://gen:9000"


def test_colocate_mode_sets_trls_colocate_fields(with_vllm: None, tmp_path: Path) -> None:
    cfg = config(
        "generation.backend=vllm-colocate",
        "generation.colocate.gpu_memory_utilization=0.45",
        "generation.colocate.tensor_parallel_size=2",
        "generation.colocate.sleep_mode=true",
        "generation.colocate.max_model_length=12288",
    )
    args = grpo.grpo_arguments(cfg, tmp_path, "cpu")
    assert (args.use_vllm, args.vllm_mode) == (True, "colocate")
    assert args.vllm_gpu_memory_utilization == 0.45
    assert args.vllm_tensor_parallel_size == 2 and args.vllm_enable_sleep_mode is True
    assert args.vllm_max_model_length == 12288


def test_server_mode_without_vllm_names_the_install_and_the_server_command(
    without_vllm: None, tmp_path: Path
) -> None:
    cfg = config("generation.backend=vllm-server", "generation.server.port=8123")
    with pytest.raises(TrainError) as exc:
        grpo.grpo_arguments(cfg, tmp_path, "cpu")
    message = str(exc.value)
    assert "pip install 'trl[vllm]'" in message
    assert "trl vllm-serve --model MODEL_DIR" in message and "--port 8123" in message
    assert "generation.backend: transformers" in message


def test_colocate_mode_without_vllm_names_the_install_only(without_vllm: None, tmp_path: Path) -> None:
    with pytest.raises(TrainError, match=r"vllm-colocate needs the vllm package") as exc:
        grpo.grpo_arguments(config("generation.backend=vllm-colocate"), tmp_path, "cpu")
    assert "pip install 'trl[vllm]'" in str(exc.value) and "vllm-serve" not in str(exc.value)


def test_missing_vllm_fails_before_a_pool_starts_or_a_model_loads(
    without_vllm: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("reached past the generation check")

    monkeypatch.setattr(grpo, "make_pool", never)
    monkeypatch.setattr(grpo, "load_policy", never)
    cfg = config("generation.backend=vllm-server", "device=cpu")
    with pytest.raises(TrainError, match="trl vllm-serve"):
        grpo.run_grpo(tmp_path / "model", [], tmp_path / "out", cfg)


def test_command_without_vllm_is_bad_input_and_writes_nothing(without_vllm: None, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["train", "grpo", "--model", str(tmp_path / "model"), "--out", str(out), "--device", "cpu",
         "--tasks", "3_softmax", "--set", "generation.backend=vllm-server"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "trl vllm-serve" in result.output and "pip install 'trl[vllm]'" in result.output
    assert not out.exists()  # the same command runs again, without --resume, once vllm is there


@pytest.mark.parametrize(
    ("override", "problem"),
    [
        ("generation.backend=vllm", "generation.backend: Input should be"),
        ("generation.use_vllm=true", "generation.use_vllm: unknown key"),
        ("generation.server.prot=8001", "generation.server.prot: unknown key (did you mean port?)"),
        ("generation.colocate.gpu_memory_utilization=1.5", "generation.colocate.gpu_memory_utilization"),
    ],
)
def test_generation_section_is_strict(override: str, problem: str) -> None:
    with pytest.raises(ConfigError) as exc:
        config(override)
    assert any(p.startswith(problem) for p in exc.value.problems), exc.value.problems
