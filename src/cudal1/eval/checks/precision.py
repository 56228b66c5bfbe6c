"""The precision policy: what reduced precision looks like on a task (levels the reference
calibrates on its own inputs), which level a candidate's errors against float64 imply, and the
``reduced_precision`` finding when that level is below what ``guards.precision_policy`` accepts.

Precision is judged from the outputs: the candidate's error against float64 over the fp32
reference's own (``compare.precision_ratio``), against levels the reference measures by running
itself at each precision on the same inputs. A policy names levels: "task" the task's dtype,
"allow_tf32" 10 fraction bits for every operation, "allow_half" bfloat16's 7.

An allowance for one kind of operation does not extend to another. Under "task", an fp32 task's
convolutions may run at TF32 where PyTorch's defaults let the reference's do so (on CUDA;
``guards.conv_tf32``), and nothing else may: an allowance is never a level granted to the whole
output. Where it applies, the reference calibrates what its own convolutions at TF32 give,
and a candidate's error beyond the task's level must be explained by them: its output must land
on the reference run with some or all of those convolutions at TF32, up to fp32 noise
(``checks.allowance``; ``Isolated``). A TF32 matmul beside the allowed convolutions leaves an
error of the same size as theirs, but not theirs, and is a ``reduced_precision``. Where that
cannot be checked (too many allowed calls to search, timed outputs, which no calibration ran
on), the error may be at most ``ALLOWED_MARGIN`` times what the allowed operations at TF32 show
(``PrecisionLevels.allowed``): the size alone, which cannot tell a TF32 matmul from a TF32
convolution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from cudal1.eval.checks.allowance import Isolated
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
# Where an allowance is judged by size alone: at most this multiple of the allowed twin's ratio.
# That twin truncates as well as rounds (the larger of the two), and on an H100 cuDNN's TF32
# convolutions came within 3% of the rounding twin's error, so twice it leaves room for the
# algorithms' different summation orders.
ALLOWED_MARGIN = 2.0


@dataclass(frozen=True)
class PrecisionLevels:
    """What reduced precision looks like on this task and input: the precision ratio
    (``compare.precision_ratio``) of the reference itself run in float16 and in bfloat16, in the
    reference worker on the same inputs, and with only its allowed operations at TF32
    (``allowed``: where an allowance applies and such an operation ran); None where not
    measured. Measured, because error growth depends on the task: a TF32 matmul of 2048 terms
    shows about 17x the fp32 reference's error, not the 8192x that the unit roundoffs alone
    would say (H100, issue 10)."""

    float16: float | None = None
    bfloat16: float | None = None
    allowed: float | None = None

    @classmethod
    def from_reply(cls, reply: dict[str, Any] | None) -> PrecisionLevels:
        reply = reply or {}
        return cls(
            _finite(reply.get("float16")), _finite(reply.get("bfloat16")), _finite(reply.get("allowed"))
        )


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


def allowed_limit(dtype: str, policy: str, levels: PrecisionLevels | None) -> float:
    """The largest precision ratio the policy accepts: "task" the task's own level (or, where an
    allowed operation ran and no projection isolates it, ``ALLOWED_MARGIN`` times what it shows
    at TF32); "allow_tf32" also 10-bit fractions; "allow_half" also bfloat16."""
    limits = dict(precision_limits(dtype, levels))
    if policy == "allow_half":
        return limits.get(BF16, limits[dtype])
    if policy == "allow_tf32":
        return limits.get(TEN_BIT, limits[dtype])
    if levels is not None and levels.allowed is not None:
        return max(limits[dtype], ALLOWED_MARGIN * levels.allowed)
    return limits[dtype]


def tf32_allowance(policy: str, conv_tf32: Literal["cuda", "any_device"], device_type: str) -> str | None:
    """The operations (an ``allowance.OPERATIONS`` key) that may run at TF32 in an fp32 task
    beyond the policy's level: convolutions under "task", where PyTorch's defaults let the
    reference's run at TF32 (``torch.backends.cudnn.allow_tf32`` is True; matmuls' is False), or
    on any device where ``conv_tf32`` says so. The other policies grant a level to every operation."""
    if policy != "task" or (conv_tf32 == "cuda" and device_type != "cuda"):
        return None
    return "convolution"


@dataclass(frozen=True)
class Judged:
    """One set's verdict: the ratio judged and its limit; ``isolated``: the part of the error
    an allowance did not explain, judged against the allowance's own limit."""

    ratio: float
    limit: float
    isolated: bool = False


def judge(
    ratio: float, dtype: str, policy: str, levels: PrecisionLevels | None, isolated: Isolated | None
) -> Judged:
    """A candidate within the task's level needs no allowance; beyond it, under "task" with an
    isolated allowance, what the allowance does not explain is what counts."""
    if policy == "task" and isolated is not None:
        task = dict(precision_limits(dtype, levels))[dtype]
        if ratio > task:
            return Judged(isolated.ratio, isolated.limit, True)
        return Judged(ratio, task)
    return Judged(ratio, allowed_limit(dtype, policy, levels))


def precision_finding(
    ratio: float | None,
    dtype: str,
    policy: str,
    levels: PrecisionLevels | None = None,
    isolated: Isolated | None = None,
) -> Finding | None:
    """``reduced_precision`` (REJECT) when the errors against float64 exceed what the policy's
    lowest accepted level shows on this task, whatever route lowered it (TF32 flags, autocast,
    half-precision kernels), or, under an allowance for some operations, when the part of them
    those operations do not explain exceeds its limit. The default policy is "task": a speedup
    bought by computing an fp32 task at lower precision is a different task (reward-hacks.md,
    precision-downgrade), and the prompt says so."""
    level = effective_precision(ratio, dtype, levels)
    if level is None or ratio is None:
        return None
    verdict = judge(ratio, dtype, policy, levels, isolated)
    if verdict.ratio <= verdict.limit:
        return None
    evidence = {
        "effective_precision": level[0],
        "precision_ratio": ratio,
        "limit": verdict.limit,
        "dtype": dtype,
        "policy": policy,
        "levels": {"float16": levels.float16, "bfloat16": levels.bfloat16, "allowed": levels.allowed}
        if levels
        else None,
    }
    if verdict.isolated:
        message = (
            f"errors against float64 that the allowed operations (convolutions at TF32) do not explain: "
            f"what is left of them is {verdict.ratio:.3g}x the fp32 reference's own error, above the "
            f"{verdict.limit:.3g}x accepted; reduced precision elsewhere (a TF32 matmul, say) in a {dtype} task"
        )
        return _finding(
            "reduced_precision", Severity.REJECT, message, {**evidence, "unexplained_ratio": verdict.ratio}
        )
    message = (
        f"errors against float64 look like {level[0]} arithmetic in a {dtype} task "
        f"({ratio:.3g}x what {dtype} explains, above the {verdict.limit:.3g}x policy {policy!r} accepts)"
    )
    return _finding("reduced_precision", Severity.REJECT, message, evidence)


class PrecisionTracker:
    """The checked set whose precision ratio is worst against its own limit, and the level and
    finding it implies."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.ratio: float | None = None
        self.dtype = ""
        self.levels: PrecisionLevels | None = None
        self.isolated: Isolated | None = None
        self._worst = -math.inf

    def add(
        self, cmp: Comparison, levels: PrecisionLevels | None = None, isolated: Isolated | None = None
    ) -> None:
        if cmp.precision_ratio is None or effective_precision(cmp.precision_ratio, cmp.dtype) is None:
            return
        verdict = judge(cmp.precision_ratio, cmp.dtype, self.policy, levels, isolated)
        if verdict.ratio / verdict.limit > self._worst:
            self._worst = verdict.ratio / verdict.limit
            self.ratio, self.dtype, self.levels, self.isolated = (
                cmp.precision_ratio,
                cmp.dtype,
                levels,
                isolated,
            )

    def record(self) -> tuple[str, float | None]:
        level = effective_precision(self.ratio, self.dtype, self.levels)
        return (level[0] if level else "", self.ratio)

    def findings(self) -> list[Finding]:
        found = precision_finding(self.ratio, self.dtype, self.policy, self.levels, self.isolated)
        return [found] if found else []
