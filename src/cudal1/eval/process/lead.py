"""The lead: the GPU spin a worker queues ahead of a sample's begin event, holding every SM.

The lead lets the host queue all K timed calls before the GPU reaches them (``WorkerServer.time``;
``timing/paired.py``, ``host_ahead``). It was ``torch.cuda._sleep``: one thread spinning on one
SM while the others sat idle for up to ``max_lead_ms``. Work a candidate left on a stream it never
joined ran on those idle SMs, inside the lead, before the begin event: neither clock saw it (the
trusted wall holds the lead on both sides alike), and a candidate that moved work to an unjoined
stream behind long leads was verified at ~1.6x (issue 21).

Here the lead is a Triton kernel whose programs take every thread slot of every SM, each spinning
on ``%globaltimer`` for the requested time from its own start. No block of another kernel, from
any stream of the process, is scheduled until a lead program ends: work queued behind the lead
runs after the begin event, beside the timed calls, and the device-wide synchronize before the
reply puts it on the trusted clock. ``spin`` returns only once the GPU has reached the lead (what
was queued before it, the L2 flush, is done), so whatever the timed calls queue finds every SM
held. A block that got onto an SM first delays a lead program, which then spins its full time
from a later start: the lead grows by as much, on the trusted clock too.

What is not covered:
- a candidate that rewrites the lead in its own process (replaces ``spin``, changes the programs
  launched, rewrites Triton's in-memory kernel): ``timer_guard`` flags the naive ways, and the
  trusted clock bounds the rest by the lead's length per sample;
- copies by the copy engines (``cudaMemcpyAsync`` on another stream) need no SM and run beside it;
- work a candidate's own thread queues while the flush before the lead runs can overlap the flush
  (at most its length: ~80 us for 256 MB at an H100's 3.35 TB/s); the timed calls cannot, as
  ``spin`` holds the worker's thread until the flush is done;
- without Triton, or where the spin kernel cannot fill an SM, the lead is ``torch.cuda._sleep`` as
  before (``kind()`` is "one-sm", ``reason()`` says why), and so is the hole.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Literal

import torch

from cudal1.eval.process import state

try:  # CUDA builds of torch ship Triton; CPU builds do not
    import triton
    import triton.language as tl

    TRITON_MISSING = ""
except ImportError as exc:
    TRITON_MISSING = f"Triton is not importable ({exc})"

LeadKind = Literal["full-gpu", "one-sm", "none"]  # every SM held; torch.cuda._sleep; a CPU: no lead

PROGRAM_WARPS = 16  # 512 threads: divides the thread slots of an SM on sm_80/90 (2048) and sm_86/89 (1536)
# Triton types an int argument by its value: a duration past int32 would compile a second kernel
# inside a sample. 2.1 s is far beyond the longest lead (4 x max_lead_ms).
MAX_SPIN_NS = 2**31 - 1


if not TRITON_MISSING:

    @triton.jit
    def _globaltimer():
        return tl.inline_asm_elementwise(
            "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
        )

    @triton.jit
    def _globaltimer_after_nap():
        # Between reads the warps sleep: they keep their slots (which is all the lead needs) and
        # issue almost nothing; the lead ends at most ~0.5 us late.
        return tl.inline_asm_elementwise(
            "nanosleep.u32 256;\n\tmov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
        )

    @triton.jit(do_not_specialize=["duration_ns"])
    def _spin_kernel(marks_ptr, duration_ns):
        # %globaltimer counts nanoseconds: the duration needs no calibration against a clock rate.
        start = _globaltimer()
        now = start
        while now - start < duration_ns:
            now = _globaltimer_after_nap()
        program = tl.program_id(0)
        tl.store(marks_ptr + 2 * program, start)
        tl.store(marks_ptr + 2 * program + 1, now)


@dataclass
class _Lead:
    requested: tuple[torch.device, bool] | None = None  # (device, full_gpu) of the last prepare
    kind: LeadKind = "none"
    reason: str = "not prepared"
    programs: int = 0  # full-gpu: programs per SM x SMs
    maxnreg: int = 0  # full-gpu: registers a thread may use, so that a full SM's threads fit
    cycles_per_us: float = 0.0  # one-sm: torch.cuda._sleep cycles per microsecond
    marks: torch.Tensor | None = None  # full-gpu: each program's start and end, globaltimer ns
    first: tuple[Any, ...] | None = None  # the settings of the first preparation on a GPU

    def settings(self) -> tuple[Any, ...]:
        return (self.requested, self.kind, self.programs, self.maxnreg, self.cycles_per_us)


_LEAD = _Lead()  # one lead per worker process; mutated in place, never rebound (timer_guard)


def prepare(device: torch.device, full_gpu: bool = True) -> LeadKind:
    """Ready the lead on ``device``, outside every clock: compile, load and warm the spin kernel
    (or calibrate the fallback). Nothing again for the same device and choice. A candidate's
    worker prepares where its task loads, before any candidate code, so the kernel it launches is
    the one compiled there and not one a candidate left in its Triton cache directory.
    ``full_gpu=False``: the fallback, on purpose (tests)."""
    if device.type == "cuda" and device.index is None:  # one name for one device ("cuda" is "cuda:0")
        device = torch.device("cuda", torch.cuda.current_device())
    if _LEAD.requested == (device, full_gpu):
        return _LEAD.kind
    _LEAD.requested = (device, full_gpu)
    if device.type != "cuda":
        _LEAD.kind, _LEAD.reason = "none", "no GPU: a CPU sample has no lead"
        return _LEAD.kind
    with torch.cuda.device(device):
        reason = _prepare_full_gpu(device) if full_gpu else "the full-GPU lead was turned off"
        if reason:
            _LEAD.kind, _LEAD.reason = "one-sm", reason
            _LEAD.cycles_per_us = _sleep_cycles_per_us()
    if _LEAD.first is None:
        _LEAD.first = _LEAD.settings()
    return _LEAD.kind


def _prepare_full_gpu(device: torch.device) -> str:
    """Set up the full-GPU lead; the reason it cannot be had, or "" when it is ready."""
    if TRITON_MISSING:
        return TRITON_MISSING
    props = torch.cuda.get_device_properties(device)
    threads_per_sm = int(getattr(props, "max_threads_per_multi_processor", 2048))
    threads = PROGRAM_WARPS * 32
    if threads_per_sm % threads:
        return f"{threads}-thread programs cannot fill the {threads_per_sm} thread slots of an SM"
    # A full SM of threads shares the register file: at most this many a thread, in the steps of
    # 8 that the allocator hands out (a spin loop needs far fewer; the cap only makes it certain).
    maxnreg = max(16, int(getattr(props, "regs_per_multiprocessor", 65536)) // threads_per_sm // 8 * 8)
    try:
        probe = torch.zeros(2, dtype=torch.int64, device=device)
        compiled = _spin_kernel[(1,)](probe, 0, num_warps=PROGRAM_WARPS, maxnreg=maxnreg)
        per_sm = _programs_per_sm(compiled, threads)
        held = per_sm * threads
        if held < threads_per_sm:
            regs = getattr(compiled, "n_regs", "?")
            return f"the spin kernel holds {held} of an SM's {threads_per_sm} threads ({regs} registers)"
        programs = per_sm * int(props.multi_processor_count)
        marks = torch.zeros(2 * programs, dtype=torch.int64, device=device)
        _spin_kernel[(programs,)](marks, 10_000, num_warps=PROGRAM_WARPS, maxnreg=maxnreg)  # warm, 10 us
        torch.cuda.synchronize(device)
    except Exception as exc:  # any failure of Triton's (compiler, driver, launch): the fallback, with why
        return f"the spin kernel failed: {type(exc).__name__}: {exc}"[:500]
    _LEAD.kind, _LEAD.reason = "full-gpu", f"{programs} programs of {threads} threads, {per_sm} per SM"
    _LEAD.programs, _LEAD.maxnreg, _LEAD.marks = programs, maxnreg, marks
    return ""


def _programs_per_sm(compiled: Any, threads: int) -> int:
    """How many programs of the compiled kernel the driver lets reside on one SM at once."""
    lib = state.libcuda()
    if lib is None:
        return 0
    count = ctypes.c_int(0)
    shared = int(getattr(compiled.metadata, "shared", 0) or 0)  # Triton's shared memory is all dynamic
    status = lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        ctypes.byref(count),
        ctypes.c_void_p(compiled.function),
        ctypes.c_int(threads),
        ctypes.c_size_t(shared),
    )
    return int(count.value) if status == 0 else 0


def _sleep_cycles_per_us() -> float:
    """GPU clock cycles per microsecond of ``torch.cuda._sleep`` here (it spins on clock cycles)."""
    probe = 1_000_000
    torch.cuda._sleep(probe)  # warm the spin kernel and the clock
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    torch.cuda._sleep(probe)
    end.record()
    torch.cuda.synchronize()
    return probe / max(begin.elapsed_time(end) * 1000, 1e-3)


def spin(us: float) -> None:
    """Queue the lead on the current stream: ``us`` microseconds in which, where ``kind()`` is
    "full-gpu", no other kernel of this process runs; it returns once the GPU has reached the
    lead. Nothing before ``prepare`` or on a CPU."""
    if _LEAD.kind == "full-gpu":
        ns = min(max(int(us * 1000), 0), MAX_SPIN_NS)
        reached = torch.cuda.Event()
        reached.record()
        _spin_kernel[(_LEAD.programs,)](_LEAD.marks, ns, num_warps=PROGRAM_WARPS, maxnreg=_LEAD.maxnreg)
        # Until the work ahead (the flush) is done, what the caller queues next on another stream
        # could run beside it rather than behind the lead; the lead itself is queued already, so
        # the GPU does not wait for this thread to wake (the host loses a few us of the lead).
        reached.synchronize()
    elif _LEAD.kind == "one-sm":
        torch.cuda._sleep(max(1, int(_LEAD.cycles_per_us * us)))


def kind() -> LeadKind:
    return _LEAD.kind


def reason() -> str:
    """Why the lead is of its kind (the fallback's cause, or the full lead's programs)."""
    return _LEAD.reason


def marks() -> torch.Tensor | None:
    """The last full-GPU lead's programs, one row each: globaltimer ns at its start and its end
    (read after a synchronize); None for the other kinds."""
    if _LEAD.kind != "full-gpu" or _LEAD.marks is None:
        return None
    return _LEAD.marks.view(-1, 2)


def altered() -> bool:
    """Whether the lead's settings differ from those of its first preparation on a GPU (a
    candidate that re-prepared it as the fallback, or changed its programs)."""
    return _LEAD.first is not None and _LEAD.settings() != _LEAD.first
