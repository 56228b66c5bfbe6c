"""A resumable command's interrupt (``cli.common.interruptible``): Ctrl-C and SIGTERM both end
in the resume hint and exit 130, and the process's SIGTERM handler is left as it was found."""

from __future__ import annotations

import os
import signal

import pytest
import typer

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
