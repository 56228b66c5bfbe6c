"""Progress of long commands, one way for all of them (``optimize``, ``verify``, ``collect``,
training): live bars on a terminal; anywhere else (a file, a pipe, ``nohup``, ``tee``, CI) one
plain line per finished unit of work, written to stderr and flushed as it happens, so a log
shows the run while it runs. Results stay on stdout.

Use it as a context manager; the wording of a line is the caller's (``report.progress`` formats
the common ones)::

    from cudal1.cli.progress import ProgressReporter

    with ProgressReporter() as progress:
        bar = progress.bar("5_gelu", total=12)      # one bar per stream of work
        for item in work:
            ...                                     # one unit finished:
            progress.advance(bar, "5_gelu llm-r1-s0: correct 1.210x [1.18, 1.25]")
        progress.update(bar, status="best 1.210x")  # text beside the bar (terminal only)
        progress.note("5_gelu: faster, llm-r1-s0 1.210x")  # a line in both modes

On a terminal ``advance`` moves the bar and shows its line beside it; elsewhere it prints the
line, prefixed with the seconds since the reporter started. ``note`` prints in both modes (above
the bars on a terminal). Log records go through the same stderr console, so they interleave
cleanly with the bars.
"""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from cudal1.cli.common import err_console
from cudal1.report.progress import evaluation_line, step_line, task_line
from cudal1.run.events import (
    Evaluated,
    Event,
    ParseFailed,
    RoundJudged,
    RunStarted,
    Stopped,
    TaskFinal,
    TrainStep,
)

_COLUMNS = (
    TextColumn("{task.description}"),
    BarColumn(bar_width=20),
    MofNCompleteColumn(),
    TimeElapsedColumn(),
    TextColumn("{task.fields[status]}"),
)


class ProgressReporter:
    """Bars on a terminal, plain flushed lines elsewhere (``live`` overrides the detection)."""

    def __init__(self, console: Console | None = None, *, live: bool | None = None) -> None:
        self.console = console or err_console
        self.live = self.console.is_terminal if live is None else live
        self._progress = Progress(*_COLUMNS, console=self.console) if self.live else None
        self._started = time.monotonic()
        self._plain_bars = 0

    def __enter__(self) -> ProgressReporter:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()

    def bar(self, name: str, total: int | None = None, completed: int = 0) -> TaskID:
        """A new bar (a stream of work: a task, a set of records, an epoch)."""
        if self._progress is None:
            self._plain_bars += 1
            return TaskID(self._plain_bars)
        return self._progress.add_task(name, total=total, completed=completed, status="")

    def advance(self, bar: TaskID, line: str = "", n: int = 1) -> None:
        """``n`` units of ``bar`` finished; ``line`` says how (printed when not on a terminal)."""
        if self._progress is None:
            if line:
                self._print(line)
            return
        if line:
            self._progress.update(bar, advance=n, status=line)
        else:
            self._progress.update(bar, advance=n)

    def update(
        self,
        bar: TaskID,
        *,
        completed: int | None = None,
        total: int | None = None,
        status: str | None = None,
    ) -> None:
        """Set a bar's position, size or status text (terminal only; nothing is printed elsewhere)."""
        if self._progress is None:
            return
        self._progress.update(bar, completed=completed, total=total)
        if status is not None:
            self._progress.update(bar, status=status)

    def note(self, line: str) -> None:
        """A line in both modes: a finished task, a budget reached."""
        if self._progress is None:
            self._print(line)
        else:
            self._progress.console.print(line, markup=False, highlight=False)

    def _print(self, line: str) -> None:
        elapsed = time.monotonic() - self._started
        self.console.print(f"[{elapsed:5.0f}s] {line}", markup=False, highlight=False, soft_wrap=True)
        self.console.file.flush()


class ProgressView:
    """Turns the events of a search loop (``optimize``) or a collect run into progress: a bar per
    task with its live best on a terminal, a line per finished evaluation and per finished task
    anywhere else."""

    def __init__(self, progress: ProgressReporter) -> None:
        self.progress = progress
        self.bars: dict[str, TaskID] = {}

    def __call__(self, event: Event) -> None:
        match event:
            case RunStarted(tasks=plan):
                for name, p in plan.items():
                    self.bars[name] = self.progress.bar(name, total=p.total, completed=p.done)
            case Evaluated(task=task) if task in self.bars:
                self.progress.advance(self.bars[task], evaluation_line(event), n=0)
                best = event.best_speedup
                status = f"best {best:.3f}x ({event.best_label})" if best is not None else "none correct yet"
                self.progress.update(self.bars[task], completed=event.done, status=status)
            case ParseFailed(task=task) if task in self.bars:
                line = f"{task} round {event.round}: reply without usable code: {event.error}"
                self.progress.advance(self.bars[task], line, n=0)
                self.progress.update(self.bars[task], completed=event.done)
            case Stopped(reason=reason):
                self.progress.note(f"budget {reason} reached: finishing what is under way")
            case TaskFinal(task=task) if task in self.bars:
                line = task_line(event)
                self.progress.update(self.bars[task], status=line.partition(" done: ")[2])
                self.progress.note(line)


class TrainingView:
    """Turns a training stage's events (``train sft|selfsup|grpo``) into progress: a bar per
    phase (the stage, or a self-supervised round's fine-tuning) advancing with each logged
    optimizer step, a line per step anywhere else, and a note when a round's samples are judged."""

    def __init__(self, progress: ProgressReporter) -> None:
        self.progress = progress
        self.bars: dict[str, TaskID] = {}

    def __call__(self, event: Event) -> None:
        match event:
            case TrainStep(phase=phase):
                if phase not in self.bars:
                    self.bars[phase] = self.progress.bar(phase, total=event.max_steps)
                line = step_line(event)
                self.progress.advance(self.bars[phase], line, n=0)
                self.progress.update(self.bars[phase], completed=event.step, status=line.partition(": ")[2])
            case RoundJudged():
                self.progress.note(
                    f"round {event.round}: {event.kept} of {event.samples} samples executable and correct"
                )
