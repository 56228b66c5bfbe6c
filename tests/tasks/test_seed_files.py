"""Seed files matched to a run's tasks (``tasks.seed_files``): by reference source across names,
by name for a directory, a same-named record with another reference skipped, and the errors."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from cudal1.schema import Task
from cudal1.tasks import TaskError, match_seed_files

REF = """\
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2

def get_inputs():
    return [torch.randn(8)]

def get_init_inputs():
    return []
"""
OTHER_REF = REF.replace("randn(8)", "randn(16)")  # the same program at another size
KERNEL = REF.replace("class Model(", "class ModelNew(").replace("x * 2", "x + x")
FASTER = KERNEL.replace("x + x", "x.mul(2)")

TASK = Task("double", REF, level=1, origin="bundled")
OTHER = Task("L1_9", OTHER_REF, level=1)


def write_lines(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def release(task_id: int, ref: str, code: str | None, score: float | None = 2.0) -> dict:
    return {"level_id": 1, "task_id": task_id, "ref_code": ref, "custom_code": code, "score_default": score}


def test_a_release_record_seeds_the_task_with_its_source_whatever_the_names(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "cuda-l1-h100.jsonl", [release(7, REF, KERNEL, 1.96), release(8, REF, None)]
    )
    match = match_seed_files([path], [TASK, OTHER])
    (kernel,) = match.kernels["double"]  # record L1_7 holds the bundled task's program
    assert (kernel.task_name, kernel.source, kernel.claimed_speedup) == ("double", KERNEL, 1.96)
    assert (kernel.label, kernel.origin) == ("cuda-l1:h100", "cuda-l1:h100")
    assert "L1_9" not in match.kernels and match.without_code == 1 and match.skipped == ()


def test_a_record_named_like_a_task_with_another_reference_is_skipped_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Record L1_9 holds REF: it seeds "double" (same source), never the run's L1_9 (OTHER_REF).
    by_source = write_lines(tmp_path / "h100.jsonl", [release(9, REF, KERNEL), release(7, REF, FASTER)])
    match = match_seed_files([by_source], [TASK, OTHER])
    assert [k.source for k in match.kernels["double"]] == [KERNEL, FASTER]
    assert "L1_9" not in match.kernels and match.skipped == ()

    resized = OTHER_REF.replace("16", "32")
    mixed = write_lines(tmp_path / "a100.jsonl", [release(9, resized, KERNEL), release(7, REF, FASTER)])
    with caplog.at_level(logging.WARNING):
        match = match_seed_files([mixed], [OTHER, TASK])
    assert "L1_9" not in match.kernels and [k.source for k in match.kernels["double"]] == [FASTER]
    assert len(match.skipped) == 1 and "L1_9: same name as a run task, another reference" in match.skipped[0]
    assert "L1_9" in caplog.text and "skipped" in caplog.text

    only = write_lines(tmp_path / "l40.jsonl", [release(9, resized, KERNEL)])
    with pytest.raises(TaskError, match="1 record\\(s\\) share a task's name but not its reference"):
        match_seed_files([only], [OTHER])


def test_a_directory_seeds_tasks_by_file_name(tmp_path: Path) -> None:
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "double.py").write_text(KERNEL)
    (kernels / "unrelated.py").write_text(FASTER)
    match = match_seed_files([kernels], [TASK, OTHER])
    (kernel,) = match.kernels["double"]
    assert (kernel.source, kernel.label, kernel.origin, kernel.claimed_speedup) == (
        KERNEL,
        "kernels",
        "kernels",
        None,
    )


def test_repeated_kernels_of_several_files_are_kept_once(tmp_path: Path) -> None:
    first = write_lines(tmp_path / "a.jsonl", [release(1, REF, KERNEL)])
    second = write_lines(tmp_path / "b.jsonl", [release(1, REF, KERNEL), release(2, REF, FASTER)])
    match = match_seed_files([first, second], [TASK])
    assert [k.source for k in match.kernels["double"]] == [KERNEL, FASTER]


def test_an_export_record_carries_its_provenance_chain(tmp_path: Path) -> None:
    record = {
        "task": "elsewhere",
        "level": 1,
        "ref_code": REF,
        "custom_code": KERNEL,
        "claimed_speedup": 1.4,
        "label": "seed:cuda-l1:h100",
        "origin": "cuda-l1",
        "provenance": "seed cuda-l1:h100 > cuda-graph",
    }
    (kernel,) = match_seed_files([write_lines(tmp_path / "e.jsonl", [record])], [TASK]).kernels["double"]
    assert (kernel.label, kernel.origin, kernel.claimed_speedup) == (
        "seed:cuda-l1:h100",
        "seed cuda-l1:h100 > cuda-graph",
        1.4,
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such seed file"),
        ('{"level_id": 1, "task_id": ', "malformed JSON"),
        (json.dumps(release(1, OTHER_REF.replace("16", "4"), KERNEL)), "seeds none of the run's tasks"),
        ("", "no records"),
    ],
    ids=["missing", "malformed", "matches-nothing", "empty"],
)
def test_unusable_seed_files_name_themselves(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "seeds.jsonl"
    if content is not None:
        path.write_text(content + "\n")
    with pytest.raises(TaskError, match=message) as error:
        match_seed_files([path], [TASK])
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_a_directory_without_the_runs_tasks_or_files_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TaskError, match="no candidate files"):
        match_seed_files([empty], [TASK])
    (empty / "other.py").write_text(KERNEL)
    with pytest.raises(TaskError, match="seeds none of the run's tasks \\(double\\)"):
        match_seed_files([empty], [TASK])
