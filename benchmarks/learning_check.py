"""Learning check: does contrastive GRPO against the real evaluator raise reward and speedup?

    python benchmarks/learning_check.py --stage prepare   # baselines, tiny policy, SFT (a few minutes on an H100)
    python benchmarks/learning_check.py --stage grpo      # GRPO, then the table (12 steps; about 6 min)

prepare: the built-in proposer's baselines of a few bundled tasks are evaluated (``optimize``
with no LLM); a tiny random policy (``tiny_policy.py``) is fine-tuned on the verified ones, so
that it writes complete programs. grpo: contrastive GRPO from that policy against the evaluator,
its database started from the baseline run (so the first prompts are already contrastive).
The table compares the first generation batch (step 0, the SFT policy) with the last, and the
first three steps with the last three: mean reward, mean verified speedup of the samples,
success rate; then the reward curve. Everything lands in --work (default runs/learning-check).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiny_policy import build_policy  # noqa: E402

from cudal1.config import ExportConfig, GRPOStageConfig, OptimizeConfig, SFTStageConfig  # noqa: E402
from cudal1.schema import Task  # noqa: E402
from cudal1.search.optimize import DB_FILE, optimize  # noqa: E402
from cudal1.tasks import bundled_tasks  # noqa: E402
from cudal1.train.datasets import export_dataset  # noqa: E402
from cudal1.train.grpo import STEPS_FILE, run_grpo  # noqa: E402
from cudal1.train.sft import run_sft  # noqa: E402

console = Console()
BASELINES = ("cuda-graph", "cudnn-benchmark")  # torch.compile variants take minutes to build


def pick_tasks(n: int, size: str) -> list[Task]:
    """``n`` bundled tasks, alternating levels, so every level is in the check."""
    by_level: dict[int, list[Task]] = {}
    for t in bundled_tasks(size):  # type: ignore[arg-type]
        by_level.setdefault(t.level, []).append(t)
    order = [t for group in zip(*by_level.values(), strict=False) for t in group]
    return order[:n]


def eval_section(device: str, budget_s: float) -> dict[str, Any]:
    return {"device": device, "correctness_trials": 3, "timing": {"budget_s": budget_s}}


def prepare(work: Path, tasks: list[Task], args: argparse.Namespace) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    baselines = work / "baselines"
    if not (baselines / DB_FILE).is_file():
        cfg = OptimizeConfig.model_validate(
            {
                "rounds": 0,
                "baseline_labels": list(args.baselines),
                "eval": eval_section(device, 2.0),
                "pool": {"workers": 4, "spares": 2},
                "final": {"enabled": False},
            }
        )
        optimize(tasks, baselines, cfg)
    build_policy(work / "tiny", tasks)
    export_dataset([baselines], work / "sft-data", ExportConfig(test_fraction=0.0, include_reference=True))
    sft = SFTStageConfig.model_validate(
        {
            "optim": {
                "learning_rate": 1e-3,
                "max_steps": args.sft_steps,
                "batch_size": 8,
                "report_to": "none",
            },
            "lora": {"enabled": False},
            "max_length": 8192,
        }
    )
    shutil.rmtree(work / "sft", ignore_errors=True)
    run_sft(work / "tiny", work / "sft-data", work / "sft", sft)


def grpo(work: Path, tasks: list[Task], args: argparse.Namespace) -> None:
    out = work / "grpo"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shutil.copy(work / "baselines" / DB_FILE, out / DB_FILE)  # the first prompts see measured baselines
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = GRPOStageConfig.model_validate(
        {
            "optim": {
                "learning_rate": args.lr,
                "max_steps": args.steps,
                "batch_size": 16,
                "save_steps": 1000,
            },
            "lora": {"enabled": False},
            "num_generations": 8,
            "sampling": {"max_tokens": 512},
            "seed_baselines": False,
            "eval": eval_section(device, 1.0),
            "pool": {"workers": 6, "spares": 2},
            "eval_devices": args.eval_devices or (),
        }
    )
    run_grpo(work / "sft" / "model", tasks, out, cfg, resume=True)  # resume: keep the copied database


def summarise(work: Path) -> dict[str, Any]:
    steps = [json.loads(line) for line in (work / "grpo" / STEPS_FILE).read_text().splitlines()]

    def stats(records: list[dict[str, Any]]) -> dict[str, float | None]:
        rewards = [r for rec in records for r in rec["rewards"]]
        speedups = [s for rec in records for s in rec["speedups"]]
        return {
            "reward": statistics.fmean(rewards),
            "speedup": statistics.fmean(speedups) if speedups else None,
            "success": statistics.fmean(rec["success_rate"] for rec in records),
            "samples": len(rewards),
        }

    k = min(3, max(len(steps) // 2, 1))
    return {
        "first": stats(steps[:1]),
        "last": stats(steps[-1:]),
        "first_k": stats(steps[:k]),
        "last_k": stats(steps[-k:]),
        "k": k,
        "curve": [(rec["step"], rec["reward_mean"]) for rec in steps],
    }


def render(summary: dict[str, Any]) -> None:
    table = Table(title="learning check: contrastive GRPO from the SFT policy")
    for col in ("", "samples", "mean reward", "mean verified speedup", "success rate"):
        table.add_column(col)
    k = summary["k"]
    for name, key in (
        ("step 0", "first"),
        ("last step", "last"),
        (f"first {k} steps", "first_k"),
        (f"last {k} steps", "last_k"),
    ):
        s = summary[key]
        speedup = f"{s['speedup']:.3f}x" if s["speedup"] is not None else "-"
        table.add_row(name, str(s["samples"]), f"{s['reward']:.3f}", speedup, f"{s['success']:.2f}")
    console.print(table)
    console.print(
        "reward curve (step: mean reward): " + ", ".join(f"{s}: {r:.3f}" for s, r in summary["curve"])
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stage", choices=("prepare", "grpo", "all", "report"), default="all")
    parser.add_argument("--work", type=Path, default=Path("runs/learning-check"))
    parser.add_argument("--tasks", type=int, default=6, help="bundled tasks in the check")
    parser.add_argument("--baselines", nargs="+", default=list(BASELINES))
    parser.add_argument("--sft-steps", type=int, default=150)
    parser.add_argument("--steps", type=int, default=12, help="GRPO steps")
    parser.add_argument("--lr", type=float, default=3e-4, help="GRPO learning rate (full fine-tune)")
    parser.add_argument("--eval-devices", nargs="*", default=None)
    args = parser.parse_args()
    size = "gpu" if torch.cuda.is_available() else "cpu"
    tasks = pick_tasks(args.tasks, size)
    console.print(f"tasks: {', '.join(t.name for t in tasks)}")
    if args.stage in ("prepare", "all"):
        prepare(args.work, tasks, args)
    if args.stage in ("grpo", "all"):
        grpo(args.work, tasks, args)
    if not (args.work / "grpo" / STEPS_FILE).is_file():
        return
    summary = summarise(args.work)
    (args.work / "learning-check.json").write_text(json.dumps(summary, indent=2))
    render(summary)


if __name__ == "__main__":
    main()
