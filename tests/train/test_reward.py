"""The reward on constructed results: gate, conservative log-speedup, snap, caps, penalties."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from cudal1.schema import Correctness, EvalResult, Finding, Severity, Stage, StageRecord, Timing
from cudal1.train.reward import RewardConfig, reward_from_result

CFG = RewardConfig()


def timing(speedup: float, ci_low: float, ci_high: float, ref_ms: float = 2.0) -> Timing:
    return Timing(
        device="cpu",
        calls_per_sample=1,
        ref_ms=(ref_ms,) * 3,
        cand_ms=(ref_ms / speedup,) * 3,
        ref_wall_ms=(ref_ms,) * 3,
        cand_wall_ms=(ref_ms / speedup,) * 3,
        speedup=speedup,
        ci_low=ci_low,
        ci_high=ci_high,
        wall_speedup=speedup,
        stop_reason="precision",
    )


def result(
    speedup: float = 2.0,
    ci: tuple[float, float] | None = None,
    *,
    correct: bool = True,
    findings: tuple[Finding, ...] = (),
    failed: Stage | None = None,
    timed: bool = True,
    ref_ms: float = 2.0,
) -> EvalResult:
    low, high = ci if ci is not None else (speedup, speedup)
    stages = (StageRecord(failed, ok=False, seconds=0.1, message="boom"),) if failed else ()
    return EvalResult(
        task="t",
        candidate_hash="h",
        device="cpu",
        stages=stages,
        correctness=Correctness(3, 3 if correct else 1, 0.0, 0.0, 1.0, "float64"),
        timing=timing(speedup, low, high, ref_ms) if timed else None,
        findings=findings,
    )


def finding(severity: Severity, code: str = "x") -> Finding:
    return Finding(code, severity, Stage.STATIC, "m")


def test_log_of_lower_ci_bound() -> None:
    assert reward_from_result(result(2.0, (1.5, 2.5)), CFG) == pytest.approx(math.log(1.5))
    median = RewardConfig(use_ci_low=False)
    assert reward_from_result(result(2.0, (1.5, 2.5)), median) == pytest.approx(math.log(2.0))


def test_lower_bound_floored_to_two_decimals() -> None:
    assert reward_from_result(result(1.5, (1.239, 1.7)), CFG) == pytest.approx(math.log(1.23))
    assert reward_from_result(result(1.5, (1.1, 1.7)), CFG) == pytest.approx(math.log(1.1))


def test_slowdown_is_negative_and_clipped() -> None:
    assert reward_from_result(result(0.5), CFG) == pytest.approx(math.log(0.5))
    assert reward_from_result(result(0.1), CFG) == CFG.min


def test_snap_to_zero_near_one() -> None:
    assert reward_from_result(result(1.015), CFG) == 0.0  # within 2 %
    assert reward_from_result(result(0.985), CFG) == 0.0
    assert reward_from_result(result(1.06, (1.0, 1.12)), CFG) == 0.0  # within 2 x CI half-width
    assert reward_from_result(result(1.06, (1.05, 1.07)), CFG) == pytest.approx(math.log(1.05))


def test_clipped_at_max_and_capped_at_speed_of_light() -> None:
    assert reward_from_result(result(50.0), CFG) == pytest.approx(math.log(10.0))
    # reference 2 ms, SOL 0.5 ms: nothing can honestly beat 4x
    assert reward_from_result(result(8.0, ref_ms=2.0), CFG, sol_ms=0.5) == pytest.approx(math.log(4.0))
    assert reward_from_result(result(3.0, ref_ms=2.0), CFG, sol_ms=0.5) == pytest.approx(math.log(3.0))
    no_cap = RewardConfig(cap_at_sol=False)
    assert reward_from_result(result(8.0, ref_ms=2.0), no_cap, sol_ms=0.5) == pytest.approx(math.log(8.0))


def test_incorrect_failed_and_untimed() -> None:
    assert reward_from_result(result(correct=False), CFG) == CFG.incorrect
    assert reward_from_result(result(failed=Stage.COMPILE), CFG) == CFG.incorrect
    assert reward_from_result(result(timed=False), CFG) == CFG.incorrect
    assert reward_from_result(result(correct=False), RewardConfig(incorrect=0.0)) == 0.0


def test_reject_beats_everything() -> None:
    hacked = result(20.0, findings=(finding(Severity.REJECT, "timing_patch"),))
    assert reward_from_result(hacked, RewardConfig(reject=-2.0, min=-1.0)) == -2.0


def test_warning_penalty_per_finding() -> None:
    warned = result(
        2.0, findings=(finding(Severity.WARNING), finding(Severity.WARNING), finding(Severity.INFO))
    )
    assert reward_from_result(warned, CFG) == pytest.approx(math.log(2.0) - 2 * CFG.warning_penalty)
    tie = result(1.0, findings=(finding(Severity.WARNING),))
    assert reward_from_result(tie, CFG) == pytest.approx(-CFG.warning_penalty)
    many = result(0.4, findings=tuple(finding(Severity.WARNING) for _ in range(50)))
    assert reward_from_result(many, CFG) == CFG.min


def test_config_is_strict_and_documented() -> None:
    with pytest.raises(ValidationError):
        RewardConfig(warnig_penalty=0.1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        RewardConfig(min=0.5)
    for name, info in RewardConfig.model_fields.items():
        assert info.description, name


def test_an_evaluator_error_has_no_reward_and_leaves_the_step_metrics_alone():
    """A completion whose evaluation the trusted side could not finish gets None (TRL skips it);
    the batch's statistics are those of the others, groups kept in place."""
    from cudal1.train.pool_reward import step_metrics

    metrics = step_metrics([1.0, None, 0.0, 2.0], [None] * 4, [None] * 4, group_size=2)
    assert metrics["reward_mean"] == 1.0
    assert metrics["group_reward_spread"] == 1.0  # groups [1.0] and [0.0, 2.0]
