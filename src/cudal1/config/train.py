"""Configs of training: how an evaluation result becomes the RL reward, data collection, dataset
export, and the three stages (SFT, self-supervised rounds, contrastive GRPO)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from cudal1.config.base import Device, StrictConfig
from cudal1.config.eval import EvalConfig, PoolConfig
from cudal1.config.search import SEED_FILES_HELP, BudgetConfig, ExemplarConfig, LLMConfig, Size

RewardBar = Literal["eager", "best-baseline"]


class RewardConfig(StrictConfig):
    """How an evaluation result becomes a scalar reward; every field is used below."""

    bar: RewardBar = Field(
        "best-baseline",
        description="what a speedup is counted over: eager (the reference as written) or best-baseline "
        "(the faster of eager and the task's torch.compile baselines measured in the same run; eager "
        "while none has verified, which the step log says)",
    )

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


# -- the training stages ---------------------------------------------------------------------------

Precision = Literal["auto", "bf16", "fp32"]
ReportTo = Literal["tensorboard", "none"]
ExportKind = Literal["sft", "contrastive"]
LossType = Literal["grpo", "dapo", "dr_grpo", "bnpo"]
ScaleRewards = Literal["group", "batch", "none"]
# What an audit does with a suspicious reward: keep it, zero a positive one, reject it, or hold it
# (capped to its group's median and listed until a person reviews it with `cudal1 audit`).
AuditOutcome = Literal["keep", "zero", "reject", "hold"]


class CollectConfig(StrictConfig):
    """``cudal1 collect``: several models answer the one-shot generation prompt for every task;
    every reply is evaluated and stored with its provenance (stage 1's data augmentation)."""

    llms: tuple[LLMConfig, ...] = Field(
        (), description="the models asked, in order; each gets its own round (round i = the i-th model)"
    )
    samples: int = Field(4, ge=1, description="completions per task per model (one prompt, n samples)")
    budget: BudgetConfig = Field(default_factory=BudgetConfig, description="when to stop early")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="evaluation of the collected variants")
    pool: PoolConfig = Field(default_factory=PoolConfig, description="evaluation workers")
    seed_files: tuple[Path, ...] = Field((), description=SEED_FILES_HELP)
    size: Size = Field("auto", description="bundled-suite sizes when no task path is given (auto: by device)")


class ExportConfig(StrictConfig):
    """``cudal1 dataset export``: which candidates become training rows, and how they are split."""

    kind: ExportKind = Field(
        "sft",
        description="sft: the generation prompt -> a verified variant; contrastive: a contrastive prompt "
        "(earlier variants of the task with their speedups) -> a verified variant",
    )
    test_fraction: float = Field(
        0.1, ge=0, lt=1, description="share of tasks (not rows) held out in the test split"
    )
    seed: int = Field(0, description="seed of the task split and of exemplar selection")
    exemplars: ExemplarConfig = Field(
        default_factory=ExemplarConfig, description="exemplars of contrastive prompts (kind=contrastive)"
    )
    include_reference: bool = Field(
        False, description="keep the reference anchor (the task's own program renamed) as a row"
    )


ModelSave = Literal["merged", "adapter"]


class LoraSettings(StrictConfig):
    """Low-rank adapters through peft; merged into the model when a stage saves it, unless
    ``save`` is ``adapter``."""

    enabled: bool = Field(True, description="train LoRA adapters instead of every weight")
    save: ModelSave = Field(
        "merged",
        description="what a stage saves as OUT/model: merged (a plain model, the adapters merged in) or "
        "adapter (only the adapter, megabytes instead of the whole model; its adapter_config.json "
        "names the base model's path, which must stay where it is for the next stage and hf: to load it)",
    )
    r: int = Field(16, ge=1, description="adapter rank")
    alpha: int = Field(32, ge=1, description="adapter scaling (lora_alpha)")
    dropout: float = Field(0.05, ge=0, lt=1, description="dropout on the adapter input")
    target_modules: tuple[str, ...] | Literal["all-linear"] = Field(
        "all-linear", description="module names that get adapters, or every linear layer"
    )

    @model_validator(mode="after")
    def _adapter_needs_lora(self) -> LoraSettings:
        if self.save == "adapter" and not self.enabled:
            raise ValueError("save=adapter needs LoRA (enabled=true): a full fine-tune has no adapter")
        return self


class OptimSettings(StrictConfig):
    """What every trainer of a stage shares (TRL/transformers ``TrainingArguments`` fields)."""

    learning_rate: float = Field(1e-5, gt=0, description="peak learning rate")
    max_steps: int = Field(100, ge=1, description="optimizer steps of the stage")
    batch_size: int = Field(4, ge=1, description="rows per device per step (per_device_train_batch_size)")
    grad_accumulation: int = Field(1, ge=1, description="batches accumulated per optimizer step")
    warmup_steps: int = Field(0, ge=0, description="linear warm-up steps")
    precision: Precision = Field("auto", description="auto: bf16 on a GPU that has it, else fp32")
    gradient_checkpointing: bool = Field(False, description="recompute activations (less memory, slower)")
    logging_steps: int = Field(1, ge=1, description="log metrics every this many steps")
    save_steps: int = Field(50, ge=1, description="checkpoint every this many steps (resume starts there)")
    report_to: ReportTo = Field("tensorboard", description="where metrics go (TRL's integrations)")
    seed: int = Field(0, description="seed of the trainer (initialisation of adapters, data order)")


class SFTOptim(OptimSettings):
    """Stage 1's defaults."""

    learning_rate: float = Field(2e-5, gt=0, description="peak learning rate")
    max_steps: int = Field(200, ge=1, description="optimizer steps of the stage")


class SelfSupOptim(OptimSettings):
    """Stage 2's defaults: each round trains briefly on that round's kept samples."""

    learning_rate: float = Field(1e-5, gt=0, description="peak learning rate")
    max_steps: int = Field(20, ge=1, description="optimizer steps of each round")


class GRPOOptim(OptimSettings):
    """Stage 3's defaults (TRL's GRPO learning rate)."""

    learning_rate: float = Field(1e-6, gt=0, description="peak learning rate")
    save_steps: int = Field(10, ge=1, description="checkpoint every this many steps (resume starts there)")


class SFTStageConfig(StrictConfig):
    """``cudal1 train sft`` (stage 1): supervised fine-tuning on verified variants, completion-only loss."""

    optim: SFTOptim = Field(default_factory=SFTOptim, description="optimizer and trainer settings")
    lora: LoraSettings = Field(default_factory=LoraSettings, description="adapters")
    max_length: int = Field(8192, ge=16, description="prompt + completion tokens; longer rows are cut")
    device: Device = Field(
        "auto", description="where the model trains: auto (first GPU, else CPU) | cpu | cuda"
    )


class SamplingSettings(StrictConfig):
    """How the policy samples its variants."""

    temperature: float = Field(1.0, gt=0, description="sampling temperature")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling mass")
    max_tokens: int = Field(4096, ge=1, description="completion tokens per sample (analysis and code)")
    seed: int | None = Field(
        None, description="sampling seed (None: not seeded); servers may ignore it, hf seeds torch's RNG"
    )


# Stands for the path of the model a self-supervised round trains from, in ``SelfSupLLM.spec``.
ROUND_MODEL = "{model}"


class SelfSupLLM(StrictConfig):
    """What samples a self-supervised round: by default the round's own model through local
    transformers (``hf:{model}``); any backend the search can use (``openai:`` for a vLLM or
    SGLang server, ``scripted:`` for dry runs) otherwise."""

    spec: str = Field(
        f"hf:{ROUND_MODEL}",
        description=f"hf:PATH | openai:MODEL | scripted:FILE; {ROUND_MODEL} stands for the absolute path of "
        "the model the round trains from (round 1: --model; round N: OUT/round-(N-1)/model), so "
        f"openai:{ROUND_MODEL} asks a server that must serve that checkpoint under its path (a stale "
        f"server fails with 'no model'); a spec without {ROUND_MODEL} samples one fixed model every "
        "round, which is not the model being trained",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="backend options (base_url, api_key_env, timeout_s, ...), validated by the backend; "
        "calls in flight are set by concurrency",
    )
    concurrency: int = Field(
        8,
        ge=1,
        description="task prompts in flight at once (the backend's max_concurrency); a server batches "
        "them, hf generates one at a time",
    )

    @model_validator(mode="after")
    def _one_concurrency(self) -> SelfSupLLM:
        prefix, sep, target = self.spec.partition(":")
        if not (prefix and sep and target):
            raise ValueError(f"spec {self.spec!r}: expected PREFIX:TARGET, e.g. hf:{ROUND_MODEL}")
        if "max_concurrency" in self.options:
            raise ValueError("set llm.concurrency, not llm.options.max_concurrency")
        return self


class SelfSupConfig(StrictConfig):
    """``cudal1 train selfsup`` (stage 2): generate, keep what is executable and correct, train on it."""

    rounds: int = Field(2, ge=1, description="generate -> evaluate -> train rounds")
    samples: int = Field(4, ge=1, description="samples per task per round")
    llm: SelfSupLLM = Field(default_factory=SelfSupLLM, description="the backend that samples each round")
    sampling: SamplingSettings = Field(default_factory=SamplingSettings, description="generation")
    optim: SelfSupOptim = Field(default_factory=SelfSupOptim, description="training of each round")
    lora: LoraSettings = Field(default_factory=LoraSettings, description="adapters")
    max_length: int = Field(8192, ge=16, description="prompt + completion tokens; longer rows are cut")
    device: Device = Field("auto", description="where the model generates and trains")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="evaluation of the samples")
    pool: PoolConfig = Field(default_factory=PoolConfig, description="evaluation workers")
    size: Size = Field("auto", description="bundled-suite sizes when no task path is given (auto: by device)")


# Who samples GRPO's completions: the policy itself through transformers' ``generate``, or vLLM
# (TRL's ``use_vllm``): a separate server started with ``trl vllm-serve`` on GPUs of its own, or an
# engine inside each training process sharing its GPU (shared/research/rl-stack.md, "Generation
# backends"; TRL 1.16 ``GRPOConfig``).
GenerationBackend = Literal["transformers", "vllm-server", "vllm-colocate"]


class VLLMServerSettings(StrictConfig):
    """``generation.backend: vllm-server``: where the ``trl vllm-serve`` process listens. Its GPUs,
    tensor parallelism, memory share and context window are that command's own flags, not
    settings here (TRL passes them to a colocated engine only)."""

    base_url: str | None = Field(
        None, description="the server's URL, e.g. http://10.0.0.2:8000 (set: host and port are ignored)"
    )
    host: str = Field("127.0.0.1", description="the server's host (the same node: 127.0.0.1)")
    port: int = Field(8000, ge=1, le=65535, description="the server's HTTP port (trl vllm-serve --port)")
    group_port: int = Field(
        51216,
        ge=1,
        le=65535,
        description="port of the weight-update group the trainer pushes weights through",
    )
    timeout_s: float = Field(
        240.0, gt=0, description="how long the trainer waits for the server to come up before it fails"
    )


class VLLMColocateSettings(StrictConfig):
    """``generation.backend: vllm-colocate``: a vLLM engine inside every training process, on its GPU."""

    gpu_memory_utilization: float = Field(
        0.3, gt=0, le=1, description="share of each training GPU's memory vLLM takes (weights and KV cache)"
    )
    tensor_parallel_size: int = Field(
        1, ge=1, description="training processes one engine is split over (must divide their number)"
    )
    max_model_length: int | None = Field(
        None,
        ge=16,
        description="vLLM's context window: at least the longest prompt plus sampling.max_tokens "
        "(None: from the model's config; a server takes it as trl vllm-serve --max-model-len)",
    )
    sleep_mode: bool = Field(
        False,
        description="offload vLLM's weights and KV cache during the optimizer step (less memory, slower)",
    )


class GenerationSettings(StrictConfig):
    """Who samples GRPO's completions (TRL's ``use_vllm`` / ``vllm_mode`` and their knobs)."""

    backend: GenerationBackend = Field(
        "transformers",
        description="transformers (the policy's generate, in the training process) | vllm-server (a "
        "`trl vllm-serve` process on GPUs of its own) | vllm-colocate (vLLM inside each training "
        "process); vllm needs `pip install 'trl[vllm]'`",
    )
    importance_sampling: bool = Field(
        True,
        description="correct for the gap between vLLM's sampling log-probs and the trainer's recomputed "
        "ones (TRL's vllm_importance_sampling_correction)",
    )
    server: VLLMServerSettings = Field(default_factory=VLLMServerSettings, description="vllm-server only")
    colocate: VLLMColocateSettings = Field(
        default_factory=VLLMColocateSettings, description="vllm-colocate only"
    )


class AuditConfig(StrictConfig):
    """Which rewards the reward-checking model sees before they count, and what its verdict does."""

    judge: LLMConfig = Field(
        default_factory=lambda: LLMConfig(temperature=0.0, max_tokens=2048, preflight=False),
        description="the reward-checking model (spec None: no judge; suspicious rewards then follow "
        "'unaudited')",
    )
    speedup_threshold: float = Field(
        5.0, gt=1, description="a speedup above this is suspicious (the reward's clip sits at 10x)"
    )
    sol_fraction: float = Field(
        0.8,
        gt=0,
        le=1,
        description="suspicious when the candidate reaches this share of the speed-of-light floor",
    )
    new_findings: bool = Field(
        True, description="suspicious when a WARNING/REJECT finding code is new to this run"
    )
    cases: int = Field(3, ge=0, description="closest hacking cases shown to the judge")
    case_db: Path | None = Field(
        None, description="hacking-case database (default: hack-cases.db in the run directory)"
    )
    unsure: AuditOutcome = Field(
        "zero",
        description="an 'unsure' verdict: keep the reward, zero a positive one, reject it, or hold it "
        "(capped to its group's median and listed for `cudal1 audit RUN`)",
    )
    unaudited: AuditOutcome = Field(
        "hold",
        description="a suspicious reward with no judge configured: hold it (capped to its group's "
        "median and listed until reviewed with `cudal1 audit RUN`), keep, zero or reject it",
    )


class GRPOStageConfig(StrictConfig):
    """``cudal1 train grpo`` (stage 3): GRPO on contrastive prompts built live from the database."""

    optim: GRPOOptim = Field(default_factory=GRPOOptim, description="optimizer and trainer settings")
    lora: LoraSettings = Field(default_factory=LoraSettings, description="adapters")
    num_generations: int = Field(4, ge=2, description="completions per prompt (one GRPO group)")
    steps_per_generation: int = Field(
        1,
        ge=1,
        description="micro-batches one generation batch feeds (TRL's): a batch holds optim.batch_size "
        "x training processes x this completions; above optim.grad_accumulation it feeds several "
        "optimizer steps (amortises evaluation time)",
    )
    sampling: SamplingSettings = Field(default_factory=SamplingSettings, description="generation")
    generation: GenerationSettings = Field(
        default_factory=GenerationSettings, description="who samples the completions (transformers or vLLM)"
    )
    loss_type: LossType = Field("dapo", description="TRL's loss normalisation")
    beta: float = Field(0.0, ge=0, description="KL coefficient against the initial model (0: no ref model)")
    scale_rewards: ScaleRewards = Field(
        "group",
        description="advantages: (r - group mean) / spread of the group, the batch, or unscaled (TRL's; "
        "with the reward's clip, the paper's reward smoothing)",
    )
    mask_truncated: bool = Field(True, description="completions cut by max_tokens earn no gradient")
    exemplars: ExemplarConfig = Field(default_factory=ExemplarConfig, description="contrastive exemplars")
    seed_baselines: bool = Field(
        True, description="seed each task with the built-in baselines and the reference before step 1"
    )
    baseline_labels: tuple[str, ...] | None = Field(
        None, description="built-in baselines seeded (None: all that apply to the task)"
    )
    seed_files: tuple[Path, ...] = Field(
        (),
        description=SEED_FILES_HELP
        + "; stored with the baselines before step 1 (whatever seed_baselines says)",
    )
    reward: RewardConfig = Field(default_factory=RewardConfig, description="evaluation result -> reward")
    audit: AuditConfig = Field(default_factory=AuditConfig, description="the reward-checking model")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="evaluation of the completions")
    pool: PoolConfig = Field(default_factory=PoolConfig, description="evaluation workers")
    eval_devices: tuple[Device, ...] = Field(
        (),
        description="devices the pool times on (default: pool.devices, else eval.device); when the "
        "training device is among them, generation, training and timing take turns",
    )
    device: Device = Field("auto", description="where the policy trains and generates")
    seed: int = Field(0, description="seed of prompt construction")
    size: Size = Field("auto", description="bundled-suite sizes when no task path is given (auto: by device)")
