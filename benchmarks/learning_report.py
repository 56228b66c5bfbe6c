"""The learning check's tables and verdict: the arms with the best reachable mean speedup
(after ``prepare``), and per seed the policies' fresh scores, the paired test and the pass rule
(``learning_stats.py``), written to ``learning-check.json`` with the pass line (``report``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from learning_arms import Arm, held_out
from learning_remeasure import replies, sample_values, samples_files, trained_of
from learning_settings import console, load_arms
from learning_stats import BAR, SeedVerdict, judge_seed, trend
from rich.table import Table

from cudal1.run.database import CandidateDB
from cudal1.run.directory import DB_FILE
from cudal1.schema import Task


def reachable(arms: dict[str, list[Arm]]) -> dict[str, float]:
    """Best mean verified speedup over the tasks: with every arm, and with the arms SFT shows."""
    reward = [max((a.reward for a in v), default=0.0) for v in arms.values()]
    best = [max((a.speedup or 0.0 for a in v), default=0.0) for v in arms.values()]
    shown = [
        max((a.speedup or 0.0 for a in v if a.label not in held_out(v)), default=0.0) for v in arms.values()
    ]
    return {
        "best_reachable": statistics.fmean(best),
        "best_shown": statistics.fmean(shown),
        "best_reachable_reward": statistics.fmean(reward),
    }


def render_arms(arms: dict[str, list[Arm]]) -> None:
    table = Table(title="arms: each stack measured once (prepare); held-out ones never reach SFT")
    for col in ("task", "arm", "verified speedup", "reward", "SFT"):
        table.add_column(col)
    for task, task_arms in arms.items():
        hidden = held_out(task_arms)
        for a in sorted(task_arms, key=lambda a: -(a.speedup or 0.0)):
            speed = f"{a.speedup:.3f}x" if a.speedup is not None else "fails"
            table.add_row(
                task, a.label, speed, f"{a.reward:.3f}", "held out" if a.label in hidden else "shown"
            )
    console.print(table)
    r = reachable(arms)
    console.print(
        f"best reachable mean reward (each task's best arm): {r['best_reachable_reward']:.3f}; "
        f"mean verified speedup: {r['best_reachable']:.3f}x; "
        f"best among the arms SFT shows: {r['best_shown']:.3f}x"
    )


def report(work: Path, tasks: list[Task], args: argparse.Namespace) -> bool:
    arms = load_arms(work, tasks, args)
    reach = reachable(arms)
    verdicts: list[SeedVerdict] = []
    files = {seed: samples_files(work, seed) for seed in args.seeds}  # each read once
    with CandidateDB(work / "remeasure" / DB_FILE) as db:
        for seed in args.seeds:
            values = {name: sample_values(db, replies(p)) for name, p in files[seed].items()}
            if "sft" in values and "final" in values:
                verdicts.append(judge_seed(seed, values))
    render_verdicts(verdicts, reach)
    trained = {seed: {name: trained_of(p) for name, p in by_name.items()} for seed, by_name in files.items()}
    for line in trained_lines(trained):
        console.print(line)
    passed = bool(verdicts) and len(verdicts) == len(args.seeds) and all(v.passed for v in verdicts)
    summary = {
        "tasks": [t.name for t in tasks],
        "bar": BAR,
        **reach,
        "seeds": [v.as_dict() for v in verdicts],
        "trained": {str(seed): by_policy for seed, by_policy in trained.items()},
        "passed": passed,
    }
    (work / "learning-check.json").write_text(json.dumps(summary, indent=2))
    console.print(
        f"passed (every seed: final >= {BAR}x, above SFT beyond the paired interval, no gain by the control): "
        + ("yes" if passed else "NO")
    )
    return passed


def trained_lines(trained: dict[int, dict[str, dict[str, object] | None]]) -> list[str]:
    """One line per policy with the settings it was trained with, the same on every seed, or
    each seed's where they differ ("not recorded" for samples older than the record): a report
    gathered from lanes trained at other times says what it compares."""
    lines = []
    names = sorted({name for by_policy in trained.values() for name in by_policy})
    for name in names:
        per_seed = {seed: by_policy.get(name) for seed, by_policy in trained.items() if name in by_policy}
        texts = {seed: "not recorded" if s is None else " ".join(f"{k}={v}" for k, v in s.items())
                 for seed, s in per_seed.items()}
        if len(set(texts.values())) == 1:
            lines.append(f"trained: {name}: {next(iter(texts.values()))}")
        else:
            lines.extend(f"trained: {name}, seed {seed}: {text}" for seed, text in texts.items())
    return lines


def render_verdicts(verdicts: list[SeedVerdict], reach: dict[str, float]) -> None:
    table = Table(title="learning check: mean verified speedup, fresh re-measurement, 95% intervals")
    for col in (
        "seed",
        "SFT policy",
        "final policy",
        "final - SFT (paired)",
        "control",
        "control - SFT",
        "ablation",
        "best reachable",
        "pass",
    ):
        table.add_column(col)
    for v in verdicts:

        def cell(i: Any, unit: str = "x") -> str:
            return i.text(unit) if i is not None else "-"

        table.add_row(
            str(v.seed),
            cell(v.sft),
            cell(v.final),
            cell(v.final_vs_sft, ""),
            cell(v.control),
            control_cell(v),
            cell(v.ablation) + ("" if v.ablation_vs_sft is None else f"; - SFT {cell(v.ablation_vs_sft, '')}"),
            f"{reach['best_reachable']:.3f}x",
            "yes" if v.passed else "no",
        )
    console.print(table)


def control_cell(v: SeedVerdict) -> str:
    """The control's paired difference from SFT, whether it is flat, fell or rose, and whether
    the rise is a shown gain (which fails the seed); then the final policy's paired difference
    from the control (shown, not judged)."""
    if v.control_vs_sft is None:
        return "- (no control: no pass)"
    shown = " GAINED" if v.control_gained else ""
    beyond = "" if v.final_vs_control is None else f"; final - control {v.final_vs_control.text('')}"
    return f"{v.control_vs_sft.text('')} {trend(v.control_vs_sft, v.sft.mean)}{shown}{beyond}"
