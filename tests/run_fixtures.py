"""Helpers for tests that run ``optimize`` (library or command): CPU tasks, scripted replies, an
OptimizeConfig with budgets small enough for CPU, progress recorders, loopback endpoints, and
``cudal1 optimize`` in a subprocess (for signals).

Shared by tests/search and tests/cli (tests/ is on ``sys.path`` through its conftest); the
fixtures are imported into those directories' conftest files.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from cudal1.config import OptimizeConfig
from cudal1.llm import Message, SamplingParams, ScriptedBackend
from cudal1.run.events import Evaluated, Event
from cudal1.tasks import bundled_tasks

TASKS = {t.name: t for t in bundled_tasks("cpu")}
GELU, SUM, CONV = TASKS["5_gelu"], TASKS["6_sum_reduction"], TASKS["2_conv2d"]
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


def fake_server_module() -> ModuleType:
    """tests/llm/fake_openai_server.py, whether or not tests/llm is on sys.path."""
    if "fake_openai_server" in sys.modules:
        return sys.modules["fake_openai_server"]
    path = Path(__file__).resolve().parent / "llm" / "fake_openai_server.py"
    spec = importlib.util.spec_from_file_location("fake_openai_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fake_openai_server"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def no_real_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
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


def eval_data(tmp_path: Path) -> dict[str, Any]:
    """EvalConfig data with budgets that keep a CPU evaluation to a few seconds."""
    return {
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
        "sandbox": {"call_timeout_s": 8, "first_calls_timeout_s": 8, "import_timeout_s": 60},
    }


def config_data(tmp_path: Path, **update: Any) -> dict[str, Any]:
    """An OptimizeConfig as YAML-able data, with evaluation budgets small enough for CPU tests."""
    base = {
        "rounds": 1,
        "samples": 4,
        "baseline_labels": [],
        "size": "cpu",
        "eval": eval_data(tmp_path),
        "pool": {"workers": 2, "spares": 1},
        "final": {"timing": {"budget_s": 0.5}, "correctness_trials": 2},
        # Off unless a test is about it: a torch.compile composition costs 20-45 s on this CPU.
        "compose": {"enabled": False},
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
    """A progress callback that keeps every event, and stands for a kill after ``kill_after``
    evaluations."""

    def __init__(self, kill_after: int | None = None) -> None:
        self.events: list[Event] = []
        self.kill_after = kill_after

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        if self.kill_after is not None and self.count(Evaluated) >= self.kill_after:
            raise Killed("simulated kill")

    def count(self, kind: type) -> int:
        return sum(1 for e in self.events if isinstance(e, kind))


@dataclass(frozen=True)
class OptimizeProcess:
    """``cudal1 optimize`` running in a subprocess, and its run directory."""

    proc: subprocess.Popen[str]
    run: Path

    def wait_until(self, ready: Callable[[], bool], timeout_s: float = 120) -> None:
        """Poll ``ready`` until it holds or ``timeout_s`` pass (the test's next step then fails)."""
        deadline = time.monotonic() + timeout_s
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.2)

    def log(self) -> str:
        """The run's log so far ("" before it exists)."""
        path = self.run / "run.log"
        return path.read_text() if path.exists() else ""


@pytest.fixture
def optimize_process(tmp_path: Path) -> Iterator[Callable[..., OptimizeProcess]]:
    """Start ``cudal1 optimize`` on GELU in a subprocess with ``config_data(tmp_path, **update)``,
    its output piped (stderr into stdout with ``merge_output``) and ``env`` added to this
    process's environment; a process still running when the test ends is killed."""
    started: list[subprocess.Popen[str]] = []

    def start(
        *, env: dict[str, str] | None = None, merge_output: bool = False, **update: Any
    ) -> OptimizeProcess:
        cfg_file, run = tmp_path / "cfg.yaml", tmp_path / "run"
        cfg_file.write_text(yaml.safe_dump(config_data(tmp_path, **update)))
        cmd = [
            sys.executable,
            "-m",
            "cudal1.cli",
            "optimize",
            GELU.name,
            "--out",
            str(run),
            "--config",
            str(cfg_file),
        ]
        stderr = subprocess.STDOUT if merge_output else subprocess.PIPE
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env={**os.environ, **(env or {})}
        )
        started.append(proc)
        return OptimizeProcess(proc, run)

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
