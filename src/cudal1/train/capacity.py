"""How to split one node's GPUs among GRPO's three sides (vLLM generation, training, evaluation)
from throughputs a user measured: pure arithmetic, no GPU, no torch (``cudal1 capacity``;
docs/scaling.md works an example).

The model. TRL's ``GRPOTrainer`` is synchronous: a step generates its completions, waits for
every reward, then trains on them (shared/research/rl-stack.md, "Async"), so a step takes the
sum of the three sides' times and each side waits while the others work:

    C       = prompts x num_generations                  completions per step
    t_gen   = C x L_c / (G x g)                          G generation GPUs (vLLM server)
    t_train = C x (L_p + L_c) / (T x r)                  T training GPUs (data parallel, ZeRO)
    t_eval  = 3600 x C / (V x E)                         V evaluation GPUs
    step    = t_gen + t_train + t_eval

with L_p, L_c the mean prompt and completion tokens, g the generation tokens per second of one
GPU (completion tokens, vLLM at its batch), r the training tokens per second of one GPU (policy
forward and backward, and the reference's forward where there is one, as measured) and E the
evaluations per GPU-hour that every run summary and report prints (``run.throughput``; failures
count, since they cost the pool their time). ``r`` may be given as the seconds one optimizer
step takes on one GPU instead: r = b x (L_p + L_c) / t_step for b completions per device step.

The split (G, T, V) with G + T + V = N is the one with the shortest step (ties: more evaluation
GPUs, then more training GPUs) among those allowed:

- V >= 1 and no GPU shared: a pair timed on a GPU where generation or training runs measures
  their kernels too (``train.phases``); G >= 1: generation gets GPUs of its own (server mode);
- G is a multiple of the GPUs of one vLLM replica, t: the smallest power of two with
  2 x P / t <= s x M (bf16 weights, 2 bytes per parameter, leave room for the KV cache);
- T is at least the memory minimum: with LoRA, every training GPU holds the bf16 weights,
  2 x P <= s x M (the adapters and their optimizer state are under 1% at rank 16, and the
  reference is the base with the adapters off, no copy), or where they do not fit one GPU,
  ZeRO-3 shards them: 2 x P / T <= s x M; a full fine-tune with ZeRO-3 shards
  16 bytes per parameter (bf16 weights and gradients, fp32 Adam master weights, m and v:
  2 + 2 + 4 + 4 + 4) plus 2 per parameter for a reference model over the T GPUs:
  (16 + 2) x P / T <= s x M;
- T divides C: TRL's generation batch is per-device batch x processes x steps_per_generation.

P is the parameter count, M one GPU's memory and s the share of it the model states may take
(the rest is activations, logits and buffers; 0.6 by default, a rule of thumb, not a measurement).
Every integer split is tried (N is small); at the continuous optimum each side's GPUs go as the
square root of its one-GPU time, which is why the slowest side gets most GPUs but not all.

What it does not model: a latency floor per evaluation (a step with few completions per
evaluation GPU waits for its slowest one), repeated sources that reuse stored results (fewer
evaluations than completions), communication cost of ZeRO beyond what the measured r includes,
vLLM colocated with training, and more than one node.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Literal

Side = Literal["generation", "training", "evaluation"]
SIDES: tuple[Side, ...] = ("generation", "training", "evaluation")

# Bytes per parameter (see the module's docstring for where each comes from).
BF16_BYTES = 2
FULL_FINETUNE_BYTES = 16  # bf16 weights and gradients, fp32 master weights, Adam's m and v
REFERENCE_BYTES = 2  # a bf16 reference model, sharded like the policy under ZeRO-3
GB = 1e9


class CapacityError(ValueError):
    """No split of the node's GPUs satisfies the rules; the message says which rule."""


@dataclass(frozen=True)
class CapacityInputs:
    """What the calculator needs; the throughputs are the user's measurements."""

    evals_per_gpu_hour: float
    gen_tokens_per_s: float  # completion tokens per second of one generation GPU
    train_tokens_per_s: float  # prompt + completion tokens per second of one training GPU
    gpus: int = 8
    params_b: float = 7.0
    gpu_memory_gb: float = 80.0
    lora: bool = True
    reference: bool = False  # a reference model (TRL's beta > 0)
    prompts: int = 16
    num_generations: int = 8
    prompt_tokens: int = 3072
    completion_tokens: int = 2048
    state_share: float = 0.6

    def __post_init__(self) -> None:
        positive = {
            "evals_per_gpu_hour": self.evals_per_gpu_hour,
            "gen_tokens_per_s": self.gen_tokens_per_s,
            "train_tokens_per_s": self.train_tokens_per_s,
            "params_b": self.params_b,
            "gpu_memory_gb": self.gpu_memory_gb,
            "gpus": self.gpus,
            "prompts": self.prompts,
            "num_generations": self.num_generations,
            "completion_tokens": self.completion_tokens,
        }
        bad = [name for name, value in positive.items() if not value > 0]
        if bad:
            raise CapacityError(f"must be positive: {', '.join(bad)}")
        if self.prompt_tokens < 0 or not 0 < self.state_share <= 1:
            raise CapacityError("prompt_tokens must be >= 0 and state_share in (0, 1]")

    @property
    def completions(self) -> int:
        """C: completions per GRPO step."""
        return self.prompts * self.num_generations

    @property
    def params(self) -> float:
        return self.params_b * 1e9

    @property
    def state_budget(self) -> float:
        """Bytes of one GPU the model states may take (s x M)."""
        return self.state_share * self.gpu_memory_gb * GB

    def one_gpu_seconds(self) -> dict[Side, float]:
        """Each side's seconds per step on one GPU (a, b, c: t = a / G, b / T, c / V)."""
        c = self.completions
        return {
            "generation": c * self.completion_tokens / self.gen_tokens_per_s,
            "training": c * (self.prompt_tokens + self.completion_tokens) / self.train_tokens_per_s,
            "evaluation": 3600 * c / self.evals_per_gpu_hour,
        }


def tokens_per_s_from_step(
    step_s: float, completions_per_device: int, prompt_tokens: int, completion_tokens: int
) -> float:
    """r from the seconds one optimizer step takes on one GPU over ``completions_per_device``."""
    if step_s <= 0 or completions_per_device <= 0:
        raise CapacityError("the training step's seconds and its completions per device must be positive")
    return completions_per_device * (prompt_tokens + completion_tokens) / step_s


def lora_sharded(inputs: CapacityInputs) -> bool:
    """Whether LoRA's frozen bf16 weights exceed one GPU's share, so that ZeRO-3 shards them."""
    return inputs.lora and BF16_BYTES * inputs.params > inputs.state_budget


def training_bytes_per_gpu(inputs: CapacityInputs, training_gpus: int) -> float:
    """The model states each training GPU holds (the memory rule of the module's docstring)."""
    if inputs.lora:
        return BF16_BYTES * inputs.params / (training_gpus if lora_sharded(inputs) else 1)
    per_param = FULL_FINETUNE_BYTES + (REFERENCE_BYTES if inputs.reference else 0)
    return per_param * inputs.params / training_gpus


def min_training_gpus(inputs: CapacityInputs) -> int:
    """The fewest training GPUs the memory rule allows."""
    return max(1, math.ceil(training_bytes_per_gpu(inputs, 1) / inputs.state_budget))


def replica_gpus(inputs: CapacityInputs) -> int:
    """t: the GPUs of one vLLM replica (tensor parallel), a power of two."""
    t = 1
    while BF16_BYTES * inputs.params / t > inputs.state_budget:
        t *= 2
    return t


@dataclass(frozen=True)
class CapacityPlan:
    inputs: CapacityInputs
    gpus: dict[Side, int]
    seconds: dict[Side, float]  # each side's time per step with its GPUs
    replica_gpus: int
    min_training_gpus: int

    @property
    def step_s(self) -> float:
        return sum(self.seconds.values())

    @property
    def bottleneck(self) -> Side:
        return max(SIDES, key=lambda side: self.seconds[side])

    def busy_share(self, side: Side) -> float:
        """The share of a step this side works (the rest it waits for the others)."""
        return self.seconds[side] / self.step_s

    @property
    def steps_per_hour(self) -> float:
        return 3600 / self.step_s

    @property
    def training_gb_per_gpu(self) -> float:
        return training_bytes_per_gpu(self.inputs, self.gpus["training"]) / GB


def plan_capacity(inputs: CapacityInputs) -> CapacityPlan:
    """The split of the module's docstring; ``CapacityError`` names the rule no split meets."""
    t = replica_gpus(inputs)
    low = min_training_gpus(inputs)
    splits = [
        (g, tr, inputs.gpus - g - tr)
        for g, tr in itertools.product(range(t, inputs.gpus + 1, t), range(low, inputs.gpus + 1))
        if inputs.gpus - g - tr >= 1 and inputs.completions % tr == 0
    ]
    if not splits:
        raise CapacityError(
            f"{inputs.gpus} GPUs cannot hold generation ({t} per vLLM replica), training (at least"
            f" {low} for memory, a divisor of {inputs.completions} completions) and evaluation (at least 1)"
        )
    one = inputs.one_gpu_seconds()

    def step(split: tuple[int, int, int]) -> tuple[float, int, int]:
        return (sum(one[side] / n for side, n in zip(SIDES, split, strict=True)), -split[2], -split[1])

    best = min(splits, key=step)
    gpus = dict(zip(SIDES, best, strict=True))
    seconds = {side: one[side] / gpus[side] for side in SIDES}
    return CapacityPlan(inputs, gpus, seconds, t, low)
