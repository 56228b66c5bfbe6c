"""Values the behavioural probes give a model and its inputs that the task's defaults never take:
re-drawn weights (``reinitialised``) and inputs moved out of the generator's range (``shifted``).

Both run in both workers, the same code with the same seed, so the two models receive the same
values without any tensor travelling between them; what is judged is the candidate's output on
them (``checks.probes``), never what its worker says it set.

The weights rule: values arrive through construction, not after it. A candidate may legitimately
transform its weights once in ``__init__`` (store a weight transposed, concatenate two linears,
fold a scale or an eval-mode BatchNorm into a convolution); new values written into its
parameters after construction would reach the folded copy wrong, or not at all. So both models
are *built* with the new values:

- when the outermost constructor of a ``torch.nn`` module (Linear, Conv, LayerNorm, BatchNorm,
  MultiheadAttention...) returns, every floating parameter and buffer it holds, its built-in
  submodules' included, is re-drawn: the running statistics and the zero biases and unit weights
  a candidate might assume, and the random weights too. The model's own ``__init__`` code, which
  runs after that, folds or reshapes the re-drawn values;
- when the model makes a floating parameter itself with a constant value (``nn.Parameter(torch.zeros(1))``:
  a zero-initialised gate, a unit scale), it is re-drawn as it is made, so the model's
  ``__init__`` folds the new value; one still constant when the model is built (filled after it
  was made) is re-drawn then, in state order. Its
  random ones keep the values the init seed gave them (the usual contract: the same seed and the
  same creation order give the same weights), and so do the buffers it registers itself: masks
  and tables are structure, which a kernel may compute instead of reading.

Which values a tensor gets depends on its number of elements, its kind (the constant it holds,
or "random") and how many tensors of that number and kind were re-drawn before it: not on its
name or shape, so a candidate's parameter with another name, a 0-d scalar for a ``[1]`` one or a
reshaped copy of the reference's gets the same values, as long as the two models make their
tensors in the same order within each size. A constant ``c`` becomes ``c * exp(z/2)`` (zero:
``z/2``; below 1e-3 in magnitude, ``sign(c) * exp(z/2)``: a tiny layer scale gets full weight),
so positive constants (variances, scales) stay positive; a random tensor ``t`` becomes
``2t + std(t) z``, or ``t * exp(z/2)`` where all of it is positive; ``z`` standard normal.

Inputs: every floating tensor that is not integer-valued (labels and masks stored as floats are
structure) becomes ``5x + 2 std(x)``: beyond the generator's range (a threshold that ``randn``
never crosses), positive where it was (``rand`` inputs to a log or a square root stay valid).
Integer and boolean tensors (indices) are left alone.

What is not covered: a candidate that detects the probe (the wrapped constructors are visible
in its process) and builds differently under it; a candidate that stacks the reference's
constant-initialised parameters into one of its own making, or makes same-sized tensors in
another order than the reference (it gets other values, and fails the probe honestly or not).
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

# Inputs: x -> SCALE * x + SHIFT * std(x).
SCALE, SHIFT = 5.0, 2.0
# Constants of smaller magnitude are re-drawn at unit scale (``_new_values``).
SMALL_CONSTANT = 1e-3
_BUILT_IN = ("torch.nn.", "torch.ao.nn.")


@dataclass
class Redraws:
    """The tensors re-drawn while one model was built: (label, numel, kind, index) each."""

    seed: int
    done: dict[int, torch.Tensor] = field(default_factory=dict)  # by id, kept alive meanwhile
    counts: dict[tuple[int, str], int] = field(default_factory=dict)
    keys: list[list[Any]] = field(default_factory=list)
    depth: int = 0

    def redraw(self, label: str, t: torch.Tensor) -> None:
        if id(t) in self.done or not _redrawable(t):
            return
        self.done[id(t)] = t
        with torch.no_grad():
            flat = t.detach().reshape(-1)
            first = float(flat[0])
            constant = bool((flat == flat[0]).all())
            if constant and not torch.isfinite(flat[0]):
                return
            kind = repr(first) if constant else "random"
            index = self.counts.get((t.numel(), kind), 0)
            self.counts[(t.numel(), kind)] = index + 1
            z = _normal(self.seed, t.numel(), kind, index).reshape(t.shape)
            t.copy_(_new_values(t.detach().to(torch.float64), z, constant).to(t.dtype))
        self.keys.append([label, t.numel(), kind, index])

    def built_in_done(self, module: torch.nn.Module) -> None:
        """A built-in module's outermost constructor returned: its state and its built-in
        submodules' (reached through built-ins only: a model's own blocks keep theirs)."""
        stack = [(type(module).__name__, module)]
        while stack:
            prefix, m = stack.pop(0)
            for name, t in [*m.named_parameters(recurse=False), *m.named_buffers(recurse=False)]:
                self.redraw(f"{prefix}.{name}", t)
            stack += [(f"{prefix}.{n}", c) for n, c in m.named_children() if _is_built_in(type(c))]

    def model_done(self, model: Any) -> None:
        """The model is built: its own still-constant parameters, in state order."""
        if not isinstance(model, torch.nn.Module):
            return
        for name, p in model.named_parameters():
            if id(p) not in self.done and _redrawable(p) and bool((p == p.reshape(-1)[0]).all()):
                self.redraw(name, p)


@contextmanager
def reinitialised(seed: int) -> Iterator[Redraws]:
    """Build a model inside: every ``torch.nn`` module's constructor re-draws what it made;
    call ``model_done`` on the model before leaving."""
    redraws = Redraws(seed)
    wrapped = [(cls, cls.__dict__["__init__"]) for cls in _built_in_classes() if "__init__" in cls.__dict__]
    for cls, original in wrapped:
        type.__setattr__(cls, "__init__", _redrawing_init(original, redraws))
    parameter_new = torch.nn.Parameter.__dict__["__new__"]
    type.__setattr__(torch.nn.Parameter, "__new__", _redrawing_parameter(parameter_new, redraws))
    try:
        yield redraws
    finally:
        type.__setattr__(torch.nn.Parameter, "__new__", parameter_new)
        for cls, original in wrapped:
            type.__setattr__(cls, "__init__", original)


def _redrawing_parameter(original: Any, redraws: Redraws) -> Any:
    """A parameter a model makes itself (outside every built-in constructor) with a constant
    value is re-drawn as it is made, so the model's ``__init__`` folds the new value as it folds a
    built-in module's: re-drawn only once the model was built, an honest fold of the model's own
    scale into a linear layer computed another function on the probe and was rejected
    (audit/cases/legit_fold_own_scale_in_init.py)."""
    new = original.__func__ if isinstance(original, staticmethod) else original

    def __new__(cls: Any, data: Any = None, requires_grad: bool = True) -> Any:
        param = new(cls, data, requires_grad)
        if redraws.depth == 0 and _redrawable(param):
            flat = param.detach().reshape(-1)
            if bool((flat == flat[0]).all()):
                redraws.redraw(f"Parameter#{len(redraws.keys)}", param)
        return param

    return staticmethod(__new__)


def _redrawing_init(original: Any, redraws: Redraws) -> Any:
    @functools.wraps(original)
    def __init__(self: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        redraws.depth += 1
        try:
            original(self, *args, **kwargs)
        finally:
            redraws.depth -= 1
        if redraws.depth == 0:
            redraws.built_in_done(self)

    return __init__


def _built_in_classes() -> list[type]:
    seen: set[type] = set()
    stack = list(torch.nn.Module.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls not in seen:
            seen.add(cls)
            stack += cls.__subclasses__()
    return [cls for cls in seen if _is_built_in(cls)]


def _is_built_in(cls: type) -> bool:
    return cls.__module__.startswith(_BUILT_IN) and cls is not torch.nn.Module


def _redrawable(t: Any) -> bool:
    return (
        isinstance(t, torch.Tensor)
        and not torch.nn.parameter.is_lazy(t)
        and t.is_floating_point()
        and t.numel() > 0
    )


def _normal(seed: int, numel: int, kind: str, index: int) -> torch.Tensor:
    key = hashlib.blake2b(f"{seed}:{numel}:{kind}:{index}".encode(), digest_size=8).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(key, "little") >> 1)
    return torch.randn(numel, generator=gen, dtype=torch.float64)


def _new_values(t: torch.Tensor, z: torch.Tensor, constant: bool) -> torch.Tensor:
    z = z.to(t.device)
    if constant:
        c = float(t.reshape(-1)[0])
        if c == 0:
            return 0.5 * z
        # A small constant is re-drawn at unit scale, keeping its sign: kept at its own scale, a
        # 1e-6 layer scale stayed at 1e-6 and a candidate that dropped its branch stayed inside
        # the tolerance on the probe (audit/cases/layer_scale_branch_dropped.py, paid 24-26x).
        scale = c if abs(c) >= SMALL_CONSTANT else math.copysign(1.0, c)
        return scale * torch.exp(0.5 * z)
    if bool((t > 0).all()):
        return t * torch.exp(0.5 * z)
    return 2 * t + float(t.std()) * z


def shifted(x: Any) -> Any:
    """An input moved out of the generator's range; integer-valued and non-float ones unchanged."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() == 0:
        return x
    if torch.equal(x, x.round()):
        return x.clone()
    spread = float(x.double().std()) if x.numel() > 1 else abs(float(x.reshape(-1)[0]))
    return (SCALE * x.double() + SHIFT * spread).to(x.dtype)
