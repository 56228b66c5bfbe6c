"""Learning check: does contrastive GRPO against the real evaluator raise reward and speedup?

    python benchmarks/learning_check.py --stage prepare   # baselines, tiny policy, SFT (a few minutes on an H100)
    python benchmarks/learning_check.py --stage grpo      # GRPO, then the table (30 steps)
    python benchmarks/learning_check.py --device cpu --tasks 3 --steps 20   # all of it on a CPU (6 min)

prepare: the built-in proposer's baselines of a few bundled tasks are evaluated (``optimize``
with no LLM); a tiny random policy (``tiny_policy.py``) is fine-tuned on the verified ones
(the reference included), each paired with the prompts GRPO will show for its task: the one-shot
prompt and the contrastive prompts that ``train.grpo.prompt_stream`` builds from the baseline
database, which are what the policy sees at step 0. Fine-tuning on the one-shot prompt alone
left the policy writing 1-3 junk tokens under the contrastive prompts (most rewards were parse
failures; H100, 2026-11). Every variant of a task is paired with the same prompts, so the SFT
policy draws them about evenly: GRPO's groups then hold different programs with different
measured speedups, which is the spread the group-relative advantage needs. A probe then samples
the policy on those prompts and prints how many samples parse as a complete ``ModelNew`` and
which variants it draws.

grpo: contrastive GRPO from that policy against the evaluator, its database started from the
baseline run (so the first prompts are already contrastive, and a sample that reproduces a
baseline reuses its measured result). One generation batch holds one prompt per task, so every
step samples every task. The table compares the first generation batch (step 0, the SFT policy)
with the last, and the first three steps with the last three: mean reward, mean verified speedup
of the samples, success rate; then the reward curve. Everything lands in --work (default
runs/learning-check).

On a CPU (``--device cpu``, the CPU sizes of the tasks) the baselines are slower than eager (no
CUDA graph, no cuDNN; the wrapper costs time), so the reference is the fastest variant: learning
shows the same way, as a move of the samples towards the faster programs.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiny_policy import build_policy  # noqa: E402

from cudal1.config import GRPOStageConfig, OptimizeConfig, SFTStageConfig  # noqa: E402
from cudal1.run.database import CandidateDB  # noqa: E402
from cudal1.run.directory import DB_FILE  # noqa: E402
from cudal1.schema import Task  # noqa: E402
from cudal1.search.optimize import optimize  # noqa: E402
from cudal1.search.parsing import extract  # noqa: E402
from cudal1.search.prompts import prompt_hash, render_generation_prompt  # noqa: E402
from cudal1.tasks import bundled_tasks  # noqa: E402
from cudal1.train.datasets import answer_text, is_verified  # noqa: E402
from cudal1.train.grpo import STEPS_FILE, prompt_stream, run_grpo  # noqa: E402
from cudal1.train.models import load_policy  # noqa: E402
from cudal1.train.pool_reward import sol_ms  # noqa: E402
from cudal1.train.reward import reward_from_result  # noqa: E402
from cudal1.train.sft import run_sft  # noqa: E402

# a log (tee, a file) gets wide tables, not 80 squeezed columns
console = Console(width=None if sys.stdout.isatty() else 140)
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


def pool_section(device: str, workers: int) -> dict[str, Any]:
    # Two cores on the CPU machines: more timing workers than cores only adds noise.
    return {"workers": workers, "spares": 2} if device == "cuda" else {"workers": 2, "spares": 1}


def grpo_config(args: argparse.Namespace, n_tasks: int) -> GRPOStageConfig:
    """GRPO's settings; ``prepare`` builds its SFT prompts from the same ones."""
    return GRPOStageConfig.model_validate(
        {
            "optim": {
                "learning_rate": args.lr,
                "max_steps": args.steps,
                # one prompt per task per generation batch: every step samples every task
                "batch_size": args.generations * n_tasks,
                "save_steps": 1000,
                # bf16 would load the weights in bf16 (train.models.load_policy), where Adam steps
                # of about the learning rate are at the weights' rounding step; the model is tiny
                "precision": "fp32",
            },
            "lora": {"enabled": False},
            "num_generations": args.generations,
            "sampling": {"max_tokens": 128, "temperature": args.temperature},
            "seed_baselines": False,
            "eval": eval_section(args.device, 1.0),
            "pool": pool_section(args.device, 6),
            "eval_devices": args.eval_devices or (),
            "device": args.device,
        }
    )


def sft_rows(baselines: Path, tasks: list[Task], cfg: GRPOStageConfig, cycles: int) -> list[dict[str, Any]]:
    """Every verified variant of a task (the reference included) as the answer to each prompt
    GRPO's first ``cycles`` passes over the tasks will show, and to the one-shot prompt."""
    prompts = {t.name: {prompt_hash(p): p for p in [render_generation_prompt(t)]} for t in tasks}
    rows: list[dict[str, Any]] = []
    with CandidateDB(baselines / DB_FILE) as db:
        for row in itertools.islice(prompt_stream(db, tasks, cfg), cycles * len(tasks)):
            prompts[row["task"]][row["prompt_hash"]] = row["prompt"]
        for t in tasks:
            answers = [answer_text(r) for r in db.evaluated(t.name) if is_verified(r)]
            rows += [
                {"prompt": p, "completion": [{"role": "assistant", "content": a}]}
                for p in prompts[t.name].values()
                for a in answers
            ]
    return rows


def prepare(work: Path, tasks: list[Task], args: argparse.Namespace) -> None:
    baselines = work / "baselines"
    if not (baselines / DB_FILE).is_file():
        cfg = OptimizeConfig.model_validate(
            {
                "rounds": 0,
                "baseline_labels": list(args.baselines),
                "eval": eval_section(args.device, 2.0),
                "pool": pool_section(args.device, 4),
                "final": {"enabled": False},
            }
        )
        optimize(tasks, baselines, cfg)
    build_policy(work / "tiny", tasks, labels=args.baselines)
    grpo_cfg = grpo_config(args, len(tasks))
    rows = sft_rows(baselines, tasks, grpo_cfg, cycles=4)
    shutil.rmtree(work / "sft-data", ignore_errors=True)
    Dataset.from_list(rows).save_to_disk(str(work / "sft-data"))
    console.print(f"SFT rows: {len(rows)} (prompt, verified variant) pairs over {len(tasks)} tasks")
    sft = SFTStageConfig.model_validate(
        {
            "optim": {
                "learning_rate": args.sft_lr,
                "max_steps": args.sft_steps,
                "batch_size": 8,
                "precision": "fp32",
                "report_to": "none",
            },
            "lora": {"enabled": False},
            "max_length": 8192,
            "device": args.device,
        }
    )
    shutil.rmtree(work / "sft", ignore_errors=True)
    model = run_sft(work / "tiny", work / "sft-data", work / "sft", sft)
    render_probe(probe(model, baselines, tasks, grpo_cfg, samples=16))


def probe(
    model_dir: Path, baselines: Path, tasks: list[Task], cfg: GRPOStageConfig, *, samples: int
) -> list[dict[str, Any]]:
    """Sample the policy on each task's first GRPO prompt (GRPO's temperature, and greedy): how
    many replies parse as a complete ``ModelNew``, and which verified variants they reproduce."""
    model, tokenizer = load_policy(model_dir, bf16=False)
    model.to(cfg.device).eval()
    torch.manual_seed(0)
    out = []
    with CandidateDB(baselines / DB_FILE) as db:
        for task in tasks:
            known = {r.source: r.label for r in db.evaluated(task.name) if is_verified(r)}
            prompt = next(prompt_stream(db, [task], cfg))["prompt"]
            ids = tokenizer.apply_chat_template(
                prompt, add_generation_prompt=True, return_tensors="pt", return_dict=True
            ).to(model.device)
            n = ids["input_ids"].shape[1]
            common = {"max_new_tokens": cfg.sampling.max_tokens, "pad_token_id": tokenizer.pad_token_id}
            with torch.no_grad():
                sampled = model.generate(
                    **ids,
                    do_sample=True,
                    temperature=cfg.sampling.temperature,
                    top_p=cfg.sampling.top_p,
                    num_return_sequences=samples,
                    **common,
                )
                greedy = model.generate(**ids, do_sample=False, **common)
            kinds = [_reply_kind(tokenizer.decode(s[n:], skip_special_tokens=True), known) for s in sampled]
            out.append(
                {
                    "task": task.name,
                    "prompt_tokens": n,
                    "kinds": collections.Counter(kinds),
                    "greedy": _reply_kind(tokenizer.decode(greedy[0][n:], skip_special_tokens=True), known),
                }
            )
    return out


def _reply_kind(text: str, known: dict[str, str]) -> str:
    ex = extract(text)
    if not ex.ok or ex.code is None:
        return "parse failure"
    return known.get(ex.code, "other program")


def render_probe(results: list[dict[str, Any]]) -> None:
    table = Table(title="SFT policy on GRPO's first prompts (sampled at GRPO's temperature, and greedy)")
    for col in ("task", "prompt tokens", "complete ModelNew", "verified variant", "drawn", "greedy"):
        table.add_column(col)
    total = parsed = variants = 0
    for r in results:
        kinds: collections.Counter[str] = r["kinds"]
        n = sum(kinds.values())
        ok = n - kinds["parse failure"]
        known = ok - kinds["other program"]
        total, parsed, variants = total + n, parsed + ok, variants + known
        drawn = ", ".join(f"{k} {v}" for k, v in kinds.most_common())
        table.add_row(r["task"], str(r["prompt_tokens"]), f"{ok}/{n}", f"{known}/{n}", drawn, r["greedy"])
    console.print(table)
    console.print(
        f"parse rate {parsed / max(total, 1):.2f}, verified-variant rate {variants / max(total, 1):.2f} "
        f"over {total} samples"
    )


def grpo(work: Path, tasks: list[Task], args: argparse.Namespace) -> None:
    out = work / "grpo"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shutil.copy(work / "baselines" / DB_FILE, out / DB_FILE)  # the first prompts see measured baselines
    cfg = grpo_config(args, len(tasks))
    render_variants(variant_rewards(work / "baselines", tasks, cfg))
    run_grpo(work / "sft" / "model", tasks, out, cfg, resume=True)  # resume: keep the copied database


def variant_rewards(
    baselines: Path, tasks: list[Task], cfg: GRPOStageConfig
) -> list[tuple[str, str, float, float]]:
    """(task, variant, verified speedup, reward) of every verified baseline: what a sample that
    reproduces it earns (its stored result is reused), so the best mean reward a policy can reach
    is the mean of each task's best."""
    out = []
    with CandidateDB(baselines / DB_FILE) as db:
        for t in tasks:
            for r in db.evaluated(t.name):
                if is_verified(r) and r.result is not None and r.speedup is not None:
                    reward = reward_from_result(r.result, cfg.reward, sol_ms=sol_ms(r.result))
                    out.append((t.name, r.label, r.speedup, reward))
    return out


def render_variants(rows: list[tuple[str, str, float, float]]) -> None:
    table = Table(
        title="what each verified variant earns (its measured result, reused when a sample repeats it)"
    )
    for col in ("task", "variant", "verified speedup", "reward"):
        table.add_column(col)
    best: dict[str, float] = {}
    for task, label, speedup, reward in rows:
        table.add_row(task, label, f"{speedup:.3f}x", f"{reward:.3f}")
        best[task] = max(best.get(task, reward), reward)
    console.print(table)
    if best:
        console.print(
            f"best reachable mean reward (each task's best variant): {statistics.fmean(best.values()):.3f}"
        )


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


def learned(summary: dict[str, Any]) -> bool:
    """The check passes when the last steps earn more, and verify faster, than the first ones."""
    first, last = summary["first_k"], summary["last_k"]
    faster = (
        first["speedup"] is not None and last["speedup"] is not None and last["speedup"] > first["speedup"]
    )
    return bool(last["reward"] > first["reward"] and faster)


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
    parser.add_argument("--stage", choices=("prepare", "probe", "grpo", "all", "report"), default="all")
    parser.add_argument("--work", type=Path, default=Path("runs/learning-check"))
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="where everything runs (and the tasks' size); auto: the GPU when there is one",
    )
    parser.add_argument("--tasks", type=int, default=6, help="bundled tasks in the check")
    parser.add_argument("--baselines", nargs="+", default=list(BASELINES))
    parser.add_argument("--sft-steps", type=int, default=200)
    parser.add_argument("--sft-lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=30, help="GRPO steps")
    parser.add_argument("--lr", type=float, default=3e-4, help="GRPO learning rate (full fine-tune)")
    parser.add_argument("--generations", type=int, default=8, help="samples per prompt (one GRPO group)")
    parser.add_argument("--temperature", type=float, default=1.0, help="GRPO's sampling temperature")
    parser.add_argument("--eval-devices", nargs="*", default=None)
    args = parser.parse_args()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    tasks = pick_tasks(args.tasks, "gpu" if args.device == "cuda" else "cpu")
    console.print(f"tasks: {', '.join(t.name for t in tasks)}")
    if args.stage in ("prepare", "all"):
        prepare(args.work, tasks, args)
    if args.stage == "probe":
        render_probe(
            probe(
                args.work / "sft" / "model",
                args.work / "baselines",
                tasks,
                grpo_config(args, len(tasks)),
                samples=16,
            )
        )
    if args.stage in ("grpo", "all"):
        grpo(args.work, tasks, args)
    if args.stage == "probe" or not (args.work / "grpo" / STEPS_FILE).is_file():
        return
    summary = summarise(args.work)
    summary["learned"] = learned(summary)
    (args.work / "learning-check.json").write_text(json.dumps(summary, indent=2))
    render(summary)
    k = summary["k"]
    console.print(
        f"learned (last {k} steps above the first {k} in mean reward and mean verified speedup): "
        + ("yes" if summary["learned"] else "NO")
    )
    sys.exit(0 if summary["learned"] else 1)


if __name__ == "__main__":
    main()
