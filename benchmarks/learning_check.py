"""Learning check: does contrastive GRPO against the real evaluator find faster programs than
its SFT policy wrote, beyond noise, on every seed, while a control with shuffled rewards does not?

    python benchmarks/learning_check.py --stage prepare                # arms measured (resumable)
    python benchmarks/learning_check.py --stage sft grpo --seeds 0 --resume
    python benchmarks/learning_check.py --stage control ablation --seeds 0 --resume
    python benchmarks/learning_check.py --stage remeasure report --resume
    python benchmarks/learning_check.py --device cpu --seeds 0 --steps 6 --generations 4 --samples 8 \
        --sft-lr 2e-3 --policy-hidden 128 --policy-layers 2   # the CPU miniature, all stages (about 4 min)

Stages (``--stage``, several allowed; each skips what ``--work`` already holds, so a call cut off
by the device tool's limit is resumed by the same command with ``--resume``):

- **prepare**: every arm of every task (``learning_arms.py``: stacks of torch.compile modes,
  channels_last, scoped cuDNN flags and a CUDA graph, written as a base block plus appended
  wrapper blocks) is evaluated once in ``arms/``; the table of arms and the **best reachable
  mean speedup** are printed; ``shown.db`` holds the arms SFT shows: every single block and the
  combinations slower than the task's best single block. The faster combinations are held out.
- **sft** (per seed): a tiny random policy (``tiny_policy.py``, weights drawn under the seed)
  whose tokenizer never merges across a block boundary, so a program is a few tokens per block
  and an unseen stack is a sequence of seen tokens; fine-tuned on (prompt, shown arm) pairs, the
  prompts being GRPO's first ones. ``ablation-sft`` is the same with the exemplars' speedups
  hidden from the prompts (``exemplars.show_speedups: false``).
- **grpo**, **control**, **ablation** (per seed): contrastive GRPO from the SFT policy; the run's
  database starts as ``shown.db`` and an arm a sample writes is copied in with its stored result
  (``PremeasuredReward``: no torch.compile builds during training). The control is the same run
  with each batch's rewards shuffled over its samples (``ShuffledReward``; ``--control-shuffle
  verified`` permutes only the verified samples' rewards, so a failure keeps its reward and only
  the speed signal is gone); the ablation starts from
  ``ablation-sft`` and hides the speedups from every prompt.
- **remeasure** (``learning_remeasure.py``): each policy (SFT, final, control, ablation of every
  seed) was sampled ``--samples`` times on each task's first prompt, at GRPO's temperature, right
  after it was trained (``seed-N/samples/*.json``: the models need not outlive their call); every
  distinct program is evaluated in ``remeasure/``, a run directory no training stage reads or
  writes, so no number a policy was trained on is reused. A sample that does not verify counts as 0x.
- **report** (``learning_report.py``): per seed, the mean verified speedup with a 95% interval of
  the SFT policy, the final policy, the control and the ablation, the paired final-vs-SFT
  difference (``learning_stats.py`` says which test and why), the best reachable, and per
  policy the settings it was trained with (each samples file keeps them: lanes trained in other
  calls are gathered into one report); ``learning-check.json``.
  Pass: on every seed the final policy's mean >= 1.3x and above the SFT policy's beyond the paired
  interval, and the control shows no gain (its paired difference from SFT is not above 0 beyond
  its interval by more than 5% of the SFT score: flat, or fell).
  Exit 0 on a pass, 1 otherwise.

GPU plan. ``prepare`` measures the arms once: over three H200s (``--eval-devices cuda:0 cuda:1
cuda:2``, 18 workers) the 48 arms of stacks of at most 3 blocks took one call's 480 s
(2026-11-28). Each trained policy then runs in a ``--work`` of its own, started from the measured
arms (``--from runs/learning-check``), and trains its own SFT policy first (seeded: the control's
SFT run repeats the GRPO lane's; ``take_from`` reports it if their samples differ): a seed's
models (about 20 MB, more with the optimizer's state) cannot come back from the device, so a
policy is trained, sampled and done inside one call. With ``--strays fail`` (the default) GRPO
times nothing: every reward is an arm's stored result or a parse failure. A GRPO run of 30 steps
took 246 s when its samples mostly wrote arms (the ablation of seed 0), and 13-21 steps in 400 s
when strays were evaluated (up to 71 s a step for their torch.compile builds). Since nothing is
timed, the three policies of a seed share one GPU at once (``gpu-check.sh`` lanes run steps
joined by ``&`` together): on four H200s each seed's three (SFT, 30 GRPO steps, samples) were
done inside a call of 281 s, and the re-measurement of all nine policies and the SFT ones (77
distinct programs) took two lanes of two GPUs and one GPU (2026-11-28):

1. ``lanes '0:train learning-check sft grpo --seeds 0 --from runs/learning-check --work
   runs/learning-check-s0-grpo & train learning-check sft control --seeds 0 --from ... --work
   runs/learning-check-s0-control & train learning-check ablation --seeds 0 --from ... --work
   runs/learning-check-s0-ablation' '1:... --seeds 1 ...'`` (carry ``.whl runs``);
2. ``gpu-unpack.sh`` brings each folder back as ``runs/learning-check-PART``; then ``remeasure
   report --from runs/learning-check-s0-grpo runs/learning-check-s0-control ... --eval-devices
   cuda:0 cuda:1 cuda:2 cuda:3`` on the main ``--work`` gathers every policy's samples and
   measures each distinct program afresh over every GPU.

At ``--beta 0.04`` (the reference model's KL term) the three seeds' nine policies trained in three
lanes of one call of 513 s (four H200s); a fresh ``--work`` re-measured 66 programs on two GPUs
inside a lane of 400 s, and 72 needed a second call (67 in 400 s, the last 5 in 84 s; carry the
lanes' folders under one directory: a call carries at most 8 paths).

On a CPU (``--device cpu``, CPU task sizes) the CUDA-only blocks do nothing, so the arms are
torch.compile and channels_last and the tasks are small: torch.compile is usually slower than
eager there, so the 1.3x bar is not reachable; the miniature shows the pipeline end to end.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import sys
from pathlib import Path
from typing import Any, get_args

import torch
from datasets import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning_arms import (  # noqa: E402
    ControlShuffle,
    PremeasuredReward,
    ShuffledReward,
    Strays,
    measure_arms,
    write_shown,
)
from learning_remeasure import POLICY_OF, samples_dir, save_samples, stage_remeasure  # noqa: E402
from learning_report import render_arms, report  # noqa: E402
from learning_settings import (  # noqa: E402
    CPU_TASKS,
    GPU_TASKS,
    MODEL,
    console,
    eval_config,
    grpo_config,
    load_arms,
    named_tasks,
    pool_config,
)
from tiny_policy import build_stacked_policy  # noqa: E402

from cudal1.config import GRPOStageConfig, SFTStageConfig  # noqa: E402
from cudal1.run.database import CandidateDB  # noqa: E402
from cudal1.run.directory import DB_FILE  # noqa: E402
from cudal1.schema import Task  # noqa: E402
from cudal1.search.prompts import render_generation_prompt  # noqa: E402
from cudal1.train.datasets import answer_text, is_verified  # noqa: E402
from cudal1.train.grpo import prompt_stream, run_grpo  # noqa: E402
from cudal1.train.sft import run_sft  # noqa: E402

STAGES = ("prepare", "sft", "grpo", "control", "ablation", "remeasure", "report")
TRAINED = ("grpo", "control", "ablation")  # policies besides the SFT one, each a GRPO run


def done(path: Path) -> bool:
    return (path / MODEL / "config.json").is_file()


# -- prepare -------------------------------------------------------------------------------------


def prepare(work: Path, tasks: list[Task], args: argparse.Namespace) -> None:
    measure_arms(
        work / "arms",
        tasks,
        eval_config(args.device, 2.0),
        pool_config(args.device, args.eval_devices or ()),
        cuda=args.device == "cuda",
        known=[d / "arms" / DB_FILE for d in args.arms_from],
    )
    arms = load_arms(work, tasks, args)
    if not (work / "shown.db").is_file():
        write_shown(work / "shown.db", arms, tasks)


# -- sft and GRPO --------------------------------------------------------------------------------


def sft_rows(shown: Path, tasks: list[Task], cfg: GRPOStageConfig, cycles: int = 4) -> list[dict[str, Any]]:
    """Every shown arm of a task as the answer to each prompt GRPO's first ``cycles`` passes
    over the tasks will show, and to the one-shot prompt: the SFT policy then draws the shown
    arms about evenly, the spread GRPO's group-relative advantage needs."""
    prompts = {t.name: [render_generation_prompt(t)] for t in tasks}
    rows: list[dict[str, Any]] = []
    with CandidateDB(shown) as db:
        for row in itertools.islice(prompt_stream(db, tasks, cfg), cycles * len(tasks)):
            prompts[row["task"]].append(row["prompt"])
        for t in tasks:
            answers = [answer_text(r) for r in db.evaluated(t.name) if is_verified(r)]
            rows += [
                {"prompt": p, "completion": [{"role": "assistant", "content": a}]}
                for p in prompts[t.name]
                for a in answers
            ]
    return rows


def stage_sft(work: Path, tasks: list[Task], args: argparse.Namespace, seed: int, *, ablation: bool) -> None:
    root = work / f"seed-{seed}"
    out = root / ("ablation-sft" if ablation else "sft")
    if done(out):
        if not ablation and not (samples_dir(work, seed) / "sft.json").is_file():
            save_samples(work, tasks, args, seed, "sft", out)
        return
    cfg = grpo_config(args, len(tasks), seed, show_speedups=not ablation)
    if not (root / "tiny" / "config.json").is_file():
        build_stacked_policy(
            root / "tiny",
            tasks,
            work / "shown.db",
            [cfg, grpo_config(args, len(tasks), seed, show_speedups=False)],
            hidden=args.policy_hidden,
            layers=args.policy_layers,
            seed=seed,
        )
    data = out.with_name(out.name + "-data")
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    Dataset.from_list(sft_rows(work / "shown.db", tasks, cfg)).save_to_disk(str(data))
    sft = SFTStageConfig.model_validate(
        {
            "optim": {
                "learning_rate": args.sft_lr,
                "max_steps": args.sft_steps,
                "batch_size": 8,
                "precision": "fp32",
                "report_to": "none",
                "seed": seed,
            },
            "lora": {"enabled": False},
            "max_length": 8192,
            "device": args.device,
        }
    )
    run_sft(root / "tiny", data, out, sft)
    if not ablation:  # the ablation is judged by its GRPO policy; its SFT policy is not re-measured
        save_samples(work, tasks, args, seed, "sft", out)


def stage_grpo(work: Path, tasks: list[Task], args: argparse.Namespace, seed: int, kind: str) -> None:
    root = work / f"seed-{seed}"
    out = root / kind
    start = root / ("ablation-sft" if kind == "ablation" else "sft")
    if done(out):
        if not (samples_dir(work, seed) / f"{POLICY_OF[kind]}.json").is_file():
            save_samples(work, tasks, args, seed, POLICY_OF[kind], out)
        return
    if not done(start):
        raise SystemExit(
            f"{kind} of seed {seed} needs {start}: run --stage {'ablation' if kind == 'ablation' else 'sft'} first"
        )
    out.mkdir(parents=True, exist_ok=True)
    if not (out / DB_FILE).is_file():
        shutil.copy(work / "shown.db", out / DB_FILE)
    arms = load_arms(work, tasks, args)
    cfg = grpo_config(args, len(tasks), seed, show_speedups=kind != "ablation")
    failures = (cfg.reward.incorrect, cfg.reward.reject) if args.control_shuffle == "verified" else ()

    def wrap(reward: Any) -> Any:
        premeasured = PremeasuredReward(reward, arms, tasks, strays=args.strays, log=out / "strays.jsonl")
        return ShuffledReward(premeasured, seed, failures) if kind == "control" else premeasured

    run_grpo(start / MODEL, tasks, out, cfg, resume=True, wrap_reward=wrap)
    save_samples(work, tasks, args, seed, POLICY_OF[kind], out)


def take_from(work: Path, sources: list[Path], *, samples: bool) -> None:
    """Start ``work`` from other work folders: their measured arms and ``shown.db`` where ``work``
    has none (a lane of one GPU machine training one policy in a folder of its own), and, with
    ``samples`` (the stages re-measure or report), every policy's samples ``work`` lacks (the
    lanes' samples gathered). A policy's samples found twice and different are reported, and the
    first kept. A training lane takes no samples: those it took along would be gathered again
    from its folder as its own, and the first kept (on four H200s the lanes carried the last
    stop's samples of other seeds that way, 2026-11-28)."""
    work.mkdir(parents=True, exist_ok=True)
    for src in sources:
        if not (src / "shown.db").is_file() or not (src / "arms").is_dir():
            raise SystemExit(f"--from {src}: no measured arms there (arms/ and shown.db)")
        if not (work / "shown.db").is_file():
            shutil.copytree(src / "arms", work / "arms", dirs_exist_ok=True)
            for f in src.glob("shown.db*"):
                shutil.copy2(f, work / f.name)
        if not samples:
            continue
        for sample in sorted(src.glob("seed-*/samples/*.json")):
            mine = work / sample.relative_to(src)
            if not mine.is_file():
                mine.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(sample, mine)
                console.print(f"{mine.relative_to(work)} <- {src}")
            elif mine.read_bytes() != sample.read_bytes():
                console.print(f"[yellow]{mine.relative_to(work)}: {src} holds other samples; kept the first[/yellow]")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stage", nargs="+", choices=(*STAGES, "all"), default=["all"])
    parser.add_argument("--work", type=Path, default=Path("runs/learning-check"))
    parser.add_argument("--resume", action="store_true", help="keep what --work holds and skip what is done")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument(
        "--tasks",
        nargs="+",
        default=None,
        help=f"bundled task names (GPU: {' '.join(GPU_TASKS)}; CPU: {' '.join(CPU_TASKS)})",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--sft-steps", type=int, default=200)
    parser.add_argument("--sft-lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=30, help="GRPO steps")
    parser.add_argument("--lr", type=float, default=3e-4, help="GRPO learning rate (full fine-tune)")
    parser.add_argument("--generations", type=int, default=8, help="samples per prompt (one GRPO group)")
    parser.add_argument(
        "--beta",
        type=float,
        default=0.04,
        help="GRPO's KL coefficient against the SFT policy (0: none). With none and every reward shuffled,"
        " the controls of seeds 0 and 2 on four H200s drifted far below their SFT policy (2026-11-28)",
    )
    parser.add_argument(
        "--control-shuffle",
        choices=get_args(ControlShuffle),
        default="all",
        help="the control's rewards: all (each batch's rewards permuted over its samples, the issue's control)"
        " or verified (only the verified samples' rewards permuted among them; a failure keeps its reward)."
        " On four H200s at beta 0.04 (2026-11-28) two of three controls stayed flat either way; the third"
        " fell with all (into replies with no program) and rose with verified (its programs that verified"
        " were faster, with no speed signal)",
    )
    parser.add_argument(
        "--temperature", type=float, default=1.0, help="GRPO's and the re-measurement's sampling temperature"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=64, help="completion tokens (a stack is a few per block)"
    )
    parser.add_argument(
        "--samples", type=int, default=16, help="samples per task and policy in the re-measurement"
    )
    parser.add_argument(
        "--strays", choices=get_args(Strays), default="fail",
        help="GRPO's reward for a program that is no measured arm: fail (scored as a reply with no program;"
        " training times nothing) or evaluate (a fresh evaluation, its build included); remeasure evaluates"
        " every program either way",
    )
    parser.add_argument("--policy-hidden", type=int, default=256)
    parser.add_argument("--policy-layers", type=int, default=4)
    parser.add_argument(
        "--eval-devices", nargs="*", default=None,
        help="GPUs the evaluator times on (prepare, GRPO's rewards, remeasure), e.g. cuda:0 cuda:1",
    )
    parser.add_argument(
        "--arms-from", nargs="+", type=Path, default=[], metavar="WORK",
        help="prepare: take the arms other --work folders measured (lanes that split --tasks) instead of"
        " measuring them again",
    )
    parser.add_argument(
        "--from", dest="sources", nargs="+", type=Path, default=[], metavar="WORK",
        help="start --work from these work folders: their arms and shown.db where --work has none (a lane's own"
        " --work), and with remeasure or report among the stages the policies' samples it lacks (the lanes'"
        " samples gathered)",
    )
    args = parser.parse_args()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    stages = STAGES if "all" in args.stage else tuple(args.stage)
    if "prepare" in stages and args.work.is_dir() and any(args.work.iterdir()) and not args.resume:
        raise SystemExit(f"{args.work} is not empty: pass --resume to continue it, or another --work")
    if args.sources:
        take_from(args.work, args.sources, samples=bool({"remeasure", "report"} & set(stages)))
    tasks = named_tasks(
        args.tasks or (GPU_TASKS if args.device == "cuda" else CPU_TASKS),
        "gpu" if args.device == "cuda" else "cpu",
    )
    console.print(
        f"tasks: {', '.join(t.name for t in tasks)}; seeds: {args.seeds}; stages: {', '.join(stages)}"
    )
    if "prepare" in stages:
        prepare(args.work, tasks, args)
    render_arms(load_arms(args.work, tasks, args))
    for seed in args.seeds:
        if "sft" in stages:
            stage_sft(args.work, tasks, args, seed, ablation=False)
        for kind in TRAINED:
            if kind == "ablation" and kind in stages:
                stage_sft(args.work, tasks, args, seed, ablation=True)
            if kind in stages:
                stage_grpo(args.work, tasks, args, seed, kind)
    if "remeasure" in stages:
        stage_remeasure(args.work, tasks, args)
    if "report" in stages:
        sys.exit(0 if report(args.work, tasks, args) else 1)


if __name__ == "__main__":
    main()
