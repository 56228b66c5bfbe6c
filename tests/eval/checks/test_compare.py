"""Output comparison says what is wrong with an output it cannot measure (wrong shape, dtype,
device or type; NaN where the reference is finite) instead of a NaN error, and the one-line
correctness summary of ``cudal1 eval`` shows that message rather than "max abs error nan"."""

from __future__ import annotations

import math

import pytest
import torch

from cudal1.config import ToleranceConfig
from cudal1.eval.checks.compare import compare_outputs, on_device
from cudal1.report.terminal import correctness_line
from cudal1.schema import Correctness


def _outputs(*values: object, device: str = "cpu") -> dict[str, object]:
    return {
        "values": list(values),
        "types": [type(v).__module__ + "." + type(v).__qualname__ for v in values],
        "devices": [device if isinstance(v, torch.Tensor) else "" for v in values],
    }


def _compare(cand: dict[str, object], ref: dict[str, object]):
    return compare_outputs(cand, ref, None, ToleranceConfig(), "cpu")


@pytest.mark.parametrize(
    "cand, message",
    [
        (torch.zeros(4, 8), "output 1 has shape (4, 8); the reference's is (4, 4)"),
        (torch.zeros(4, 4, dtype=torch.float64), "output 1 has dtype float64; the reference's is float32"),
        (3.0, "output 1 is a builtins.float; the reference's is a tensor"),
    ],
)
def test_an_output_that_cannot_be_measured_is_named_with_the_references(cand, message):
    ref = _outputs(torch.ones(2), torch.zeros(4, 4))
    cmp = _compare(_outputs(torch.ones(2), cand), ref)
    assert not cmp.ok
    assert cmp.message == message
    assert math.isnan(cmp.max_abs_err) and math.isnan(cmp.max_rel_err)


def test_an_output_on_another_device_is_named():
    ref = _outputs(torch.zeros(4))
    cmp = _compare(_outputs(torch.zeros(4), device="meta"), ref)
    assert cmp.message == "output is on meta; the evaluation's device is cpu"


def test_a_nan_where_the_reference_is_finite_reports_no_error_figure():
    """Not the finite leaves' error before it (it read "max abs error 0": a pass's numbers)."""
    bad = torch.zeros(4)
    bad[1] = float("nan")
    cmp = _compare(_outputs(torch.ones(3), bad), _outputs(torch.ones(3), torch.zeros(4)))
    assert "1 NaN/Inf values where the reference is finite" in cmp.message
    assert math.isnan(cmp.max_abs_err)


def test_the_correctness_line_says_what_is_wrong_instead_of_nan():
    shape = "output has shape (4, 8); the reference's is (4, 4)"
    c = Correctness(5, 0, math.nan, math.nan, 1.0, "float64", shape)
    assert correctness_line(c) == f"correctness: 0/5 input sets; {shape}"
    assert "nan" not in correctness_line(c)


def test_the_correctness_line_keeps_measured_errors():
    c = Correctness(5, 5, 1e-6, 0.25, 1.0, "float64")
    assert correctness_line(c) == (
        "correctness: 5/5 input sets; max abs error 1e-06; worst 0.25x of tolerance (allowed 1x), against float64"
    )


@pytest.mark.parametrize(
    "actual, expected, ok",
    [
        ("cuda:1", "cuda:1", True),
        ("cuda:0", "cuda:1", False),  # computed on another GPU of the machine
        ("cuda:0", "cuda", True),
        ("cuda:3", "cuda", True),
        ("cuda", "cuda:0", True),
        ("cpu", "cpu:1", True),  # a CPU pool's second name of the one CPU
        ("cpu", "cuda:0", False),
        ("cuda:0", "cpu", False),
    ],
)
def test_an_output_is_on_the_evaluations_gpu_itself_not_another(actual, expected, ok):
    assert on_device(actual, expected) is ok


def test_an_output_on_another_gpu_fails_with_where_it_was():
    """Outputs made on an idle GPU of the machine (no flush, no lead, no clock there) are not the
    evaluation's: the comparison names both devices."""
    ref = {"values": [torch.ones(2)], "types": ["torch.Tensor"], "devices": ["cuda:1"]}
    cand = {"values": [torch.ones(2)], "types": ["torch.Tensor"], "devices": ["cuda:0"]}
    result = compare_outputs(cand, ref, None, ToleranceConfig(), "cuda:1")
    assert not result.ok and "cuda:0" in result.message and "cuda:1" in result.message
