"""Builders shared by the run and search tests: a task and evaluation results, without an evaluator.

A uniquely named module (not conftest) so that importing it cannot pick up another directory's conftest."""

from __future__ import annotations

from cudal1.schema import (
    Correctness,
    EvalResult,
    Finding,
    Severity,
    Stage,
    StageRecord,
    Task,
    Timing,
    source_hash,
)

GEMM_TASK = Task(
    name="gemm_relu",
    source="""import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


batch_size = 4


def get_inputs():
    return [torch.randn(batch_size, 16)]


def get_init_inputs():
    return [16, 8]
""",
)


def make_result(
    task: str,
    source: str,
    speedup: float | None = 1.0,
    *,
    correct: bool = True,
    failed_stage: Stage | None = None,
    reject: bool = False,
    warning: str | None = None,
) -> EvalResult:
    """An EvalResult as the evaluator would return it; speedup=None means 'not timed'."""
    stages = [StageRecord(Stage.STATIC, True, 0.01), StageRecord(Stage.COMPILE, True, 0.5)]
    if failed_stage is not None:
        stages.append(StageRecord(failed_stage, False, 0.1, f"{failed_stage.value} exploded at line 3"))
    correctness = Correctness(
        trials=3,
        passed=3 if correct else 1,
        max_abs_err=1e-6 if correct else 0.5,
        max_rel_err=0.01,
        tolerance_scale=1.0,
        against="float64",
        message="" if correct else "max error 0.5 exceeds tolerance",
    )
    timing = None
    if speedup is not None:
        timing = Timing(
            device="cpu",
            calls_per_sample=1,
            ref_ms=(1.0, 1.0),
            cand_ms=(1 / speedup, 1 / speedup),
            ref_wall_ms=(1.0, 1.0),
            cand_wall_ms=(1 / speedup, 1 / speedup),
            speedup=speedup,
            ci_low=speedup * 0.99,
            ci_high=speedup * 1.01,
            wall_speedup=speedup,
            stop_reason="precision",
        )
    findings = []
    if reject:
        findings.append(
            Finding("cached_output", Severity.REJECT, Stage.INTEGRITY, "outputs reused across calls")
        )
    if warning:
        findings.append(Finding("calls_reference_model", Severity.WARNING, Stage.STATIC, warning))
    return EvalResult(
        task=task,
        candidate_hash=source_hash(source),
        device="cpu",
        stages=tuple(stages),
        correctness=correctness if failed_stage in (None, Stage.CORRECTNESS) else None,
        timing=timing if failed_stage is None else None,
        findings=tuple(findings),
    )

# A GPU task with one large input: the GPU tests and the reference-disturbance tests time it.
SCALE_SHIFT = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x * 2.0 + 1.0)


def get_inputs():
    return [torch.randn(4096, 1024)]


def get_init_inputs():
    return []
"""
SCALE_SHIFT_TASK = Task("scale_shift_relu", SCALE_SHIFT, level=1)
