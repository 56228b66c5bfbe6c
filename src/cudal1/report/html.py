"""The report as one self-contained HTML page: figures embedded as base64 PNG, the tables, and
what the numbers mean. No external file, script, font or stylesheet: the page opens offline and
can be mailed. Needs the ``report`` extra (matplotlib), through ``report.figures``."""

from __future__ import annotations

import html
from collections.abc import Sequence

from cudal1.report.figures import report_figures
from cudal1.report.paper import Source, report_tables
from cudal1.report.tables import TableSpec

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 0.3em; font-size: 0.9em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25em 0.7em; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
caption { caption-side: top; font-weight: bold; text-align: left; padding-bottom: 0.3em; }
p.note { color: #666; font-size: 0.85em; margin-top: 0; }
figure { display: inline-block; margin: 0.5em 1em 1em 0; }
figcaption { color: #444; font-size: 0.9em; }
"""

_MEANING = """
<p>Each task's <b>speedup</b> is the eager reference's time divided by the kept kernel's, measured
in the same run on the same device by the one evaluator (paired, interleaved timing; median of paired
ratios with a bootstrap 95% interval). A run keeps a variant only when the lower end of that interval is
above 1.0; otherwise it keeps the reference, which counts 1.00x. <b>correct</b>: tasks whose kept
kernel passed every correctness and integrity check; <b>&gt;1.01x</b>: tasks improved as the paper counts
them. Mean, max and percentiles are over the correct tasks. <b>Over a baseline</b>: the kept kernel's
time against that baseline's (torch.compile, CUDA graph, cuDNN flags), measured beside it.
<b>% of SOL</b>: the physical floor of the task (bytes moved over bandwidth, FLOPs over peak) as a
percentage of the kernel's time. <b>Throughput</b>: a run's evaluations per device-hour of its wall
time, the share of that time its devices were held for checks and timing, and where its evaluations'
seconds went (builds and first calls run beside other evaluations, off the device).</p>
"""


def html_table(spec: TableSpec) -> str:
    """One table as HTML; every column (a page scrolls), numbers right-aligned."""
    head = "".join(
        f'<th class="{"num" if c.right else ""}">{html.escape(c.heading)}</th>' for c in spec.columns
    )
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{"num" if c.right else ""}">{html.escape(cell)}</td>'
            for c, cell in zip(spec.columns, row, strict=True)
        )
        + "</tr>"
        for row in spec.plain_rows()
    )
    caption = f'<p class="note">{html.escape(spec.caption)}</p>' if spec.caption else ""
    return (
        f"<table><caption>{html.escape(spec.title)}</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{caption}"
    )


def render_html(sources: Sequence[Source], title: str = "cudal1 report") -> str:
    """The whole page for ``sources`` (runs and verify reports)."""
    entries = [e for s in sources for e in s.entries]
    figures = "".join(
        f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{png}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        for caption, png in report_figures(entries)
    )
    tables = "".join(html_table(t) for t in report_tables(sources))
    listed = "".join(f"<li><code>{html.escape(s.cost.source)}</code> ({s.cost.kind})</li>" for s in sources)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><ul>{listed}</ul>{_MEANING}"
        f"<h2>Figures</h2>{figures}<h2>Tables</h2>{tables}</body></html>\n"
    )
