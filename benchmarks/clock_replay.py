"""Would the CPU's checks of the worker clock hold on a GPU? Stored GPU results replayed through them.

    python benchmarks/clock_replay.py runs/verify/p1.rows.jsonl ... runs/best-known [--show 20]

The pending hole ``reply_rewrite_ms_gpu`` (a candidate that rewrites its worker's timed replies)
passes on a GPU because there the trusted clock checks the events only by the per-sample excess:
the two views that catch it on a CPU (``checks/clock.py``: the per-sample clock quotient, and the
events against the trusted net-wall interval) run on a CPU only. Turning them on for GPUs is a
change of the reward for every GPU candidate, so this measures first what they would have said of
results already stored: verify rows files (``*.rows.jsonl``) and run directories (every
``candidates.db`` below). Each GPU result's main samples (events and trusted wall, per call) go
through ``clock._clock_quotient`` and ``clock._net_wall_estimate`` as the CPU path calls them;
the table counts the results each view would have flagged, and lists the widest gaps.

On the H200 results of 2026-11-28 (the CUDA-L1 release verify, the 30-task benchmark's runs and
its round trip: 353 results with samples), the net-wall view flagged 71, among them torch.compile
modes and CUDA graphs, which forge nothing (torch.compile default on ``L1_89``: events 4.78x,
trusted net wall 0.94x): the trusted wall of a GPU sample is mostly the lead and the host's
overhead, which the reference's gap does not take off exactly, so it cannot check short kernels.
The quotient could be computed for 100 and flagged 17, honest ones among them. Neither view can
be turned on for GPUs as it is; the trusted clock needs samples long enough to see the calls.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_sharing import Stored, stored_results  # noqa: E402

from cudal1.eval.checks import clock  # noqa: E402
from cudal1.eval.timing import stats  # noqa: E402
from cudal1.eval.timing.paired import PairedOutcome  # noqa: E402

DISAGREEMENT = 0.10  # timing.clock_disagreement's default


@dataclass(frozen=True)
class Replayed:
    source: str
    task: str
    label: str
    samples: int
    events: float
    net_wall: float
    net_wall_high: float
    quotient: float | None
    flagged_net: bool
    flagged_quotient: bool


def replay(stored: Stored) -> Replayed | None:
    """The CPU's two views of one GPU result's main samples; None where it has none."""
    t = stored.result.get("timing") or {}
    if not str(t.get("device", "")).startswith("cuda") or not t.get("ref_wall_ms"):
        return None
    probe = PairedOutcome(
        t["calls_per_sample"], list(t["ref_ms"]), list(t["cand_ms"]), list(t["ref_wall_ms"]), list(t["cand_wall_ms"])
    )
    ref_gap, _ = probe.gap_ms()
    noise = clock._gap_noise(probe, ref_gap)
    events = stats.median(list(stats.paired_ratios(probe.ref_ms, probe.cand_ms)))
    net = clock._net_wall_estimate(probe, ref_gap)
    quotient, _ = clock._clock_quotient(probe, ref_gap, noise, DISAGREEMENT)
    n = len(probe.ref_ms)
    return Replayed(
        stored.source,
        stored.task,
        stored.origin or stored.label,
        n,
        events,
        net.median,
        net.ci_high,
        quotient,
        n >= clock.INTERVAL_MIN_SAMPLES and events > net.ci_high * (1 + DISAGREEMENT),
        quotient is not None and quotient > 1 + DISAGREEMENT,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", type=Path, help="verify rows files or run directories")
    ap.add_argument("--show", type=int, default=20, help="list this many flagged results, widest gap first")
    args = ap.parse_args(argv)
    found = [r for item in stored_results(args.results) if (r := replay(item)) is not None]
    flagged = [r for r in found if r.flagged_net or r.flagged_quotient]
    table = Table(title="GPU results the CPU's clock views would flag", title_justify="left")
    for col in ("source", "task", "label", "n", "events", "net wall [hi]", "quotient"):
        table.add_column(col, justify="left" if col in ("source", "task", "label") else "right")
    for r in sorted(flagged, key=lambda r: -r.events / max(r.net_wall_high, 1e-9))[: args.show]:
        table.add_row(
            r.source, r.task, r.label[:40], str(r.samples), f"{r.events:.3f}",
            f"{r.net_wall:.3f} [{r.net_wall_high:.3f}]", "-" if r.quotient is None else f"{r.quotient:.3f}",
        )
    console = Console()
    console.print(table)
    console.print(
        f"{len(found)} GPU results with samples; the net-wall view flags {sum(r.flagged_net for r in found)}; "
        f"the quotient is computed for {sum(r.quotient is not None for r in found)} and flags "
        f"{sum(r.flagged_quotient for r in found)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
