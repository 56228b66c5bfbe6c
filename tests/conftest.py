"""Shared fixtures: GPU tests are skipped without CUDA; workers get small, fast budgets."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shard",
        default=None,
        metavar="K/N",
        help="run the K-th of N parts of the selected tests (every N-th, from the K-th): the GPU "
        "tests take longer than one 10-minute device call (scripts/gpu-check.sh tests --shard 1/2)",
    )


def _shard(value: str) -> tuple[int, int]:
    from cudal1.tasks.shard import parse_shard

    try:
        return parse_shard(value)
    except ValueError as exc:
        raise pytest.UsageError(f"--shard {exc}") from None


def pytest_configure(config: pytest.Config) -> None:
    if (value := config.getoption("--shard")) is not None:
        _shard(value)  # a bad value stops the run before collection


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected theirs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if (value := config.getoption("--shard")) is not None:
        from cudal1.tasks.shard import part_of

        kept = part_of(items, _shard(value))
        ids = {id(item) for item in kept}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in ids])
        items[:] = kept
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
