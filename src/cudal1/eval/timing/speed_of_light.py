"""Speed of light: the work a task must do, the device's peaks, and the floor no kernel beats.

Method (shared/research/timing-and-anchors.md section 6): run the reference once on the ``meta``
device under ``FlopCounterMode`` to get FLOPs by dtype, count compulsory bytes as inputs +
parameters + buffers + outputs (each once), and divide by measured peaks (a big device copy for
bandwidth, big matmuls per dtype), cached per device and torch version.

Only the bytes floor is hard: reference FLOPs over-state the work a smarter algorithm needs, so
the FLOP floor is a soft signal (section 6 "Caveats"). The gate therefore rejects only times below
the output-bytes floor, or below the whole I/O floor when the working set cannot sit in L2.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import platform
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn
from torch.func import functional_call
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from cudal1.schema import Finding, Severity, Stage

logger = logging.getLogger(__name__)

Precision = Literal["float64", "float32", "tf32", "bfloat16", "float16"]

# Gate constants, both from timing-and-anchors.md section 6, "Proposal" item 4.
GATE_MARGIN = 0.8  # measured peaks are below the true ones (3.0 vs 3.35 TB/s on our H100): leave room
L2_FACTOR = 2.0  # a working set under 2x L2 can be served from cache faster than HBM


@dataclass(frozen=True)
class Work:
    """What one forward call must do: FLOPs (by dtype) and compulsory bytes.

    ``bytes_io`` = inputs + parameters + buffers + outputs; ``bytes_out`` = outputs alone. When the
    model could not be run at all, ``flops`` and ``bytes_out`` are NaN and ``bytes_io`` holds the
    known part (inputs + parameters + buffers), still a valid lower bound. ``launches``: the GPU
    kernels one call launches, estimated (``estimate_launches``); 0 when unknown.
    """

    flops: float
    bytes_io: float
    bytes_out: float
    flops_by_dtype: dict[str, float] = field(default_factory=dict)
    launches: int = 0


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, list | tuple):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


def _map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, list | tuple):
        return type(obj)(_map_tensors(x, fn) for x in obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return obj


def _nbytes(tensors: Iterator[torch.Tensor]) -> float:
    """Bytes of distinct tensors (a tensor passed twice is read once)."""
    unique = {id(t): t for t in tensors}
    return float(sum(t.numel() * t.element_size() for t in unique.values()))


class _DtypeFlopCounter(FlopCounterMode):
    """FlopCounterMode that also attributes each op's FLOPs to the dtype of its first tensor.

    ``_count_flops`` is private; if a torch release renames it, ``by_dtype`` stays empty and
    ``count_work`` files the total under "unknown" instead of failing.
    """

    def __init__(self) -> None:
        super().__init__(display=False)
        self.by_dtype: dict[str, float] = {}

    def _count_flops(self, func_packet: Any, out: Any, args: Any, kwargs: Any) -> Any:
        before = self.flop_counts["Global"].get(func_packet, 0)
        result = super()._count_flops(func_packet, out, args, kwargs)
        added = self.flop_counts["Global"].get(func_packet, 0) - before
        if added:
            dtype = next((str(t.dtype).removeprefix("torch.") for t in _tensors(list(args))), "unknown")
            self.by_dtype[dtype] = self.by_dtype.get(dtype, 0.0) + added
        return result


def _run_under(mode: Any, model: nn.Module, inputs: list, on_meta: bool) -> Any:
    """One ``model(*inputs)`` call under a dispatch ``mode``, which sees the call's operators
    only: on meta stand-ins for the parameters and inputs (nothing allocated, nothing computed),
    or on CPU copies."""
    if on_meta:
        named = chain(model.named_parameters(), model.named_buffers())
        state = {name: torch.empty_like(t, device="meta") for name, t in named}
        meta_inputs = _map_tensors(inputs, lambda t: torch.empty_like(t, device="meta"))
        with torch.no_grad(), mode:
            return functional_call(model, state, tuple(meta_inputs))
    cpu_inputs = _map_tensors(inputs, lambda t: t.detach().cpu().clone())
    cpu_model = copy.deepcopy(model).cpu()
    with torch.no_grad(), mode:
        return cpu_model(*cpu_inputs)


def _counted_run(model: nn.Module, inputs: list, on_meta: bool) -> tuple[Any, float, dict[str, float]]:
    counter = _DtypeFlopCounter()
    out = _run_under(counter, model, inputs, on_meta)
    total = float(counter.get_total_flops())
    by_dtype = dict(counter.by_dtype)
    missing = total - sum(by_dtype.values())
    if missing > 0:
        by_dtype["unknown"] = by_dtype.get("unknown", 0.0) + missing
    return out, total, by_dtype


# Operators that launch no kernel of their own: views, aliases and allocations.
_NO_KERNEL = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "t", "transpose", "permute", "expand",
    "squeeze", "unsqueeze", "select", "slice", "as_strided", "alias", "detach", "unbind", "split",
    "split_with_sizes", "chunk", "narrow", "unfold", "view_as", "empty", "empty_like",
    "empty_strided", "lift_fresh",
})
# cuDNN runs an NCHW convolution as three kernels: the input to NHWC, the convolution, the output
# back (an H200, 2026-11-28: 6 of ``2_conv_block``'s 11 kernels for its 2 convolutions).
_KERNELS_PER_OP = {"convolution": 3}


class _OpCounter(TorchDispatchMode):
    """The ATen operators one call dispatches, by name, before any decomposition."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def estimate_launches(names: list[str]) -> int:
    """The GPU kernels of a call that dispatched ``names`` (ATen operators): one per operator
    that computes, none for a view or an allocation, three for a convolution. An estimate: a
    library may split an operator further (a split-K GEMM and its reduction), and a task's own
    kernels called outside ATen are not seen."""
    return sum(_KERNELS_PER_OP.get(n, 1) for n in names if n not in _NO_KERNEL)


def _launches(model: nn.Module, inputs: list, on_meta: bool) -> int:
    counter = _OpCounter()
    _run_under(counter, model, inputs, on_meta)
    return estimate_launches(counter.names)


def count_work(model: nn.Module, inputs: list) -> Work:
    """FLOPs and compulsory bytes of one ``model(*inputs)`` call, without computing it.

    Runs on the ``meta`` device first (248 of 250 KernelBench v0.1 tasks do, timing note
    section 6); tasks that need real values (``.item()``) run on CPU copies instead. The model and
    inputs passed in are never modified.
    """
    bytes_in = _nbytes(chain(_tensors(inputs), model.parameters(), model.buffers()))
    for on_meta in (True, False):
        try:
            out, flops, by_dtype = _counted_run(model, inputs, on_meta)
        except Exception as exc:  # arbitrary task code: any failure means "try the next way"
            logger.info(
                "count_work on %s failed: %s: %s", "meta" if on_meta else "cpu", type(exc).__name__, exc
            )
            continue
        bytes_out = _nbytes(_tensors(out))
        try:
            launches = _launches(model, inputs, on_meta)
        except Exception as exc:  # arbitrary task code, run once more: unknown is 0
            logger.info("counting launches failed: %s: %s", type(exc).__name__, exc)
            launches = 0
        return Work(flops, bytes_in + bytes_out, bytes_out, by_dtype, launches)
    return Work(math.nan, bytes_in, math.nan, {})


@dataclass(frozen=True)
class DevicePeaks:
    """Achievable ceilings of one device: copy bandwidth (B/s) and matmul FLOP/s per precision."""

    name: str
    bandwidth_Bps: float
    flops_per_s: dict[str, float]
    l2_bytes: int = 0
    source: str = "measured"  # measured | nominal


_MiB = 1 << 20
# Datasheet dense peaks (no sparsity). Upper bounds: a floor from them is lower, i.e. more lenient,
# than one from measured peaks. H100 SXM figures as in timing note section 6.
NOMINAL_PEAKS: dict[str, DevicePeaks] = {
    "H100 SXM": DevicePeaks(
        "NVIDIA H100 SXM (nominal)",
        3.35e12,
        {"float64": 67e12, "float32": 67e12, "tf32": 494.7e12, "bfloat16": 989e12, "float16": 989e12},
        50 * _MiB,
        "nominal",
    ),
    "H100 PCIe": DevicePeaks(
        "NVIDIA H100 PCIe (nominal)",
        2.0e12,
        {"float64": 51e12, "float32": 51e12, "tf32": 378e12, "bfloat16": 756e12, "float16": 756e12},
        50 * _MiB,
        "nominal",
    ),
    "H200": DevicePeaks(
        "NVIDIA H200 (nominal)",
        4.8e12,
        {"float64": 67e12, "float32": 67e12, "tf32": 494.7e12, "bfloat16": 989e12, "float16": 989e12},
        50 * _MiB,
        "nominal",
    ),
}


def nominal_peaks(device_name: str) -> DevicePeaks | None:
    """Datasheet fallback for a device name such as ``torch.cuda.get_device_name()`` returns."""
    upper = device_name.upper()
    if "H200" in upper:
        return NOMINAL_PEAKS["H200"]
    if "H100" in upper:
        return NOMINAL_PEAKS["H100 PCIe" if "PCIE" in upper else "H100 SXM"]
    return None


def device_name(device: torch.device | str) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type}-{platform.machine() or 'unknown'}"


def _best_seconds(fn: Callable[[], object], device: torch.device, reps: int, inner: int) -> float:
    """Fastest of ``reps`` samples of ``inner`` back-to-back calls, per call, after one warm-up."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda *_: None)
    fn()
    sync(device)
    best = math.inf
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        sync(device)
        best = min(best, (time.perf_counter() - start) / inner)
    return best


def _copy_bandwidth(device: torch.device, nbytes: int, reps: int) -> float:
    src = torch.ones(nbytes // 4, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    return 2.0 * nbytes / _best_seconds(lambda: dst.copy_(src), device, reps, inner=4)  # read + write


def _matmul_flops_per_s(device: torch.device, precision: str, n: int, reps: int) -> float:
    dtype = {"float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(
        precision, torch.float32
    )
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    saved = torch.get_float32_matmul_precision()
    try:  # our own process, restored below: tf32 is measured as float32 with "high" precision
        torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
        seconds = _best_seconds(lambda: a @ b, device, reps, inner=3)
    finally:
        torch.set_float32_matmul_precision(saved)
    return 2.0 * n**3 / seconds


def measure_peaks(device: torch.device | str = "cpu") -> DevicePeaks:
    """Measure copy bandwidth and matmul throughput per precision on ``device``.

    On a GPU: a 1 GiB copy (20x the H100's 50 MB L2, so HBM is measured, timing note section 2.3)
    and 8192^3 matmuls. On CPU: a small quick version (32 MiB, 256^3), where TF32 equals float32.
    """
    device = torch.device(device)
    cuda = device.type == "cuda"
    nbytes, n, reps = (1 << 30, 8192, 5) if cuda else (32 * _MiB, 256, 3)
    bandwidth = _copy_bandwidth(device, nbytes, reps)
    precisions = ("float64", "float32", "tf32", "bfloat16", "float16")
    flops = {p: _matmul_flops_per_s(device, p, n, reps) for p in precisions if cuda or p != "tf32"}
    flops.setdefault("tf32", flops["float32"])
    l2 = torch.cuda.get_device_properties(device).L2_cache_size if cuda else 0
    return DevicePeaks(device_name(device), bandwidth, flops, int(l2), "measured")


def _cache_path(name: str, cache_dir: Path) -> Path:
    slug = re.sub(r"[^A-Za-z0-9.+-]+", "_", f"{name}-torch{torch.__version__}")
    return cache_dir / f"peaks-{slug}.json"


def load_or_measure_peaks(
    device: torch.device | str,
    cache_dir: Path | str,
    *,
    measure: Callable[[torch.device | str], DevicePeaks] = measure_peaks,
) -> DevicePeaks:
    """Peaks for ``device`` from the JSON cache keyed by device name and torch version, else measured.

    A new torch version re-measures (kernels and libraries change); a damaged cache file is
    replaced.
    """
    path = _cache_path(device_name(device), Path(cache_dir))
    if path.exists():
        try:
            return DevicePeaks(**json.loads(path.read_text()))
        except (ValueError, TypeError) as exc:
            logger.warning("ignoring damaged peaks cache %s: %s", path, exc)
    peaks = measure(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(peaks), indent=2, sort_keys=True))
    tmp.replace(path)
    logger.info("measured peaks for %s: %.3g B/s, %s", peaks.name, peaks.bandwidth_Bps, peaks.flops_per_s)
    return peaks


def sol_ms(work: Work, peaks: DevicePeaks, precision: Precision) -> tuple[float, float]:
    """(bytes floor, FLOP floor) in milliseconds: bytes_io / bandwidth and flops / peak[precision].

    ``precision`` is the lowest one the task's tolerance admits (bf16 at 1e-2, timing note section 6).
    """
    if precision not in peaks.flops_per_s:
        raise KeyError(f"no {precision} peak for {peaks.name}: has {sorted(peaks.flops_per_s)}")
    return work.bytes_io / peaks.bandwidth_Bps * 1e3, work.flops / peaks.flops_per_s[precision] * 1e3


def sol_percent(time_ms: float, work: Work, peaks: DevicePeaks, precision: Precision) -> float:
    """Speed-of-light fraction in percent: max(bytes floor, FLOP floor) / time x 100.

    A NaN FLOP count falls back to the bytes floor alone; a non-positive time gives NaN.
    """
    floors = [f for f in sol_ms(work, peaks, precision) if not math.isnan(f)]
    if time_ms <= 0 or not floors:
        return math.nan
    return 100.0 * max(floors) / time_ms


def physical_gate(cand_ms: float, work: Work, peaks: DevicePeaks, l2_bytes: float) -> Finding | None:
    """REJECT a candidate time that is faster than memory can possibly be.

    A forward call must at least write its outputs, so ``cand_ms < 0.8 x bytes_out / BW`` is
    impossible whatever the caches do. When the working set exceeds 2x L2, the inputs must come
    from HBM too, so ``cand_ms < 0.8 x bytes_io / BW`` is impossible as well; below that, an
    unflushed L2 can legitimately beat HBM bandwidth. Such times come from lazy or cached outputs
    or broken timing (timing-and-anchors.md section 6: four CUDA-L1 scores exceed the bytes bound,
    among them a lazy tensor at 17.8x against a 1.5x bound). The 0.8 margin absorbs measured
    peaks being below the true ones.
    """
    bounds = [("bytes_out", work.bytes_out)]
    if work.bytes_io > L2_FACTOR * l2_bytes:
        bounds.append(("bytes_io", work.bytes_io))
    for bound, nbytes in bounds:
        floor_ms = nbytes / peaks.bandwidth_Bps * 1e3
        if cand_ms < GATE_MARGIN * floor_ms:
            return Finding(
                code="faster_than_memory_floor",
                severity=Severity.REJECT,
                stage=Stage.INTEGRITY,
                message=(
                    f"candidate {cand_ms:.4g} ms is below {GATE_MARGIN} x the {bound} floor {floor_ms:.4g} ms "
                    f"({nbytes:.4g} B at {peaks.bandwidth_Bps / 1e12:.3g} TB/s on {peaks.name})"
                ),
                evidence={
                    "cand_ms": cand_ms,
                    "floor_ms": floor_ms,
                    "bound": bound,
                    "bytes": nbytes,
                    "bytes_io": work.bytes_io,
                    "bytes_out": work.bytes_out,
                    "bandwidth_Bps": peaks.bandwidth_Bps,
                    "l2_bytes": l2_bytes,
                    "margin": GATE_MARGIN,
                    "device": peaks.name,
                },
            )
    return None
