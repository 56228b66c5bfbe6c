"""``--devices`` and ``--pool``: parsed into the pool's config before any work; a bad value, or
GPUs asked for on a machine with none, exits 2 with a message that says why."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cudal1.cli import app
from cudal1.cli.common import parse_devices, pool_values


def test_devices_all_and_lists_name_cuda_devices() -> None:
    assert parse_devices("all", visible=2) == ("cuda:0", "cuda:1")
    assert parse_devices("1,0", visible=2) == ("cuda:1", "cuda:0")
    assert parse_devices("cuda:1", visible=2) == ("cuda:1",)


@pytest.mark.parametrize(
    ("spec", "visible", "why"),
    [
        ("all", 0, "no CUDA GPU"),
        ("0", 0, "no CUDA GPU"),
        ("2", 2, "not visible"),
        ("gpu0", 2, "not a GPU index"),
        ("0,0", 2, "twice"),
    ],
)
def test_bad_devices_are_bad_input(spec: str, visible: int, why: str, capsys) -> None:
    with pytest.raises(typer.Exit) as exc:
        parse_devices(spec, visible=visible)
    assert exc.value.exit_code == 2
    assert why in capsys.readouterr().err


def test_pool_kinds() -> None:
    assert pool_values("local", None) == {"pool.kind": "local"}
    assert pool_values("ray://head:10001", None) == {
        "pool.kind": "ray",
        "pool.ray.address": "ray://head:10001",
    }
    for bad in ("dask", "ray:/head"):
        with pytest.raises(typer.Exit):
            pool_values(bad, None)
    with pytest.raises(typer.Exit):  # a Ray pool's GPUs are the cluster's
        pool_values("ray", "0")


@pytest.mark.parametrize("command", ["optimize", "collect", "verify", "train selfsup", "train grpo"])
def test_every_evaluating_command_takes_devices_and_pool(command: str, tmp_path: Path) -> None:
    """Asked for GPUs on this CPU machine, each command stops at once with the reason."""
    args = {
        "optimize": ["optimize", "--out", str(tmp_path / "run")],
        "collect": ["collect", "--out", str(tmp_path / "run"), "--llm", "scripted:x"],
        "verify": ["verify", str(tmp_path / "records.jsonl")],
        "train selfsup": ["train", "selfsup", "--model", str(tmp_path), "--out", str(tmp_path / "o")],
        "train grpo": ["train", "grpo", "--model", str(tmp_path), "--out", str(tmp_path / "o")],
    }[command]
    runner = CliRunner()
    help_text = runner.invoke(app, [*command.split(), "--help"], env={"COLUMNS": "250"}).output
    assert "--devices" in help_text and "--pool" in help_text
    res = runner.invoke(app, [*args, "--devices", "all"])
    if not _has_cuda():
        assert res.exit_code == 2 and "no CUDA GPU" in res.output
    bad = runner.invoke(app, [*args, "--pool", "dask"])
    assert bad.exit_code == 2 and "--pool dask" in bad.output


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
