"""The learning check's re-measurement: the samples a just-trained policy writes, kept as JSON
(``seed-N/samples/``: the models need not outlive their call), every distinct program among them
evaluated once in ``remeasure/``, a run directory no training stage reads or writes, and each
sample's verified speedup there (0 when it does not verify).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from learning_settings import MODEL, console, eval_config, grpo_config, pool_config
from tiny_policy import sample_policy

from cudal1.eval.pool_kinds import make_pool
from cudal1.run.database import CandidateDB
from cudal1.run.directory import RunDirectory, start_session
from cudal1.run.rows import Provenance
from cudal1.schema import Task, source_hash
from cudal1.search.lifecycle import evaluate_rows
from cudal1.search.parsing import extract
from cudal1.train.grpo import prompt_stream

POLICY_OF = {"grpo": "final", "control": "control", "ablation": "ablation"}


# Each samples file also says how its policy was trained, under this key (older files lack it).
TRAINED_KEY = "__trained__"
SFT_SETTINGS = ("sft_steps", "sft_lr", "policy_hidden", "policy_layers")
GRPO_SETTINGS = ("steps", "lr", "generations", "beta", "strays", "temperature", "max_tokens")


def samples_dir(work: Path, seed: int) -> Path:
    return work / f"seed-{seed}" / "samples"


def trained_with(args: argparse.Namespace, name: str) -> dict[str, object]:
    """The settings a policy named ``name`` (sft, final, control, ablation) was trained with: the
    SFT ones for every policy, GRPO's for the trained ones, and how the control's rewards were
    shuffled. Two lanes' SFT samples of one seed compare equal when their SFT settings do."""
    keys = SFT_SETTINGS + (() if name == "sft" else GRPO_SETTINGS)
    settings: dict[str, object] = {k: getattr(args, k) for k in keys if hasattr(args, k)}
    if name == "control":
        settings["control_shuffle"] = getattr(args, "control_shuffle", None)
    return settings


def samples_files(work: Path, seed: int) -> dict[str, dict[str, Any]]:
    """Every sampled policy's samples file of a seed, read once: its replies by task and, under
    ``TRAINED_KEY``, how it was trained (``replies`` and ``trained_of`` take them apart)."""
    folder = samples_dir(work, seed)
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    return {f.stem: json.loads(f.read_text()) for f in files}


def replies(payload: dict[str, Any]) -> dict[str, list[str]]:
    return {task: texts for task, texts in payload.items() if task != TRAINED_KEY}


def trained_of(payload: dict[str, Any]) -> dict[str, object] | None:
    """The settings a samples file says its policy was trained with; None in files older than that."""
    return payload.get(TRAINED_KEY)


def trained_settings(work: Path, seed: int) -> dict[str, dict[str, object] | None]:
    """Each sampled policy's training settings, None where its samples file does not say."""
    return {name: trained_of(payload) for name, payload in samples_files(work, seed).items()}


def save_samples(
    work: Path, tasks: list[Task], args: argparse.Namespace, seed: int, name: str, path: Path
) -> None:
    """``--samples`` replies of a just-trained policy to each task's first prompt, at GRPO's
    temperature, kept as JSON: the re-measurement needs these, not the model (which a fresh
    device machine no longer has)."""
    cfg = grpo_config(args, len(tasks), seed, show_speedups=name != "ablation")
    with CandidateDB(work / "shown.db") as db:
        prompts = {t.name: next(prompt_stream(db, [t], cfg))["prompt"] for t in tasks}
    texts = sample_policy(path / MODEL, prompts, cfg, samples=args.samples, seed=seed)
    samples_dir(work, seed).mkdir(parents=True, exist_ok=True)
    payload = {**texts, TRAINED_KEY: trained_with(args, name)}
    (samples_dir(work, seed) / f"{name}.json").write_text(json.dumps(payload))


def sampled(work: Path, seed: int) -> dict[str, dict[str, list[str]]]:
    """Every sampled policy of a seed: sft, final, control, ablation (those that finished)."""
    return {name: replies(payload) for name, payload in samples_files(work, seed).items()}


def stage_remeasure(work: Path, tasks: list[Task], args: argparse.Namespace) -> None:
    """Every distinct program the policies' samples (``seed-N/samples/*.json``) write, evaluated
    once in ``remeasure/``; a cut-off call evaluates what is still pending."""
    by_name = {t.name: t for t in tasks}
    run = RunDirectory(work / "remeasure")
    with run.session() as db:
        start_session(db, run, tasks, eval_config(args.device, 2.0), note="learning-check remeasure")
        for seed in args.seeds:
            for name, by_task in sampled(work, seed).items():
                for task, texts in by_task.items():
                    for text in texts:
                        code = extract(text).code
                        if code is not None and db.find_by_hash(task, source_hash(code)) is None:
                            db.add_candidate(
                                by_name[task], code, Provenance(backend="policy", model=f"seed{seed}-{name}")
                            )
        pending = [r for r in db.pending() if r.task in by_name]
        if pending:
            console.print(f"re-measuring {len(pending)} program(s) in {run.path}")
            with make_pool(eval_config(args.device, 2.0), pool_config(args.device, args.eval_devices or ())) as pool:
                asyncio.run(evaluate_rows(db, pool, by_name, pending))


def sample_values(db: CandidateDB, texts: dict[str, list[str]]) -> dict[str, list[float]]:
    """Each sample's verified speedup in the re-measurement, 0 when it does not verify; a program
    still pending (the evaluator failed on it) is left out."""
    out: dict[str, list[float]] = {}
    for task, replies in texts.items():
        values = []
        for text in replies:
            code = extract(text).code
            row = db.find_by_hash(task, source_hash(code)) if code is not None else None
            if code is None or (row is not None and row.result is not None):
                res = row.result if row is not None else None
                ok = (
                    res is not None
                    and res.correct
                    and not res.rejected
                    and row is not None
                    and row.speedup is not None
                )
                values.append(
                    float(row.speedup) if ok and row is not None and row.speedup is not None else 0.0
                )
        out[task] = values
    return out
