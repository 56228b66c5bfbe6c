"""``cudal1 dataset export``: verified variants of one or more runs as a Hugging Face dataset.

Needs the ``[train]`` extra (``datasets``), imported when the command runs. Exit codes
(``cli.common``): 0 written, 2 bad input (not a run directory, nothing to export, bad config).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Annotated

import typer

from cudal1.cli.common import EXIT_OK, bad_input, console, resolve_config, setup_logging
from cudal1.config import ExportConfig
from cudal1.config.train import ExportKind

dataset_app = typer.Typer(help="Training data from run directories.", no_args_is_help=True)


@dataset_app.command("export")
def export_command(
    runs: Annotated[list[Path], typer.Argument(help="run directories (optimize, collect, selfsup, grpo)")],
    out: Annotated[Path, typer.Option("--out", help="dataset directory (save_to_disk) with its card")],
    kind: Annotated[
        ExportKind | None,
        typer.Option(help="sft: generation prompt -> variant; contrastive: contrastive prompt -> variant"),
    ] = None,
    test_fraction: Annotated[
        float | None, typer.Option(help="share of tasks held out as the test split")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="YAML ExportConfig")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="config override, e.g. seed=1")] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
) -> None:
    """Write verified candidates (correct, no rejecting finding, no reward an audit withheld: see
    `cudal1 audit`), deduplicated by source hash and
    split by task, as conversational prompt/completion rows with a card of counts per level and
    source."""
    setup_logging(verbose)
    cfg = resolve_config(ExportConfig, config, set_, {"kind": kind, "test_fraction": test_fraction})
    try:
        datasets = importlib.import_module("cudal1.train.datasets")
    except ImportError as exc:
        raise bad_input(f"dataset export needs {exc.name}: pip install 'cudal1[train]'") from None
    try:
        data = datasets.export_dataset(runs, out, cfg)
    except datasets.ExportError as exc:
        raise bad_input(str(exc)) from None
    sizes = ", ".join(f"{name} {len(split)}" for name, split in data.items())
    console.print(f"{cfg.kind} dataset written to {out}: {sizes} rows (card: {out / 'README.md'})")
    raise typer.Exit(EXIT_OK)
