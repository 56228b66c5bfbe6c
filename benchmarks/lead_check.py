"""Does the lead hold the whole GPU? The facts behind ``eval/process/lead.py``, one row per lead.

    python benchmarks/lead_check.py [--leads 100 1000 10000]

For each lead length and each kind (the full-GPU Triton spin, and the one-SM ``torch.cuda._sleep``
fallback): the lead asked for and its length between CUDA events; how far apart its programs
started (a second wave of programs would start a lead later); and, for work queued on another
stream of the same process right after the lead (a 2048^2 matmul between two %globaltimer
stamps), when it started against the lead's end and how much of it ran under the lead. With the
full-GPU lead the side work starts after the lead ends and none of it is hidden; with the
fallback most of it runs under the lead (the hole of issue 21). Needs a CUDA GPU and Triton.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from rich.console import Console
from rich.table import Table

from cudal1.eval.process import lead


@triton.jit(do_not_specialize=["index"])
def _stamp(stamps_ptr, index):
    now = tl.inline_asm_elementwise(
        "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
    )
    tl.store(stamps_ptr + index, now)


@dataclass(frozen=True)
class LeadFacts:
    kind: lead.LeadKind
    reason: str
    asked_us: float
    measured_us: float  # between events recorded on the lead's stream before and after it
    start_spread_us: float | None  # full-gpu: last program start - first (None: one program)
    spin_returned_at_lead: bool  # spin returned only once the work ahead of it was done
    side_queued_during_lead: bool  # the side work was queued while the lead still ran
    side_start_after_lead_us: float  # side work's first stamp - the lead's end (>= 0: after it)
    side_under_lead_us: float  # side work that ran before the lead ended
    side_work_us: float  # the side work, stamp to stamp
    host_us: float  # the host's time in spin() (the launch, and the wait for the work ahead)


def measure(asked_us: float, full_gpu: bool, device: torch.device) -> LeadFacts:
    """One lead of ``asked_us`` on the current stream, with a matmul queued on another stream
    right behind it. The lead's end: the first of its programs to end (no block of another kernel
    can start before a slot frees), or for the fallback a stamp queued behind it on its stream."""
    lead.prepare(device, full_gpu=full_gpu)
    side = torch.cuda.Stream(device)
    a = torch.randn(2048, 2048, device=device)
    stamps = torch.zeros(3, dtype=torch.int64, device=device)
    for index in range(3):  # compile and warm everything before the measured launch
        _stamp[(1,)](stamps, index)
    a @ a
    with torch.cuda.stream(side):  # the side stream's own memory pool and cuBLAS workspace
        a @ a
    torch.cuda.synchronize(device)
    begin, after = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    # Work ahead of the lead, as the worker's flush is: the begin event then times the lead and
    # not the host's launch of it (~tens of us through Triton).
    torch.cuda._sleep(1_000_000)
    begin.record()
    t0 = time.perf_counter()
    lead.spin(asked_us)
    host_us = (time.perf_counter() - t0) * 1e6
    after.record()
    reached = begin.query()  # the full lead returns only once the GPU has reached it
    begin.synchronize()  # the fallback does not wait: the side work is queued during the lead
    _stamp[(1,)](stamps, 0)
    with torch.cuda.stream(side):
        _stamp[(1,)](stamps, 1)
        a @ a
        _stamp[(1,)](stamps, 2)
    queued_during = not after.query()
    torch.cuda.synchronize(device)
    main_after, side_start, side_end = (int(v) for v in stamps.tolist())
    marks = lead.marks()
    spread = None
    lead_end = main_after
    if marks is not None:
        starts, ends = marks[:, 0], marks[:, 1]
        spread = float(starts.max() - starts.min()) / 1000
        lead_end = int(ends.min())
    return LeadFacts(
        kind=lead.kind(),
        reason=lead.reason(),
        asked_us=asked_us,
        measured_us=begin.elapsed_time(after) * 1000,
        start_spread_us=spread,
        spin_returned_at_lead=reached,
        side_queued_during_lead=queued_during,
        side_start_after_lead_us=(side_start - lead_end) / 1000,
        side_under_lead_us=max(0, min(side_end, lead_end) - side_start) / 1000,
        side_work_us=(side_end - side_start) / 1000,
        host_us=host_us,
    )


def table(rows: list[LeadFacts]) -> Table:
    out = Table(title="the lead: asked vs measured, and work on another stream behind it")
    for name in ("kind", "asked us", "measured us", "start spread us", "returned at lead", "queued during"):
        out.add_column(name, justify="right")
    for name in ("side start - lead end us", "side under lead us", "side work us", "host us", "reason"):
        out.add_column(name, justify="right")
    for r in rows:
        out.add_row(
            r.kind,
            f"{r.asked_us:.0f}",
            f"{r.measured_us:.1f}",
            "-" if r.start_spread_us is None else f"{r.start_spread_us:.1f}",
            str(r.spin_returned_at_lead),
            str(r.side_queued_during_lead),
            f"{r.side_start_after_lead_us:.1f}",
            f"{r.side_under_lead_us:.1f}",
            f"{r.side_work_us:.1f}",
            f"{r.host_us:.1f}",
            r.reason,
        )
    return out


def main(argv: Sequence[str] | None = None) -> list[LeadFacts]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--leads", type=float, nargs="+", default=[100.0, 1000.0, 10000.0], help="microseconds"
    )
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.cuda.set_device(device)
    rows = [measure(us, full, device) for full in (True, False) for us in args.leads]
    lead.prepare(device)
    Console(width=200).print(table(rows))
    return rows


if __name__ == "__main__":
    main()
