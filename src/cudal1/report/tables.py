"""Tables that read at any width: one description of a table, rendered as a rich table fitted to
the console, as Markdown, or as plain data for JSON.

A ``TableSpec`` names its columns (``Col``) with a full heading, a short one, and a priority.
``to_rich`` fits the table to a width in a stated order: first every heading is abbreviated
where that saves room, then columns are dropped from the highest ``drop`` number down (0: never
dropped), and the caption says which ones went. Cells wrap at spaces and fold long words; none is
cut to an ellipsis. ``to_markdown`` keeps every column (a document has no width to fit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.table import Table
from rich.text import Text

Cell = str | Text
# Space a column costs beyond its text in a SIMPLE_HEAD table: one padding character each side
# and one divider; plus one for the table's two edges less the missing last divider.
_PAD, _EDGES = 3, 1


@dataclass(frozen=True)
class Col:
    """One column: ``heading`` where it fits, ``short`` where it does not; ``drop`` orders what
    goes first when even short headings leave the table too wide (higher goes first; 0 stays)."""

    heading: str
    short: str = ""
    drop: int = 0
    right: bool = False  # numbers are right-aligned
    wrap: bool = False  # prose may wrap at spaces; other cells keep their width

    @property
    def abbreviated(self) -> str:
        return self.short or self.heading


@dataclass(frozen=True)
class TableSpec:
    title: str
    columns: tuple[Col, ...]
    rows: tuple[tuple[Cell, ...], ...]
    caption: str = ""

    def plain_rows(self) -> list[list[str]]:
        return [[_plain(c) for c in row] for row in self.rows]

    def to_dict(self) -> dict[str, object]:
        """The table as data: headings and rows of plain strings."""
        return {
            "title": self.title,
            "columns": [c.heading for c in self.columns],
            "rows": self.plain_rows(),
        }


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def _min_width(col: Col, heading: str, cells: Sequence[str]) -> int:
    """The narrowest this column can be without cutting a word (prose) or a value (the rest)."""
    widths = [_longest_word(heading) if col.wrap else len(heading)]
    for cell in cells:
        widths.extend(len(line) for line in cell.splitlines() or [""])
        if col.wrap:
            widths[-1] = min(widths[-1], max(12, _longest_word(cell)))
    return max(widths)


def _natural_width(heading: str, cells: Sequence[str]) -> int:
    return max([len(heading)] + [len(line) for cell in cells for line in cell.splitlines() or [""]])


def fit_columns(spec: TableSpec, width: int) -> tuple[list[int], list[str], list[int] | None]:
    """Indices of the columns kept at ``width``, the headings they use (full or short), and the
    width each gets (None: even the columns that stay do not fit at their narrowest, so every
    cell may fold)."""
    plain = spec.plain_rows()
    cells = [[row[i] for row in plain] for i in range(len(spec.columns))]
    kept = list(range(len(spec.columns)))
    headings = [c.heading for c in spec.columns]

    def least(i: int) -> int:
        return _min_width(spec.columns[i], headings[i], cells[i])

    def total() -> int:
        return _EDGES + sum(least(i) + _PAD for i in kept)

    for i in sorted(kept, key=lambda i: len(headings[i]) - len(spec.columns[i].abbreviated), reverse=True):
        if total() <= width:
            break
        headings[i] = spec.columns[i].abbreviated
    order = sorted((i for i in kept if spec.columns[i].drop), key=lambda i: -spec.columns[i].drop)
    for i in order:
        if total() <= width:
            break
        kept.remove(i)
    if total() > width:
        return kept, [headings[i] for i in kept], None
    # Every column at its natural width, then the widest prose column narrowed one character at a
    # time until the table fits (rich's own collapse would fold values such as labels instead).
    widths = {i: _natural_width(headings[i], cells[i]) for i in kept}
    floors = {i: least(i) for i in kept}
    while _EDGES + sum(w + _PAD for w in widths.values()) > width:
        i = max((i for i in kept if widths[i] > floors[i]), key=lambda i: widths[i] - floors[i])
        widths[i] -= 1
    return kept, [headings[i] for i in kept], [widths[i] for i in kept]


def to_rich(spec: TableSpec, width: int) -> Table:
    """The table fitted to ``width`` columns (see the module docstring for the order)."""
    kept, headings, widths = fit_columns(spec, width)
    dropped = [spec.columns[i].heading for i in range(len(spec.columns)) if i not in kept]
    caption = spec.caption
    if dropped:
        caption = (caption + "; " if caption else "") + f"not shown at this width: {', '.join(dropped)}"
    table = Table(title=spec.title, caption=caption or None, box=box.SIMPLE_HEAD, caption_justify="left")
    for n, (i, heading) in enumerate(zip(kept, headings, strict=True)):
        # Fixed widths from ``fit_columns``: values keep theirs, prose wraps at spaces. Where even
        # the narrowest columns do not fit, rich shares the width and cells fold: split, never cut
        # to an ellipsis.
        table.add_column(
            heading,
            justify="right" if spec.columns[i].right else "left",
            overflow="fold",
            width=widths[n] if widths is not None else None,
        )
    for row in spec.rows:
        table.add_row(*(row[i] for i in kept))
    return table


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def to_markdown(spec: TableSpec) -> str:
    """The table as GitHub Markdown: every column, full headings, notes and caption below."""
    lines = [f"**{spec.title}**", ""] if spec.title else []
    lines.append("| " + " | ".join(_md_escape(c.heading) for c in spec.columns) + " |")
    lines.append("|" + "|".join("---:" if c.right else "---" for c in spec.columns) + "|")
    lines.extend("| " + " | ".join(_md_escape(c) for c in row) + " |" for row in spec.plain_rows())
    if spec.caption:
        lines += ["", spec.caption]
    return "\n".join(lines) + "\n"
