"""Is the A-vs-A bias a matter of where a process's memory lies? Identical code, one process,
several placements.

    python benchmarks/placement.py [--tasks lb_mlp3 2_conv_block 1_gemm] [--clones 4] [--processes 3]
    python benchmarks/placement.py --device cpu --tasks 3_softmax --samples 20   # a smoke test

``pair_asymmetry.py`` found that two fresh worker processes running the same code time apart by
up to 5% on the launch-bound ``lb_mlp3`` (H200), steadily for their whole lives. Two kinds of
cause fit that: what lies where in memory (each process's weights, inputs and activations sit at
its own addresses, and the caching allocator hands the same blocks back every call), or something
of the process itself (its CUDA context, its launch queue). This script separates them. Each
fresh process (``--processes``, one after the other) builds the task's model once and copies it
``--clones`` times, each copy's weights, inputs and activations allocated from a memory pool of
its own (``torch.cuda.MemPool``) behind a spacer of a random size, so that they lie at different
addresses of one process (the rows keep each copy's first input address). Every sample times each copy
once, in random order, the way a worker times a sample (L2 flushed, the lead spun, K calls back
to back on fresh inputs, CUDA events), and pairs each copy with copy 0.

- The copies of one process disagree as much as processes do: memory placement is the cause, and
  averaging over placements (or widening by their scatter) is the remedy.
- The copies agree (to about their intervals) while the processes' copy 0 scatter: the bias is the
  process's own, not its memory's; the reproducibility floor covers it. Each process also lists
  the kernels one call launches, with their grids, blocks, shared memory and registers and
  their own median times over 20 profiled calls: processes that chose other kernels or launch
  configurations for the same code (cuDNN's and cuBLAS's heuristics run in each) are told apart
  from those that did not, and where they agree, the launches whose times differ most between
  the processes are named.

On an H200 (2026-11-28, ``--processes 3 --samples 100``, 4 copies; the script then moved only the
copies' weights, its lead was a fixed 20 us a call, and its copies' inputs and activations most
likely reused one set of the caching allocator's blocks): ``1_gemm`` (343 us a call) copies and
processes within 0.1%; ``2_conv_block`` (127 us) copies within 0.4% of each other in every
process, processes 2.0% apart (126.5, 128.2, 129.1 us, run one after another); ``lb_mlp3``'s
figures were its host's launch rates (the lead too short): copies within 2.7% (their intervals
about +-1.5%), processes 104.6, 58.5 and 61.0 us a call. Where a process's weights lie moved
nothing beyond the noise; inputs and activations are moved since. With them moved (a memory
pool per copy; an H200 of four, 2026-11-28, ``--tasks 2_conv_block 1_gemm --processes 6
--samples 100``): ``2_conv_block``'s copies within 0.7% of copy 0 in every process, its processes
127.7-130.7 us a call (1.8%), the same 11 kernels by name in each; ``1_gemm`` within 0.1% both
ways. Fresh pairs of identical code (``pair_asymmetry.py``) scatter most on the convolution
tasks: the bias is something each process's cuDNN convolutions keep. Launch configurations and
per-kernel times were not recorded then.

Recorded since (an H200 of four, 2026-11-28, ``--tasks 2_conv_block 2_conv_bn_relu --processes 6
--samples 100``): every process launched the same kernels with the same grids, blocks, shared
memory and registers, and the kernels' own time per call agreed within 0.3% (``2_conv_block``
113.25-113.60 us of kernels), while the event-timed call spread 1.5% (128.0-130.3 us). What
differs is the time between the kernels: 14.5-16.4 us a call over 11 launches (sd about 0.07 us a
launch between processes); ``2_conv_bn_relu``, 6 launches, 7.8-8.9 us. So the per-process bias
grows with the launches a call makes, which is why the convolution tasks (cuDNN adds layout
kernels around each convolution) and ``4_transformer_block`` scatter most and a GEMM of one or two
launches not at all. It is not where a process loads its kernels (``--env
CUDA_MODULE_LOADING=EAGER``: processes 128.4-129.8 us, the same gaps), nor the hardware channel a
stream is fed through (``--vary stream``, an H200 of two: the copies on four streams spread 0.7%
inside a process while the processes' means over their streams spread 1.3%; with ``--env
CUDA_DEVICE_MAX_CONNECTIONS=1``, 0.6% and 1.4%), nor where its memory lies (copies with their own
pools agree better than processes). Spreading a process's samples over placements or streams
therefore does not remove it.

Made for a GPU; prints a table (``--json`` writes the rows).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import itertools
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_candidates import launch_bound_tasks  # noqa: E402

from cudal1.eval.process import lead, state  # noqa: E402
from cudal1.schema import Task  # noqa: E402
from cudal1.tasks import bundled_tasks  # noqa: E402

console = Console()
FLUSH_BYTES = 256 << 20  # as the evaluator's workers flush L2 before a sample
SAMPLE_MS = 1.0  # K calls last about this long (the evaluator's aim)


def all_tasks() -> dict[str, Task]:
    return {**{t.name: t for t in bundled_tasks()}, **launch_bound_tasks()}


def load(task: Task, device: torch.device) -> tuple[Any, Any]:
    """The task's module namespace and its model on ``device`` (trusted: a bundled task)."""
    namespace: dict[str, Any] = {}
    exec(compile(task.source, task.name, "exec"), namespace)
    torch.manual_seed(1)
    init = list(namespace["get_init_inputs"]())
    return namespace, namespace["Model"](*init).to(device).eval()


def fresh_inputs(namespace: dict[str, Any], seed: int, device: torch.device) -> list[Any]:
    torch.manual_seed(seed)
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in namespace["get_inputs"]()]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(model: Any, inputs: list[Any], calls: int, lead_us: float, flush: torch.Tensor,
               device: torch.device) -> tuple[float, bool]:
    """Milliseconds per call of ``calls`` back-to-back calls, as a worker's timed sample runs
    them (one untimed call, the flush and the lead ahead of the begin event), and whether the
    lead ran out before the host had queued them all (its launch time then leaked in)."""
    with torch.no_grad():
        model(*inputs)
        sync(device)
        if device.type != "cuda":
            flush.zero_()
            t0 = time.perf_counter()
            for _ in range(calls):
                model(*inputs)
            return (time.perf_counter() - t0) * 1000 / calls, False
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        state.reset_persisting_l2()
        flush.zero_()
        lead.spin(lead_us)
        begin.record()
        for _ in range(calls):
            model(*inputs)
        end.record()
        behind = begin.query()  # the GPU reached the begin event before the host queued the last call
        torch.cuda.synchronize()
        return begin.elapsed_time(end) / calls, behind


def kernel_launches(model: Any, inputs: list[Any], device: torch.device, calls: int = 20) -> list[dict[str, Any]]:
    """The GPU kernels one call launches, in order, each with its launch configuration and its
    median time over ``calls`` profiled calls (empty on a CPU). Two processes that time the same
    code apart may have chosen other kernels, or the same kernels with other grids (cuDNN's and
    cuBLAS's heuristics run in each process), which placement cannot explain; where both agree,
    the kernel whose own time differs between the processes is the one to look at."""
    if device.type != "cuda":
        return []
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        model(*inputs)
        sync(device)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                model(*inputs)
            sync(device)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text()).get("traceEvents", [])
    return launches(events, calls)


def launches(events: list[dict[str, Any]], calls: int) -> list[dict[str, Any]]:
    """Kernel events of a profiler trace (``cat`` "kernel") of ``calls`` identical calls, folded
    into one call's launches: by position, the name, grid, block, shared memory and registers of
    the first call and the median duration over all calls (us). Empty when the calls launched
    unequal numbers of kernels."""
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e.get("ts", 0))
    if not kernels or len(kernels) % calls:
        return []
    per_call = len(kernels) // calls
    out = []
    for i in range(per_call):
        first, args = kernels[i], kernels[i].get("args", {})
        durs = [float(kernels[c * per_call + i].get("dur", 0.0)) for c in range(calls)]
        out.append({
            "name": first.get("name", ""),
            "config": [args.get("grid"), args.get("block"), args.get("shared memory"),
                       args.get("registers per thread")],
            "us": float(np.median(durs)),
        })
    return out


def own_pool(device: torch.device) -> Any:
    """A memory pool of its own for one copy (``torch.cuda.MemPool``), or None on a CPU."""
    return torch.cuda.MemPool() if device.type == "cuda" else None


def using(pool: Any) -> contextlib.AbstractContextManager[Any]:
    """Allocations inside come from ``pool`` (a copy's weights, inputs and activations)."""
    return torch.cuda.use_mem_pool(pool) if pool is not None else contextlib.nullcontext()


def child(task: Task, clones: int, samples: int, device: torch.device, seed: int,
          vary: str = "placement") -> dict[str, Any]:
    """One process: the model and its copies, each copy's weights, inputs and activations in a
    memory pool of its own (on a GPU) behind a spacer of random size; per sample, every copy
    timed once in random order on its own fresh inputs. The row keeps each copy's first input
    address, so that the placements are seen to differ. With ``vary="stream"`` the "copies" are
    the one model, each run on a CUDA stream of its own (copy 0 on the current one): each stream
    is fed through one of the process's hardware channels, so copies that differ then differ by
    the channel, not by where their memory lies."""
    rng = random.Random(seed)
    namespace, model = load(task, device)
    keep: list[torch.Tensor] = []  # the spacers stay allocated, so the copies stay where they are
    by_stream = vary == "stream" and device.type == "cuda"
    pools = [None] * clones if by_stream else [None] + [own_pool(device) for _ in range(clones - 1)]
    streams = [None] + [torch.cuda.Stream(device) if by_stream else None for _ in range(clones - 1)]
    copies = [model] * clones if by_stream else [model]
    for pool in pools[1:] if not by_stream else []:
        with using(pool):
            keep.append(torch.empty(rng.randint(1, 64) << 20, dtype=torch.uint8, device=device))
            copies.append(copy.deepcopy(model))
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=device)
    lead.prepare(device)
    warm = fresh_inputs(namespace, 0, device)
    one_ms = max(time_calls(model, warm, 20, 200.0, flush, device)[0], 1e-4)
    calls = max(1, min(2000, round(SAMPLE_MS / one_ms)))
    # The lead covers the host's launches of the K calls (measured here, with half again as margin),
    # so the events time the GPU alone. A fixed 20 us a call did not cover lb_mlp3's five launches
    # a call on an H200 (2026-11-28): its figures were the host's launch rates, 58-104 us a call.
    sync(device)
    t0 = time.perf_counter()
    with torch.no_grad():
        for _ in range(calls):
            model(*warm)
    host_us = (time.perf_counter() - t0) * 1e6
    sync(device)
    lead_us = min(20_000.0, 50.0 + 1.5 * host_us)
    times, behind, where = np.zeros((samples, clones)), 0, [0] * clones
    for s in range(samples):
        order = list(range(clones))
        rng.shuffle(order)
        for c in order:
            with using(pools[c]), on(streams[c]):
                inputs = fresh_inputs(namespace, 1000 + s, device)  # the same values for every copy
                times[s, c], late = time_calls(copies[c], inputs, calls, lead_us, flush, device)
            behind += late
            where[c] = where[c] or next((x.data_ptr() for x in inputs if isinstance(x, torch.Tensor)), 0)
    return {"task": task.name, "calls": calls, "lead_us": lead_us, "behind": behind, "input_at": where,
            "vary": "stream" if by_stream else "placement",
            "kernels": kernel_launches(model, warm, device), "ms": times.tolist()}


def on(stream: Any) -> contextlib.AbstractContextManager[Any]:
    """Work inside is queued on ``stream`` (None: the current stream)."""
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def ratio_interval(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> tuple[float, float, float]:
    """Median of the paired ratios a/b with a 95% bootstrap interval."""
    r = a / b
    boots = np.median(rng.choice(r, size=(2000, r.size)), axis=1)
    return float(np.median(r)), float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))


def table(rows: list[dict[str, Any]]) -> Table:
    """A row per copy of each process: its time per call, against copy 0 of its process (paired:
    the same samples) and against copy 0 of the task's first process (unpaired: the processes ran
    one after the other). Then per task, the spread of the copies' medians inside one process (the
    largest) beside the spread of the processes' copy 0."""
    rng = np.random.default_rng(0)
    out = Table(title="identical code: copies in one process, and processes", title_justify="left")
    for col in ("task", "proc", "copy", "us/call", "vs copy 0 [95% CI]", "vs proc 0"):
        out.add_column(col, justify="left" if col == "task" else "right")
    for name in dict.fromkeys(r["task"] for r in rows):
        mine = [np.asarray(r["ms"]) for r in rows if r["task"] == name]
        base = float(np.median(mine[0][:, 0]))
        inside = []
        for p, ms in enumerate(mine):
            meds = [1.0]
            for c in range(ms.shape[1]):
                m, lo, hi = ratio_interval(ms[:, c], ms[:, 0], rng)
                meds.append(m)
                out.add_row(name if p == c == 0 else "", str(p) if c == 0 else "", str(c),
                            f"{np.median(ms[:, c]) * 1000:.2f}", f"{m:.3f} [{lo:.3f}, {hi:.3f}]",
                            f"{np.median(ms[:, c]) / base:.3f}")
            inside.append(max(meds) - min(meds))
        firsts = [float(np.median(ms[:, 0])) / base for ms in mine]
        # Each process's copies averaged: what a process measures that spreads its samples over
        # the copies' placements (or streams) instead of keeping one.
        means = [float(np.mean(np.median(ms, axis=0))) / base for ms in mine]
        out.add_row("", "", "", "", f"copies spread {max(inside) * 100:.1f}%",
                    f"procs {(max(firsts) - min(firsts)) * 100:.1f}%", end_section=False)
        out.add_row("", "", "", "", "", f"means {(max(means) - min(means)) * 100:.1f}%", end_section=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["lb_mlp3", "2_conv_block", "1_gemm"])
    parser.add_argument("--clones", type=int, default=4, help="copies of the model in one process")
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per task, one after the other")
    parser.add_argument("--samples", type=int, default=200, help="samples per process (each times every copy)")
    parser.add_argument("--device", default="cuda:0", help="cuda:N, or cpu for a smoke test")
    parser.add_argument("--json", type=Path, help="write the raw rows here")
    parser.add_argument("--env", nargs="+", default=[], metavar="KEY=VALUE",
                        help="environment of every measured process, e.g. CUDA_MODULE_LOADING=EAGER (is it"
                             " where each process loads its kernels?) or CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=stderr (every"
                             " cuDNN call with its parameters, kept by --logs: large, so few --samples)")
    parser.add_argument("--logs", type=Path, help="keep each process's stderr here, as TASK-pN.stderr")
    parser.add_argument("--vary", choices=["placement", "stream"], default="placement",
                        help="what the copies of one process differ by: where their memory lies, or (one"
                             " model) the CUDA stream, and so the hardware channel, each is queued on")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # TASK:SEED, one process's part
    args = parser.parse_args()
    device = torch.device(args.device)
    tasks = all_tasks()
    if args.child:
        name, seed = args.child.rsplit(":", 1)
        print(json.dumps(child(tasks[name], args.clones, args.samples, device, int(seed), args.vary)))
        return
    unknown = sorted(set(args.tasks) - set(tasks))
    if unknown:
        parser.error(f"unknown tasks {unknown}; known: {', '.join(sorted(tasks))}")
    env = dict(os.environ)
    for item in args.env:
        key, eq, value = item.partition("=")
        if not eq or not key:
            parser.error(f"--env {item!r}: expected KEY=VALUE")
        env[key] = value
    if args.logs:
        args.logs.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.tasks:
        for p in range(args.processes):
            cmd = [sys.executable, __file__, "--child", f"{name}:{p}", "--clones", str(args.clones),
                   "--samples", str(args.samples), "--device", args.device, "--vary", args.vary]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
            if args.logs:
                (args.logs / f"{name}-p{p}.stderr").write_text(done.stderr)
            if done.returncode != 0:
                console.print(f"[red]{name} process {p} failed:[/red] {done.stderr.strip()[-800:]}")
                continue
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            row = rows[-1]
            console.print(f"{name}: process {p} done ({row['calls']} calls a sample behind a lead of"
                          f" {row.get('lead_us', 0):.0f} us; {row.get('behind', 0)} samples not covered by it)")
            if args.json:  # after every process: a run cut off keeps what it measured
                args.json.write_text(json.dumps(rows))
        console.print(table([r for r in rows if r["task"] == name]))  # each task's table once it is done
        console.print(same_kernels([r for r in rows if r["task"] == name]))


def same_kernels(rows: list[dict[str, Any]]) -> str:
    """Whether every process of a task launched the same kernels with the same launch
    configurations for one call, and if not, the first launch where they part; if so, the
    launches whose own times differ most between the processes."""
    seqs = [r.get("kernels", []) for r in rows]
    if not seqs or not any(seqs):
        return "kernels: not recorded"
    keys = [[(k["name"], json.dumps(k["config"])) for k in seq] for seq in seqs]
    for i, names in enumerate(itertools.zip_longest(*keys, fillvalue=("-", ""))):
        if len(set(names)) > 1:
            return f"kernels DIFFER at launch {i}: " + " | ".join(f"{n[:50]} {c}" for n, c in names)
    lines = [f"kernels: the same {len(keys[0])} (names, grids, blocks, shared memory, registers) in every process"]
    spread = []
    for i, launch in enumerate(seqs[0]):
        us = [seq[i]["us"] for seq in seqs]
        spread.append((max(us) - min(us), i, launch["name"], us))
    total = [sum(k["us"] for k in seq) for seq in seqs]
    lines.append("  one call's kernels, us by process: " + ", ".join(f"{t:.2f}" for t in total))
    # What the events time beyond the kernels (copy 0): the GPU's time between one launch and the next.
    if all("ms" in r for r in rows):
        gaps = [float(np.median(np.asarray(r["ms"])[:, 0])) * 1000 - t for r, t in zip(rows, total, strict=True)]
        lines.append("  events' call minus its kernels (gaps), us by process: " + ", ".join(f"{g:.2f}" for g in gaps))
    for gap, i, name, us in sorted(spread, reverse=True)[:3]:
        lines.append(f"  launch {i} {name[:60]}: " + ", ".join(f"{u:.2f}" for u in us) + f" (spread {gap:.2f} us)")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
