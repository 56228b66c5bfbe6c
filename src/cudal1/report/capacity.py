"""A capacity plan (``train.capacity``) as a terminal view, Markdown and data (``cudal1 capacity``)."""

from __future__ import annotations

from dataclasses import asdict

from rich.console import Group
from rich.text import Text

from cudal1.report.tables import Col, TableSpec, to_markdown, to_rich
from cudal1.train.capacity import GB, SIDES, CapacityPlan, Side, lora_sharded


def _range(first: int, count: int) -> str:
    return str(first) if count == 1 else f"{first}-{first + count - 1}"


# Training takes the first GPUs: ``accelerate launch`` with every GPU visible puts rank i on
# cuda:i, and the evaluator's --eval-devices name GPUs the training processes see; the vLLM
# server is started on the next ones with CUDA_VISIBLE_DEVICES (docs/scaling.md).
PLACEMENT: tuple[Side, ...] = ("training", "generation", "evaluation")


def gpu_ranges(plan: CapacityPlan) -> dict[Side, str]:
    """GPU indices per side: training first, then generation, then evaluation."""
    ranges: dict[Side, str] = {}
    first = 0
    for side in PLACEMENT:
        ranges[side] = _range(first, plan.gpus[side])
        first += plan.gpus[side]
    return ranges


def capacity_table(plan: CapacityPlan) -> TableSpec:
    i = plan.inputs
    rates = {
        "generation": f"{i.gen_tokens_per_s:,.0f} tok/s",
        "training": f"{i.train_tokens_per_s:,.0f} tok/s",
        "evaluation": f"{i.evals_per_gpu_hour:,.0f} evals/h",
    }
    names = {
        "generation": "generation (vLLM server)",
        "training": ("training (LoRA, ZeRO-3)" if lora_sharded(i) else "training (LoRA)")
        if i.lora
        else "training (ZeRO-3)",
        "evaluation": "evaluation (timing)",
    }
    ranges = gpu_ranges(plan)
    rows = tuple(
        (names[s], str(plan.gpus[s]), ranges[s], rates[s], f"{plan.seconds[s]:.1f}", f"{100 * plan.busy_share(s):.0f}%")
        for s in PLACEMENT
    ) + (("step", str(i.gpus), "", "", f"{plan.step_s:.1f}", ""),)  # fmt: skip
    columns = (
        Col("side", wrap=True),
        Col("GPUs", right=True),
        Col("indices", "idx", drop=1),
        Col("per GPU", right=True),
        Col("s per step", "s/step", right=True),
        Col("busy", right=True),
    )
    return TableSpec("GPU split for one GRPO step", columns, rows)


def capacity_lines(plan: CapacityPlan) -> tuple[list[str], list[str]]:
    """What the table does not say, each line under 80 columns: the inputs (above the table);
    the bottleneck, the memory rule that applied and the step's schedule (below it)."""
    i = plan.inputs
    side = plan.bottleneck
    above = [
        f"{i.gpus} GPUs of {i.gpu_memory_gb:g} GB; a {i.params_b:g}B model,"
        f" {'LoRA' if i.lora else 'full fine-tune'}, {'a' if i.reference else 'no'} reference model",
        f"a step: {i.completions} completions ({i.prompts} prompts x {i.num_generations})",
        f"tokens per completion: {i.prompt_tokens} prompt + {i.completion_tokens} completion",
    ]
    below = [
        f"bottleneck: {side}, {100 * plan.busy_share(side):.0f}% of a {plan.step_s:.1f} s step",
        f"per hour: {plan.steps_per_hour:.1f} steps, {plan.steps_per_hour * i.completions:.0f} evaluations",
        *_memory_lines(plan),
        f"vLLM: {plan.replica_gpus} GPU(s) per replica (bf16 weights: {2 * i.params / GB:.0f} GB)",
        "step = generation + training + evaluation, in turn (TRL's GRPO is synchronous)",
    ]
    return above, below


def _memory_lines(plan: CapacityPlan) -> list[str]:
    i = plan.inputs
    if lora_sharded(i):
        rule = f"memory: ZeRO-3 shards LoRA's bf16 weights over the {plan.gpus['training']} training GPUs:"
    elif i.lora:
        rule = "memory: LoRA keeps the bf16 weights (2 B/param) on every training GPU:"
    else:
        rule = (
            f"memory: ZeRO-3 shards {18 if i.reference else 16} B/param over the"
            f" {plan.gpus['training']} training GPUs:"
        )
    return [
        rule,
        f"  {plan.training_gb_per_gpu:.0f} GB each of at most {i.state_budget / GB:.0f} GB"
        f" ({100 * i.state_share:.0f}% of {i.gpu_memory_gb:g} GB), so at least"
        f" {plan.min_training_gpus} training GPU(s)",
    ]


def render_capacity(plan: CapacityPlan, width: int = 80) -> Group:
    above, below = capacity_lines(plan)
    return Group(
        *(Text(line) for line in above), to_rich(capacity_table(plan), width), *(Text(line) for line in below)
    )


def capacity_markdown(plan: CapacityPlan) -> str:
    above, below = capacity_lines(plan)
    items: list[str] = []
    for line in below:  # an indented line goes on with the item above it
        if line.startswith("  ") and items:
            items[-1] += " " + line.strip()
        else:
            items.append(f"- {line}")
    return "\n".join([*above, "", to_markdown(capacity_table(plan)), *items]) + "\n"


def capacity_data(plan: CapacityPlan) -> dict[str, object]:
    """The plan as JSON data: inputs, GPUs, indices and seconds per side, step, bottleneck."""
    ranges = gpu_ranges(plan)
    return {
        "inputs": asdict(plan.inputs),
        "sides": {
            s: {
                "gpus": plan.gpus[s],
                "indices": ranges[s],
                "seconds": plan.seconds[s],
                "busy": plan.busy_share(s),
            }
            for s in SIDES
        },
        "step_s": plan.step_s,
        "bottleneck": plan.bottleneck,
        "steps_per_hour": plan.steps_per_hour,
        "replica_gpus": plan.replica_gpus,
        "min_training_gpus": plan.min_training_gpus,
        "training_gb_per_gpu": plan.training_gb_per_gpu,
    }
