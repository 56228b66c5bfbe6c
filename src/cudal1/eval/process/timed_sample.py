"""The timed sample, in either worker: the sets a timing warms up on, the warm-up, the untimed
call before each sample, and ``time``, one sample answered with one reply.

A ``time`` request makes the sample's fresh input sets from its seed, runs the K timed calls
(behind the lead on a GPU: ``lead.spin``), keeps every call's output and digests them all on the
device before it replies, so the inputs of timed calls exist only inside the trusted clock and
whatever work an output still needs is done before the clock stops. The trusted side draws the
call whose output it fetches only after the reply (``CandidateServer.fetch_output``).

``TimedSampler`` is a part of ``worker.WorkerServer`` (its base): the timer guard watches its
methods and this module's globals as it watches the worker's (``timer_guard._namespaces``).
"""

from __future__ import annotations

import contextlib
import gc
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch

from cudal1.eval.process import lead, state, timer_guard
from cudal1.eval.process.model_state import BuiltStates
from cudal1.eval.process.wire import DigestBatch, flatten_outputs


class TimedSampler:
    """What a worker keeps for timing, and the commands that time (see the module docstring)."""

    module: Any  # the task's module (inputs come from its get_inputs)
    model: Any
    inputs: dict[str, list[Any]]
    device: torch.device

    def __init__(self) -> None:
        self.warm_sets: list[list[Any]] = []  # fixed: warm-up and the untimed call before a sample
        # The last timed sample: its input sets (made inside its ``time`` request), the set its
        # first call ran on, and every call's output, kept until the next sample.
        self.timed_sets: list[list[Any]] = []
        self.timed_start = 0
        self.timed_outputs: list[Any] = []
        self.flush_buffer: torch.Tensor | None = None
        self.lead_us = 0.0  # the default lead (set_timing_inputs)
        # A stateful task's models as built, put back before each sample (``prepare``).
        self.built_states = BuiltStates()
        # Every output this worker returned that is still alive (``state.EarlierOutputs``): the
        # checked calls' and the timed calls'.
        self.earlier_outputs = state.EarlierOutputs()

    def set_timing_inputs(self, keys: list[str], flush_bytes: int, lead_us: float = 0.0) -> dict[str, Any]:
        """Both sides enter timing with the same memory picture: what only one side keeps leaves
        the device (``before_timing``), caches are emptied and the timed inputs re-made in a fresh
        block. Without this the long-lived reference worker timed differently from a fresh
        candidate worker running the very same code (A-vs-A bias of up to 30% on the H200)."""
        self.before_timing(keys)
        self.warm_sets, self.flush_buffer = [], None
        self.timed_sets, self.timed_outputs = [], []
        release(self.device)
        for key in keys:
            self.inputs[key] = [x.clone() if isinstance(x, torch.Tensor) else x for x in self.inputs[key]]
        release(self.device)
        self.warm_sets = [self.inputs[k] for k in keys]
        if flush_bytes > 0:
            if self.device.type != "cuda":
                flush_bytes = min(flush_bytes, 2 * last_level_cache_bytes())
            self.flush_buffer = torch.empty(flush_bytes // 4, dtype=torch.int32, device=self.device)
        self.lead_us = lead_us
        lead.prepare(self.device)  # outside every clock; done already where the task loaded on it
        return {"lead": lead.kind(), "lead_reason": lead.reason()}

    def before_timing(self, keys: list[str]) -> None:
        pass

    def _on_device(self) -> AbstractContextManager[Any]:
        """Where a task's get_inputs makes its tensors: the GPU's random numbers on a GPU."""
        return torch.device(self.device) if self.device.type == "cuda" else nullcontext()

    def _make_timed_sets(self, seed: int, count: int, max_bytes: int) -> list[list[Any]]:
        """A sample's fresh timed input sets from the task's get_inputs under ``seed``, made on
        the device (GPU random numbers: milliseconds, not the seconds a CPU-made set of hundreds
        of MB takes) at new addresses (the caller frees the last sample's only after). ``count``
        sets, fewer when they would exceed ``max_bytes`` (at least one); both workers make the
        same ones, which their digests show."""
        torch.manual_seed(seed)
        fresh: list[list[Any]] = []
        with self._on_device():
            while len(fresh) < max(count, 1):
                fresh.append([to_device(x, self.device) for x in self.module.get_inputs()])
                if len(fresh) == 1:
                    count = min(count, max(1, max_bytes // max(tensor_bytes(fresh[0]), 1)))
        return fresh

    def warmup(self, min_calls: int, min_ms: float) -> dict[str, Any]:
        """Calls on the warm-up sets by count and by time. The reply also gives the bytes of one
        input set and of one call's outputs: the trusted side sizes K so that a sample's K kept
        outputs fit beside its inputs."""
        calls, start, out = 0, time.perf_counter(), None
        with torch.no_grad():
            while True:
                out = self.model(*self.warm_sets[calls % len(self.warm_sets)])
                calls += 1
                if calls >= min_calls:
                    sync(self.device)
                    if (time.perf_counter() - start) * 1000 >= min_ms or calls >= 100_000:
                        break
        return {
            "calls": calls,
            "ms": (time.perf_counter() - start) * 1000,
            "set_bytes": tensor_bytes(self.warm_sets[0]),
            "out_bytes": tensor_bytes(flatten_outputs(out)),
        }

    def prepare(self) -> dict[str, Any]:
        """Right before a sample, outside every clock. A stateful task's model starts each
        sample from its state as built (``model_state``), after the untimed call."""
        if self.device.type != "cuda":
            self.built_states.restore(self.model)
            # CPU: both sides start from caches that hold neither's data. Without this, the side
            # that made its inputs last (the candidate: the reference makes them first) found them
            # in cache, and identical code timed 3-8% faster as the candidate.
            if self.flush_buffer is not None:
                self.flush_buffer.zero_()
            return {}
        # One untimed call first: it absorbs the GPU's switch from the other worker's context
        # and the clock ramp. On the H200, without it, whichever side ran second in a pair
        # was up to 35% slower, and the median of the paired ratios flipped between modes.
        # Synchronised, so that no work of a candidate's spills from here into the next sample.
        with torch.no_grad():
            self.model(*self.warm_sets[0])
        self.built_states.restore(self.model)
        sync(self.device)
        return {}

    def time(
        self,
        calls: int,
        seed: int,
        sets: int,
        max_bytes: int,
        start: int = 0,
        lead_us: float | None = None,
    ) -> dict[str, Any]:
        """One timed sample, answered with one reply, on which the trusted clock stops. The
        sample's fresh input sets are made here from ``seed`` (``sets`` of them, fewer where they
        would exceed ``max_bytes``), so no request outside this one sees them; then the K =
        ``calls`` calls (``_timed_calls``), call j on set (``start`` + j) mod the sets made, every
        output kept; then the digests of the sets and of every call's outputs, summed on the
        device in one batch and read with one wait (``wire.DigestBatch``). The reply: ``ms`` (this
        worker's own time of the K calls), ``ahead``, ``input_digest`` (each tensor of each set),
        ``digests`` (per call, per output), ``tampered``, the timing's objects that are no
        longer the trusted side's own (``timer_guard``), and ``kept``: calls whose outputs are
        the memory of another output still alive (``state.EarlierOutputs``), found after the
        clock's events, on both sides alike so that neither's wall pays more."""
        self.timed_outputs = []  # the last sample's outputs go now, its inputs once the new ones exist
        self.timed_sets, self.timed_start = self._make_timed_sets(seed, sets, max_bytes), start
        batch = DigestBatch()
        for inputs in self.timed_sets:
            batch.add(inputs)
        batch.queue()  # ahead of the calls: one that writes into its inputs does not change these
        ms, ahead, tail_ms = self._timed_calls(calls, lead_us)
        for out in self.timed_outputs:
            batch.add(flatten_outputs(out))
        found = batch.read()
        kept = self.earlier_outputs.shared_calls(self.timed_outputs)
        n = len(self.timed_sets)
        return {
            "ms": ms,
            "ahead": ahead,
            "tail_ms": tail_ms,
            "input_digest": [d for inputs in found[:n] for d in inputs],
            "digests": found[n:],
            "tampered": timer_guard.tampered(),
            "kept": kept[:3],
        }

    def _timed_calls(self, calls: int, lead_us: float | None) -> tuple[float, bool, float]:
        """K calls back to back on the sample's sets, their outputs kept in ``timed_outputs``. On
        a GPU, behind a spin of ``lead_us`` (default: the one set with the inputs) long enough
        that the host queues all K calls before the GPU reaches them: the events then time the
        GPU's work alone. ``ahead`` says whether the host made it (the spin was still running
        when the last call was queued); if not, its launch time leaked in. ``tail_ms``: from the
        end event to an event recorded once every stream of the process is done (the
        synchronise's wake-up for honest code; work left on another stream past the end event
        besides, which the trusted side compares with the reference's tail)."""
        sets, n, first, outs = self.timed_sets, len(self.timed_sets), self.timed_start, self.timed_outputs
        ahead, tail_ms = True, 0.0
        spin_us = self.lead_us if lead_us is None else lead_us
        gc.disable()  # no collector pauses inside the timed window (for either side)
        try:
            with torch.no_grad():
                if self.device.type == "cuda":
                    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    # The L2 flush and a short spin are queued ahead of the begin event, so the GPU
                    # is busy when the clock starts and the first call's host-side launch latency
                    # (which differs between two processes running the same code) is not on the
                    # clock. The spin hides at most lead_us of host time per sample; the trusted
                    # wall clock sees all.
                    state.reset_persisting_l2()  # lines kept in L2 on purpose get flushed too
                    if self.flush_buffer is not None:
                        self.flush_buffer.zero_()
                    if spin_us:
                        lead.spin(spin_us)  # every SM: nothing of another stream runs hidden under it
                    begin.record()
                    for j in range(calls):
                        outs.append(self.model(*sets[(first + j) % n]))
                    end.record()
                    ahead = not begin.query()
                    torch.cuda.synchronize()  # device-wide: work on any stream finishes before we reply
                    drained = torch.cuda.Event(enable_timing=True)
                    drained.record()
                    drained.synchronize()
                    ms, tail_ms = begin.elapsed_time(end), end.elapsed_time(drained)
                else:
                    t0 = time.perf_counter()
                    for j in range(calls):
                        outs.append(self.model(*sets[(first + j) % n]))
                    ms = (time.perf_counter() - t0) * 1000
        finally:
            gc.enable()
        return ms, ahead, tail_ms

    def timed_inputs(self, index: int) -> list[Any]:
        """The input set call ``index`` of the last timed sample ran on."""
        return self.timed_sets[(self.timed_start + index) % len(self.timed_sets)]


def to_device(x: Any, device: torch.device) -> Any:
    return x.to(device) if isinstance(x, torch.Tensor) else x


def tensor_bytes(values: list[Any]) -> int:
    """Bytes of the tensors among ``values`` (an input set, a call's flattened outputs)."""
    return sum(x.nbytes for x in values if isinstance(x, torch.Tensor))


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def last_level_cache_bytes(cpu: int = 0, default: int = 32 * 2**20) -> int:
    """The size of the largest CPU cache ``cpu`` sees (Linux sysfs), or ``default`` where unknown."""
    sizes = [default]
    for index in Path(f"/sys/devices/system/cpu/cpu{cpu}/cache").glob("index*"):
        with contextlib.suppress(OSError, ValueError):
            text = (index / "size").read_text().strip().upper()
            scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
            sizes.append(int(text.rstrip("KMG")) * scale)
    return max(sizes) if len(sizes) > 1 else default


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
