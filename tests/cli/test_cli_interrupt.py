"""A resumable command's interrupt (``cli.common.interruptible``): Ctrl-C and SIGTERM both end
in the resume hint and exit 130, and the process's SIGTERM handler is left as it was found;
``optimize`` says at once what it stops, records it in the run's log and leaves nothing behind."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import typer
from run_fixtures import OptimizeProcess

from cudal1.cli.common import EXIT_INTERRUPTED, interruptible


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_an_interrupt_prints_the_resume_hint_and_exits_130(
    how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(typer.Exit) as exit_, interruptible("`cudal1 optimize --out run --resume`"):
        if how == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        raise KeyboardInterrupt
    assert exit_.value.exit_code == EXIT_INTERRUPTED
    assert "interrupted: continue with `cudal1 optimize --out run --resume`" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before


def test_other_errors_pass_through_untouched() -> None:
    with pytest.raises(ValueError, match="bad"), interruptible("--resume"):
        raise ValueError("bad")


def test_ctrl_c_on_optimize_says_at_once_what_stops_and_logs_it(
    tmp_path: Path, optimize_process: Callable[..., OptimizeProcess]
) -> None:
    """Ctrl-C mid-evaluation: a "stopping" line names the evaluations in flight (cancelled, not
    waited for: this one would time for 120 s more), the run's log records it, and no worker or
    sandbox is left behind. It took ~15 s with nothing printed before."""
    timing = {"budget_s": 120, "min_samples": 100_000, "max_samples": 100_000}
    slow = {"eval": {"timing": timing, "sandbox": {"call_timeout_s": 60}}}  # 60: a loaded machine
    sandboxes = tmp_path / "tmp"
    sandboxes.mkdir()
    run = optimize_process(env={"TMPDIR": str(sandboxes)}, rounds=0, **slow)
    run.wait_until(lambda: "run 1 in" in run.log())
    time.sleep(10.0)  # its one evaluation (the reference anchor) is now starting or timing
    run.proc.send_signal(signal.SIGINT)
    _, err = run.proc.communicate(timeout=90)
    assert run.proc.returncode == EXIT_INTERRUPTED, err
    said = " ".join(err.split())  # as one line: the log handler wraps at 80 columns in a pipe
    assert "stopping: 1 evaluation in flight is cancelled; everything stored is kept" in said
    assert "interrupted: continue with" in said
    assert "stopping: 1 evaluation in flight is cancelled" in run.log()
    assert not list(sandboxes.glob("cudal1-*")), "a worker's sandbox was left behind"
