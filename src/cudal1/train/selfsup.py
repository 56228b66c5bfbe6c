"""Stage 2: self-supervised rounds (the paper's REINFORCE special case with a 0/1 reward).

Each round: the current model answers the one-shot generation prompt of every task through the
local transformers backend (``hf:``), the pool evaluates the answers, and the model is
fine-tuned (``sft.fine_tune``) on the ones that are executable, correct and not rejected; the
next round samples from that model. Phases never overlap: the model is unloaded before the pool
evaluates, and loaded again to train.

The run directory (``--out``): ``config.yaml``, ``candidates.db`` (every sample with its round,
the data each round trained on), ``run.log``, ``round-N/`` (that round's checkpoints and model)
and ``model/`` (the last round's model). Per round the success rate is logged and kept in the
database (meta ``selfsup:round-N``). Resume: a round whose model is saved is skipped; a round
whose samples are stored is not sampled again, and its pending samples are evaluated first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from datasets import Dataset

from cudal1.config import SelfSupConfig
from cudal1.eval.pool import Pool
from cudal1.eval.pool_kinds import make_pool
from cudal1.llm import Message, SamplingParams
from cudal1.llm.hf_backend import HFBackend
from cudal1.run.database import CandidateDB, Provenance
from cudal1.run.directory import RunDirectory, start_session
from cudal1.run.events import ProgressCallback, RoundJudged
from cudal1.schema import Task
from cudal1.search.lifecycle import evaluate_rows, store_reply
from cudal1.search.prompts import prompt_hash, render_generation_prompt
from cudal1.train.datasets import Verified, is_verified, sft_row
from cudal1.train.models import MODEL_DIR, check_stage_start
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
    a ``RoundJudged`` event per round and a ``TrainStep`` event per logged step of its fine-tuning."""
    run = RunDirectory(out)
    check_stage_start(run, resume)
    run.write_config(config)
    out = run.path
    current = Path(model_path)
    with run.session() as db, make_pool(config.eval, config.pool) as pool:
        run_id = start_session(db, run, tasks, config, note="selfsup resume" if resume else "selfsup")
        for r in range(1, config.rounds + 1):
            saved = out / f"round-{r}" / MODEL_DIR
            if (saved / "config.json").is_file():
                current = saved
                continue
            current = _round(db, pool, tasks, config, r, current, out, run_id, progress)
    final = out / MODEL_DIR
    if final.exists():
        shutil.rmtree(final)
    shutil.copytree(current, final)
    return final


def _round(
    db: CandidateDB,
    pool: Pool,
    tasks: Sequence[Task],
    config: SelfSupConfig,
    r: int,
    model: Path,
    out: Path,
    run_id: int,
    progress: ProgressCallback | None = None,
) -> Path:
    """One round: sample (unless stored), evaluate, train on what passed; returns the new model."""
    by_name = {t.name: t for t in tasks}
    stored = {row.task for t in tasks for row in db.evaluated(t.name) + db.pending(t.name) if row.round == r}
    todo = [t for t in tasks if t.name not in stored]
    if todo:
        asyncio.run(_sample(db, todo, config, r, model, run_id))
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


async def _sample(
    db: CandidateDB, tasks: Sequence[Task], config: SelfSupConfig, r: int, model: Path, run_id: int
) -> None:
    backend = HFBackend(model, HFBackend.Options(device=config.device))
    s = config.sampling
    params = SamplingParams(
        temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens, n=config.samples, seed=s.seed
    )
    try:
        for task in tasks:
            messages = render_generation_prompt(task)
            chat = [Message(m["role"], m["content"]) for m in messages]  # type: ignore[arg-type]
            completions = await backend.complete(chat, params)
            with db.transaction():
                for i, c in enumerate(completions):
                    prov = Provenance(
                        round=r,
                        prompt_hash=prompt_hash(messages),
                        backend=backend.name,
                        model=str(model),
                        completion_tokens=c.completion_tokens,
                        run_id=run_id,
                        step=r,
                    )
                    store_reply(db, task, c.text, prov, label=f"selfsup-r{r}-s{i}")
    finally:
        await backend.aclose()  # free the model's memory before the pool evaluates
