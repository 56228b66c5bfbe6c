"""The repaired twin: a candidate that left process-wide state changed, made to scope it.

Kernels in the wild (51 of 210 released CUDA-L1 H100 codes) set cuDNN or TF32 flags at import or
in ``__init__`` and never restore them. The evaluator rejects that (``global_state_changed``):
a module that changes its caller's whole process is no drop-in replacement. When that is the
only reason a correct candidate was rejected, its speed may still be real, and scoping the flags
makes it a drop-in. ``repaired_twin`` writes the wrapper that does so:

- before the candidate's module code runs, it snapshots the settings the evaluator's worker
  checks (cuDNN enabled/benchmark/deterministic/allow_tf32, CUDA matmul allow_tf32, the float32
  matmul precision), the reduced-precision reduction flags and, where this torch has them, the
  ``fp32_precision`` settings of its newer API;
- after the module code, it records what the candidate set and restores the snapshot;
- its ``__init__`` builds the candidate's model under the candidate's import-time settings,
  records what they are then, and restores the caller's; its ``forward`` sets the recorded
  settings and restores the caller's on return (try/finally).

Reading and setting every setting costs tens of microseconds a call (torch's flag properties are
Python; measured 60 us a read on the 2-core development machine), which a tiny kernel's twin
pays; a CUDA-graph composition over the twin replays without it.

The twin is an ordinary candidate, judged from scratch: if the candidate's speed came from a
precision its outputs cannot afford, the precision checks reject the twin as they would anything.
What it does not repair: other state (a persisting-L2 carve-out, threads, patched functions, the
current stream); ``repairable`` says which results qualify.
"""

from __future__ import annotations

from cudal1.eval.checks.global_state import GLOBAL_STATE_CHANGED
from cudal1.schema import EvalResult, Severity
from cudal1.search.embedding import embed
from cudal1.search.transforms import BASE_CLASS, Variant, render

REPAIRED = "repaired"
# The keys of eval/process/state.global_state that the twin restores.
REPAIRABLE_STATE = frozenset(
    {
        "cudnn.enabled",
        "cudnn.benchmark",
        "cudnn.deterministic",
        "cudnn.allow_tf32",
        "matmul.allow_tf32",
        "float32_matmul_precision",
    }
)

# Set in this order: the legacy precision setter first (it also sets matmul TF32), the flags, then
# the newer API's settings, parents before children (a parent's setter resets its children).
_PROLOGUE = '''
import torch

_PROCESS_STATE_KEYS = (
    "float32_matmul_precision",
    "backends.cuda.matmul.allow_tf32",
    "backends.cudnn.allow_tf32",
    "backends.cudnn.enabled",
    "backends.cudnn.benchmark",
    "backends.cudnn.deterministic",
    "backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
    "backends.fp32_precision",
    "backends.cuda.matmul.fp32_precision",
    "backends.cudnn.fp32_precision",
    "backends.cudnn.conv.fp32_precision",
    "backends.cudnn.rnn.fp32_precision",
    "backends.mkldnn.fp32_precision",
    "backends.mkldnn.matmul.fp32_precision",
    "backends.mkldnn.conv.fp32_precision",
    "backends.mkldnn.rnn.fp32_precision",
)


def _torch_attribute(path):
    value = torch
    for name in path.split("."):
        value = getattr(value, name)
    return value


def _process_state():
    """The process-wide settings this twin scopes; a setting this torch lacks, or cannot read
    (mixing its legacy and newer precision APIs makes some legacy getters raise), is left out."""
    state = {}
    for key in _PROCESS_STATE_KEYS:
        owner, _, name = key.rpartition(".")
        try:
            if key == "float32_matmul_precision":
                state[key] = torch.get_float32_matmul_precision()
            else:
                state[key] = getattr(_torch_attribute(owner), name)
        except (AttributeError, RuntimeError):
            pass
    return state


def _set_process_state(state):
    for key, value in state.items():
        if key == "float32_matmul_precision":
            torch.set_float32_matmul_precision(value)
        else:
            owner, _, name = key.rpartition(".")
            setattr(_torch_attribute(owner), name, value)


_STATE_BEFORE_IMPORT = _process_state()
'''

_EPILOGUE = """
_STATE_AFTER_IMPORT = _process_state()
_set_process_state(_STATE_BEFORE_IMPORT)
"""

_BUILD = """
        caller = _process_state()
        _set_process_state(_STATE_AFTER_IMPORT)
        try:
            self.model = $inner($init_call)
            self._candidate_state = _process_state()
        finally:
            _set_process_state(caller)"""

_RUN = """
    def _run(self, *args, **kwargs):
        caller = _process_state()
        _set_process_state(self._candidate_state)
        try:
            return self.model(*args, **kwargs)
        finally:
            _set_process_state(caller)
"""

_TWIN = Variant(
    "The base candidate with the process-wide settings it changes scoped to its own calls.", run=_RUN
)
_NAMES = (
    "_PROCESS_STATE_KEYS",
    "_torch_attribute",
    "_process_state",
    "_set_process_state",
    "_STATE_BEFORE_IMPORT",
    "_STATE_AFTER_IMPORT",
)


def repairable(result: EvalResult | None) -> bool:
    """Whether a result was rejected only for settings the twin restores: correct outputs, and
    no rejecting finding but ``global_state_changed`` over ``REPAIRABLE_STATE``."""
    if result is None or not result.correct:
        return False
    rejecting = [f for f in result.findings if f.severity is Severity.REJECT]
    changed = {k for f in rejecting for k in (f.evidence.get("changed") or {})}
    return (
        bool(rejecting)
        and all(f.code == GLOBAL_STATE_CHANGED for f in rejecting)
        and changed <= REPAIRABLE_STATE
    )


def repaired_twin(source: str) -> str:
    """``source`` (a candidate) wrapped so that the settings it changes are set only inside its
    own ``__init__`` and ``forward``. Raises ValueError when it cannot be embedded."""
    embedded = embed(source, "ModelNew", BASE_CLASS)
    embedded.require_free(*_NAMES)
    header = f"# cudal1 {REPAIRED} twin. {_TWIN.doc}"
    return render(header, _TWIN.doc, _TWIN, embedded, prologue=_PROLOGUE, epilogue=_EPILOGUE, build=_BUILD)
