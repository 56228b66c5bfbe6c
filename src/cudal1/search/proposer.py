"""Built-in baseline proposer: candidates that need no LLM, and the bars an LLM must clear.

The paper compares against torch.compile (default and reduce-overhead), CUDA graphs and cuDNN
flags; these, and torch.compile's max-autotune (with and without CUDA graphs), are written as
ordinary candidates, so that they go through the one evaluator, land in the database, seed
contrastive prompts with real numbers, and make the search useful on a machine with no LLM at all.

Each candidate is self-contained: it embeds the task's source with ``class Model`` renamed to
``_Reference`` (by ``ast``, every reference to the name included; ``get_inputs`` and
``get_init_inputs`` dropped), then defines ``ModelNew`` with exactly the constructor and
``forward`` parameters of ``Model``, building the reference inside it. Constructing
``_Reference`` is the first thing that draws random numbers, so under the same seed its
weights equal the reference's. The evaluator's static checks will note that a candidate wraps
the reference; for these proposals that is the point.

Rules the variants keep (the same ones the prompts impose): no global flag changes outside a
local ``with``; no cached outputs (the CUDA-graph variant copies fresh inputs into its static
buffers on every call and returns a clone of the static output, because the next replay
overwrites it); every stream joined before ``forward`` returns.
"""

from __future__ import annotations

import ast
import copy
import logging
import textwrap
from dataclasses import dataclass
from string import Template

from cudal1.schema import Task

log = logging.getLogger(__name__)

REFERENCE_CLASS = "_Reference"
_DROPPED_FUNCTIONS = frozenset({"get_inputs", "get_init_inputs"})
_CONV2D_NAMES = frozenset({"Conv2d", "conv2d", "ConvTranspose2d", "conv_transpose2d"})

_HELPERS = '''
def _map_tensors(fn, value):
    """Apply fn to every tensor in a (nested) output, keeping the container types."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_map_tensors(fn, v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_map_tensors(fn, v) for v in value)
    if isinstance(value, dict):
        return {k: _map_tensors(fn, v) for k, v in value.items()}
    return value
'''

_CLASS = Template('''
class ModelNew(nn.Module):
    """$doc"""

    def __init__($init_params):
        super().__init__()
        self.model = $REFERENCE($init_call)$init_extra

    def forward($forward_params):
        return self._run($forward_call)
$run''')

_COMPILE_RUN = """
    def _run(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)
"""

# CUDA-graph trees overwrite their outputs on the next replay: clone, and mark each call a new step.
_COMPILE_CUDAGRAPH_RUN = """
    def _run(self, *args, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()
        return _map_tensors(torch.clone, self._compiled(*args, **kwargs))
"""

_CUDNN_RUN = """
    def _run(self, *args, **kwargs):
        with torch.backends.cudnn.flags(
            enabled=True, benchmark=True, deterministic=False, allow_tf32=torch.backends.cudnn.allow_tf32
        ):
            return self.model(*args, **kwargs)
"""

_CHANNELS_LAST_RUN = """
    def _run(self, *args, **kwargs):
        def to_nhwc(t):
            return t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t

        args = _map_tensors(to_nhwc, args)
        kwargs = _map_tensors(to_nhwc, kwargs)
        return _map_tensors(lambda t: t.contiguous(), self.model(*args, **kwargs))
"""

_GRAPH_RUN = """
    def _run(self, *args, **kwargs):
        names = tuple(sorted(kwargs))
        flat = list(args) + [kwargs[k] for k in names]
        if not _graphable(flat):
            return self.model(*args, **kwargs)
        key = (len(args), names, tuple(_input_key(v) for v in flat))
        if key in self._ungraphable:
            return self.model(*args, **kwargs)
        if key != self._graph_key:
            try:
                self._capture(flat, len(args), names, key)
            except Exception:  # capture-unsafe forward (host sync, dynamic shapes): run it eagerly
                self._graph, self._graph_key = None, None
                self._ungraphable.add(key)
                return self.model(*args, **kwargs)
        for static, fresh in zip(self._static_inputs, flat):
            if isinstance(static, torch.Tensor):
                static.copy_(fresh)
        self._graph.replay()
        return _map_tensors(torch.clone, self._static_output)

    def _capture(self, flat, n_args, names, key):
        static = [v.clone() if isinstance(v, torch.Tensor) else v for v in flat]

        def call():
            return self.model(*static[:n_args], **dict(zip(names, static[n_args:])))

        # Warm up outside capture (lazy cuBLAS/cuDNN initialisation cannot be captured), on a
        # side stream as torch.cuda.graph's documentation prescribes, joined before capture.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(2):
                call()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            output = call()
        self._graph, self._graph_key = graph, key
        self._static_inputs, self._static_output = static, output
"""

_GRAPH_HELPERS = '''
def _graphable(values):
    """Graph only forward-only calls whose tensors all live on a CUDA device."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    return (
        bool(tensors)
        and torch.cuda.is_available()
        and all(t.is_cuda and not t.requires_grad for t in tensors)
        and not torch.cuda.is_current_stream_capturing()
    )


def _input_key(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype, str(value.device), value.stride())
    return ("value", repr(value))
'''

_GRAPH_INIT = """
        self._graph = None
        self._graph_key = None
        self._static_inputs = []
        self._static_output = None
        self._ungraphable = set()"""


@dataclass(frozen=True)
class _Variant:
    doc: str  # the candidate's docstring and header line
    init_extra: str = ""  # lines appended to __init__ after the reference is built
    run: str = ""  # the _run method forward delegates to
    helpers: str = ""  # module-level functions the variant needs besides _map_tensors


@dataclass(frozen=True)
class _Embedded:
    """The task's program as a candidate embeds it, and the signatures ModelNew mirrors."""

    future: str  # `from __future__` imports, which must open the module
    reference: str
    init: tuple[str, str]  # (parameters with self, call arguments)
    forward: tuple[str, str]


class _RenameModel(ast.NodeTransformer):
    """``Model`` -> ``_Reference`` for the class and every name that refers to it."""

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        if node.name == "Model":
            node.name = REFERENCE_CLASS
        self.generic_visit(node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == "Model":
            node.id = REFERENCE_CLASS
        return node


def _embedded_reference(source: str) -> tuple[list[ast.stmt], list[ast.stmt], ast.ClassDef]:
    """(future imports, remaining statements, the renamed reference class) of a task source."""
    tree = _RenameModel().visit(ast.parse(source))
    future: list[ast.stmt] = [
        s for s in tree.body if isinstance(s, ast.ImportFrom) and s.module == "__future__"
    ]
    body = [
        s
        for s in tree.body
        if s not in future and not (isinstance(s, ast.FunctionDef) and s.name in _DROPPED_FUNCTIONS)
    ]
    cls = next((s for s in body if isinstance(s, ast.ClassDef) and s.name == REFERENCE_CLASS), None)
    if cls is None:
        raise ValueError("task source defines no top-level class Model")
    return future, body, cls


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == name), None)


def _signature(fn: ast.FunctionDef | None, inherited: tuple[str, str]) -> tuple[str, str]:
    """(parameter list with self, call arguments) that mirror a method's own parameters."""
    if fn is None:
        return inherited
    args = copy.deepcopy(fn.args)
    if args.posonlyargs:
        args.posonlyargs = args.posonlyargs[1:]
    else:
        args.args = args.args[1:]
    call = [a.arg for a in args.posonlyargs + args.args]
    if args.vararg:
        call.append("*" + args.vararg.arg)
    call += [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
    if args.kwarg:
        call.append("**" + args.kwarg.arg)
    params = ast.unparse(args)
    return ("self, " + params if params else "self"), ", ".join(call)


def _uses_conv2d(tree: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr in _CONV2D_NAMES)
        or (isinstance(n, ast.Name) and n.id in _CONV2D_NAMES)
        for n in ast.walk(tree)
    )


def _compile_variant(mode: str | None) -> _Variant:
    arg = "" if mode is None else f", mode={mode!r}"
    return _Variant(
        doc=f"The reference under torch.compile({'default' if mode is None else 'mode=' + repr(mode)}).",
        init_extra=f"\n        self._compiled = torch.compile(self.model.forward{arg})",
        # Both modes capture CUDA graphs (through CUDA-graph trees) on a GPU.
        run=_COMPILE_CUDAGRAPH_RUN if mode in ("reduce-overhead", "max-autotune") else _COMPILE_RUN,
    )


def _variants(uses_conv2d: bool) -> dict[str, _Variant]:
    variants = {
        "torch-compile-default": _compile_variant(None),
        "torch-compile-reduce-overhead": _compile_variant("reduce-overhead"),
        "torch-compile-max-autotune": _compile_variant("max-autotune"),
        "torch-compile-max-autotune-no-cudagraphs": _compile_variant("max-autotune-no-cudagraphs"),
        "cuda-graph": _Variant(
            "The reference captured in a CUDA graph per input signature; eager off CUDA.",
            _GRAPH_INIT,
            _GRAPH_RUN,
            _GRAPH_HELPERS,
        ),
        "cudnn-benchmark": _Variant(
            "The reference with cuDNN autotuning enabled only inside forward.", run=_CUDNN_RUN
        ),
    }
    if uses_conv2d:
        variants["channels-last"] = _Variant(
            "The reference in channels_last memory format; 4-D inputs converted, outputs contiguous.",
            "\n        self.model.to(memory_format=torch.channels_last)",
            _CHANNELS_LAST_RUN,
        )
    return variants


def _unparse(statements: list[ast.stmt]) -> str:
    """Source for top-level statements, with PEP 8 spacing around definitions."""
    out = ""
    previous: ast.stmt | None = None
    for stmt in statements:
        is_def = isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        was_def = isinstance(previous, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        if previous is not None:
            out += "\n\n\n" if is_def or was_def else "\n"
        out += ast.unparse(stmt)
        previous = stmt
    return out


def _render(label: str, variant: _Variant, embedded: _Embedded) -> str:
    cls = _CLASS.substitute(
        doc=variant.doc,
        REFERENCE=REFERENCE_CLASS,
        init_params=embedded.init[0],
        init_call=embedded.init[1],
        init_extra=variant.init_extra,
        forward_params=embedded.forward[0],
        forward_call=embedded.forward[1],
        run=variant.run,
    )
    header = f"# cudal1 baseline proposal: {label}. {variant.doc}"
    definitions = [textwrap.dedent(_HELPERS).strip()] if "_map_tensors(" in variant.run else []
    if variant.helpers:
        definitions.append(textwrap.dedent(variant.helpers).strip())
    sections = [
        header + (f"\n{embedded.future}" if embedded.future else ""),
        f"# --- the task's reference program (class Model renamed to {REFERENCE_CLASS}) ---\n{embedded.reference}",
        "\n# --- the baseline ---\nimport torch\nimport torch.nn as nn",
        *(f"\n{d}" for d in definitions),
        "\n" + cls.strip(),
    ]
    return "\n\n".join(sections) + "\n"


def baseline_candidates(task: Task) -> list[tuple[str, str]]:
    """(label, complete candidate source) for every built-in baseline that applies to the task."""
    future, body, cls = _embedded_reference(task.source)
    embedded = _Embedded(
        future=_unparse(future),
        reference=_unparse(body),
        # An inherited __init__ is nn.Module's (no arguments); an inherited forward is passed through.
        init=_signature(_method(cls, "__init__"), ("self", "")),
        forward=_signature(_method(cls, "forward"), ("self, *args, **kwargs", "*args, **kwargs")),
    )
    variants = _variants(_uses_conv2d(ast.parse(task.source)))
    log.debug("task %s: baselines %s", task.name, ", ".join(variants))
    return [(label, _render(label, variant, embedded)) for label, variant in variants.items()]
