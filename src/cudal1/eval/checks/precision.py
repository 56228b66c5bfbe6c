"""The precision policy: what reduced precision looks like on a task (levels the reference
calibrates on its own inputs), which level a candidate's errors against float64 imply, and the
``reduced_precision`` finding when that level is below what ``guards.precision_policy`` accepts.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Any

from cudal1.eval.checks.compare import Comparison
from cudal1.schema import Finding, Severity, Stage


def _finding(code: str, severity: Severity, message: str, evidence: dict[str, Any]) -> Finding:
    return Finding(code, severity, Stage.INTEGRITY, message, evidence)


# Precision levels a computation can fall to, in order: the task's dtype, 10 fraction bits (TF32
# and float16, which errors alone cannot tell apart), bfloat16's 7, and below (fp8).
TEN_BIT, BF16, BELOW = "tf32/float16", "bfloat16", "below bfloat16"
# Never flag an error within the factor the tolerance already grants an honest candidate over the
# reference's own error (ToleranceConfig.reference_error_factor).
MIN_LIMIT = 4.0
# Unit-roundoff quotients, used where the reference's twins could not calibrate a level.
_NOMINAL = {"float16": 2.0**13, "bfloat16": 2.0**16}


@dataclass(frozen=True)
class PrecisionLevels:
    """What reduced precision looks like on this task and input: the precision ratio
    (``compare.precision_ratio``) of the reference itself run in float16 and in bfloat16, in the
    reference worker on the same inputs; None where not measured. Measured, because error growth
    depends on the task: a TF32 matmul of 2048 terms shows about 17x the fp32 reference's error,
    not the 8192x that the unit roundoffs alone would say (H100, issue 10)."""

    float16: float | None = None
    bfloat16: float | None = None

    @classmethod
    def from_reply(cls, reply: dict[str, Any] | None) -> PrecisionLevels:
        reply = reply or {}
        return cls(_finite(reply.get("float16")), _finite(reply.get("bfloat16")))


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) and x > 0 else None


def precision_limits(dtype: str, levels: PrecisionLevels | None = None) -> list[tuple[str, float]]:
    """(level, the largest precision ratio still at that level), from the task's dtype down: the
    geometric midpoint between consecutive levels' ratios, never under ``MIN_LIMIT``."""
    levels = levels or PrecisionLevels()
    if dtype == "float32":
        r16 = levels.float16 or (levels.bfloat16 / 8 if levels.bfloat16 else _NOMINAL["float16"])
        rbf = max(levels.bfloat16 or r16 * 8, r16)
        task = max(MIN_LIMIT, math.sqrt(r16))
        ten = max(task, math.sqrt(r16 * rbf))
        return [(dtype, task), (TEN_BIT, ten), (BF16, max(ten, 4 * rbf))]
    if dtype == "float16":
        rbf = levels.bfloat16 or 8.0
        task = max(MIN_LIMIT, math.sqrt(rbf))
        return [(dtype, task), (BF16, max(task, 4 * rbf))]
    return [(dtype, 4 * MIN_LIMIT)]


def effective_precision(
    ratio: float | None, dtype: str, levels: PrecisionLevels | None = None
) -> tuple[str, float] | None:
    """(level name, its ratio limit) that a precision ratio (compare._precision_ratio) implies."""
    if ratio is None or dtype not in ("float32", "float16", "bfloat16"):
        return None
    limits = precision_limits(dtype, levels)
    if not math.isfinite(ratio):
        return BELOW, math.inf
    return next(((name, limit) for name, limit in limits if ratio <= limit), (BELOW, math.inf))


def allowed_limit(dtype: str, policy: str, tf32_default: bool, levels: PrecisionLevels | None) -> float:
    """The largest precision ratio the policy accepts: "task" the task's own level; "allow_tf32"
    also 10-bit fractions; "allow_half" also bfloat16. ``tf32_default``: the reference itself may
    run at TF32 under PyTorch's defaults, so 10-bit errors are the task's own precision there."""
    limits = dict(precision_limits(dtype, levels))
    if policy == "allow_half":
        return limits.get(BF16, limits[dtype])
    if policy == "allow_tf32" or tf32_default:
        return limits.get(TEN_BIT, limits[dtype])
    return limits[dtype]


def reference_may_use_tf32(reference_source: str, device_type: str) -> bool:
    """Whether PyTorch's defaults let the reference run at TF32: on CUDA, any convolution (module
    or functional) in its source, since ``torch.backends.cudnn.allow_tf32`` defaults to True.
    Matmuls default to full fp32 (``torch.backends.cuda.matmul.allow_tf32`` is False)."""
    if device_type != "cuda":
        return False
    try:
        tree = ast.parse(reference_source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
        if name.lower().startswith("conv"):
            return True
    return False


def precision_finding(
    ratio: float | None,
    dtype: str,
    policy: str,
    tf32_default: bool = False,
    levels: PrecisionLevels | None = None,
) -> Finding | None:
    """``reduced_precision`` (REJECT) when the errors against float64 exceed what the policy's
    lowest accepted level shows on this task, whatever route lowered it (TF32 flags, autocast,
    half-precision kernels). The default policy is "task": a speedup bought by computing an fp32
    task at lower precision is a different task (reward-hacks.md, precision-downgrade), and the
    prompt says so.

    ``tf32_default``: fp32 convolutions run at TF32 under PyTorch's defaults
    (``torch.backends.cudnn.allow_tf32``), so there TF32-level errors are the task's own; on the
    H200, cuDNN-benchmark, channels_last and torch.compile variants of a conv task were all
    rejected before this, because the heuristic's first algorithm happened to be a full-fp32 one."""
    level = effective_precision(ratio, dtype, levels)
    if level is None or ratio is None:
        return None
    limit = allowed_limit(dtype, policy, tf32_default, levels)
    if ratio <= limit:
        return None
    return _finding(
        "reduced_precision",
        Severity.REJECT,
        f"errors against float64 look like {level[0]} arithmetic in a {dtype} task "
        f"({ratio:.3g}x what {dtype} explains, above the {limit:.3g}x policy {policy!r} accepts)",
        {
            "effective_precision": level[0],
            "precision_ratio": ratio,
            "limit": limit,
            "dtype": dtype,
            "policy": policy,
            "levels": {"float16": levels.float16, "bfloat16": levels.bfloat16} if levels else None,
        },
    )


class PrecisionTracker:
    """The checked set whose precision ratio is worst against its own calibrated limit, and the
    level and finding it implies."""

    def __init__(self, policy: str, tf32_default: bool) -> None:
        self.policy, self.tf32_default = policy, tf32_default
        self.ratio: float | None = None
        self.dtype = ""
        self.levels: PrecisionLevels | None = None
        self._worst = -math.inf

    def add(self, cmp: Comparison, levels: PrecisionLevels | None = None) -> None:
        if cmp.precision_ratio is None or effective_precision(cmp.precision_ratio, cmp.dtype) is None:
            return
        limit = allowed_limit(cmp.dtype, self.policy, self.tf32_default, levels)
        if cmp.precision_ratio / limit > self._worst:
            self._worst = cmp.precision_ratio / limit
            self.ratio, self.dtype, self.levels = cmp.precision_ratio, cmp.dtype, levels

    def record(self) -> tuple[str, float | None]:
        level = effective_precision(self.ratio, self.dtype, self.levels)
        return (level[0] if level else "", self.ratio)

    def findings(self) -> list[Finding]:
        found = precision_finding(self.ratio, self.dtype, self.policy, self.tf32_default, self.levels)
        return [found] if found else []
