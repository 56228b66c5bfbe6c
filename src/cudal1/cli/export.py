"""``cudal1 export``: a run's kept kernels as records (``run.export``) that ``cudal1 verify``
re-measures on another machine and ``--seed`` starts another run from.

Exit codes (``cli.common``): 0 written, 2 bad input (not a run directory, nothing to export, an
unwritable --out).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cudal1.cli.common import EXIT_OK, bad_input, console, setup_logging
from cudal1.run.directory import RunError
from cudal1.run.export import export_kernels


def export_command(
    run: Annotated[Path, typer.Argument(help="run directory (optimize, collect, train grpo)")],
    out: Annotated[Path, typer.Option("--out", help="records file to write (JSON Lines)")],
    every: Annotated[
        bool, typer.Option("--all", help="every verified candidate, not only each task's kept kernel")
    ] = False,
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
) -> None:
    """Write RUN's kernels as JSON Lines records: each task's kept kernel where it beat the \
reference beyond its 95% interval (--all: every verified candidate but the reference itself).

    Each record holds the task (name, level, ref_code), the kernel (custom_code, label, its \
provenance chain) and what this machine measured: claimed_speedup is that speedup, with its \
interval, device and GPU, so that `cudal1 verify FILE` on another GPU compares it with its own \
measurement; `cudal1 optimize --seed FILE` starts a run from the kernels. Tasks with nothing to \
export are left out and counted; a run with nothing at all to export is an error (exit 2)."""
    setup_logging(verbose)
    try:
        summary = export_kernels(run, out, every=every)
    except RunError as exc:
        raise bad_input(str(exc)) from None
    what = "verified candidates" if every else "kept kernels"
    line = f"wrote {summary.records} {what} of {len(summary.tasks)} task(s) to {summary.out}"
    if summary.left_out:
        reason = "no verified candidate" if every else "nothing beat the reference"
        line += f"; {len(summary.left_out)} task(s) left out ({reason}): {', '.join(summary.left_out)}"
    console.print(line, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_OK)
