"""The RL reward of one evaluated candidate, and the cap on a held one.

``reward_from_result`` turns an ``EvalResult`` into one number, in this order:

1. a REJECT finding earns ``cfg.reject``; an incorrect, failed or untimed candidate ``cfg.incorrect``;
2. the speedup that counts is over the bar (``bar``: 1.0 for eager, else the speedup over eager
   of the task's fastest torch.compile baseline, ``cfg.bar`` and ``train.reward_bar``), from the
   lower bound of the bootstrap interval, floored to ``cfg.quantum``
   (timing-and-anchors.md section 2.7: "Reward = floor(lower CI bound, 2 dp)"), so noise never
   pays;
3. a speedup within ``max(2 %, 2 x CI half-width)`` of the bar is the bar (section 2.7's snap):
   moving noise around a tie must not be learned as progress;
4. the reward is ``log(speedup / bar)`` (a 2x gain and a 2x loss weigh the same), capped at
   ``log(t_ref / SOL / bar)`` when a speed-of-light time is given (section 6, proposal 6: nothing
   beats the physical floor, so more is a hack or a measurement error), and clipped to
   ``[cfg.min, cfg.max]``;
5. each WARNING finding subtracts ``cfg.warning_penalty`` (never below ``cfg.min``).

Disagreement between the worker's clock and the trusted one is not handled here: the evaluator
records it as a finding, and findings are what this function reads.

The paper's reward smoothing ("so that a single extreme reward cannot dominate an update") is
the clip of step 4 plus TRL's group normalisation: ``GRPOTrainer`` turns rewards into advantages
``(r - group mean) / (group std + 1e-4)`` (``GRPOStageConfig.scale_rewards``; TRL 1.16
``_generate_and_score_completions``), and with a sample std no advantage exceeds sqrt(G) for G
completions per prompt. Normalising here as well would do it twice, so this module does not.
"""

from __future__ import annotations

import math
import statistics

from cudal1.config import RewardConfig
from cudal1.schema import EvalResult, Severity


def _counted_speedup(result: EvalResult, cfg: RewardConfig, bar: float) -> float:
    """The conservative speedup over the bar: CI lower bound (or median), floored to ``cfg.quantum``."""
    assert result.timing is not None
    s = (result.timing.ci_low if cfg.use_ci_low else result.timing.speedup) / bar
    if cfg.quantum > 0 and math.isfinite(s):
        s = math.floor(s / cfg.quantum + 1e-9) * cfg.quantum  # 1e-9: 1.10 stays 1.10
    return s


def _snaps_to_bar(result: EvalResult, cfg: RewardConfig, bar: float) -> bool:
    timing = result.timing
    assert timing is not None
    half_width = timing.ci_half_width if math.isfinite(timing.ci_half_width) else 0.0
    return abs(timing.speedup / bar - 1.0) < max(cfg.snap_rel, cfg.snap_ci_factor * half_width / bar)


def reward_from_result(
    result: EvalResult, cfg: RewardConfig, *, sol_ms: float | None = None, bar: float = 1.0
) -> float:
    """Scalar reward of one evaluated candidate (see the module docstring for the rules).

    ``sol_ms`` is the task's speed-of-light time on this device (``eval.timing.speed_of_light``); with
    ``cfg.cap_at_sol`` the reward cannot exceed ``log(reference time / sol_ms / bar)``. ``bar``: the
    speedup over eager the candidate is measured against (positive; 1.0 is eager).
    """
    if not (math.isfinite(bar) and bar > 0):
        raise ValueError(f"bar must be a positive speedup, got {bar}")
    if result.rejected:
        return cfg.reject
    if not result.correct or result.timing is None:
        return cfg.incorrect
    if _snaps_to_bar(result, cfg, bar):
        reward = 0.0
    else:
        s = _counted_speedup(result, cfg, bar)
        reward = math.log(s) if s > 0 and math.isfinite(s) else cfg.min
    if cfg.cap_at_sol and sol_ms is not None and sol_ms > 0:
        ref_ms = result.timing.ref_median_ms
        if math.isfinite(ref_ms) and ref_ms > 0:
            reward = min(reward, max(0.0, math.log(ref_ms / sol_ms / bar)))
    reward = min(max(reward, cfg.min), cfg.max)
    warnings = sum(f.severity is Severity.WARNING for f in result.findings)
    return max(cfg.min, reward - cfg.warning_penalty * warnings)


def cap_held(rewards: list[float | None], held: list[bool], group_size: int) -> list[float | None]:
    """Each held reward capped to the median of the other rewards of its GRPO group (consecutive
    ``group_size`` completions of one prompt), or to 0.0 (the bar's own reward) when nothing else
    in the group has one. A held reward never rises, and a hack repeated across a group cannot
    raise its own cap; TRL then ranks it near the middle of its group until a review decides."""
    out = list(rewards)
    for start in range(0, len(rewards), group_size):
        group = range(start, min(start + group_size, len(rewards)))
        others = [r for i in group if not held[i] and (r := rewards[i]) is not None]
        cap = statistics.median(others) if others else 0.0
        for i in group:
            value = out[i]
            if held[i] and value is not None:
                out[i] = min(value, cap)
    return out
