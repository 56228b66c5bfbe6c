"""Chat prompts for one-shot generation and for contrastive search, rendered from package data.

The structure follows the paper (shared/research/cuda-l1-method.md): the generation prompt is
"reference implementation + task for CUDA optimisation + output format"; the contrastive prompt
is the task, earlier variants *with their measured speedups*, a protocol that asks for a
performance analysis comparing them before one new ``ModelNew``, and requirements and
restrictions that name the known reward hacks (the model is told what the evaluator detects,
which is cheaper than learning it from zero rewards).

The texts live in ``prompts/*.md`` so that they can be read and reviewed as prose; a file holds
``<!-- role: NAME -->`` markers that split it into chat messages, and ``${name}`` placeholders.
``prompt_hash`` identifies a rendered prompt, so that the database can record which prompt
produced which candidate and training can group samples of the same prompt.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import re
from dataclasses import dataclass, field
from importlib import resources
from string import Template

from cudal1.schema import Bound, Task

log = logging.getLogger(__name__)

Message = dict[str, str]

_ROLE_MARKER = re.compile(r"^<!-- role: (system|user|assistant) -->[ \t]*$", re.MULTILINE)


@dataclass(frozen=True)
class Exemplar:
    """An earlier variant shown in a contrastive prompt, with what the evaluator said about it."""

    source: str
    speedup: float | None  # effective speedup; None when the variant earned nothing
    correct: bool
    findings: list[str] = field(default_factory=list)  # short evaluator notes worth showing
    label: str = ""  # shown next to the variant's number, e.g. "#17" for a database id
    error: str = ""  # why an incorrect variant failed
    candidate_id: int | None = None  # database id, recorded as a parent of what the prompt yields
    sol_percent: float | None = None  # its time against the task's physical floor (speed of light)
    bound: Bound | None = None  # what limits the task: memory, compute or launches


@functools.cache
def _template(name: str) -> str:
    return resources.files("cudal1.search").joinpath("prompts", name).read_text(encoding="utf-8")


def _messages(name: str, **values: str) -> list[Message]:
    text = Template(_template(name)).substitute(restrictions=_template("restrictions.md").strip(), **values)
    parts = _ROLE_MARKER.split(text)
    if parts[0].strip():
        raise ValueError(f"prompt {name}: text before the first role marker")
    return [
        {"role": role, "content": body.strip() + "\n"}
        for role, body in zip(parts[1::2], parts[2::2], strict=True)
    ]


def _fence(code: str, lang: str = "python") -> str:
    """Fence code with more backticks than it contains, so that a ``` inside cannot close it."""
    longest = max((len(m) for m in re.findall(r"`+", code)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{code.strip(chr(10))}\n{ticks}"


def _exemplar_section(i: int, ex: Exemplar, show_speedups: bool) -> str:
    name = f"## Variant {i}" + (f" ({ex.label})" if ex.label else "")
    if ex.correct and ex.speedup is not None:
        verdict = f"speedup {ex.speedup:.2f}x (correct)" if show_speedups else "correct"
    else:
        verdict = "incorrect: " + (
            ex.error.strip().splitlines()[0] if ex.error.strip() else "failed evaluation"
        )
    lines = [f"{name} — {verdict}"]
    if show_speedups and ex.correct and ex.sol_percent is not None and math.isfinite(ex.sol_percent):
        bound = f"; the task is {ex.bound}-bound" if ex.bound else ""
        lines.append(f"Speed of light: {ex.sol_percent:.0f}% of the physical floor{bound}")
    if ex.findings:
        lines.append("Evaluator notes: " + "; ".join(ex.findings))
    lines.append(_fence(ex.source))
    return "\n\n".join(lines)


def render_generation_prompt(task: Task) -> list[Message]:
    """The one-shot prompt: reference, optimisation task, restrictions, output format."""
    return _messages("generation.md", task_name=task.name, task_source=task.source.strip("\n"))


def render_contrastive_prompt(
    task: Task, exemplars: list[Exemplar], *, show_speedups: bool = True
) -> list[Message]:
    """The contrastive prompt; exemplars appear in the given order (selection orders them).
    ``show_speedups=False`` leaves out every measured number (speedup, speed of light): the
    variants without the contrast between them, for the learning check's ablation."""
    if not exemplars:
        raise ValueError("a contrastive prompt needs at least one exemplar; use render_generation_prompt")
    body = "\n\n".join(_exemplar_section(i, ex, show_speedups) for i, ex in enumerate(exemplars, 1))
    return _messages(
        "contrastive.md", task_name=task.name, task_source=task.source.strip("\n"), exemplars=body
    )


def prompt_hash(messages: list[Message]) -> str:
    """Content address of a rendered prompt (sha256 of its canonical JSON, hex)."""
    canonical = json.dumps(messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
