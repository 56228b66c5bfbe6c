"""``cudal1 audit RUN``: the rewards a GRPO run held for review, and a person's ruling on them
(``train.review``).

Exit codes (``cli.common``): 0 listed (and ruled as asked); 2 bad input (not a run directory, an
id that is not a reward the run held, one both confirmed and cleared, or one already ruled the
other way: then nothing is changed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cudal1.cli.common import FORMAT_HELP, OutputFormat, bad_input, err_console, print_result
from cudal1.report.held import held_table
from cudal1.report.tables import to_markdown, to_rich
from cudal1.run.directory import RunDirectory, RunError
from cudal1.train.review import ReviewError, review


def audit_command(
    run: Annotated[Path, typer.Argument(help="run directory (of `cudal1 train grpo`)")],
    confirm: Annotated[
        list[int] | None,
        typer.Option(
            "--confirm",
            metavar="ID",
            help="candidate ID is a hack: add it to the run's hacking-case database (repeatable)",
        ),
    ] = None,
    clear: Annotated[
        list[int] | None,
        typer.Option(
            "--clear", metavar="ID", help="candidate ID is honest: its reward counts in full (repeatable)"
        ),
    ] = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", help=FORMAT_HELP)] = "table",
) -> None:
    """List the rewards a run held for review (suspicious, with no reward-checking model to rule on
    them; each capped to its group's median meanwhile): task, candidate id, speedup, findings and
    why it was held. --confirm ID rules it a hack: it joins the run's hacking-case database, which
    every later judge is shown, and earns the reject reward from then on. --clear ID rules it
    honest: its reward counts in full in every later read (a resumed run, its prompts' exemplars,
    `cudal1 dataset export`). A ruling is final."""
    if not run.is_dir():
        raise bad_input(f"{run}: no such run directory")
    try:
        done = review(RunDirectory(run), confirm or [], clear or [])
    except (RunError, ReviewError) as exc:
        raise bad_input(str(exc)) from None
    if done.cases is not None:
        err_console.print(f"confirmed hacks added to {done.cases}", highlight=False)
    table = held_table(done.held, str(run))
    print_result(
        fmt,
        lambda width: to_rich(table, width),
        lambda: to_markdown(table),
        lambda: [h.to_dict() for h in done.held],
    )
