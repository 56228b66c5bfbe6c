"""What a candidate must leave as it found it, observed inside its worker.

Process-wide settings (cuDNN and TF32 flags, the matmul precision, the current stream, a
persisting-L2 carve-out), the
identity of every public torch function (a patched ``torch.allclose`` or timer shows here), the
RNG state, streams a model holds, outputs that alias inputs or parameters, and the poisoning of
free memory before a checked call. A candidate can forge any of this from inside its process, so
it only ever adds findings (see ``checks.global_state``); verdicts come from the trusted side.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import time
import weakref
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from cudal1.eval.process.wire import flatten_outputs

CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # cuda.h, CUlimit
_LIBCUDA: list[Any] = []


def libcuda() -> Any:
    """The CUDA driver this process uses, or None (no GPU, no driver)."""
    if not _LIBCUDA:
        try:
            _LIBCUDA.append(ctypes.CDLL("libcuda.so.1"))
        except OSError:
            _LIBCUDA.append(None)
    return _LIBCUDA[0]


def persisting_l2_limit() -> int:
    """The context's persisting-L2 carve-out in bytes (0 unless someone set it). Lines marked
    persisting through an access-policy window survive the evaluator's L2 flush only while it is
    nonzero, so a candidate that keeps its weights in L2 between samples leaves it set."""
    lib = libcuda() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    if lib is None:
        return 0
    value = ctypes.c_size_t(0)
    try:
        if lib.cuCtxGetLimit(ctypes.byref(value), CU_LIMIT_PERSISTING_L2_CACHE_SIZE) != 0:
            return 0
    except AttributeError:  # a driver without the symbol
        return 0
    return int(value.value)


def reset_persisting_l2() -> None:
    """Return lines marked persisting to normal (before a sample's flush), where there is a GPU."""
    lib = libcuda() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    if lib is not None:
        with contextlib.suppress(AttributeError):
            lib.cuCtxResetPersistingL2Cache()


# The current GPU, left switched: the worker's events, flush, lead and state reads act on the
# current device, so a candidate that ends its forward on another GPU of the machine has them
# read a GPU it did not run on (review of the two-H200 findings, 2026-11-28). Process state, so
# ``global_state_changed`` (REJECT by default), and no repaired twin restores it.
CURRENT_DEVICE = "cuda.current_device"


def global_state() -> dict[str, Any]:
    """Process-wide settings and the identity of functions a timing or comparison hack patches."""
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    state: dict[str, Any] = {
        "cuda.current_stream": _current_stream(),  # checks.global_state.CURRENT_STREAM
        "cudnn.enabled": cudnn.enabled,
        "cudnn.benchmark": cudnn.benchmark,
        "cudnn.deterministic": cudnn.deterministic,
        "cudnn.allow_tf32": cudnn.allow_tf32,
        "matmul.allow_tf32": matmul.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    if torch.cuda.is_initialized():  # compared only where CUDA ran before the call too
        state[CURRENT_DEVICE] = torch.cuda.current_device()
    l2 = persisting_l2_limit()
    if l2:  # listed only when set: a process that never touched it has no such key
        state["cuda.persisting_l2_limit"] = l2
    patched = {
        "torch.allclose": torch.allclose,
        "torch.isclose": torch.isclose,
        "torch.equal": torch.equal,
        "torch.testing.assert_close": torch.testing.assert_close,
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.cuda.Event.record": torch.cuda.Event.record,
        "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
        "time.perf_counter": time.perf_counter,
        "time.time": time.time,
        "torch.nn.Module.__call__": torch.nn.Module.__call__,
    }
    state.update({f"id:{k}": id(v) for k, v in patched.items()})
    # Every public function of torch, torch.nn.functional and torch.Tensor, against what it was
    # when this worker started: only the replaced ones are listed, so the snapshot stays small.
    # torch wraps some of its own on lazy imports (torch._dynamo wraps torch.manual_seed on the
    # first torch.compile), so a wrapper whose __wrapped__ chain reaches the original is no change.
    for label, owner, name, original in _watched():
        now = getattr(owner, name, None)
        if now is not original and not _wraps(now, original):
            state[f"ns:{label}"] = id(now)
    return state


def _wraps(fn: Any, original: Any) -> bool:
    for _ in range(8):
        fn = getattr(fn, "__wrapped__", None)
        if fn is None:
            return False
        if fn is original:
            return True
    return False


_WATCHED: list[tuple[str, Any, str, Any]] = []


def _watched() -> list[tuple[str, Any, str, Any]]:
    """(label, owner, name, original): taken when the worker starts, before any candidate."""
    if not _WATCHED:
        for prefix, owner in (("torch", torch), ("torch.nn.functional", F), ("torch.Tensor", torch.Tensor)):
            for name in dir(owner):
                value = getattr(owner, name, None)
                if not name.startswith("_") and callable(value) and not isinstance(value, type):
                    _WATCHED.append((f"{prefix}.{name}", owner, name, value))
    return _WATCHED


def _current_stream() -> str:
    """The current CUDA stream: "default" while it is the device's default stream (always so
    before CUDA is initialised), else its handle."""
    if not torch.cuda.is_initialized():
        return "default"
    current = torch.cuda.current_stream()
    return "default" if current == torch.cuda.default_stream() else f"stream {current.cuda_stream:#x}"


def rng_digest() -> list[str]:
    """Hashes of the CPU generator's state and, once CUDA is initialised, every CUDA generator's
    (reading them before initialisation would initialise CUDA). Not ``wire.digest``: one draw
    moves two counters of the state by amounts whose sum is unchanged."""
    states = [torch.get_rng_state()]
    if torch.cuda.is_initialized():
        states += list(torch.cuda.get_rng_state_all())
    return [hashlib.sha256(s.numpy().tobytes()).hexdigest()[:16] for s in states]


def side_streams(candidate: Any, model: Any) -> list[str]:
    """Names of CUDA streams the candidate's module or its model's submodules hold as attributes."""
    found = []
    owners = [("module", vars(candidate))] if candidate is not None else []
    if isinstance(model, torch.nn.Module):
        owners += [(name or "model", vars(m)) for name, m in model.named_modules()]
    for owner, attrs in owners:
        for attr, value in list(attrs.items()):
            values = value if isinstance(value, list | tuple) else [value]
            if any(isinstance(v, torch.cuda.Stream) for v in values):
                found.append(f"{owner}.{attr}")
    return found


M_PERTURB = -6  # glibc's mallopt parameter: fill every heap allocation with ~value's low byte


@contextlib.contextmanager
def poisoned(device: torch.device, sizes: list[int], copies: int = 2, limit: int = 2**30) -> Iterator[None]:
    """Free memory filled with all-ones bytes (NaN in every float dtype, -1 in every integer one)
    for the duration of a checked call, so an output the candidate never wrote (``torch.empty``, a
    partial write) fails the comparison instead of showing whatever a freed block held.

    CUDA: blocks sized like the reference's outputs are filled and freed after ``empty_cache``, so
    the caching allocator hands a poisoned block to the next request of that size (best effort:
    nothing stops a candidate allocating another size). CPU: glibc's ``M_PERTURB`` fills every
    allocation it hands out, heap or fresh mmap, with 0xFF until the call ends (reusing freed
    blocks, as this did before, depended on the heap's history and failed on some machines). Off
    again afterwards, so timed calls pay no memset."""
    if device.type == "cuda":
        sizes = [n for n in sizes if n > 0][:16]
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        if sum(sizes) * copies <= limit:
            blocks = [
                torch.full((n,), 255, dtype=torch.uint8, device=device) for n in sizes for _ in range(copies)
            ]
            del blocks
        yield
        return
    libc = _libc()
    on = libc is not None and libc.mallopt(M_PERTURB, 0x100) == 1  # ~0x00 low byte: 0xFF fill
    try:
        yield
    finally:
        if on:
            libc.mallopt(M_PERTURB, 0)


def _libc() -> Any:
    """glibc, whose ``mallopt`` knows ``M_PERTURB``; None elsewhere (musl has no mallopt)."""
    try:
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "mallopt") else None
    except OSError:
        return None


def state_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """What differs after from before. The current GPU only where CUDA ran before too: a CPU
    evaluation's candidate that merely starts CUDA has switched nothing."""
    return {
        k: [before.get(k), after.get(k)]
        for k in after
        if before and before.get(k) != after.get(k) and (k != CURRENT_DEVICE or k in before)
    }


def _span(t: torch.Tensor) -> tuple[int, int]:
    st = t.untyped_storage()
    return st.data_ptr(), st.data_ptr() + st.nbytes()


def aliases(out: Any, inputs: list[Any], model: Any) -> list[str]:
    """Output leaves whose memory overlaps an input's or a parameter's."""
    owned = [("input", x) for x in inputs if isinstance(x, torch.Tensor)]
    if isinstance(model, torch.nn.Module):
        owned += [("parameter", p) for p in model.parameters()] + [("buffer", b) for b in model.buffers()]
    found = []
    for i, leaf in enumerate(flatten_outputs(out)):
        if not isinstance(leaf, torch.Tensor) or leaf.numel() == 0:
            continue
        lo, hi = _span(leaf)
        for kind, t in owned:
            tlo, thi = _span(t)
            if t.numel() and lo < thi and tlo < hi:
                found.append(f"output {i} shares memory with a {kind}")
                break
    return found


class EarlierOutputs:
    """The tensors earlier calls returned (checked and timed), held weakly by their storage (a
    view by its base): a new output in the storage of one that is still alive is memory the
    module kept and returned again, not a result it computed (a tensor of ones made in
    ``__init__`` and returned by every call read 274.9x on the H200, with nothing launched:
    CUDA-L1's L2_66). An honest output is freed once
    described, and the allocator never hands out the memory of a live tensor, so a fresh result
    cannot meet one. Every earlier output still alive is kept (dead ones are dropped), so
    rotating among several kept tensors is caught at the first one used twice. A CUDA graph's
    static output returned uncloned is kept memory too: the next call overwrites it
    (``search/transforms.py`` clones it for that reason)."""

    def __init__(self) -> None:
        self.alive: dict[int, weakref.ref[torch.Tensor]] = {}  # storage address -> a tensor on it

    def shared(self, out: Any) -> list[str]:
        """Why ``out``'s leaves are an earlier output's memory (empty if none are); then
        ``out``'s leaves join the earlier ones."""
        return self.shared_calls([out])

    def shared_calls(self, outs: list[Any]) -> list[str]:
        """``shared`` over several calls' outputs in order (a timed sample's K calls, all still
        held by the worker): a call whose output is an earlier call's memory is named by its
        index."""
        self.alive = {ptr: ref for ptr, ref in self.alive.items() if ref() is not None}
        found = []
        for call, out in enumerate(outs):
            leaves = [x for x in flatten_outputs(out) if isinstance(x, torch.Tensor) and x.numel()]
            for i, leaf in enumerate(leaves):
                if leaf.untyped_storage().data_ptr() in self.alive:
                    where = f"output {i}" if len(outs) == 1 else f"call {call}, output {i}"
                    found.append(f"{where} is the memory of an earlier call's output, which the module kept")
            for leaf in leaves:
                # A view is held by its base: a fresh view of a kept tensor dies with the reply,
                # the kept base does not (red team 2026-11-28: views of 4099 kept tensors in turn).
                owner = leaf._base if leaf._base is not None else leaf
                self.alive.setdefault(leaf.untyped_storage().data_ptr(), weakref.ref(owner))
        return found
