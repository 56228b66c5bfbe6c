"""``cudal1 dataset export``: verified rows only, each source once across runs, split by task,
conversational prompt/completion rows, a card with counts per level and source."""

from __future__ import annotations

from pathlib import Path

from datasets import load_from_disk
from run_fixtures import GELU, SUM
from train_fixtures import GOOD_ANSWER, make_result
from typer.testing import CliRunner

from cudal1.cli import app
from cudal1.config import ExportConfig
from cudal1.run.database import CandidateDB
from cudal1.run.directory import DB_FILE, remember_tasks
from cudal1.run.rows import Provenance
from cudal1.schema import Task
from cudal1.search.parsing import extract
from cudal1.train.datasets import export_dataset, split_tasks

GELU_CODE = extract(GOOD_ANSWER).code or ""


def variant(task: Task, i: int) -> str:
    return (
        GELU_CODE.replace("variant 0", f"variant {i}")
        if task is GELU
        else f"{SUM.source}\n# v{i}\n".replace("class Model(", "class ModelNew(")
    )


def make_run(run: Path, model: str) -> None:
    """Per task: two verified variants, a rejected one, an incorrect one and the reference."""
    with CandidateDB(run / DB_FILE) as db:
        remember_tasks(db, [GELU, SUM])
        for task in (GELU, SUM):
            specs = [
                (1, 1.5, False, True, ""),
                (2, 2.0, False, True, ""),
                (3, 5.0, True, True, ""),
                (4, None, False, False, ""),
                (5, 1.0, False, True, "reference"),
            ]
            for i, speedup, reject, correct, label in specs:
                source = variant(task, i)
                cid = db.add_candidate(
                    task,
                    source,
                    Provenance(backend="openai", model=model),
                    label=label,
                    analysis="fuse it" if i == 2 else "",
                )
                db.record_result(cid, make_result(task.name, source, speedup, correct=correct, reject=reject))


def test_export_sft_and_contrastive_from_two_runs(tmp_path: Path) -> None:
    make_run(tmp_path / "a", "m1")
    make_run(tmp_path / "b", "m2")  # the same sources again: each is exported once
    runs = [tmp_path / "a", tmp_path / "b"]
    data = export_dataset(runs, tmp_path / "sft", ExportConfig(kind="sft", test_fraction=0.5))
    train, test = data["train"], data["test"]
    assert len(train) == len(test) == 2  # two verified variants per task, one task per split
    assert set(train["task"]).isdisjoint(test["task"])
    assert set(train["source"]) | set(test["source"]) == {"openai:m1"}
    row = next(r for r in train if "fuse it" in r["completion"][0]["content"])
    assert row["prompt"][0]["role"] == "system" and "Reference implementation" in row["prompt"][1]["content"]
    assert row["completion"][0]["role"] == "assistant"
    assert extract(row["completion"][0]["content"]).ok
    card = (tmp_path / "sft" / "README.md").read_text()
    assert "| openai:m1 | 2 |" in card and "| 1 | 2 |" in card  # both tasks are level 1
    assert len(load_from_disk(str(tmp_path / "sft"))["train"]) == 2

    contrastive = export_dataset(runs, tmp_path / "c", ExportConfig(kind="contrastive", test_fraction=0.0))
    rows = list(contrastive["train"])
    # the first variant of a task has nothing correct before it; the second is contrasted with it
    assert len(rows) == 2 and all("measured speedups" in r["prompt"][1]["content"] for r in rows)
    assert "test" not in contrastive  # an empty split is left out (it could not be loaded back)


def test_task_split_is_seeded_and_holds_out_whole_tasks() -> None:
    names = [f"t{i}" for i in range(10)]
    train, test = split_tasks(names, 0.2, seed=0)
    assert len(test) == 2 and train | test == set(names) and not train & test
    assert split_tasks(names, 0.2, seed=0) == (train, test)
    assert split_tasks(["only"], 0.5, seed=0) == ({"only"}, set())


def test_cli_export(tmp_path: Path) -> None:
    make_run(tmp_path / "a", "m1")
    runner = CliRunner()
    ok = runner.invoke(app, ["dataset", "export", str(tmp_path / "a"), "--out", str(tmp_path / "d")])
    assert ok.exit_code == 0, ok.output
    assert "sft dataset written" in ok.output
    bad = runner.invoke(app, ["dataset", "export", str(tmp_path / "nowhere"), "--out", str(tmp_path / "e")])
    assert bad.exit_code == 2 and "not a cudal1 run directory" in bad.output
    typo = runner.invoke(
        app, ["dataset", "export", str(tmp_path / "a"), "--out", str(tmp_path / "f"), "--kind", "rl"]
    )
    assert typo.exit_code == 2
