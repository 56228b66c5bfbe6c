"""Stage 2: self-supervised rounds (the paper's REINFORCE special case with a 0/1 reward).

Each round: a backend answers the one-shot generation prompt of every task (``llm.concurrency``
prompts in flight at once, each task's samples stored as soon as its call returns), the pool
evaluates the answers, and the model is fine-tuned (``sft.fine_tune``) on the ones that are
executable, correct and not rejected; the next round samples from that model. Phases never
overlap: a local sampling model is unloaded before the pool evaluates, and loaded again to train.

Which model samples (``llm.spec``, ``--llm``): by default ``hf:{model}``, the model the round
trains from, through local transformers (one prompt at a time: the backend does not batch).
``{model}`` stands for that model's absolute path: ``--model`` in round 1, ``OUT/round-(N-1)/model``
in round N. Any other backend of ``llm/`` works the same way; for throughput, an OpenAI-compatible
server (``openai:...`` with ``llm.options.base_url``: vLLM or SGLang batching the concurrent
prompts). This stage cannot reload a server, so the choice is:

- ``openai:{model}``: the server must serve the round's checkpoint under its path (``vllm serve
  OUT/round-1/model``, whose served name is that path). A server still serving the previous
  round's model answers "no model" (404), the round stops with that error, and ``--resume`` after
  reloading the server goes on: sampling stays on-policy.
- a fixed name (``openai:my-model``, or ``hf:PATH``): every round samples that model. From round 2
  on it is not the model being trained unless the server was reloaded with it; the log says so at
  the start, and each sample's provenance records the model that wrote it.

Either way, round N's model is the one trained here: ``OUT/round-N/model``, fine-tuned from round
N-1's model on the samples of round N, whichever model wrote them.

The run directory (``--out``): ``config.yaml``, ``candidates.db`` (every sample with its round,
the data each round trained on), ``run.log``, ``llm-calls.jsonl`` (one line per sampling call),
``round-N/`` (that round's checkpoints and model) and ``model/`` (the last round's model; a LoRA
adapter with ``lora.save: adapter``). Per round the success rate is logged and kept in the
database (meta ``selfsup:round-N``). Resume: a round whose model is saved is skipped; a round
whose samples are stored is not sampled again (a task whose call had not returned when the run
stopped is sampled then), and its pending samples are evaluated first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from datasets import Dataset

from cudal1.config import ROUND_MODEL, SelfSupConfig
from cudal1.eval.pool import Pool
from cudal1.eval.pool_kinds import make_pool
from cudal1.llm import (
    Completion,
    Ledger,
    LLMBackend,
    LLMError,
    Message,
    SamplingParams,
    backend_class,
    create_backend,
)
from cudal1.llm.model_dir import is_model_dir
from cudal1.run.database import CandidateDB
from cudal1.run.directory import RunDirectory, start_session
from cudal1.run.events import ProgressCallback, RoundJudged
from cudal1.run.rows import Provenance
from cudal1.schema import Task
from cudal1.search.lifecycle import evaluate_rows, store_reply
from cudal1.search.prompts import prompt_hash, render_generation_prompt
from cudal1.train.datasets import Verified, is_verified, sft_row
from cudal1.train.models import MODEL_DIR, TrainError, check_stage_start
from cudal1.train.sft import fine_tune

log = logging.getLogger(__name__)


def run_selfsup(
    model_path: Path,
    tasks: Sequence[Task],
    out: Path,
    config: SelfSupConfig,
    *,
    resume: bool = False,
    progress: ProgressCallback | None = None,
) -> Path:
    """Run ``config.rounds`` rounds from ``model_path``; returns ``out/model``. ``progress`` gets
    a ``RoundJudged`` event per round and a ``TrainStep`` event per logged step of its fine-tuning.
    Raises ``TrainError`` before anything runs when ``config.llm`` names no usable backend, and
    when a round's sampling fails (a dead endpoint: what was sampled stays stored)."""
    run = RunDirectory(out)
    check_stage_start(run, resume)
    sampling_backend(config, model_path, Ledger())  # a bad spec, option or model fails here, not later
    run.write_config(config)
    out = run.path
    current = Path(model_path)
    with run.session() as db, make_pool(config.eval, config.pool) as pool:
        run_id = start_session(db, run, tasks, config, note="selfsup resume" if resume else "selfsup")
        if ROUND_MODEL not in config.llm.spec:
            log.warning(
                "every round samples %s: from round 2 on that is not the model being trained "
                "(OUT/round-N/model) unless it is reloaded with it (%s samples the round's own model)",
                config.llm.spec,
                ROUND_MODEL,
            )
        ledger = run.ledger()
        for r in range(1, config.rounds + 1):
            saved = out / f"round-{r}" / MODEL_DIR
            if is_model_dir(saved):
                current = saved
                continue
            current = _round(db, pool, tasks, config, r, current, out, run_id, ledger, progress)
    final = out / MODEL_DIR
    if final.exists():
        shutil.rmtree(final)
    shutil.copytree(current, final)
    return final


def sampling_backend(config: SelfSupConfig, model: Path, ledger: Ledger) -> LLMBackend:
    """The backend of ``config.llm`` for a round that trains from ``model`` (``{model}`` in the
    spec becomes its absolute path); a backend that takes a device gets the stage's unless its
    options name one."""
    llm = config.llm
    spec = llm.spec.replace(ROUND_MODEL, str(Path(model).resolve()))
    try:
        options = {"max_concurrency": llm.concurrency, **llm.options}
        if "device" in backend_class(spec.partition(":")[0]).Options.model_fields:
            options.setdefault("device", config.device)
        return create_backend(spec, ledger=ledger, **options)
    except (ValueError, ImportError) as exc:
        raise TrainError(f"llm.spec {spec}: {exc}") from None


def _round(
    db: CandidateDB,
    pool: Pool,
    tasks: Sequence[Task],
    config: SelfSupConfig,
    r: int,
    model: Path,
    out: Path,
    run_id: int,
    ledger: Ledger,
    progress: ProgressCallback | None = None,
) -> Path:
    """One round: sample (unless stored), evaluate, train on what passed; returns the new model."""
    by_name = {t.name: t for t in tasks}
    stored = db.tasks_in_round(r)
    todo = [t for t in tasks if t.name not in stored]
    if todo:
        _sample_round(db, todo, config, r, sampling_backend(config, model, ledger), run_id)
    asyncio.run(evaluate_rows(db, pool, by_name, [row for row in db.pending() if row.task in by_name]))
    rows = [row for t in tasks for row in db.evaluated(t.name) if row.round == r]
    samples = len(tasks) * config.samples  # each task's samples of a round are stored together
    kept = [row for row in rows if is_verified(row)]
    rate = len(kept) / samples if samples else 0.0
    db.set_meta(
        f"selfsup:round-{r}", json.dumps({"samples": samples, "kept": len(kept), "success_rate": rate})
    )
    log.info(
        "self-supervised round %d: %d of %d samples executable and correct (%.0f%%)",
        r,
        len(kept),
        samples,
        100 * rate,
    )
    if progress is not None:
        progress(RoundJudged(r, samples, len(kept)))
    if not kept:
        log.warning("round %d kept nothing; the model is unchanged", r)
        return model
    data = Dataset.from_list([sft_row(Verified(by_name[row.task], row, str(out), ())) for row in kept])
    return fine_tune(
        model,
        data.select_columns(["prompt", "completion"]),
        out / f"round-{r}",
        optim=config.optim,
        lora=config.lora,
        max_length=config.max_length,
        device=config.device,
        progress=progress,
        phase=f"selfsup round {r}",
    )


def _sample_round(
    db: CandidateDB, tasks: Sequence[Task], config: SelfSupConfig, r: int, backend: LLMBackend, run_id: int
) -> None:
    """Sample ``tasks`` through ``backend``; a failed call stops the round as a ``TrainError``."""
    log.info(
        "round %d: sampling %d task(s) through %s:%s, up to %d prompt(s) at once",
        r,
        len(tasks),
        backend.name,
        backend.model,
        config.llm.concurrency,
    )
    try:
        asyncio.run(_sample(db, tasks, config, r, backend, run_id))
    except LLMError as exc:
        raise TrainError(
            f"round {r}: sampling through {backend.name}:{backend.model} failed: {exc}; the tasks "
            "that were answered are stored, and --resume samples the others"
        ) from None


async def _sample(
    db: CandidateDB, tasks: Sequence[Task], config: SelfSupConfig, r: int, backend: LLMBackend, run_id: int
) -> None:
    """Every task's prompt at once (the backend's ``max_concurrency`` admits ``llm.concurrency``
    of them); each task's samples are stored when its call returns, and the first failure cancels
    the calls still waiting."""
    s = config.sampling
    params = SamplingParams(
        temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens, n=config.samples, seed=s.seed
    )

    async def sample(task: Task) -> None:
        messages = render_generation_prompt(task)
        chat = [Message(m["role"], m["content"]) for m in messages]  # type: ignore[arg-type]
        _store(db, task, messages, await backend.complete(chat, params), r, backend, run_id)

    jobs = [asyncio.create_task(sample(task)) for task in tasks]
    try:
        await asyncio.gather(*jobs)
    finally:
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        await backend.aclose()  # free a local model's memory before the pool evaluates


def _store(
    db: CandidateDB,
    task: Task,
    messages: list[dict[str, str]],
    completions: Sequence[Completion],
    r: int,
    backend: LLMBackend,
    run_id: int,
) -> None:
    """A task's samples of round ``r``, together (resume counts a task with any as sampled)."""
    with db.transaction():
        for i, c in enumerate(completions):
            prov = Provenance(
                round=r,
                prompt_hash=prompt_hash(messages),
                backend=backend.name,
                model=backend.model,
                completion_tokens=c.completion_tokens,
                run_id=run_id,
                step=r,
            )
            store_reply(db, task, c.text, prov, label=f"selfsup-r{r}-s{i}")
