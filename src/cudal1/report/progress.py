"""The wording of progress lines (``cli.progress`` prints them): one per finished evaluation, one
per finished task and one per logged training step, the same in every long command, and the line
that says what a session's seed files matched. Pure string formatting of the run's events
(``run.events``) and seeds (``search.seeds.SeedSet``)."""

from __future__ import annotations

from cudal1.run.events import Evaluated, TaskFinal, TrainStep
from cudal1.run.selection import REFERENCE_LABEL
from cudal1.search.seeds import SeedSet


def interval(ci_low: float | None, ci_high: float | None) -> str:
    return f" [{ci_low:.3f}, {ci_high:.3f}]" if ci_low is not None and ci_high is not None else ""


def evaluation_line(event: Evaluated) -> str:
    """``task label: verdict speedup [CI]``, e.g. ``3_softmax cuda-graph: correct 1.020x [1.001, 1.040]``."""
    head = f"{event.task} {event.label}"
    if event.ok and event.speedup is not None:
        return f"{head}: correct {event.speedup:.3f}x{interval(event.ci_low, event.ci_high)}"
    return f"{head}: not ok: {(event.error or 'no result')[:160]}"


def task_line(event: TaskFinal) -> str:
    """A finished task: the variant kept, or the reference when nothing beat it beyond its interval."""
    task, label, speedup = event.task, event.label, event.speedup
    measured = (
        f"{label} {speedup:.3f}x{interval(event.ci_low, event.ci_high)}"
        if label and speedup is not None
        else ""
    )
    if event.faster:
        return f"{task} done: faster: {measured}"
    if label is None:
        return f"{task} done: no correct variant; keeping the reference"
    tried = f" (best tried: {measured or label + ' not ok'})" if label != REFERENCE_LABEL else ""
    return f"{task} done: no faster variant found{tried}; keeping the reference"


# What a step line shows of a trainer's logged metrics, in this order, when present: the loss;
# GRPO's mean reward and its cudal1 rates; SFT's token accuracy.
_STEP_METRICS = (
    ("loss", "loss"),
    ("reward", "reward"),
    ("cudal1/success_rate", "success"),
    ("cudal1/speedup_mean", "speedup"),
    ("mean_token_accuracy", "token accuracy"),
)


def step_line(event: TrainStep) -> str:
    """A logged training step, e.g. ``grpo step 3/30: loss 0.012, reward -0.102, success 0.96``."""
    metrics = event.metrics
    shown = [
        f"{name} {float(metrics[key]):.3g}" for key, name in _STEP_METRICS if metrics.get(key) is not None
    ]
    return f"{event.phase} step {event.step}/{event.max_steps}" + (": " + ", ".join(shown) if shown else "")


def seeds_line(seeds: SeedSet, tasks: int) -> str:
    """What the seed files gave, e.g. ``seeds: 3 kernels for 2 of 3 tasks from h100.jsonl;
    1 record skipped (a task's name with another reference)``."""
    files = ", ".join(p.name or str(p) for p in seeds.files)
    line = f"seeds: {_n(seeds.count, 'kernel')} for {len(seeds.proposals)} of {tasks} tasks from {files}"
    if seeds.skipped:
        line += f"; {_n(len(seeds.skipped), 'record')} skipped (a task's name with another reference)"
    if seeds.without_code:
        line += f"; {_n(seeds.without_code, 'matching record')} without code"
    return line


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
