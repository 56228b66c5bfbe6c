"""Configs of the search: the proposing model, budgets, exemplar selection, the final
re-evaluation, and ``OptimizeConfig``, which holds them all for one ``cudal1 optimize`` run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from cudal1.config.base import StrictConfig
from cudal1.config.eval import EvalConfig, PoolConfig

Size = Literal["auto", "gpu", "cpu"]
Suite = Literal["quick", "full"]
# The built-in transforms (search/transforms.py), and the pairs that apply two of them: each wraps
# a program (the task's reference in round 0, any verified candidate afterwards) in a ModelNew.
Transform = Literal[
    "torch-compile-default",
    "torch-compile-reduce-overhead",
    "torch-compile-max-autotune",
    "torch-compile-max-autotune-no-cudagraphs",
    "cuda-graph",
    "cudnn-benchmark",
    "channels-last",
    "torch-compile-default+channels-last",
    "cuda-graph+cudnn-benchmark",
    "channels-last+cudnn-benchmark",
]

# What `cudal1 optimize` does with no options (suite "quick"): three tasks, a few baselines and
# short timing budgets, so that the README's first command fits a coffee break (times measured in
# README "Quick start"). Baselines depend on the device the suite is sized for: on a 2-core CPU a
# torch.compile variant holds the timing device for 20-45 s while it compiles (measured on
# 4_transformer_block: 21 s default, 33 s reduce-overhead, 43 s max-autotune-no-cudagraphs), so the
# CPU quick suite measures only the variants that cost seconds, of which a CPU has one
# (channels-last, on convolutions: CUDA graphs and cuDNN flags are the reference itself there, so
# a CPU run never proposes them); a GPU's adds torch.compile (default).
# These are defaults only: a config file or --set wins, and config.yaml keeps what the run used.
# The quick suite's tasks are ``tasks.QUICK_TASKS``; suite "full" is every bundled task and every
# baseline at the budgets of ``TimingConfig`` and ``FinalEvalConfig``.
QUICK_BASELINES: dict[str, list[str]] = {
    "gpu": ["torch-compile-default", "cuda-graph", "cudnn-benchmark", "channels-last"],
    "cpu": ["channels-last"],
}
QUICK_BUDGETS: dict[str, Any] = {
    "eval": {"timing": {"budget_s": 1.0}},
    "final": {"timing": {"budget_s": 2.0}},
}


# The ``seed_files`` of every stage that starts from round 0 (optimize, collect, GRPO).
SEED_FILES_HELP = (
    "kernels to start from: CUDA-L1 release files, cudal1 export files or directories of <task name>.py;"
    " a record seeds the task whose source is its ref_code, a directory's file the task of its name;"
    " each kernel is a round-0 candidate labelled seed:..., evaluated like any other"
)


def _under(defaults: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``defaults`` filled in where it says nothing (nested sections merged)."""
    out = dict(defaults)
    for key, value in data.items():
        base = out.get(key)
        out[key] = _under(base, value) if isinstance(base, dict) and isinstance(value, dict) else value
    return out


class ExemplarConfig(StrictConfig):
    """How a contrastive prompt's earlier variants are chosen."""

    k: int = Field(4, ge=1, description="variants shown per prompt (the failed one included)")
    temperature: float = Field(
        1.0, gt=0, description="softmax temperature on log-speedup within a bucket; small favours the fastest"
    )
    bucketing: Literal["edges", "quantiles"] = Field(
        "edges", description="bucket by fixed speedup edges, or by quantiles of the task's speedups"
    )
    bucket_edges: tuple[float, ...] = Field(
        (1.0, 1.25, 2.0), description="ascending speedup edges (bucketing='edges'); n edges make n+1 buckets"
    )
    quantile_buckets: int = Field(
        4, ge=1, description="number of equal-count buckets (bucketing='quantiles')"
    )
    diversity_threshold: float = Field(
        0.9,
        gt=0,
        le=1,
        description="skip a variant whose token Jaccard similarity to a chosen one exceeds this",
    )
    include_failed: bool = Field(
        False, description="show one failed variant with its error (the paper shows only scored variants)"
    )
    show_speedups: bool = Field(
        True,
        description="show each variant's measured speedup (and speed of light); False hides them, the "
        "learning check's contrastive ablation: the same variants, no numbers to contrast",
    )


class LLMConfig(StrictConfig):
    """Which model proposes variants, and how it samples."""

    spec: str | None = Field(
        None, description="openai:MODEL | hf:PATH | scripted:FILE; None: the built-in baseline proposer only"
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="backend options (base_url, api_key_env, max_concurrency, ...), validated by the backend",
    )
    temperature: float = Field(1.0, ge=0, description="sampling temperature")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling mass")
    max_tokens: int = Field(8192, ge=1, description="completion tokens per sample (analysis and code)")
    preflight: bool = Field(
        True,
        description="one 1-token call before any work, so that a dead endpoint fails in seconds"
        " (a scripted backend spends one reply on it)",
    )


class BudgetConfig(StrictConfig):
    """Limits that stop the search cleanly; None: no limit. Work under way still finishes.

    Token and cost limits stop LLM calls only (samples already paid for are still evaluated);
    wall-clock and device-time limits stop evaluations as well.
    """

    max_tokens_total: int | None = Field(
        None, ge=1, description="prompt + completion tokens of the whole run (every session)"
    )
    max_cost_usd: float | None = Field(
        None, gt=0, description="LLM cost of the whole run, from the backend's price table"
    )
    max_gpu_seconds: float | None = Field(
        None, gt=0, description="sum of load + correctness + timing stage seconds over the run's results"
    )
    max_wall_s: float | None = Field(None, gt=0, description="wall-clock seconds of this session's search")


class FinalTimingConfig(StrictConfig):
    """What the final re-evaluation changes in the search's ``eval.timing``."""

    budget_s: float = Field(10.0, gt=0, description="wall-clock budget for the final timing stage")


class FinalEvalConfig(StrictConfig):
    """The strict re-evaluation of each task's best candidate, whose numbers the run reports.

    The paper gives each task a long, randomised final measurement; this is the same idea with a
    budget a run can afford: a longer timing stage and more fresh input sets than the search used.
    Its values override the search's ``eval`` config under the same names.
    """

    enabled: bool = Field(True, description="re-evaluate each task's best candidate at the end")
    correctness_trials: int = Field(10, ge=1, description="fresh input sets checked in the final evaluation")
    attempts: int = Field(
        3,
        ge=1,
        description="candidates re-evaluated in turn per task and session: a best that fails its final "
        "(incorrect or rejected in a fresh build) is not kept, and the next fastest is tried",
    )
    timing: FinalTimingConfig = Field(default_factory=FinalTimingConfig, description="final timing stage")

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        return _renamed_final_keys(data)

    def apply(self, config: EvalConfig) -> EvalConfig:
        """``config`` (the search's) with this section's values in place of its own."""
        data = config.model_dump()
        data["correctness_trials"] = self.correctness_trials
        data["timing"]["budget_s"] = self.timing.budget_s
        return EvalConfig.model_validate(data)


def _renamed_final_keys(data: Any) -> Any:
    """``final`` with its old key ``timing_budget_s`` as ``timing.budget_s``, the eval config's
    name for the same budget: a run's saved config.yaml from before the rename still resumes."""
    if not isinstance(data, dict) or "timing_budget_s" not in data:
        return data
    data = dict(data)
    budget = data.pop("timing_budget_s")
    timing = data.get("timing", {})
    if not isinstance(timing, dict):
        raise ValueError("final.timing must be a section")
    if "budget_s" in timing:
        raise ValueError("final: timing_budget_s is the old name of timing.budget_s; give only one")
    data["timing"] = {**timing, "budget_s": budget}
    return data


class ComposeConfig(StrictConfig):
    """The composition step that ends every round: built-in transforms over the round's best kernels.

    A published kernel or an LLM's is often beaten by torch.compile of the reference; the same
    transforms over the kernel itself can beat both. Each round's top ``top_k`` verified kernels
    (seeds, LLM kernels, repaired twins; never baselines or compositions) get every transform that
    applies to the task and device, and a kernel rejected only for process-wide state it left
    changed gets a repaired twin. Each composition is one more evaluation.
    """

    enabled: bool = Field(True, description="compose transforms over each round's best kernels")
    top_k: int = Field(2, ge=1, description="verified kernels of a round that the transforms are applied to")
    transforms: tuple[Transform, ...] = Field(
        (
            "torch-compile-default",
            "torch-compile-reduce-overhead",
            "cuda-graph",
            "cuda-graph+cudnn-benchmark",
            "channels-last",
            "torch-compile-default+channels-last",
        ),
        description="transforms applied to each of them; CUDA-only ones are skipped on a CPU device and "
        "channels-last ones on tasks without 2-D convolutions",
    )


class OptimizeConfig(StrictConfig):
    """Everything ``cudal1 optimize`` does; saved as the run directory's ``config.yaml``."""

    rounds: int = Field(2, ge=0, description="LLM rounds per task after the baseline round 0")
    samples: int = Field(4, ge=1, description="completions per task per round (one prompt, n samples)")
    exemplars: ExemplarConfig = Field(default_factory=ExemplarConfig, description="contrastive exemplars")
    llm: LLMConfig = Field(default_factory=LLMConfig, description="the proposing model")
    baseline_labels: tuple[str, ...] | None = Field(
        None, description="built-in baselines seeded in round 0 (None: all that apply to the task)"
    )
    seed: int = Field(0, description="seed of exemplar selection (same seed, same prompts)")
    budget: BudgetConfig = Field(default_factory=BudgetConfig, description="when to stop early")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="evaluation during the search")
    pool: PoolConfig = Field(default_factory=PoolConfig, description="evaluation workers")
    final: FinalEvalConfig = Field(default_factory=FinalEvalConfig, description="final re-evaluation")
    seed_files: tuple[Path, ...] = Field((), description=SEED_FILES_HELP)
    compose: ComposeConfig = Field(
        default_factory=ComposeConfig, description="transforms composed over each round's best kernels"
    )
    a_vs_a: bool = Field(
        False,
        description="state the A-vs-A check in the summary: round 0's reference anchor (the task's own "
        "program as ModelNew, which every run evaluates beside its other work) per task, how many of "
        "their intervals contain 1.0, their half-widths against the goal, and the clock that decided",
    )
    size: Size = Field("auto", description="bundled-suite sizes when no task path is given (auto: by device)")
    suite: Suite = Field(
        "quick",
        description="quick: three bundled tasks (one per level), a few baselines, 1 s timing "
        "(a coffee break; size 'auto' is best settled before, as `cudal1 optimize` does); "
        "full: every bundled task and baseline at the full budgets",
    )

    @model_validator(mode="before")
    @classmethod
    def _suite_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and "final" in data:  # before the quick suite's final.timing
            data = {**data, "final": _renamed_final_keys(data["final"])}
        if isinstance(data, dict) and data.get("suite", "quick") == "quick":
            sized = "cpu" if data.get("size") == "cpu" else "gpu"  # auto: settled by the caller first
            return _under({**QUICK_BUDGETS, "baseline_labels": QUICK_BASELINES[sized]}, data)
        return data
