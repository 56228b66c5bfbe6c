"""Prompt rendering: the paper's structure, the restrictions, and a stable hash."""

from __future__ import annotations

import pytest

from cudal1.config import ExemplarConfig
from cudal1.schema import SpeedOfLight
from cudal1.search.parsing import extract
from cudal1.search.prompts import Exemplar, prompt_hash, render_contrastive_prompt, render_generation_prompt

FAST = "class ModelNew(nn.Module):\n    FAST = True\n"
SLOW = "class ModelNew(nn.Module):\n    SLOW = True\n"
BROKEN = "class ModelNew(nn.Module):\n    BROKEN = True\n"

RESTRICTION_MARKERS = (
    "cudnn.benchmark",
    "inside a `with` context",
    "Do not cache",
    "threads running",
    "side streams",
    "REJECTED",
    "FLAGGED",
    "lazy tensors, tensor subclasses",
    "float16, bfloat16 or TF32",
    "Do not instantiate or call the reference `Model`",
    "read or write files, use the network",
    "same constructor arguments",
    "same `forward` arguments",
    "inputs' device",
)


def test_generation_prompt_structure(gemm_task):
    messages = render_generation_prompt(gemm_task)
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]["content"]
    assert gemm_task.source.strip() in user
    order = [
        user.index(h)
        for h in (
            "# Reference implementation",
            "# Task for CUDA optimization",
            "# Requirements and restrictions",
            "# Output format",
        )
    ]
    assert order == sorted(order)
    for marker in RESTRICTION_MARKERS:
        assert marker in user, marker
    assert "${" not in user


def test_contrastive_prompt_shows_variants_with_speedups_then_protocol(gemm_task):
    exemplars = [
        Exemplar(
            BROKEN, None, False, [], label="#3", error="correctness stage failed: max error 0.5\nTraceback..."
        ),
        Exemplar(SLOW, 0.87, True, ["calls_reference_model: wraps the reference"], label="#1"),
        Exemplar(FAST, 1.83, True, [], label="#2"),
    ]
    user = render_contrastive_prompt(gemm_task, exemplars)[-1]["content"]
    assert gemm_task.source.strip() in user
    assert "## Variant 1 (#3) — incorrect: correctness stage failed: max error 0.5\n" in user
    assert "## Variant 2 (#1) — speedup 0.87x (correct)" in user
    assert "Evaluator notes: calls_reference_model: wraps the reference" in user
    assert "## Variant 3 (#2) — speedup 1.83x (correct)" in user
    positions = [user.index(code) for code in (BROKEN, SLOW, FAST)]
    assert positions == sorted(positions)
    protocol = user.index("# Generation protocol")
    assert positions[-1] < protocol
    assert user.index("## Performance analysis", protocol) < user.index("## Implementation", protocol)
    for marker in RESTRICTION_MARKERS:
        assert marker in user, marker


def test_contrastive_prompt_needs_exemplars(gemm_task):
    with pytest.raises(ValueError, match="at least one exemplar"):
        render_contrastive_prompt(gemm_task, [])


def test_exemplar_with_backticks_cannot_break_its_fence(gemm_task):
    tricky = FAST + 'NOTE = """\n```\nnot the end\n```\n"""\n'
    user = render_contrastive_prompt(gemm_task, [Exemplar(tricky, 1.2, True, [])])[-1]["content"]
    assert "````python\n" + tricky.strip("\n") + "\n````" in user


def test_a_reply_in_the_requested_format_parses(gemm_task):
    reply = "## Performance analysis\nVariant 2 is faster.\n\n## Implementation\n```python\n" + FAST + "```\n"
    assert extract(reply).code == FAST


def test_prompt_hash_is_stable_and_content_addressed(gemm_task):
    a = render_contrastive_prompt(gemm_task, [Exemplar(FAST, 1.5, True, [])])
    b = render_contrastive_prompt(gemm_task, [Exemplar(FAST, 1.5, True, [])])
    c = render_contrastive_prompt(gemm_task, [Exemplar(FAST, 1.6, True, [])])
    assert prompt_hash(a) == prompt_hash(b) != prompt_hash(c)
    assert len(prompt_hash(a)) == 64


def _sol(bytes_ms: float, flops_ms: float) -> SpeedOfLight:
    return SpeedOfLight("float32", 1e9, 1e6, bytes_ms, flops_ms, 10.0, 40.0, "measured")


@pytest.mark.parametrize(
    ("bytes_ms", "flops_ms", "ref_ms", "bound"),
    [
        (0.5, 0.1, 1.0, "memory"),  # the bytes floor is the higher one
        (0.1, 0.5, 1.0, "compute"),
        (0.001, 0.0005, 0.05, "launch"),  # 50 us against a 1 us floor: fixed per-call costs
        (0.02, 0.001, 0.05, "memory"),  # short, but within 10x of its floor: still memory-bound
        (0.5, float("nan"), 1.0, "memory"),  # FLOPs not counted: the bytes floor alone
    ],
)
def test_a_task_is_memory_compute_or_launch_bound_from_its_floors(bytes_ms, flops_ms, ref_ms, bound):
    assert _sol(bytes_ms, flops_ms).bound(ref_ms) == bound


def test_no_floor_means_no_bound():
    assert _sol(float("nan"), float("nan")).bound(1.0) is None


def test_contrastive_prompt_shows_each_correct_variants_speed_of_light(gemm_task):
    exemplars = [
        Exemplar(FAST, 1.83, True, [], label="#2", sol_percent=41.6, bound="memory"),
        Exemplar(BROKEN, None, False, [], label="#3", error="wrong", sol_percent=90.0, bound="memory"),
    ]
    user = render_contrastive_prompt(gemm_task, exemplars)[-1]["content"]
    assert "## Variant 1 (#2) — speedup 1.83x (correct)\n\nSpeed of light: 42% of the physical floor;" in user
    assert "the task is memory-bound" in user
    assert user.count("Speed of light:") == 1  # an incorrect variant's time means nothing
    assert "100% is the limit no kernel can beat" in user


def test_hidden_speedups_leave_the_variants_and_drop_every_number(gemm_task):
    """The contrastive ablation's prompt: the same variants in the same order, no measured numbers."""
    sol = dict(sol_percent=42.0, bound="memory")
    exemplars = [
        Exemplar(SLOW, 0.87, True, [], label="#1", **sol),
        Exemplar(FAST, 1.83, True, [], label="#2", **sol),
    ]
    shown = render_contrastive_prompt(gemm_task, exemplars)[-1]["content"]
    hidden = render_contrastive_prompt(gemm_task, exemplars, show_speedups=False)[-1]["content"]
    assert "speedup 1.83x" in shown and "42% of the physical floor" in shown
    assert "## Variant 1 (#1) — correct\n" in hidden and "## Variant 2 (#2) — correct\n" in hidden
    for number in ("0.87x", "1.83x", "42%"):
        assert number not in hidden
    assert hidden.index(SLOW) < hidden.index(FAST)


def test_speedups_are_shown_by_default():
    assert ExemplarConfig().show_speedups is True
    assert ExemplarConfig(show_speedups=False).show_speedups is False
