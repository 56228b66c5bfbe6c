"""benchmarks/pair_asymmetry.py's table: the scatter of fresh pairs, and a row a lane's time limit
cut short saying how many pairs it has (the table is printed on SIGINT)."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from pair_asymmetry import add_row  # noqa: E402


def rendered(table: Table) -> str:
    console = Console(width=160, record=True)
    console.print(table)
    return console.export_text()


def test_a_row_gives_the_pairs_scatter_and_a_cut_row_says_how_many_pairs_it_has() -> None:
    table = Table()
    for col in ("task", "side A", "K", "median ratio", "range of pairs", "sd %", "floor %"):
        table.add_column(col)
    runs = [(1.01, 1.0, 1.02, 1), (0.99, 0.98, 1.0, 1), (1.0, 0.99, 1.01, 1)]
    add_row(table, "2_conv_block", "candidate (control)", runs, repeats=3)
    add_row(table, "1_gemm", "candidate (control)", runs[:2], repeats=6)
    text = rendered(table)
    assert "2_conv_block " in text and "(3 of 3)" not in text
    assert "1_gemm (2 of 6)" in text
    assert "[0.9900, 1.0100]" in text and "1.00 " in text  # sd of the three pairs' log ratios, in %
