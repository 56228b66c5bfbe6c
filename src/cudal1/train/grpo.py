"""Stage 3: contrastive GRPO (TRL's ``GRPOTrainer``) with the evaluator pool as the reward.

Before step 1, each task is seeded (``search.seeds.store_round_zero``): the built-in baselines
and the reference where it has no candidate yet, and the kernels given with ``--seed``; all of
them are evaluated before the first prompt.

What runs, per generation batch: ``prompt_stream`` builds each prompt live from the candidate
database (exemplars with their measured speedups, chosen and rendered by the search's own
``task_prompt``: the one-shot prompt while a task has no correct variant); TRL samples
``num_generations`` completions per prompt; ``PoolReward`` stores, evaluates, audits and scores
them all at once (a speedup counts over ``config.reward.bar``: by default the faster of eager and
the task's torch.compile baselines, which round 0 measures); TRL normalises rewards within each group (``scale_rewards``) and updates the
policy (LoRA by default). What the batch found is in the database before the next prompts are
built, so better variants show up as exemplars: the paper's two loops together.

What it keeps from the paper and drops: GRPO on the speedup reward and contrastive prompts, yes;
the paper's exact reward scaling and its bucketed exemplar sampling are ours (``train.reward``,
``search.exemplars``). Under a multi-process launch (``accelerate launch``, one process per
training GPU) the processes share the run directory, its database and one evaluator service on
GPUs of its own (``train.ranks``).

The run directory (``--out``): ``config.yaml``, ``candidates.db`` (every completion with its
step), ``hack-cases.db`` (shipped cases plus the hacks confirmed here), ``steps.jsonl`` (rewards
and speedups per step), ``run.log``, ``checkpoints/`` (TRL checkpoints with TensorBoard logs
under ``checkpoints/runs``) and ``model/`` (the trained policy, adapters merged; or the adapter
alone with ``lora.save: adapter``). A killed run
resumes from its newest complete checkpoint with ``resume=True``; completions evaluated after
that checkpoint stay in the database (a repeated source reuses its stored result), and
candidates left pending are evaluated before training goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import json
import logging
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from datasets import IterableDataset
from trl import GRPOConfig, GRPOTrainer

from cudal1.audit import open_case_db
from cudal1.config import GenerationSettings, GRPOStageConfig
from cudal1.eval.pool import Pool
from cudal1.eval.pool_kinds import make_pool
from cudal1.eval.pool_service import PoolService, RemotePool, ServiceAddress
from cudal1.run.database import CandidateDB
from cudal1.run.directory import LOG_FILE, RunDirectory, start_session
from cudal1.schema import Task
from cudal1.search.contrastive import task_prompt
from cudal1.search.lifecycle import evaluate_rows
from cudal1.search.prompts import prompt_hash
from cudal1.search.seeds import SeedSet, load_seeds, seeds_first, store_round_zero
from cudal1.train.auditing import RewardAuditor, case_db_path, make_judge
from cudal1.train.models import (
    MODEL_DIR,
    ProgressCallback,
    TrainError,
    check_stage_start,
    last_checkpoint,
    load_policy,
    lora_for,
    one_device,
    progress_callbacks,
    save_policy,
    trainer_arguments,
    training_device,
)
from cudal1.train.phases import PhaseCallback, PhaseGate, same_device
from cudal1.train.pool_reward import PoolReward
from cudal1.train.ranks import Ranks, mark_ready, wait_until_ready

log = logging.getLogger(__name__)

STEPS_FILE = "steps.jsonl"


def prompt_stream(
    db: CandidateDB, tasks: Sequence[Task], config: GRPOStageConfig
) -> Iterator[dict[str, Any]]:
    """Endless rows ``{prompt, task, prompt_hash, parent_ids}``: tasks in a seeded shuffled order,
    each prompt built from the database as it is when the row is drawn. A candidate whose reward
    its audit withheld (held, or a hack) is no exemplar: its speedup would teach what it hides."""
    rng = random.Random(f"grpo:{config.seed}")
    for cycle in itertools.count():
        order = list(tasks)
        rng.shuffle(order)
        for task in order:
            withheld = db.withheld()
            prompt = task_prompt(
                task,
                [r for r in db.evaluated(task.name) if r.id not in withheld],
                config.exemplars,
                random.Random(f"{config.seed}:{task.name}:{cycle}"),
            )
            yield {
                "prompt": prompt.messages,
                "task": task.name,
                "prompt_hash": prompt_hash(prompt.messages),
                "parent_ids": json.dumps(list(prompt.parents)),
            }


# ``IterableDataset.from_generator`` fingerprints its generator and arguments with dill, and a
# database connection does not pickle: the stream is registered here under a key, and the
# generator datasets sees is a module function that takes only that key.
_STREAMS: dict[str, tuple[CandidateDB, tuple[Task, ...], GRPOStageConfig]] = {}


def _registered_stream(key: str) -> Iterator[dict[str, Any]]:
    db, tasks, config = _STREAMS[key]
    yield from prompt_stream(db, tasks, config)


def live_prompts(db: CandidateDB, tasks: Sequence[Task], config: GRPOStageConfig) -> IterableDataset:
    """``prompt_stream`` as the IterableDataset GRPOTrainer reads (drawn lazily, never cached)."""
    key = f"{id(db)}:{db.path}"
    _STREAMS[key] = (db, tuple(tasks), config)
    return IterableDataset.from_generator(_registered_stream, gen_kwargs={"key": key})


def vllm_installed() -> bool:
    """Whether the ``vllm`` package can be imported here (found, not imported: that takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


def check_generation(generation: GenerationSettings) -> None:
    """A vLLM backend without the ``vllm`` package is a ``TrainError`` now, before a pool starts or
    a model loads (TRL would raise its ImportError only once the trainer is built, the policy
    already on the GPU); the message says what to install and, for server mode, what to start."""
    if generation.backend == "transformers" or vllm_installed():
        return
    hint = "pip install 'trl[vllm]' (TRL 1.16 supports vllm 0.22-0.31)"
    if generation.backend == "vllm-server":
        server = generation.server
        where = server.base_url or f"{server.host}:{server.port}"
        hint += (
            f", then start the generation server on GPUs of its own before training, e.g."
            f" CUDA_VISIBLE_DEVICES=0,1 trl vllm-serve --model MODEL_DIR --tensor-parallel-size 2"
            f" --port {server.port} (the trainer looks for it at {where})"
        )
    raise TrainError(
        f"generation.backend {generation.backend} needs the vllm package, which is not installed"
        f" here: {hint}; or set generation.backend: transformers"
    )


def generation_arguments(generation: GenerationSettings) -> dict[str, Any]:
    """``generation`` as GRPOConfig's fields: ``use_vllm`` and, for vLLM, its mode and that
    mode's knobs (TRL reads the server's in server mode only, the engine's in colocate only)."""
    if generation.backend == "transformers":
        return {"use_vllm": False}
    common = {"use_vllm": True, "vllm_importance_sampling_correction": generation.importance_sampling}
    if generation.backend == "vllm-server":
        server = generation.server
        return common | {
            "vllm_mode": "server",
            "vllm_server_base_url": server.base_url,
            "vllm_server_host": server.host,
            "vllm_server_port": server.port,
            "vllm_group_port": server.group_port,
            "vllm_server_timeout": server.timeout_s,
        }
    colocate = generation.colocate
    return common | {
        "vllm_mode": "colocate",
        "vllm_max_model_length": colocate.max_model_length,
        "vllm_gpu_memory_utilization": colocate.gpu_memory_utilization,
        "vllm_tensor_parallel_size": colocate.tensor_parallel_size,
        "vllm_enable_sleep_mode": colocate.sleep_mode,
    }


def grpo_arguments(config: GRPOStageConfig, out: Path, device: str) -> GRPOConfig:
    """TRL's GRPOConfig for ``config``; a vLLM backend that cannot run here fails first."""
    check_generation(config.generation)
    s = config.sampling
    try:
        args = GRPOConfig(
            **trainer_arguments(config.optim, out, device),
            **generation_arguments(config.generation),
            num_generations=config.num_generations,
            steps_per_generation=config.steps_per_generation,
            max_completion_length=s.max_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            loss_type=config.loss_type,
            beta=config.beta,
            scale_rewards=config.scale_rewards,
            mask_truncated_completions=config.mask_truncated,
            shuffle_dataset=False,  # the buffered shuffle would prefetch prompts built from stale data
            ignore_data_skip=True,  # a resumed run builds fresh prompts instead of replaying old ones
        )
    except ValueError as exc:  # e.g. a generation batch not divisible by num_generations
        raise TrainError(f"GRPO settings: {exc}") from None
    return one_device(args, device)


def pool_devices(config: GRPOStageConfig) -> tuple[str, ...]:
    return tuple(config.eval_devices or config.pool.devices)


def shares_device(train_device: str, eval_devices: Sequence[str]) -> bool:
    """Whether the policy's device is one the pool times on (then the phases alternate)."""
    return any(same_device(train_device, d) for d in eval_devices)


def _reserver(pool: Any, train_device: str) -> Callable[[int], None] | None:
    """Tells a local pool what the policy holds on the device they share (see ``PhaseGate``)."""
    reserve = getattr(pool, "reserve", None)
    shared = [d for d in pool.devices if same_device(train_device, d)]
    if reserve is None or not shared:
        return None
    return lambda nbytes: reserve(shared[0], nbytes)


def run_grpo(
    model_path: Path,
    tasks: Sequence[Task],
    out: Path,
    config: GRPOStageConfig,
    *,
    resume: bool = False,
    judge: Any = None,
    seeds: SeedSet | None = None,
    progress: ProgressCallback | None = None,
    wrap_reward: Callable[[PoolReward], Any] | None = None,
) -> Path:
    """Train ``model_path`` with contrastive GRPO on ``tasks``; returns ``out/model``.

    ``judge`` overrides ``config.audit.judge`` (tests inject a ``ScriptedJudge``); ``seeds`` are
    ``config.seed_files`` already loaded; ``progress`` gets a ``TrainStep`` event per logged step;
    ``wrap_reward`` turns the pool's reward into the async callable TRL is given (the learning
    check's shuffled-reward control, and its table of pre-measured programs).
    Under a multi-process launch (``accelerate launch``, ``torchrun``) every process runs this;
    what they share and who does what is ``train.ranks``'s.
    """
    run = RunDirectory(out)
    device = training_device(config.device)
    ranks = Ranks.current(cpu=device == "cpu")
    if ranks.several:
        device = ranks.training_device(device, config.device)
        check_own_eval_devices(device, pool_devices(config))

    def start() -> None:
        check_stage_start(run, resume)
        run.write_config(config)

    ranks.from_main(start)
    seeds = seeds if seeds is not None else load_seeds(config.seed_files, tasks)
    out = run.path
    args = grpo_arguments(config, out, device)
    by_name = {t.name: t for t in tasks}
    with contextlib.ExitStack() as stack:
        db, run_id, pool = _session_and_pool(stack, run, tasks, config, ranks, resume)
        cases = stack.enter_context(open_case_db(case_db_path(out, config.audit)))
        gate = PhaseGate(
            shares_device(device, pool.devices) and not ranks.several, reserve=_reserver(pool, device)
        )
        log.info(
            "GRPO on %s%s, pool on %s, phases %s, rewards over %s",
            device,
            f" (process {ranks.index + 1} of {ranks.count})" if ranks.several else "",
            pool.devices,
            "alternate" if gate.shared else "overlap",
            config.reward.bar,
        )
        if ranks.main:
            store_round_zero(
                db,
                by_name,
                seeds,
                run_id,
                baselines=config.seed_baselines,
                labels=config.baseline_labels,
                # A Ray pool names no local devices: its actors each time on a GPU.
                cuda=not pool.devices or any(not d.startswith("cpu") for d in pool.devices),
            )
            _evaluate_pending(db, pool, by_name, gate)
            mark_ready(db, run_id)
        else:
            wait_until_ready(db, run_id)
        auditor = RewardAuditor(config.audit, config.reward, judge or make_judge(config.audit), cases, db)
        reward = PoolReward(
            db,
            pool,
            by_name,
            config.reward,
            auditor,
            gate,
            group_size=config.num_generations,
            run_id=run_id,
            steps_file=out / ranks.file_name(STEPS_FILE),
            ranks=ranks,
        )
        model, tokenizer = load_policy(model_path, bf16=bool(args.bf16), train_adapter=config.lora.enabled)
        trainer = GRPOTrainer(
            model=model,
            # an async callable class, which TRL awaits
            reward_funcs=[cast(Any, wrap_reward(reward) if wrap_reward else reward)],
            args=args,
            train_dataset=live_prompts(db, tasks, config),
            processing_class=tokenizer,
            peft_config=lora_for(model, config.lora),
            callbacks=[PhaseCallback(gate), *progress_callbacks(progress, "grpo")],
        )
        checkpoint = last_checkpoint(out) if resume else None
        log.info("GRPO from %s%s", model_path, f", resuming from {checkpoint.name}" if checkpoint else "")
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        if getattr(trainer, "is_deepspeed_enabled", False):
            # Every process: under ZeRO-3 the weights are gathered from their shards; a LoRA
            # policy is saved as its adapter (Trainer.save_model), not merged.
            trainer.save_model(str(out / MODEL_DIR))
            if ranks.main:
                tokenizer.save_pretrained(out / MODEL_DIR)
        elif ranks.main:
            save_policy(trainer.model, tokenizer, out / MODEL_DIR, config.lora.save)
        ranks.barrier()  # no process's rewards are in flight once every one is here
        return out / MODEL_DIR


def check_own_eval_devices(train_device: str, eval_devices: Sequence[str]) -> None:
    """Under a multi-process launch the evaluator needs GPUs no process trains on: the phase
    gate that makes training and timing take turns sees only its own process. A CPU shared
    with the evaluator is allowed (CPU timings are a test setting, not a measurement)."""
    if train_device.startswith("cuda") and shares_device(train_device, eval_devices):
        raise TrainError(
            f"this process trains on {train_device}, which the evaluator times on "
            f"({', '.join(eval_devices)}): under a multi-process launch give the evaluator GPUs "
            "of its own with --eval-devices"
        )


def _session_and_pool(
    stack: contextlib.ExitStack,
    run: RunDirectory,
    tasks: Sequence[Task],
    config: GRPOStageConfig,
    ranks: Ranks,
    resume: bool,
) -> tuple[CandidateDB, int, Pool]:
    """The run's database, the session's id and the pool this process submits to: the pool
    itself in a single process. Under a multi-process launch the main process opens the session
    and starts the evaluator service; the others open the database it made and a client of the
    service (its address and key reach them through the launcher's collective)."""
    db = stack.enter_context(run.session()) if ranks.main else None

    def record_session() -> int:
        assert db is not None
        return start_session(db, run, tasks, config, note="grpo resume" if resume else "grpo")

    if not ranks.several:
        pool = stack.enter_context(make_pool(config.eval, config.pool, devices=pool_devices(config)))
        return cast(CandidateDB, db), record_session(), pool

    def start_service() -> tuple[int, ServiceAddress]:
        run_id = record_session()
        service = stack.enter_context(
            PoolService.start(config.eval, config.pool, devices=pool_devices(config))
        )
        return run_id, service.address

    run_id, address = ranks.from_main(start_service)
    if db is None:
        stack.enter_context(run.logging(ranks.file_name(LOG_FILE)))
        db = stack.enter_context(run.open_db())
    return db, run_id, stack.enter_context(RemotePool(address))


def _evaluate_pending(db: CandidateDB, pool: Pool, tasks: dict[str, Task], gate: PhaseGate) -> None:
    """Evaluate everything pending (round 0, and a killed session's samples) before training,
    the seeds of every task first."""
    pending = seeds_first([r for r in db.pending() if r.task in tasks])
    if pending:
        log.info("evaluating %d pending candidate(s) before training", len(pending))
        with gate.evaluating():
            asyncio.run(evaluate_rows(db, pool, tasks, pending))
