"""The wording of progress lines (``cli.progress`` prints them): one per finished evaluation and
one per finished task, the same in every long command. Pure string formatting."""

from __future__ import annotations


def interval(ci_low: float | None, ci_high: float | None) -> str:
    return f" [{ci_low:.3f}, {ci_high:.3f}]" if ci_low is not None and ci_high is not None else ""


def evaluation_line(
    task: str,
    label: str,
    *,
    ok: bool,
    speedup: float | None,
    ci_low: float | None = None,
    ci_high: float | None = None,
    error: str | None = None,
) -> str:
    """``task label: verdict speedup [CI]``, e.g. ``3_softmax cuda-graph: correct 1.020x [1.001, 1.040]``."""
    if ok and speedup is not None:
        return f"{task} {label}: correct {speedup:.3f}x{interval(ci_low, ci_high)}"
    return f"{task} {label}: not ok: {(error or 'no result')[:160]}"


def task_line(
    task: str,
    *,
    faster: bool,
    label: str | None,
    speedup: float | None,
    ci_low: float | None = None,
    ci_high: float | None = None,
) -> str:
    """A finished task: the variant kept, or the reference when nothing beat it beyond its interval."""
    measured = f"{label} {speedup:.3f}x{interval(ci_low, ci_high)}" if label and speedup is not None else ""
    if faster:
        return f"{task} done: faster: {measured}"
    if label is None:
        return f"{task} done: no correct variant; keeping the reference"
    tried = f" (best tried: {measured or label + ' not ok'})" if label != "reference" else ""
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


def step_line(phase: str, step: int, total: int, metrics: dict[str, float]) -> str:
    """A logged training step, e.g. ``grpo step 3/30: loss 0.012, reward -0.102, success 0.96``."""
    shown = [
        f"{name} {float(metrics[key]):.3g}" for key, name in _STEP_METRICS if metrics.get(key) is not None
    ]
    return f"{phase} step {step}/{total}" + (": " + ", ".join(shown) if shown else "")
