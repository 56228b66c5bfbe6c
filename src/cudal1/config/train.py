"""Configs of training: how an evaluation result becomes the RL reward."""

from __future__ import annotations

import math

from pydantic import Field, model_validator

from cudal1.config.base import StrictConfig


class RewardConfig(StrictConfig):
    """How an evaluation result becomes a scalar reward; every field is used below."""

    incorrect: float = Field(
        -1.0, description="Reward of a candidate that fails a stage, is incorrect or was not timed."
    )
    reject: float = Field(
        -1.0, description="Reward of a candidate with any REJECT finding (a detected hack)."
    )
    min: float = Field(-1.0, description="Lower clip of the log-speedup reward; -1.0 is a 0.37x slowdown.")
    max: float = Field(
        math.log(10.0),
        description="Upper clip of the log-speedup reward; log(10): speedups over 10x go to audit "
        "(reward-hacks.md, 'Cheap layer on top of all five').",
    )
    use_ci_low: bool = Field(
        True, description="Reward the lower bound of the speedup's confidence interval instead of its median."
    )
    quantum: float = Field(
        0.01,
        ge=0.0,
        description="Floor the speedup to this step before taking the log (0 disables; timing note 2.7).",
    )
    snap_rel: float = Field(
        0.02, ge=0.0, description="Speedups within this relative distance of 1.0 count as exactly 1.0."
    )
    snap_ci_factor: float = Field(
        2.0, ge=0.0, description="Also snap within this many CI half-widths of 1.0 (timing note 2.7)."
    )
    cap_at_sol: bool = Field(
        True, description="When a speed-of-light time is given, cap the reward at log(t_ref / t_SOL)."
    )
    warning_penalty: float = Field(
        0.05, ge=0.0, description="Subtracted per WARNING finding (audit triggers cost a little)."
    )

    @model_validator(mode="after")
    def _ordered(self) -> RewardConfig:
        if not self.min <= 0.0 <= self.max:
            raise ValueError(f"need min <= 0 <= max, got min={self.min}, max={self.max}")
        return self
