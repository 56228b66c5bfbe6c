"""Training data from run directories: verified variants as conversational prompt/completion rows.

``export_dataset(run_dirs, out, config)`` reads the candidate databases of one or more runs
(``optimize``, ``collect``, ``train selfsup``/``grpo``) and writes a Hugging Face ``DatasetDict``
(``save_to_disk``) with ``train`` and ``test`` splits (an empty one left out) plus a card (``README.md``). What goes in:

- only verified candidates: correct on every checked input set and with no REJECT finding (a
  WARNING does not exclude a row; it is visible in the card's counts as it is in every result),
  whose reward no audit withheld (a reward held for review counts once ``cudal1 audit`` clears
  it; one confirmed as a hack never does); the reference anchor (the task's own program renamed)
  only when asked;
- each (task, source hash) once, across runs: the first one read wins;
- split by task, never by row, so that no task is seen on both sides (a model that memorised a
  task's variants must not be scored on that task); the split is a seeded hash of task names;
- ``sft`` rows: the one-shot generation prompt -> the variant (its analysis, if the model wrote
  one, then the code, in the format the prompt asks for); ``contrastive`` rows: the contrastive
  prompt the variant was generated from (its recorded exemplars, else exemplars selected from
  the task's variants evaluated before it) -> the variant; a variant with no correct earlier
  variant to contrast with has no contrastive row.

Rows are conversational (lists of ``{"role", "content"}``), which TRL's SFTTrainer trains with
completion-only loss; extra columns (task, level, source, speedup, ...) describe the row.
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import Dataset, DatasetDict

from cudal1.config import ExportConfig
from cudal1.run.directory import DB_FILE, RunDirectory, stored_tasks
from cudal1.run.rows import CandidateRow
from cudal1.run.selection import REFERENCE_LABEL
from cudal1.schema import Task
from cudal1.search.exemplars import select_exemplars, to_exemplar
from cudal1.search.prompts import render_contrastive_prompt, render_generation_prompt

log = logging.getLogger(__name__)

CARD_FILE = "README.md"


class ExportError(Exception):
    """Nothing to export, or a path that is not a run directory."""


@dataclass(frozen=True)
class Verified:
    """A verified candidate with what its row needs: the task, and the run's other candidates."""

    task: Task
    row: CandidateRow
    run: str
    earlier: tuple[CandidateRow, ...]  # the task's candidates evaluated before it, in its run


def is_verified(row: CandidateRow) -> bool:
    """Correct and not rejected: what training may learn from."""
    result = row.result
    return result is not None and result.correct and not result.rejected


def answer_text(row: CandidateRow) -> str:
    """The reply a model should have written: analysis (when recorded), then one python block."""
    return format_answer(row.source, row.analysis)


def format_answer(source: str, analysis: str = "") -> str:
    """A reply in the format the prompts ask for, which ``search.parsing.extract`` reads back."""
    code = "```python\n" + source.strip("\n") + "\n```\n"
    analysis = analysis.strip()
    if not analysis:
        return "## Implementation\n" + code
    return f"## Performance analysis\n{analysis}\n\n## Implementation\n{code}"


def read_verified(run_dirs: Sequence[Path], *, include_reference: bool = False) -> list[Verified]:
    """Verified candidates of every run, each (task, source) once, in run then id order."""
    seen: set[tuple[str, str]] = set()
    out: list[Verified] = []
    for run_dir in run_dirs:
        run = RunDirectory(run_dir)
        if not run.db_file.is_file():
            raise ExportError(f"{run_dir}: no {DB_FILE}; not a cudal1 run directory")
        with run.open_db() as db:
            withheld = db.withheld()
            for name, task in stored_tasks(db).items():
                rows = db.evaluated(name)
                for i, row in enumerate(rows):
                    key = (name, row.source_hash)
                    if key in seen or not is_verified(row) or row.id in withheld:
                        continue
                    if row.label == REFERENCE_LABEL and not include_reference:
                        continue
                    seen.add(key)
                    out.append(Verified(task, row, str(run_dir), tuple(rows[:i])))
    return out


def split_tasks(names: Sequence[str], test_fraction: float, seed: int) -> tuple[set[str], set[str]]:
    """(train, test) task names: a seeded hash order, the first ``test_fraction`` of it held out
    (at least one task when the fraction is positive, never every task)."""
    unique = sorted(set(names))
    order = sorted(unique, key=lambda n: hashlib.sha256(f"{seed}:{n}".encode()).hexdigest())
    n_test = math.floor(len(unique) * test_fraction + 0.5)
    if test_fraction > 0:  # at least one task held out, and at least one left to train on
        n_test = max(n_test, 1)
    n_test = min(n_test, max(len(unique) - 1, 0))
    return set(order[n_test:]), set(order[:n_test])


def _source(row: CandidateRow) -> str:
    return f"{row.backend}:{row.model}" if row.model else row.backend or "unknown"


def sft_row(item: Verified) -> dict[str, Any]:
    return _row(item, render_generation_prompt(item.task))


def contrastive_row(item: Verified, config: ExportConfig) -> dict[str, Any] | None:
    """The variant's contrastive prompt, or None when nothing earlier was correct."""
    by_id = {r.id: r for r in item.earlier}
    parents = [by_id[i] for i in item.row.parent_ids if i in by_id]
    if any(is_verified(p) and p.speedup is not None for p in parents):
        exemplars = [to_exemplar(p) for p in sorted(parents, key=lambda p: (p.speedup or 0.0, p.id))]
    else:
        rng = random.Random(f"{config.seed}:{item.task.name}:{item.row.id}")
        exemplars = select_exemplars(item.earlier, config.exemplars, rng)
    if not any(e.correct for e in exemplars):
        return None
    return _row(item, render_contrastive_prompt(item.task, exemplars))


def _row(item: Verified, prompt: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "prompt": prompt,
        "completion": [{"role": "assistant", "content": answer_text(item.row)}],
        "task": item.task.name,
        "level": item.task.level,
        "source": _source(item.row),
        "speedup": item.row.speedup,
        "candidate_hash": item.row.source_hash,
        "run": item.run,
    }


def build_rows(items: Sequence[Verified], config: ExportConfig) -> list[dict[str, Any]]:
    rows = [sft_row(i) if config.kind == "sft" else contrastive_row(i, config) for i in items]
    return [r for r in rows if r is not None]


def export_dataset(run_dirs: Sequence[Path], out: Path, config: ExportConfig) -> DatasetDict:
    """Write the ``train``/``test`` DatasetDict of ``config.kind`` rows and its card to ``out``."""
    items = read_verified(run_dirs, include_reference=config.include_reference)
    rows = build_rows(items, config)
    if not rows:
        raise ExportError(
            f"no verified candidates to export as {config.kind} rows in {list(map(str, run_dirs))}"
        )
    train_tasks, test_tasks = split_tasks([r["task"] for r in rows], config.test_fraction, config.seed)
    splits = {
        "train": [r for r in rows if r["task"] in train_tasks],
        "test": [r for r in rows if r["task"] in test_tasks],
    }
    # An empty split saves as zero shards, which load_from_disk cannot read back: leave it out.
    data = DatasetDict({name: Dataset.from_list(part) for name, part in splits.items() if part})
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data.save_to_disk(str(out))
    (out / CARD_FILE).write_text(render_card(splits, config, run_dirs), encoding="utf-8")
    log.info(
        "exported %d %s rows (%s) to %s", len(rows), config.kind, {k: len(v) for k, v in splits.items()}, out
    )
    return data


def render_card(
    splits: dict[str, list[dict[str, Any]]], config: ExportConfig, run_dirs: Sequence[Path]
) -> str:
    """The dataset card: what it holds, how it was filtered and split, counts per level and source."""
    lines = [
        f"# cudal1 {config.kind} dataset",
        "",
        f"Exported from {len(run_dirs)} run(s): " + ", ".join(f"`{d}`" for d in run_dirs) + ".",
        "Rows: verified candidates (correct, no rejecting finding, no reward an audit withheld), one per "
        "task and source hash; "
        f"split by task (test fraction {config.test_fraction}, seed {config.seed}).",
        "",
    ]
    for name, rows in splits.items():
        tasks = sorted({r["task"] for r in rows})
        lines += [f"## {name}: {len(rows)} rows, {len(tasks)} tasks", ""]
        lines += ["| level | rows |", "|---|---|"]
        lines += [f"| {lvl} | {n} |" for lvl, n in sorted(Counter(r["level"] for r in rows).items())]
        lines += ["", "| source | rows |", "|---|---|"]
        lines += [f"| {src} | {n} |" for src, n in sorted(Counter(r["source"] for r in rows).items())]
        lines += ["", "Tasks: " + (", ".join(tasks) or "(none)"), ""]
    return "\n".join(lines)
