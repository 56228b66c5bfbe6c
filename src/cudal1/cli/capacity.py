"""``cudal1 capacity``: how to split one node's GPUs among GRPO's vLLM generation, training and
evaluation, from throughputs the user measured (the arithmetic and its rules: ``train.capacity``;
a worked example: docs/scaling.md).

Exit codes (``cli.common``): 0 a split was printed; 2 bad input (a number out of range, both or
neither of --train-tokens-per-s and --train-step-s, or no split that meets the rules).
"""

from __future__ import annotations

from typing import Annotated

import typer

from cudal1.cli.common import FORMAT_HELP, OutputFormat, bad_input, print_result
from cudal1.report.capacity import capacity_data, capacity_markdown, render_capacity
from cudal1.train.capacity import CapacityError, CapacityInputs, plan_capacity, tokens_per_s_from_step

_DEFAULTS = CapacityInputs(evals_per_gpu_hour=1, gen_tokens_per_s=1, train_tokens_per_s=1)


def capacity_command(
    evals_per_gpu_hour: Annotated[
        float,
        typer.Option(
            "--evals-per-gpu-hour",
            help="evaluations per GPU-hour, as `cudal1 runs show RUN` prints it for a run of kernels like"
            " your policy's",
        ),
    ],
    gen_tokens_per_s: Annotated[
        float,
        typer.Option(
            "--gen-tokens-per-s",
            help="completion tokens per second one GPU generates with vLLM, at its batch",
        ),
    ],
    train_tokens_per_s: Annotated[
        float | None,
        typer.Option(
            "--train-tokens-per-s",
            help="prompt + completion tokens one GPU trains on per second (or --train-step-s)",
        ),
    ] = None,
    train_step_s: Annotated[
        float | None,
        typer.Option(
            "--train-step-s", help="seconds one optimizer step takes on one GPU over --step-completions"
        ),
    ] = None,
    step_completions: Annotated[
        int,
        typer.Option(help="completions one GPU trains on in that step (batch_size x grad_accumulation)"),
    ] = 4,
    gpus: Annotated[int, typer.Option(help="GPUs on the node")] = _DEFAULTS.gpus,
    params_b: Annotated[float, typer.Option(help="model size, billions of parameters")] = _DEFAULTS.params_b,
    gpu_memory_gb: Annotated[float, typer.Option(help="memory of one GPU, GB")] = _DEFAULTS.gpu_memory_gb,
    lora: Annotated[
        bool, typer.Option("--lora/--full", help="LoRA adapters, or a full fine-tune with ZeRO-3")
    ] = _DEFAULTS.lora,
    reference: Annotated[
        bool, typer.Option(help="a reference model is kept (GRPO's beta > 0; cudal1's default beta is 0)")
    ] = _DEFAULTS.reference,
    prompts: Annotated[int, typer.Option(help="prompts per GRPO step")] = _DEFAULTS.prompts,
    num_generations: Annotated[
        int, typer.Option(help="completions per prompt (num_generations)")
    ] = _DEFAULTS.num_generations,
    prompt_tokens: Annotated[int, typer.Option(help="mean prompt tokens")] = _DEFAULTS.prompt_tokens,
    completion_tokens: Annotated[
        int, typer.Option(help="mean completion tokens (sampling.max_tokens caps them)")
    ] = _DEFAULTS.completion_tokens,
    state_share: Annotated[
        float, typer.Option(help="share of a GPU's memory the model states may take (the rest: activations)")
    ] = _DEFAULTS.state_share,
    fmt: Annotated[OutputFormat, typer.Option("--format", help=FORMAT_HELP)] = "table",
) -> None:
    """Split one node's GPUs among GRPO's vLLM generation, training and evaluation for the
    shortest step, from your measured throughputs: each side's GPUs (and their indices), its
    seconds per step and busy share, the bottleneck, and the memory rule that bounds training.
    A step is generation + training + evaluation, one after another (TRL's GRPO is synchronous);
    evaluation never shares a GPU. Formulas and rules: docs/scaling.md."""
    try:
        if train_tokens_per_s is not None and train_step_s is None:
            rate = train_tokens_per_s
        elif train_step_s is not None and train_tokens_per_s is None:
            rate = tokens_per_s_from_step(train_step_s, step_completions, prompt_tokens, completion_tokens)
        else:
            raise CapacityError("give one of --train-tokens-per-s and --train-step-s")
        plan = plan_capacity(
            CapacityInputs(
                evals_per_gpu_hour=evals_per_gpu_hour,
                gen_tokens_per_s=gen_tokens_per_s,
                train_tokens_per_s=rate,
                gpus=gpus,
                params_b=params_b,
                gpu_memory_gb=gpu_memory_gb,
                lora=lora,
                reference=reference,
                prompts=prompts,
                num_generations=num_generations,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                state_share=state_share,
            )
        )
    except CapacityError as exc:
        raise bad_input(str(exc)) from None
    print_result(
        fmt,
        lambda width: render_capacity(plan, width),
        lambda: capacity_markdown(plan),
        lambda: capacity_data(plan),
    )
