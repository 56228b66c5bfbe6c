"""What an allowance for one kind of operation explains of a candidate's error, and what it does
not: the reference worker's side of the per-operation precision rule (``checks.precision`` says
how the verdict uses it).

Under the "task" policy an fp32 task's convolutions may run at TF32 (PyTorch's default on CUDA,
``torch.backends.cudnn.allow_tf32``), because the reference itself may. Its matmuls may not. A
TF32 matmul and a TF32 convolution leave errors of the same size (on an H100, a conv + linear
task's candidate with TF32 linears showed 0.8-1.2x the error of one with TF32 convolutions), so
no threshold on the size of the error separates them. Where the error comes from does: a TF32
convolution rounds its operands, input and weight, to 10 fraction bits and sums the exact
products in fp32, and the reference can do exactly that. So, on each calibrated set:

- the reference runs in strict fp32 (TF32 off) while the allowed operations are counted, then
  with all of them at TF32: rounding to nearest, ties away (cuDNN's and CUTLASS's conversion),
  and truncating (tensor cores fed raw fp32); these twins' outputs, and the reference's own
  under PyTorch's defaults (whatever cuDNN picked for it), are kept on a sample of output
  positions;
- a candidate's output is measured against the nearest twin (the 99th percentile of the
  difference, over the strict reference's own error, ``Isolated.ratio``). Where none is near,
  twins with some of the calls at TF32 and not the others are tried (cuDNN picks its algorithm
  per convolution), every subset, each a forward pass of its own: rounding effects do not add
  up across chained calls (a call's operands round differently once an earlier call's output
  moved), so no sum of single-call effects stands in for them.

A candidate whose only reduced precision is the reference's own convolutions at TF32 lands on a
twin up to the tensor cores' own summation (they align and truncate the products they add):
about 1-30x the strict reference's error on an H100, a few percent of the TF32 error. One that
also runs a matmul at TF32 stays that matmul's error away from every twin, hundreds of times the
strict reference's, 20-70% of the TF32 error. The limit (``Isolated.limit``) is the larger of the
geometric midpoint between the strict reference (1) and the TF32 twin, as for the levels
``checks.precision`` calibrates, and ``TWIN_FRACTION`` of the twin; never under ``MIN_LIMIT``.

What is not covered: a convolution at TF32 on operands the reference never has (weights the
candidate folded a scale or a norm into) rounds other numbers and lands on no twin: such a
candidate keeps that convolution at fp32 (``torch.backends.cudnn.flags(allow_tf32=False)``); a
reduced precision that is not TF32 (an fp16 convolution), or one rounding for some calls and the
other for the rest, lands on no twin either. Beyond ``MAX_SEARCH_CALLS`` allowed calls (deep
convolutional networks) only the strict, the all-TF32 and the reference's own twins are tried,
and a candidate near none of them is judged by the size of its error (``Allowance.level``), which cannot tell a TF32 matmul
from a TF32 convolution. Where the reference itself picked TF32 algorithms, its own error is
TF32's, and a TF32 matmul beside them may not stand out of that by size.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.overrides import TorchFunctionMode

from cudal1.eval.checks.compare import precision_ratio
from cudal1.eval.process.wire import flatten_outputs

Rounding = Literal["nearest", "truncate"]

# The operations each allowance covers; F.conv2d is torch.conv2d, and nn.Conv* calls it.
OPERATIONS: dict[str, frozenset[Callable[..., Any]]] = {
    "convolution": frozenset(
        {
            torch.conv1d,
            torch.conv2d,
            torch.conv3d,
            torch.conv_transpose1d,
            torch.conv_transpose2d,
            torch.conv_transpose3d,
            torch.convolution,
            torch.conv_tbc,
        }
    )
}
ROUNDINGS: tuple[Rounding, Rounding] = ("nearest", "truncate")
# Beyond this many allowed calls only the strict, the all-TF32 and the reference's own twins are
# tried. On an H100 a greedy search, one call toggled at a time, did not find cuDNN's per-layer
# choice in a chain of five convolutions, and in a chain of three the tensor cores' summation
# (below) already took honest candidates to 7% of the TF32 error, a TF32 matmul to 12-16%.
MAX_SEARCH_CALLS = 2
# The limit, in the strict reference's errors: at least the geometric midpoint between it (1)
# and the TF32 twin, and at least this fraction of the twin. Tensor cores align and truncate the
# products they sum, which no fp32 run reproduces: with one or two convolutions, cuDNN's TF32
# algorithms (NCHW, channels_last, cudnn.benchmark) landed at most 4.5% of the TF32 error away
# from the nearest twin (H100, 27 to 2304 terms), a TF32 matmul beside them 20-70% away.
TWIN_FRACTION = 0.1
SAMPLE = 16384  # output positions the distance is measured on
QUANTILE = 0.99  # robust to the odd element a ReLU kink or a rounding boundary flips
MIN_LIMIT = 4.0
_U32 = 2.0**-24
# On a probe's set a candidate past the tolerance is still right where the allowed operations at
# TF32 explain its error (``within_allowance``), up to this many times the tolerance: the probes
# scale the inputs by 5 (or draw wider weights), and TF32's rounding grows with its operands while
# the tolerance follows the outputs, which a sigmoid or a sum need not let grow. On an H200
# (2026-11-28) every transform of 6_conv_maxpool_sigmoid_sum (channels_last, cudnn.benchmark,
# torch.compile: TF32 convolutions the reference's own NCHW algorithm did not use) was 0.50x the
# tolerance on the task's inputs and 1.21-1.25x on the scaled ones, and failed there; on this
# repository's CPU test of a conv + sigmoid + per-channel sum, 0.7-1.0x and 1.8-4.8x. What the
# probes are there to catch (a clamp the task's inputs never reach, a weight assumed) misses by
# far more, and lands on no twin.
ROOM = 10.0


def round_tf32(x: Any, rounding: Rounding) -> Any:
    """An fp32 tensor rounded to TF32's 10 fraction bits; anything else unchanged."""
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        return x
    bits = x.contiguous().view(torch.int32)
    if rounding == "nearest":  # ties away from zero: the magnitude bits round up at the half
        bits = bits + 0x1000
    return (bits & ~0x1FFF).view(torch.float32).view(x.shape)


class ReducedOps(TorchFunctionMode):
    """Counts calls of ``ops``; with ``rounding``, rounds the input and weight of the calls in
    ``select`` (all when None) to TF32 before they run."""

    def __init__(
        self,
        ops: frozenset[Callable[..., Any]],
        rounding: Rounding | None = None,
        select: frozenset[int] | None = None,
    ) -> None:
        super().__init__()
        self.ops, self.rounding, self.select, self.calls = ops, rounding, select, 0

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        if func in self.ops:
            if self.rounding is not None and (self.select is None or self.calls in self.select):
                args = tuple(round_tf32(a, self.rounding) if i < 2 else a for i, a in enumerate(args))
                for name in ("input", "weight"):
                    if name in kwargs:
                        kwargs[name] = round_tf32(kwargs[name], self.rounding)
            self.calls += 1
        return func(*args, **kwargs)


@contextlib.contextmanager
def strict_fp32() -> Iterator[None]:
    """TF32 off for matmuls and convolutions, restored after."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@dataclass(frozen=True)
class Isolated:
    """The candidate's error that the allowance does not explain, and the most accepted."""

    ratio: float
    limit: float


Rerun = Callable[[frozenset[int] | None, Rounding], torch.Tensor]


@dataclass
class Allowance:
    """What one calibrated set says about the allowed operations at TF32: ``level``, the twin
    with all of them at TF32's precision ratio (as ``PrecisionLevels`` measures it); and, on
    sampled output positions, the strict and TF32 twins' outputs that ``isolated`` measures a
    candidate against (``rerun`` makes others: some calls rounded, not all)."""

    level: float | None
    calls: int
    positions: torch.Tensor
    scale: float  # the strict reference's own error there (QUANTILE, floored at fp32's roundoff)
    limit: float
    known: dict[str, torch.Tensor]  # "strict", "reference", "all nearest", "all truncate"
    rerun: Rerun
    remake: Callable[[Rounding], Any]  # the whole output with every allowed call at TF32

    def isolated(self, cand: Any) -> Isolated | None:
        """The distance from the candidate's output to the nearest reference with some of its
        allowed calls at TF32 (none, all, or each other subset of them, either rounding); None
        where it is near none of the strict, the all-TF32 and the reference's own (PyTorch's
        defaults) twin, and there are too many calls to try the subsets."""
        flat = _flat(cand)
        if flat is None or flat.numel() <= int(self.positions.max()):
            return None
        got = flat[self.positions.to(flat.device)].cpu()
        if not bool(torch.isfinite(got).all()):
            return None
        best = min(self._distance(got, twin) for twin in self.known.values())
        if best <= self.limit:
            return Isolated(best, self.limit)
        if self.calls > MAX_SEARCH_CALLS:
            return None  # near no twin, too many calls to try their subsets: the size decides
        subsets = itertools.chain.from_iterable(
            itertools.combinations(range(self.calls), n) for n in range(1, self.calls)
        )
        for chosen, rounding in itertools.product(subsets, ROUNDINGS):
            best = min(best, self._distance(got, self.rerun(frozenset(chosen), rounding)))
            if best <= self.limit:
                break
        return Isolated(best, self.limit)

    def _distance(self, got: torch.Tensor, twin: torch.Tensor) -> float:
        """In units of the strict reference's own error."""
        return _quantile(got - twin) / self.scale


def within_allowance(
    allowance: Allowance | None, rel_err: float, scale: float, matches: Callable[[Any], bool]
) -> Rounding | None:
    """Where a candidate's output misses the tolerance (``rel_err`` tolerance units, ``scale``
    allowed) by at most ``ROOM`` times: the rounding whose full twin of the reference (every
    allowed call at TF32) the candidate ``matches`` (its caller's comparison, at every element
    and at the tolerance); None when it matches neither, or the miss is not one to look at. Not
    ``isolated``'s sampled quantile: a candidate that skips a clamp the scaled inputs reach in
    half a percent of its outputs sits on the twin everywhere else (a red team, 2026-11-28)."""
    if allowance is None or not math.isfinite(rel_err) or rel_err > ROOM * scale:
        return None
    return next((r for r in ROUNDINGS if matches(allowance.remake(r))), None)


def calibrate(
    model: Any, inputs: list[Any], out: Any, out64: Any, ops: frozenset[Callable[..., Any]], seed: int
) -> Allowance | None:
    """None when no allowed operation ran on these inputs, or the outputs are not float32 (TF32
    rounds fp32 operands only), or not finite: the allowance explains nothing there."""
    floats = [x for x in flatten_outputs(out) if isinstance(x, torch.Tensor) and x.is_floating_point()]
    target = _flat(out64)
    if not floats or any(x.dtype != torch.float32 for x in floats) or target is None:
        return None
    if not bool(torch.isfinite(target).all()):
        return None
    counter = ReducedOps(ops)
    strict = _flat(_run(model, inputs, counter))
    if counter.calls == 0 or strict is None:
        return None
    gen = torch.Generator().manual_seed(seed)
    positions = torch.randint(0, target.numel(), (min(target.numel(), SAMPLE),), generator=gen)
    at = positions.to(target.device)

    def rerun(select: frozenset[int] | None, rounding: Rounding) -> torch.Tensor:
        return _flat(_run(model, inputs, ReducedOps(ops, rounding, select)))[at].cpu()  # type: ignore[index]

    twins = {r: _run(model, inputs, ReducedOps(ops, r)) for r in ROUNDINGS}
    ratios = [
        precision_ratio(flatten_outputs(t), flatten_outputs(out), flatten_outputs(out64))
        for t in twins.values()
    ]
    target_s, strict_s = target[at].cpu(), strict[at].cpu()
    scale = max(_quantile(strict_s - target_s), _U32 * _quantile(target_s), 1e-300)
    known = {"strict": strict_s, "reference": _flat(out)[at].cpu()}  # type: ignore[index]
    known |= {f"all {r}": _flat(t)[at].cpu() for r, t in twins.items()}  # type: ignore[index]
    twin_level = max(_quantile(known[f"all {r}"] - target_s) for r in ROUNDINGS) / scale
    return Allowance(
        level=max((x for x in ratios if x is not None), default=None),
        calls=counter.calls,
        positions=positions,
        scale=scale,
        limit=max(MIN_LIMIT, math.sqrt(max(twin_level, 1.0)), TWIN_FRACTION * twin_level),
        known=known,
        rerun=rerun,
        remake=lambda rounding: _run(model, inputs, ReducedOps(ops, rounding)),
    )


def _run(model: Any, inputs: list[Any], mode: ReducedOps) -> Any:
    with torch.no_grad(), strict_fp32(), mode:
        out = model(*inputs)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out


def _flat(out: Any) -> torch.Tensor | None:
    """Every floating leaf, flattened and joined, in float64; None when there is none."""
    leaves = [
        x.reshape(-1).to(torch.float64)
        for x in flatten_outputs(out)
        if isinstance(x, torch.Tensor) and x.is_floating_point()
    ]
    return torch.cat(leaves) if leaves else None


def _quantile(x: torch.Tensor) -> float:
    return float(torch.quantile(x.abs().to(torch.float64), QUANTILE)) if x.numel() else 0.0
