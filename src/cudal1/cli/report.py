"""``cudal1 report``: the paper's statistics over runs and verify reports, as tables (terminal,
Markdown, JSON) and, with ``--html``, one self-contained page with figures.

Reading the inputs is here (run directories through ``run.records.load_run``, verify JSON
through ``search.verify.load_verify_report``); the statistics and every rendering are pure, in
``report.paper``, ``report.figures`` and ``report.html``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Group

from cudal1.cli.common import FORMAT_HELP, OutputFormat, bad_input, err_console, print_result
from cudal1.report.paper import Source, report_data, report_tables, run_source, verify_source
from cudal1.report.tables import to_markdown, to_rich
from cudal1.run.directory import RunError
from cudal1.run.records import load_run
from cudal1.search.verify import load_verify_report
from cudal1.tasks import TaskError


def load_source(path: Path) -> Source:
    """A run directory or a verify report, as the report's entries and cost; bad input exits 2."""
    try:
        if path.is_dir():
            return run_source(load_run(path))
        if path.is_file():
            return verify_source(str(path), load_verify_report(path))
    except (RunError, TaskError) as exc:
        raise bad_input(str(exc)) from None
    raise bad_input(f"{path}: no such run directory or verify report")


def _write_html(sources: list[Source], out: Path) -> None:
    # matplotlib is an optional extra: imported only when a page is asked for, so that every
    # other command works without it.
    try:
        from cudal1.report.html import render_html
    except ImportError as exc:
        raise bad_input(f"--html needs matplotlib: pip install 'cudal1[report]' ({exc})") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(sources), encoding="utf-8")
    err_console.print(f"report page: {out}")


def report_command(
    inputs: Annotated[
        list[Path],
        typer.Argument(
            help="run directories and/or verify reports (cudal1 verify --format json, or --json-out PATH)"
        ),
    ],
    fmt: Annotated[OutputFormat, typer.Option("--format", help=FORMAT_HELP)] = "table",
    html_out: Annotated[
        Path | None, typer.Option("--html", help="also write one self-contained HTML page with figures")
    ] = None,
) -> None:
    """Speedup statistics as the CUDA-L1 paper reports them, per level and overall; against every \
baseline measured in the same run; speed of light; cost; and, for results from several GPUs, \
a portability table."""
    sources = [load_source(p) for p in inputs]
    tables = report_tables(sources)
    print_result(
        fmt,
        lambda width: Group(*(to_rich(t, width) for t in tables)),
        lambda: "\n".join(to_markdown(t) for t in tables),
        lambda: report_data(sources),
    )
    if html_out is not None:
        _write_html(sources, html_out)
