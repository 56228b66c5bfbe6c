"""A model's state as built, for tasks whose forward changes it (KernelBench L3_33/L3_34, the
vanilla RNN: ``self.hidden = tanh(i2h(cat(x, self.hidden)))``).

Such a task's output depends on how often its model was called before, and the two workers call
theirs a different number of times (the reference's float64 twin and precision calibration, the
candidate's first calls, warm-ups, probes). The function the task defines is the one KernelBench's
harness compares: the first call of a freshly built model. So, where the trusted reference's
worker finds its task stateful (``stateful_attributes``, once per task), both workers keep their
models' state as built (``BuiltState``) and put it back before every checked call and before each
timed sample, outside every clock; within a sample the K calls evolve the state alike on both
sides, so timed call j is compared with the reference's call j.

The state is what a forward can replace or change without touching a parameter: every tensor,
``None`` or Python scalar (bool, int, float, str) held as a plain attribute of a module of the
tree, and every buffer. The scalars count because they go with the tensors: CUDA-L1's L3_33
kernel sets ``_device_initialized`` on its first call together with buffers that start as
``None``; restoring the buffers and not the flag left it calling ``None.addmm_`` (H100,
2026-11-26). What is not covered: state held elsewhere (a list, a dict, a C++ extension object,
the task's module globals), and a change that shows in the output only after more than one call.
A candidate that keeps its state elsewhere is not restored, and its outputs are judged as they
come: its own loss. Which side is stateful is never the candidate's word: the trusted side tells
its worker (``keep_state`` on ``build``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

from cudal1.eval.process.wire import flatten_outputs

Slot = tuple[torch.nn.Module, str]  # a module of the tree and one of its attribute names
Scalar = bool | int | float | str
Value = torch.Tensor | Scalar | None  # what a state attribute may hold

# nn.Module's own attributes (``training``, hook dicts, ``_compiled_call_impl``...): never state.
_MODULE_OWN = frozenset(vars(torch.nn.Module()))


class BuiltStates:
    """A worker's built states, by model: kept for a model while it lives (``keep``), put back
    before a call (``restore``). Empty for a stateless task, where ``restore`` is one test."""

    def __init__(self) -> None:
        self._by_id: dict[int, BuiltState] = {}

    def keep(self, model: Any) -> None:
        if isinstance(model, torch.nn.Module):
            self._by_id[id(model)] = BuiltState(model)
            weakref.finalize(model, self._by_id.pop, id(model), None)

    def restore(self, model: Any) -> None:
        if self._by_id:
            built = self._by_id.get(id(model))
            if built is not None and built.model() is model:
                built.restore()

    def calling(self, model: Any) -> Any:
        """``model`` itself, or where its state is kept, a callable that restores it before
        each call (for code that calls a model several times: ``checks.allowance.calibrate``)."""
        if not self.kept(model):
            return model

        def call(*args: Any) -> Any:
            self.restore(model)
            return model(*args)

        return call

    def kept(self, model: Any) -> bool:
        built = self._by_id.get(id(model))
        return built is not None and built.model() is model


def _state_slots(model: Any) -> Iterator[tuple[str, Slot, Value]]:
    """(label, (module, name), value) for every buffer and every plain attribute holding a tensor
    (not a parameter), ``None`` or a Python scalar."""
    if not isinstance(model, torch.nn.Module):
        return
    for path, module in model.named_modules():
        prefix = f"{path}." if path else ""
        for name, value in list(vars(module).items()) + list(module._buffers.items()):
            if name in _MODULE_OWN and name not in module._buffers:
                continue
            tensor = isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter)
            if tensor or value is None or isinstance(value, Scalar):
                yield prefix + name, (module, name), value


class BuiltState:
    """Copies of a model's state tensors, taken right after it was built. It refers to the model's
    modules weakly: a model dropped by its worker takes nothing of this with it."""

    def __init__(self, model: Any) -> None:
        self.model = weakref.ref(model) if isinstance(model, torch.nn.Module) else lambda: None
        self.saved: dict[str, tuple[weakref.ref[torch.nn.Module], str, Value]] = {
            label: (
                weakref.ref(module),
                name,
                value.detach().clone() if isinstance(value, torch.Tensor) else value,
            )
            for label, (module, name), value in _state_slots(model)
        }

    def restore(self) -> None:
        """Every state attribute back to its value as built, each in fresh memory: an output a
        previous call returned may be the very tensor it replaces (L3_34 returns its hidden
        state), and kept outputs must not change. On the device where the attribute is now:
        KernelBench's RNN makes its state on the CPU and its forward moves it to the input's
        device, and ``Module.to`` leaves plain attributes where they are. Put back on the CPU,
        the reference's first timed call of every sample would copy it to the GPU inside its
        clock, a wait a candidate that made its state on the device never pays (red team
        2026-11-26, ``stateful_state_built_on_device_gpu``); the copy here is outside every
        clock."""
        for ref, name, value in self.saved.values():
            module = ref()
            if module is None:
                continue
            if not isinstance(value, torch.Tensor):
                setattr(module, name, value)
                continue
            now = getattr(module, name, None)
            where = now.device if isinstance(now, torch.Tensor) else value.device
            setattr(module, name, value.to(where, copy=True))

    def changed(self, model: Any) -> list[str]:
        """Labels of the state attributes that are no longer what was saved (replaced, written,
        set, reshaped)."""
        now = {label: value for label, _, value in _state_slots(model)}
        found = []
        for label, (_, _, saved) in self.saved.items():
            value = now.get(label)
            if not _same(saved, value):
                found.append(label)
        return found


def _same(a: Value, b: Value) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b.to(a.device)))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return False
    return type(a) is type(b) and (a == b or a != a and b != b)  # NaN is itself


def same_outputs(a: Any, b: Any) -> bool:
    """Two calls' outputs are bit for bit the same."""
    left, right = flatten_outputs(a), flatten_outputs(b)
    if len(left) != len(right):
        return False
    for x, y in zip(left, right, strict=True):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if not (x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y)):
                return False
        elif x != y:
            return False
    return True


def stateful_attributes(model: Any, make_inputs: Callable[[], list[Any]]) -> list[str]:
    """The state attributes whose change moved the model's output: two calls on the same inputs
    (``make_inputs``'), the second from the state the first left. Empty for a stateless model, and
    for one whose state changes without moving its output (a training-mode batch norm's running
    statistics), which is judged as before; a model with no state attribute at all is not
    called. Leaves the model's state as built. A nondeterministic model whose state changes
    reads as stateful: that costs restores, never a wrong verdict."""
    built = BuiltState(model)
    if not built.saved:
        return []
    inputs = make_inputs()
    with torch.no_grad():
        first = model(*inputs)
        changed = built.changed(model)
        moved = bool(changed) and not same_outputs(first, model(*inputs))
    built.restore()
    return changed if moved else []
