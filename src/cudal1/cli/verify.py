"""``cudal1 verify``: re-measure released records on this machine (``search.verify``), with
progress (``cli.progress``: a bar on a terminal, a line per finished record elsewhere), then the
tables on stdout (``--format``: table, md or json); with ``--json-out PATH``, also write the report
to a file as the rows finish."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group

from cudal1.cli.common import (
    DEVICES_HELP,
    FORMAT_HELP,
    POOL_HELP,
    OutputFormat,
    bad_input,
    err_console,
    pool_values,
    print_result,
    resolve_config,
    setup_logging,
)
from cudal1.cli.progress import ProgressReporter
from cudal1.config import EvalConfig, PoolConfig, apply_overrides
from cudal1.eval.ray_pool import RayPoolError
from cudal1.report.verify import (
    progress_line,
    render_rows,
    render_rows_markdown,
    render_summary,
    render_summary_markdown,
    report_json,
    summarize,
)
from cudal1.search.verify import Row, Selection, VerifyRun, rows_log_path, run_verify, write_json
from cudal1.tasks import TaskError
from cudal1.tasks.shard import Shard, parse_shard


def _selection(
    levels: list[str] | None,
    tasks: list[str] | None,
    sample: int | None,
    seed: int,
    limit: int | None,
    shard: str | None = None,
) -> Selection:
    try:
        wanted = frozenset(int(x) for item in levels or [] for x in item.split(",") if x.strip())
    except ValueError:
        raise bad_input(f"--levels {levels}: expected level numbers, e.g. 1,2") from None
    names = frozenset(x.strip() for item in tasks or [] for x in item.split(",") if x.strip())
    return Selection(
        levels=wanted, names=names, sample=sample, seed=seed, limit=limit, shard=_shard(shard)
    )


def _shard(value: str | None) -> Shard | None:
    """``--shard K/N`` as (K, N); a bad value is bad input."""
    try:
        return parse_shard(value) if value is not None else None
    except ValueError as exc:
        raise bad_input(f"--shard {exc}") from None


def _pool_config(pool: str | None, devices: str | None, workers: int | None) -> PoolConfig:
    """The pool of --pool, --devices and --workers (4 workers on one device, as before)."""
    data: dict[str, Any] = apply_overrides({}, [], pool_values(pool, devices)).get("pool", {})
    if workers is None and "devices" not in data:
        workers = 4
    return PoolConfig.model_validate({**data, "workers": workers, "spares": min(workers or 2, 2)})


def _where(cfg: EvalConfig, pool: PoolConfig) -> str:
    if pool.kind == "ray":
        return f"Ray ({pool.ray.address or 'RAY_ADDRESS or a local cluster'})"
    return ", ".join(pool.devices) if pool.devices else cfg.device


def verify_command(
    records: Annotated[Path, typer.Argument(help="CUDA-L1 release file (JSON Lines) or a cudal1 export")],
    device: Annotated[str | None, typer.Option(help="auto | cpu | cuda | cuda:N")] = None,
    devices: Annotated[str | None, typer.Option(help=DEVICES_HELP)] = None,
    pool: Annotated[str | None, typer.Option(help=POOL_HELP)] = None,
    workers: Annotated[
        int | None,
        typer.Option(min=1, help="candidates compiled and checked in parallel (default: 4, or 2 per device)"),
    ] = None,
    json_path: Annotated[
        Path | None,
        typer.Option(
            "--json-out",
            help="also write the report (JSON) to this file; rows stream to PATH's .rows.jsonl as they finish",
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="verify only the first N selected records")] = None,
    sample: Annotated[
        int | None, typer.Option(min=1, help="a random subset of N records (see --seed)")
    ] = None,
    seed: Annotated[int, typer.Option(help="seed of --sample")] = 0,
    levels: Annotated[list[str] | None, typer.Option(help="only these levels, e.g. --levels 1,2")] = None,
    tasks: Annotated[
        list[str] | None,
        typer.Option(help="only these records, named as the table does, e.g. --tasks L2_4,L3_13"),
    ] = None,
    shard: Annotated[
        str | None,
        typer.Option(
            metavar="K/N",
            help="only the K-th of N parts of the selection (every N-th record from the K-th), one "
            "per lane of a machine of several GPUs; put their rows files together and --resume "
            "to report the whole",
        ),
    ] = None,
    budget_s: Annotated[float | None, typer.Option(help="timing budget per record, seconds")] = None,
    deadline_s: Annotated[
        float | None, typer.Option(help="start no evaluation after this many seconds; the rest are 'not run'")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="YAML EvalConfig")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="config override, e.g. timing.min_samples=5")
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(help="keep the records --json-out's rows file already holds; evaluate the rest"),
    ] = False,
    fmt: Annotated[OutputFormat, typer.Option("--format", help=FORMAT_HELP)] = "table",
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
) -> None:
    """Re-measure every record's candidate against its reference on this machine.

    Claimed speedups in RECORDS were measured elsewhere (another GPU, another evaluator). Each \
candidate goes through the full evaluator (static checks, compile, correctness, paired timing, \
integrity guards); a table puts claimed and measured speedup side by side with every finding. \
Records without code ("None") are listed as "no code".

    Selection: --levels and --tasks, then --sample, then --limit, then --shard. With --json-out PATH, each \
finished row is \
appended to PATH's .rows.jsonl at once, so a killed run loses nothing it finished; PATH itself \
is written at the end. --resume (with the same --json-out and selection) keeps the rows that file \
holds and evaluates the rest, so a long release can be verified across several runs; records \
"not run" or lost to an evaluator error are evaluated again. Parts verified apart (--shard K/N, one \
a lane) report as one: put their rows files into one (cat) beside a new PATH and run with --resume.

    Exit 0 when the run completes, whatever the verdicts (records left "not run" by --deadline-s \
included); 2 for bad input.
    """
    setup_logging(verbose)
    cfg = resolve_config(EvalConfig, config, set_, {"device": device, "timing.budget_s": budget_s})
    pool_cfg = _pool_config(pool, devices, workers)
    if not records.is_file():
        raise bad_input(f"{records}: no such records file")
    selection = _selection(levels, tasks, sample, seed, limit, shard)
    if resume and json_path is None:
        raise bad_input("--resume needs --json-out PATH: the rows file beside it is what is resumed")
    try:
        run = VerifyRun.load(records, selection, cfg)
    except TaskError as exc:
        raise bad_input(str(exc)) from None
    taken = run.resume(rows_log_path(json_path)) if resume and json_path else 0
    with ProgressReporter() as progress:
        progress.note(
            f"verifying {len(run.chosen)} records from {records} ({run.with_code} with code) on "
            + _where(cfg, pool_cfg)
            + (f"; {taken} already done" if taken else "")
        )
        bar = progress.bar("verify", total=len(run.chosen), completed=taken)

        def on_row(row: Row) -> None:
            progress.advance(bar, progress_line(len(run.rows), len(run.chosen), row))

        rows_log = rows_log_path(json_path) if json_path else None
        try:
            run_verify(run, pool=pool_cfg, rows_log=rows_log, deadline_s=deadline_s, on_row=on_row)
        except RayPoolError as exc:
            raise bad_input(str(exc)) from None
        finally:  # also when interrupted: the report says so ("complete": false)
            if json_path:
                write_json(json_path, report_json(run))
    print_result(
        fmt,
        lambda width: Group(render_rows(run.rows, width), render_summary(summarize(run.rows, run.results), width)),
        lambda: render_rows_markdown(run.rows) + "\n" + render_summary_markdown(summarize(run.rows, run.results)),
        lambda: report_json(run),
    )
    if json_path:
        err_console.print(f"report: {json_path} (rows as they finished: {json_path.stem}.rows.jsonl)")
