"""Output comparison, done only on the trusted side, on decoded copies of the outputs.

A candidate's output passes when, for every leaf: it is a plain ``torch.Tensor`` of the reference's
shape, dtype and device type; its NaN/Inf pattern is the reference's; and its error against the
float64 reference, measured in units of (atol + rtol*|ref|) for the output dtype, is at most
``max(1, factor * the float32 reference's own error)``. Without a float64 reference the float32
reference is the target and the scale is 1.

It runs in the trusted reference's worker process (``eval.reference_process``), next to the
kept outputs, so it imports no configuration models: any object with the ``Tolerances``
attributes will do (``config.ToleranceConfig``, or its fields sent over the wire).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch


class Tolerances(Protocol):
    """Per-dtype atol = rtol, and how far the allowed error may follow the reference's own."""

    @property
    def fp32(self) -> float: ...
    @property
    def fp16(self) -> float: ...
    @property
    def bf16(self) -> float: ...
    @property
    def fp64(self) -> float: ...
    @property
    def reference_error_factor(self) -> float: ...


@dataclass(frozen=True)
class Comparison:
    ok: bool
    # NaN where no error could be measured: an output of the wrong type, shape, dtype or device,
    # or NaN/Inf where the reference is finite (``message`` says which).
    max_abs_err: float
    max_rel_err: float  # worst error in tolerance units
    scale: float  # allowed tolerance units
    against: str
    message: str = ""
    # Worst leaf's error against float64 over the error the output dtype explains (see
    # ``_precision_ratio``); None without a float64 reference or a floating output.
    precision_ratio: float | None = None
    dtype: str = ""
    # Past the tolerance by at most ``allowance.ROOM`` times, and passed because the allowed
    # operations at TF32 explain the error (a probe's set only: ``allowance.within_allowance``).
    by_allowance: bool = False


def tolerance_for(dtype: torch.dtype, tol: Tolerances) -> float:
    return {
        torch.float16: tol.fp16,
        torch.bfloat16: tol.bf16,
        torch.float64: tol.fp64,
    }.get(dtype, tol.fp32)


def compare_outputs(
    cand: dict[str, Any],
    ref: dict[str, Any],
    ref64: dict[str, Any] | None,
    tol: Tolerances,
    device: str,
    min_scale: float = 1.0,
) -> Comparison:
    """``device``: where the outputs must be (``on_device``). ``min_scale``: tolerance units
    allowed at least (a timed output checked against the fp32 reference alone gets the room its
    correctness stage measured against float64)."""
    cvals, rvals = cand["values"], ref["values"]
    r64vals = ref64["values"] if ref64 is not None else None
    against = "float64" if r64vals is not None else "reference"
    if len(cvals) != len(rvals):
        return _fail(f"returned {len(cvals)} outputs; the reference returns {len(rvals)}", against)
    worst_abs, worst_rel, scale = 0.0, 0.0, 1.0
    ratio: float | None = None
    dtype = ""
    for i, (c, r) in enumerate(zip(cvals, rvals, strict=True)):
        where = f"output {i}" if len(rvals) > 1 else "output"
        r64 = r64vals[i] if r64vals is not None and i < len(r64vals) else None
        problem = _check_leaf_type(c, r, cand["types"][i], cand["devices"][i], device, where)
        if problem:
            return _fail(problem, against)
        if not isinstance(r, torch.Tensor):
            r, c = torch.tensor(r), torch.tensor(c)
        err = _leaf_error(c, r, r64 if isinstance(r64, torch.Tensor) else None, tol, where, min_scale)
        if isinstance(err, str):
            return _fail(err + _poison_note(c), against)  # no error to measure: the message says why
        leaf_abs, leaf_rel, leaf_scale, leaf_ratio = err
        worst_abs, worst_rel = max(worst_abs, leaf_abs), max(worst_rel, leaf_rel / leaf_scale)
        scale = max(scale, leaf_scale)
        if leaf_ratio is not None and (ratio is None or leaf_ratio > ratio):
            ratio, dtype = leaf_ratio, str(r.dtype).removeprefix("torch.")
        if leaf_rel > leaf_scale:
            msg = (
                f"{where} differs: max abs error {leaf_abs:.3g}, "
                f"{leaf_rel:.3g}x the tolerance (allowed {leaf_scale:.3g}x)"
            ) + _poison_note(c)
            return Comparison(False, worst_abs, leaf_rel, leaf_scale, against, msg, ratio, dtype)
    return Comparison(True, worst_abs, worst_rel, scale, against, "", ratio, dtype)


def on_device(actual: str, expected: str) -> bool:
    """Whether a tensor on ``actual`` is on the evaluation's ``expected`` device: a GPU named
    with its index is that GPU only (a candidate that computes on another, idle GPU of the machine
    gets none of its flush, lead or clock); a bare "cuda" is any GPU, and a CPU is any CPU name
    ("cpu:1" is a pool's second name of the one CPU)."""
    etype, _, eindex = expected.partition(":")
    atype, _, aindex = actual.partition(":")
    if etype == "cuda" and eindex:
        return atype == "cuda" and (aindex or "0") == eindex
    return atype == etype


def _check_leaf_type(c: Any, r: Any, ctype: str, cdevice: str, device: str, where: str) -> str | None:
    if isinstance(r, torch.Tensor):
        if not isinstance(c, torch.Tensor):
            return f"{where} is a {ctype}; the reference's is a tensor"
        if ctype != "torch.Tensor":
            return f"{where} is a {ctype}, not a plain torch.Tensor"
        if tuple(c.shape) != tuple(r.shape):
            return f"{where} has shape {tuple(c.shape)}; the reference's is {tuple(r.shape)}"
        if c.dtype != r.dtype:
            return f"{where} has dtype {_dtype(c.dtype)}; the reference's is {_dtype(r.dtype)}"
        if not on_device(cdevice, device):
            return f"{where} is on {cdevice}; the evaluation's device is {device}"
        return None
    if isinstance(r, bool | int | float) and not isinstance(c, bool | int | float):
        return f"{where} is a {ctype}; the reference's is a number"
    if not isinstance(r, bool | int | float) and c != r:
        return f"{where} is {c!r}; the reference's is {r!r}"
    return None


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _leaf_error(
    c: torch.Tensor, r: torch.Tensor, r64: torch.Tensor | None, tol: Tolerances, where: str, min_scale: float
) -> tuple[float, float, float, float | None] | str:
    if not (r.is_floating_point() or r.is_complex()):
        if not torch.equal(c, r):
            return f"{where} differs from the reference in {int((c != r).sum())} elements"
        return 0.0, 0.0, 1.0, None
    c64, r_64 = c.to(torch.float64, copy=True), r.to(torch.float64)  # c stays intact for _poison_note
    if not bool(torch.isfinite(c64).all()) or not bool(torch.isfinite(r_64).all()):
        bad = _nonfinite_mismatch(c64, r_64)
        if bad:
            return f"{where}: {bad}"
        finite = torch.isfinite(r_64)  # rare: mask the (matching) non-finite places out
        c64, r_64 = c64[finite], r_64[finite]
        r64 = r64.to(torch.float64)[finite] if r64 is not None and r64.shape == r.shape else None
        if c64.numel() == 0:
            return 0.0, 0.0, 1.0, None
    target = r64.to(torch.float64) if r64 is not None and r64.shape == r_64.shape else r_64
    t = tolerance_for(r.dtype, tol)
    # In place where possible: outputs can be hundreds of MB.
    peak = float(target.abs().max()) if target.numel() else 0.0
    denom = target.abs().mul_(t).add_(t)
    err = c64.sub_(target).abs_()
    abs_err = float(err.max()) if err.numel() else 0.0
    rel = float(err.div_(denom).max()) if err.numel() else 0.0
    scale, ratio = max(1.0, min_scale), None
    if target is not r_64:
        ref_err = r_64.sub(target).abs_()
        ratio = _precision_ratio(abs_err, float(ref_err.max()), peak, r.dtype)
        scale = max(scale, tol.reference_error_factor * float(ref_err.div_(denom).max()))
    return abs_err, rel, scale, ratio


# Unit roundoff 2^-p of each output dtype (p: significand bits, the implicit one included).
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


def _precision_ratio(cand_err: float, ref_err: float, peak: float, dtype: torch.dtype) -> float | None:
    """The candidate's max error against float64 over the most the task's dtype explains: the
    reference's own error in that dtype (which carries the computation's error growth), and never
    less than one unit roundoff of the output's peak. Both errors are normwise (max over the same
    output), so cancellation and scale divide out. About 1 for a candidate computing in the task's
    dtype, about u(half)/u(fp32) = 8192 for one that computes an fp32 task in fp16 or TF32."""
    u = UNIT_ROUNDOFF.get(dtype)
    if u is None or peak == 0 or not math.isfinite(peak):
        return None
    return cand_err / max(ref_err, u * peak)


def precision_ratio(cand: list[Any], ref: list[Any], ref64: list[Any]) -> float | None:
    """The worst floating leaf's ``_precision_ratio`` of outputs ``cand`` (cast to the reference's
    dtype), against float64 ``ref64``, over what the reference ``ref`` shows. For the reference
    worker's low-precision twins, whose ratio calibrates what reduced precision looks like on this
    task (``precision.PrecisionTracker``); None when no leaf can tell (non-finite, not floating)."""
    worst: float | None = None
    for c, r, r64 in zip(cand, ref, ref64, strict=False):
        if not all(isinstance(t, torch.Tensor) for t in (c, r, r64)) or not r.is_floating_point():
            continue
        if c.shape != r.shape or r64.shape != r.shape:
            continue
        target = r64.to(torch.float64)
        c64, r_64 = c.to(torch.float64), r.to(torch.float64)
        if not (bool(torch.isfinite(c64).all()) and bool(torch.isfinite(target).all())) or not c64.numel():
            return None
        peak = float(target.abs().max())
        ratio = _precision_ratio(
            float((c64 - target).abs().max()), float((r_64 - target).abs().max()), peak, r.dtype
        )
        if ratio is not None and (worst is None or ratio > worst):
            worst = ratio
    return worst


def _poison_note(c: Any) -> str:
    """Names outputs that hold the evaluator's poison (all-ones bytes, a NaN in every float dtype,
    written into free memory before the call): memory the candidate never wrote."""
    if not isinstance(c, torch.Tensor) or not c.is_floating_point() or c.numel() == 0:
        return ""
    ints = {8: torch.int64, 4: torch.int32, 2: torch.int16}.get(c.element_size())
    if ints is None:
        return ""
    n = int((c.contiguous().view(ints) == -1).sum())
    if not n:
        return ""
    return (
        f"; {n} of {c.numel()} values hold the poison bytes written into free memory before the call "
        "(output memory the candidate never wrote, e.g. torch.empty or a partial write)"
    )


def _nonfinite_mismatch(c: torch.Tensor, r: torch.Tensor) -> str | None:
    c_nan, r_nan = torch.isnan(c), torch.isnan(r)
    c_inf, r_inf = torch.isinf(c), torch.isinf(r)
    if not bool(c_nan.any() or c_inf.any()):
        return None
    if torch.equal(c_nan, r_nan) and torch.equal(c_inf, r_inf) and torch.equal(c[c_inf], r[r_inf]):
        return None  # the reference itself is non-finite exactly there
    n = int((c_nan & ~r_nan).sum() + (c_inf & ~r_inf).sum())
    return f"{n} NaN/Inf values where the reference is finite"


def _fail(msg: str, against: str) -> Comparison:
    """A comparison that measured no error (NaN in both fields): ``msg`` says what is wrong."""
    return Comparison(False, math.nan, math.nan, 1.0, against, msg)
