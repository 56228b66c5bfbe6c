"""The built-in transforms: torch.compile modes, CUDA-graph capture, scoped cuDNN flags and
channels_last, each a wrapper around a whole program.

The paper compares against torch.compile (default and reduce-overhead), CUDA graphs and cuDNN
flags. Here they are transforms of a program rather than fixed baselines: ``apply_transform``
embeds a program (``embedding.embed``: the task's reference with ``class Model`` renamed
``_Reference``, or any candidate with its ``ModelNew`` renamed ``_Base``, ``_Base2``... with its
module-level code, ``load_inline`` builds included, kept as written), then defines ``ModelNew``
with exactly the constructor and ``forward`` parameters of the embedded class, building it
inside. Over the reference that gives round 0's baselines (``proposer.baseline_candidates``);
over a seed's or an LLM's kernel, a composition. Constructing the embedded class is the first
thing that draws random numbers, so under the same seed its weights equal the unwrapped ones.

A pair (``cuda-graph+cudnn-benchmark``) applies its two transforms one over the other, innermost
first (``PAIRS``); a transform over a transform's output embeds that output like any program,
so a helper function the inner wrapper already defines is not defined twice.

``stacked_program`` writes a composition another way, for a policy that writes programs token by
token (the learning check's tiny policy): a base block (the program, its model class renamed,
and ``class ModelNew`` over it) and then one wrapper block per transform, appended in order. A
wrapper block is the same text whatever it wraps (``*args, **kwargs`` signatures; its
``_wrapped`` is whichever ``ModelNew`` the text above it bound), so composing is appending: a
policy that has written each block can write a stack of them it never saw.

Rules the wrappers keep (the same ones the prompts impose): no global flag changes outside a
local ``with``; no cached outputs (the CUDA-graph wrapper copies fresh inputs into its static
buffers on every call and returns a clone of the static output, because the next replay
overwrites it); every stream joined before ``forward`` returns. torch.compile wraps the embedded
model's ``forward`` and leaves its custom ops as they are (an extension call is a graph break).
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from string import Template
from typing import get_args

from cudal1.config import Transform
from cudal1.schema import Task
from cudal1.search.embedding import Embedded, ModelClass, embed

REFERENCE_CLASS = "_Reference"
BASE_CLASS = "_Base"
TRANSFORMS: tuple[Transform, ...] = get_args(Transform)
_CONV2D_NAMES = frozenset({"Conv2d", "conv2d", "ConvTranspose2d", "conv_transpose2d"})

# A pair's transforms, innermost first: compile traces the channels_last model the outer wrapper
# hands it; the graph's warm-up calls run cuDNN's benchmark search, so capture reuses its choice.
PAIRS: dict[Transform, tuple[Transform, Transform]] = {
    "torch-compile-default+channels-last": ("torch-compile-default", "channels-last"),
    "cuda-graph+cudnn-benchmark": ("cudnn-benchmark", "cuda-graph"),
    "channels-last+cudnn-benchmark": ("cudnn-benchmark", "channels-last"),
}
# Off CUDA these run the wrapped program unchanged: the same program under another name.
CUDA_ONLY: frozenset[Transform] = frozenset({"cuda-graph", "cudnn-benchmark"})
_CONV_ONLY: frozenset[Transform] = frozenset({"channels-last"})

HELPERS: dict[str, str] = {
    "_map_tensors": '''
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
''',
    "_graphable": '''
def _graphable(values):
    """Graph only forward-only calls whose tensors all live on a CUDA device."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    return (
        bool(tensors)
        and torch.cuda.is_available()
        and all(t.is_cuda and not t.requires_grad for t in tensors)
        and not torch.cuda.is_current_stream_capturing()
    )
''',
    "_input_key": """
def _input_key(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype, str(value.device), value.stride())
    return ("value", repr(value))
""",
}

CLASS = Template('''
class ModelNew(nn.Module):
    """$doc"""

    def __init__($init_params):
        super().__init__()$build

    def forward($forward_params):
        return self._run($forward_call)
$run''')

_BUILD = "\n        self.model = $inner($init_call)"

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

_GRAPH_INIT = """
        self._graph = None
        self._graph_key = None
        self._static_inputs = []
        self._static_output = None
        self._ungraphable = set()"""


@dataclass(frozen=True)
class Variant:
    """One wrapper: its docstring, what ``__init__`` adds after building the embedded model, the
    ``_run`` method ``forward`` delegates to, and the helper functions (``HELPERS``) it calls."""

    doc: str
    init_extra: str = ""
    run: str = ""
    helpers: tuple[str, ...] = ()


def _compile_variant(mode: str | None) -> Variant:
    arg = "" if mode is None else f", mode={mode!r}"
    # Both modes capture CUDA graphs (through CUDA-graph trees) on a GPU.
    graphs = mode in ("reduce-overhead", "max-autotune")
    return Variant(
        doc=f"The wrapped model under torch.compile({'default' if mode is None else 'mode=' + repr(mode)}).",
        init_extra=f"\n        self._compiled = torch.compile(self.model.forward{arg})",
        run=_COMPILE_CUDAGRAPH_RUN if graphs else _COMPILE_RUN,
        helpers=("_map_tensors",) if graphs else (),
    )


VARIANTS: dict[Transform, Variant] = {
    "torch-compile-default": _compile_variant(None),
    "torch-compile-reduce-overhead": _compile_variant("reduce-overhead"),
    "torch-compile-max-autotune": _compile_variant("max-autotune"),
    "torch-compile-max-autotune-no-cudagraphs": _compile_variant("max-autotune-no-cudagraphs"),
    "cuda-graph": Variant(
        "The wrapped model captured in a CUDA graph per input signature; eager off CUDA.",
        _GRAPH_INIT,
        _GRAPH_RUN,
        ("_map_tensors", "_graphable", "_input_key"),
    ),
    "cudnn-benchmark": Variant(
        "The wrapped model with cuDNN autotuning enabled only inside forward.", run=_CUDNN_RUN
    ),
    "channels-last": Variant(
        "The wrapped model in channels_last memory format; 4-D inputs converted, outputs contiguous.",
        "\n        self.model.to(memory_format=torch.channels_last)",
        _CHANNELS_LAST_RUN,
        ("_map_tensors",),
    ),
}


def steps(label: Transform) -> tuple[Transform, ...]:
    """The single transforms ``label`` applies, innermost first."""
    return PAIRS.get(label, (label,))


def applies(task: Task, label: Transform, *, cuda: bool) -> bool:
    """Whether ``label`` changes anything for ``task``: CUDA-only transforms need a CUDA device,
    channels_last a 2-D convolution in the task."""
    parts = set(steps(label))
    if not cuda and parts & CUDA_ONLY:
        return False
    return not (parts & _CONV_ONLY) or uses_conv2d(task)


def cuda_only(label: str) -> bool:
    """Whether a transform's label (a pair's joined by "+") names one that needs CUDA."""
    return any(part in CUDA_ONLY for part in label.split("+"))


def uses_conv2d(task: Task) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr in _CONV2D_NAMES)
        or (isinstance(n, ast.Name) and n.id in _CONV2D_NAMES)
        for n in ast.walk(ast.parse(task.source))
    )


def apply_transform(source: str, label: Transform, *, of: ModelClass = "ModelNew") -> str:
    """``source`` (a task's program with ``of="Model"``, else a candidate) wrapped by ``label``.
    Raises ValueError when the program cannot be embedded (no such class, a name clash)."""
    parts = steps(label)
    program, cls = source, of
    for i, step in enumerate(parts):
        last = i == len(parts) - 1
        kind = "baseline proposal" if of == "Model" else "composition"
        header = f"# cudal1 {kind}: {label}." if last else f"# cudal1 step {step} of {label}."
        doc = _pair_doc(parts) if last and len(parts) > 1 else VARIANTS[step].doc
        inner = REFERENCE_CLASS if cls == "Model" else BASE_CLASS
        program = render(f"{header} {doc}", doc, VARIANTS[step], embed(program, cls, inner))
        cls = "ModelNew"
    return program


def _pair_doc(parts: tuple[Transform, ...]) -> str:
    return f"{parts[-1]} over {' over '.join(reversed(parts[:-1]))} of the wrapped model."


def render(
    header: str,
    doc: str,
    variant: Variant,
    embedded: Embedded,
    *,
    prologue: str = "",
    epilogue: str = "",
    build: str = _BUILD,
) -> str:
    """The candidate: header, future imports, ``prologue``, the embedded program, ``epilogue``,
    then the wrapper's imports, the helpers the program does not define yet, and ``ModelNew``
    (which builds the embedded model with ``build``, a template of ``$inner`` and ``$init_call``)."""
    helpers = [
        textwrap.dedent(HELPERS[name]).strip()
        for name in variant.helpers
        if not embedded.defines(name, HELPERS[name])
    ]
    what = "the task's reference program" if embedded.original == "Model" else "the base program"
    sections = [
        header + (f"\n{embedded.future}" if embedded.future else ""),
        *([prologue.strip()] if prologue else []),
        f"# --- {what} (its model class renamed to {embedded.inner}) ---\n{embedded.body}",
        *([epilogue.strip()] if epilogue else []),
        "\n# --- the wrapper ---\nimport torch\nimport torch.nn as nn",
        *(f"\n{h}" for h in helpers),
        "\n" + wrapper_class(doc, variant, embedded, build).strip(),
    ]
    return "\n\n".join(sections) + "\n"


def wrapper_class(doc: str, variant: Variant, embedded: Embedded, build: str = _BUILD) -> str:
    """``ModelNew``: mirrors the embedded class's signatures, builds it (``build``) as
    ``self.model``, and runs ``variant``'s ``_run``."""
    built = Template(build).substitute(inner=embedded.inner, init_call=embedded.init[1])
    return CLASS.substitute(
        doc=doc,
        init_params=embedded.init[0],
        build=built + variant.init_extra,
        forward_params=embedded.forward[0],
        forward_call=embedded.forward[1],
        run=variant.run,
    )


STACK_HEADER = (
    "# cudal1 stacked program: the base block, then one wrapper block per transform, innermost first."
)

_STACK_BASE = Template('''
class ModelNew($inner):
    """The program so far: the base program itself."""
''')

_STACK_BLOCK = Template('''

# --- wrapper: $label ---
class ModelNew(nn.Module):
    """$doc"""

    _wrapped = ModelNew  # the ModelNew of the text above this block

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.model = self._wrapped(*args, **kwargs)$init_extra

    def forward(self, *args, **kwargs):
        return self._run(*args, **kwargs)
$run''')


def stacked_program(source: str, labels: Sequence[Transform], *, of: ModelClass = "Model") -> str:
    """``source`` (a task's program with ``of="Model"``, else a candidate) as a base block with
    one wrapper block per single transform of ``labels`` appended, innermost first. Raises
    ValueError when the program cannot be embedded (no such class, a helper's name taken)."""
    return stack_base(source, of=of) + "".join(wrapper_block(s) for label in labels for s in steps(label))


def stack_base(source: str, *, of: ModelClass = "Model") -> str:
    """The base block: the program with its class renamed, every wrapper's helpers, and a
    ``ModelNew`` that is the program itself (the reference, for a task)."""
    embedded = embed(source, of, REFERENCE_CLASS if of == "Model" else BASE_CLASS)
    helpers = [
        textwrap.dedent(body).strip() for name, body in HELPERS.items() if not embedded.defines(name, body)
    ]
    what = "the task's reference program" if of == "Model" else "the base program"
    sections = [
        STACK_HEADER + (f"\n{embedded.future}" if embedded.future else ""),
        f"# --- {what} (its model class renamed to {embedded.inner}) ---\n{embedded.body}",
        "# --- the base block ---\nimport torch\nimport torch.nn as nn",
        *helpers,
        _STACK_BASE.substitute(inner=embedded.inner).strip(),
    ]
    return "\n\n".join(sections) + "\n"


def wrapper_block(label: Transform) -> str:
    """One single transform's block: the same text over any program."""
    if label in PAIRS:
        raise ValueError(f"{label} is a pair: append its steps, {' then '.join(PAIRS[label])}")
    variant = VARIANTS[label]
    return _STACK_BLOCK.substitute(
        label=label, doc=variant.doc, init_extra=variant.init_extra, run=variant.run.rstrip("\n") + "\n"
    )
