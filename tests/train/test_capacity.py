"""The capacity calculator's arithmetic (``train.capacity``), checked against numbers worked by
hand: the split with the shortest synchronous step, the memory rules that bound training, a
vLLM replica's GPUs, TRL's divisibility rule, and the splits no node can hold."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from cudal1.train.capacity import (
    CapacityError,
    CapacityInputs,
    min_training_gpus,
    plan_capacity,
    replica_gpus,
    tokens_per_s_from_step,
    training_bytes_per_gpu,
)

# C = 8 x 4 = 32 completions of 1000 + 1000 tokens. On one GPU: generation 32 x 1000 / 1000 = 32 s,
# training 32 x 2000 / 1000 = 64 s, evaluation 3600 x 32 / 320 = 360 s.
HAND = CapacityInputs(
    evals_per_gpu_hour=320,
    gen_tokens_per_s=1000,
    train_tokens_per_s=1000,
    gpus=8,
    prompts=8,
    num_generations=4,
    prompt_tokens=1000,
    completion_tokens=1000,
)


def test_one_gpu_seconds_are_the_formulas() -> None:
    assert HAND.completions == 32
    assert HAND.one_gpu_seconds() == {"generation": 32.0, "training": 64.0, "evaluation": 360.0}


def test_the_shortest_synchronous_step_is_chosen() -> None:
    # Splits (G, T, V) with T dividing 32: (1,2,5) 32 + 32 + 72 = 136 s is the least; the
    # runners-up are (2,2,4) 16 + 32 + 90 = 138 s and (2,1,5) 16 + 64 + 72 = 152 s.
    plan = plan_capacity(HAND)
    assert plan.gpus == {"generation": 1, "training": 2, "evaluation": 5}
    assert plan.seconds == {"generation": 32.0, "training": 32.0, "evaluation": 72.0}
    assert plan.step_s == 136.0 and plan.bottleneck == "evaluation"
    assert plan.busy_share("evaluation") == pytest.approx(72 / 136)
    assert plan.steps_per_hour == pytest.approx(3600 / 136)


def test_a_tie_goes_to_more_evaluation_then_more_training_gpus() -> None:
    # Training at 2000 tok/s: 32 s on one GPU; (1,2,5) and (2,1,5) both take 32 + 16 + 64 = 112 s
    # with evaluation at 360 evaluations per GPU-hour (320 s on one GPU).
    tie = replace(HAND, train_tokens_per_s=2000, evals_per_gpu_hour=360)
    plan = plan_capacity(tie)
    assert plan.step_s == 112.0
    assert plan.gpus == {"generation": 1, "training": 2, "evaluation": 5}


def test_lora_keeps_bf16_weights_on_every_training_gpu() -> None:
    seven = CapacityInputs(evals_per_gpu_hour=1, gen_tokens_per_s=1, train_tokens_per_s=1)
    assert training_bytes_per_gpu(seven, 1) == training_bytes_per_gpu(seven, 4) == 14e9
    assert min_training_gpus(seven) == 1  # 14 GB under 60% of 80 GB: one GPU trains a 7B LoRA


def test_full_finetune_shards_16_bytes_per_parameter_over_the_training_gpus() -> None:
    full = CapacityInputs(evals_per_gpu_hour=1, gen_tokens_per_s=1, train_tokens_per_s=1, lora=False)
    assert training_bytes_per_gpu(full, 4) == 16 * 7e9 / 4
    assert min_training_gpus(full) == 3  # 112 GB / 48 GB = 2.33
    with_ref = replace(full, reference=True)
    assert training_bytes_per_gpu(with_ref, 1) == 18 * 7e9
    assert min_training_gpus(with_ref) == 3  # 126 GB / 48 GB = 2.63
    assert min_training_gpus(replace(full, params_b=70)) == 24  # 1120 GB / 48 GB = 23.3


def test_training_gpus_divide_the_completions_and_meet_the_memory_minimum() -> None:
    # Full 7B: at least 3 GPUs, and 32 completions allow 4 (not 3): (1,4,3) 32 + 16 + 120 = 168 s
    # beats (2,4,2) 16 + 16 + 180 = 212 s.
    plan = plan_capacity(replace(HAND, lora=False))
    assert plan.min_training_gpus == 3
    assert plan.gpus == {"generation": 1, "training": 4, "evaluation": 3}
    assert plan.step_s == 168.0
    assert plan.training_gb_per_gpu == 28.0


def test_a_vllm_replica_takes_the_gpus_its_weights_need() -> None:
    base = CapacityInputs(evals_per_gpu_hour=1, gen_tokens_per_s=1, train_tokens_per_s=1)
    assert replica_gpus(base) == 1
    assert replica_gpus(replace(base, params_b=32)) == 2  # 64 GB: two of 48 GB
    assert replica_gpus(replace(base, params_b=70)) == 4  # 140 GB: 70 per GPU on 2, 35 on 4
    plan = plan_capacity(replace(HAND, params_b=32, gpus=8))
    assert plan.gpus["generation"] % 2 == 0


@pytest.mark.parametrize(
    ("gpus", "lora"), [(3, True), (4, True), (8, True), (16, True), (6, False), (8, False), (16, False)]
)
def test_every_side_gets_its_own_gpus(gpus: int, lora: bool) -> None:
    plan = plan_capacity(replace(HAND, gpus=gpus, lora=lora, prompts=16))
    assert sum(plan.gpus.values()) == gpus
    assert min(plan.gpus.values()) >= 1
    assert plan.inputs.completions % plan.gpus["training"] == 0


def test_too_few_gpus_is_an_error_that_names_the_rules() -> None:
    with pytest.raises(CapacityError, match="2 GPUs cannot hold generation"):
        plan_capacity(replace(HAND, gpus=2))
    with pytest.raises(CapacityError, match=r"at least 24 for memory"):
        plan_capacity(replace(HAND, params_b=70, lora=False))


def test_lora_of_a_model_over_one_gpu_shards_its_weights() -> None:
    # 70B: 140 GB of bf16 weights, over 48 GB: ZeRO-3 shards them over at least 3 GPUs.
    big = replace(HAND, params_b=70, gpus=16)
    assert min_training_gpus(big) == 3
    plan = plan_capacity(big)
    assert plan.gpus["training"] >= 4 and plan.training_gb_per_gpu == 140 / plan.gpus["training"]


def test_training_step_seconds_become_tokens_per_second() -> None:
    assert tokens_per_s_from_step(5.0, 4, 1000, 1500) == 2000.0  # 4 x 2500 tokens in 5 s
    with pytest.raises(CapacityError):
        tokens_per_s_from_step(0.0, 4, 1000, 1500)


@pytest.mark.parametrize(
    "bad",
    [
        {"evals_per_gpu_hour": 0},
        {"gen_tokens_per_s": -1},
        {"gpus": 0},
        {"state_share": 1.5},
        {"prompt_tokens": -1},
    ],
)
def test_inputs_out_of_range_are_errors(bad: dict[str, float]) -> None:
    with pytest.raises(CapacityError):
        replace(HAND, **bad)


def test_more_gpus_never_make_the_step_longer() -> None:
    steps = [plan_capacity(replace(HAND, gpus=n)).step_s for n in range(3, 17)]
    assert all(b <= a or math.isclose(a, b) for a, b in zip(steps, steps[1:], strict=False))
