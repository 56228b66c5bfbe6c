"""The bundled example suite: a few KernelBench-format tasks per level, shipped as package data.

Each file is plain KernelBench format sized for a GPU (roughly 0.05-5 ms per forward on an
H100 in float32). ``bundled/cpu_sizes.yaml`` maps a file stem to smaller values of its
top-level size constants; ``bundled_tasks("cpu")`` applies them so that the whole pipeline
(search loop, evaluator, reports) can run end to end on a CPU-only machine in seconds.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

from cudal1.schema import Task
from cudal1.tasks.loading import load_kernelbench_dir
from cudal1.tasks.source import TaskError, override_constants

logger = logging.getLogger(__name__)

SuiteSize = Literal["gpu", "cpu"]
CPU_SIZES_FILE = "cpu_sizes.yaml"

# The quick suite (``cudal1 optimize`` with no options): one task per level, chosen for what they
# show and what they cost. 3_softmax and 4_transformer_block are where the built-in baselines win
# on an H100 (torch.compile 1.41x; CUDA graph about 1.9x, README "Status"); 2_conv_bn_relu is a
# conv task, so cuDNN autotuning and channels_last apply. Small graphs keep torch.compile cheap.
QUICK_TASKS = ("3_softmax", "2_conv_bn_relu", "4_transformer_block")


def bundled_root() -> Path:
    """Directory holding ``level1/ level2/ level3/`` of the bundled suite."""
    return Path(__file__).resolve().parent / "bundled"


def bundled_tasks(size: SuiteSize = "gpu", suite: Literal["quick", "full"] = "full") -> list[Task]:
    """The bundled tasks (every one, or the ``QUICK_TASKS``) at GPU sizes, or with the CPU size
    overrides applied."""
    if size not in ("gpu", "cpu"):
        raise ValueError(f"size must be 'gpu' or 'cpu', not {size!r}")
    tasks = load_kernelbench_dir(bundled_root(), origin="bundled")
    if size == "cpu":
        tasks = _apply_overrides(tasks, cpu_overrides())
    return [t for t in tasks if suite == "full" or t.name in QUICK_TASKS]


def cpu_overrides() -> dict[str, dict[str, Any]]:
    """Task file stem -> {constant name: CPU value}, as written in ``cpu_sizes.yaml``."""
    import yaml  # deferred: only the CPU variant needs it

    path = bundled_root() / CPU_SIZES_FILE
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise TaskError(f"{path}: expected a mapping of task name -> {{constant: value}}")
    return data


def _apply_overrides(tasks: list[Task], overrides: dict[str, dict[str, Any]]) -> list[Task]:
    unknown = sorted(set(overrides) - {t.name for t in tasks})
    if unknown:
        raise TaskError(f"{bundled_root() / CPU_SIZES_FILE}: no bundled task named {', '.join(unknown)}")
    resized = []
    for task in tasks:
        where = task.path or task.name
        source = override_constants(task.source, overrides.get(task.name, {}), where)
        resized.append(Task(task.name, source, task.level, task.path, task.origin))
    return resized
