"""The precision policy (eval/checks/precision.py) without workers: an allowance for one kind of
operation (convolutions at TF32) is never a level granted to the whole output."""

from __future__ import annotations

from cudal1.eval.checks.allowance import Isolated
from cudal1.eval.checks.precision import PrecisionLevels, precision_finding, tf32_allowance


def test_convolutions_may_run_at_tf32_where_the_reference_may_and_nothing_else_does():
    assert tf32_allowance("task", "cuda", "cuda") == "convolution"
    assert tf32_allowance("task", "cuda", "cpu") is None
    assert tf32_allowance("task", "any_device", "cpu") == "convolution"
    assert tf32_allowance("allow_tf32", "cuda", "cuda") is None  # a level for every operation
    tf32_like = 3000.0  # errors ~2^-13 relative in an fp32 task
    assert precision_finding(tf32_like, "float32", "task") is not None
    # A convolution in the task grants nothing by itself: only what its TF32 twin explains.
    conv_ran = PrecisionLevels(float16=2500.0, bfloat16=20000.0, allowed=2000.0)
    assert precision_finding(tf32_like, "float32", "task", conv_ran, Isolated(1.5, 50.0)) is None
    assert precision_finding(tf32_like, "float32", "task", conv_ran, Isolated(900.0, 50.0)) is not None
    assert precision_finding(2.0**16, "float32", "task", conv_ran) is not None  # bf16-like
