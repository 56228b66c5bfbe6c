"""Training throughput: rollouts and rewards per GPU-hour, and how long the policy's GPU waits.

    python benchmarks/training.py                       # policy and evaluator share the GPU
    python benchmarks/training.py --eval-devices cuda:1 # the evaluator on a GPU of its own

Runs a short contrastive GRPO (the learning check's SFT policy when it exists, else a fresh tiny
policy) against the real evaluator and prints: rollouts (completions rewarded) and fresh
evaluations per GPU-hour (GPUs = the training device plus the evaluation devices), the share of
wall time spent inside the reward function (the policy's GPU does no training or generation
then: GRPO's step waits for its rewards), and, from NVML samples of the training GPU, its mean
utilisation inside and outside those reward windows (inside, on a shared GPU, it is the pool's
timing that keeps it busy).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning_settings import named_tasks, pick_tasks  # noqa: E402
from tiny_policy import build_policy  # noqa: E402

from cudal1.config import GRPOStageConfig  # noqa: E402
from cudal1.llm.model_dir import is_model_dir  # noqa: E402
from cudal1.train.grpo import STEPS_FILE, run_grpo  # noqa: E402

console = Console()


def nvml_handle(pynvml: Any, device: int) -> Any:
    """The NVML handle of CUDA device ``device`` of this process. NVML numbers the host's GPUs and
    ignores ``CUDA_VISIBLE_DEVICES``: in a lane of GPUs 1,2, NVML's index 0 is another lane's GPU.
    The device's UUID names the same GPU in both."""
    try:
        return pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{torch.cuda.get_device_properties(device).uuid}")
    except Exception as exc:  # an older torch or NVML: the index, right when every GPU is visible
        print(f"NVML: no GPU by UUID ({exc}); sampling NVML's GPU {device}", file=sys.stderr)
        return pynvml.nvmlDeviceGetHandleByIndex(device)


class UtilisationSampler:
    """NVML utilisation of this process's CUDA device ``index`` every ``period`` seconds, with
    wall-clock timestamps."""

    def __init__(self, index: int, period: float = 0.1) -> None:
        self.samples: list[tuple[float, int]] = []
        self.period, self.index = period, index
        self.gpu = "-"  # the sampled GPU's NVML UUID, once known
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            import pynvml
        except ImportError:
            return
        pynvml.nvmlInit()
        handle = nvml_handle(pynvml, self.index)
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        self.gpu = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        while not self._stop.is_set():
            self.samples.append((time.time(), pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
            time.sleep(self.period)

    def __enter__(self) -> UtilisationSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, default=Path("runs/training-bench"))
    parser.add_argument("--model", type=Path, default=Path("runs/learning-check/seed-0/sft/model"))
    parser.add_argument("--tasks", type=int, default=6, help="how many bundled tasks, alternating levels")
    parser.add_argument(
        "--task-names", nargs="+", default=None,
        help="these bundled tasks instead (the learning check's, for its SFT policy as --model)",
    )
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--eval-devices", nargs="*", default=None)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    size = "gpu" if cuda else "cpu"
    tasks = named_tasks(args.task_names, size) if args.task_names else pick_tasks(args.tasks, size)
    shutil.rmtree(args.work, ignore_errors=True)
    model = args.model if is_model_dir(args.model) else build_policy(args.work / "tiny", tasks)
    cfg = GRPOStageConfig.model_validate(
        {
            "optim": {"learning_rate": 1e-4, "max_steps": args.steps, "batch_size": 16, "save_steps": 1000},
            "lora": {"enabled": False},
            "num_generations": 8,
            "sampling": {"max_tokens": 512},
            "baseline_labels": ["cuda-graph"],
            "eval": {
                "device": "cuda" if cuda else "cpu",
                "correctness_trials": 3,
                "timing": {"budget_s": 1.0},
            },
            "pool": {"workers": 6, "spares": 2},
            "eval_devices": args.eval_devices or (),
        }
    )
    start = time.time()
    with UtilisationSampler(0) as sampler:
        run_grpo(model, tasks, args.work / "grpo", cfg)
    wall = time.time() - start
    steps = [json.loads(line) for line in (args.work / "grpo" / STEPS_FILE).read_text().splitlines()]
    windows = [(s["time"] - s["reward_wall_s"], s["time"]) for s in steps]
    inside = [u for t, u in sampler.samples if any(a <= t <= b for a, b in windows)]
    outside = [u for t, u in sampler.samples if not any(a <= t <= b for a, b in windows)]
    gpus = len({"cuda:0", *(args.eval_devices or [])}) if cuda else 1
    hours = wall / 3600 * gpus
    rollouts = sum(len(s["rewards"]) for s in steps)
    fresh = sum(s["fresh_evaluations"] for s in steps)
    reward_s = sum(s["reward_wall_s"] for s in steps)
    table = Table(
        title=f"GRPO throughput ({len(steps)} generation batches, {gpus} GPU(s), {wall:.0f} s wall)"
    )
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("rollouts per GPU-hour", f"{rollouts / hours:.0f}")
    table.add_row("fresh evaluations (rewards) per GPU-hour", f"{fresh / hours:.0f}")
    table.add_row("share of wall time in the reward (policy GPU idle)", f"{reward_s / wall:.1%}")
    mean = statistics.fmean
    table.add_row("training GPU utilisation inside reward windows", f"{mean(inside):.0f}%" if inside else "-")
    table.add_row("training GPU utilisation outside them", f"{mean(outside):.0f}%" if outside else "-")
    table.add_row("utilisation sampled on (NVML)", sampler.gpu)
    console.print(table)


if __name__ == "__main__":
    main()
