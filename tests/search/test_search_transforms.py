"""The built-in transforms over any program that defines ModelNew (a seed's or an LLM's kernel,
another transform's output), and the repaired twin of a kernel that leaves flags changed: sources
that parse, keep the wrapped program as written, and are judged correct by the evaluator on CPU."""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest
import torch
from test_search_proposer import CONV_TASK, assert_same, load_candidate, run_pair

from cudal1.config import EvalConfig, SandboxConfig, TimingConfig
from cudal1.eval.pool import EvalPool
from cudal1.schema import EvalRequest, Severity, Task
from cudal1.search.repair import repairable, repaired_twin
from cudal1.search.transforms import (
    PAIRS,
    TRANSFORMS,
    VARIANTS,
    apply_transform,
    stack_base,
    stacked_program,
    wrapper_block,
)

# A kernel as a seed or a model writes one: a future import, comments, a multi-line string (a
# load_inline source stands here), module-level constants and a helper, the class named in its
# own body and after it.
KERNEL = '''from __future__ import annotations

import torch
import torch.nn as nn

# This comment and the string below must reach every composition as written.
CUDA_SOURCE = """
// kept verbatim
__global__ void noop() {}
"""
_FLOOR = 0.0


def relu_scale(x: torch.Tensor, scale: float) -> torch.Tensor:
    """A module-level helper."""
    return torch.clamp_min(x, _FLOOR) * scale


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale=0.5):
        super(ModelNew, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)
        self.scale = scale

    def forward(self, x):
        return relu_scale(self.conv(x), self.scale)


assert issubclass(ModelNew, nn.Module)
'''

# Sets cuDNN flags at import and in __init__ and never restores them: rejected as it stands.
FLAG_SETTER = (
    KERNEL.replace(
        "_FLOOR = 0.0\n",
        "_FLOOR = 0.0\ntorch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark\n",
    )
    .replace(
        "        self.scale = scale\n",
        "        self.scale = scale\n        torch.backends.cudnn.deterministic = not torch.backends.cudnn.deterministic\n"
        "        self.seen = []\n",
    )
    .replace(
        "        return relu_scale(",
        "        self.seen.append((torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic))\n"
        "        return relu_scale(",
    )
)


def classes(source: str) -> list[str]:
    return [n.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)]


def test_every_configurable_transform_has_a_wrapper():
    assert set(TRANSFORMS) == set(VARIANTS) | set(PAIRS)
    assert all(set(steps) <= set(VARIANTS) for steps in PAIRS.values())


@pytest.mark.parametrize("label", TRANSFORMS)
def test_a_composition_keeps_the_kernel_as_written(label):
    source = apply_transform(KERNEL, label)
    ast.parse(source)
    assert source.startswith(f"# cudal1 composition: {label}.")
    assert source.splitlines()[1] == "from __future__ import annotations"  # still the first statement
    assert (
        '# This comment and the string below must reach every composition as written.\nCUDA_SOURCE = """\n// kept verbatim\n'
        in source
    )
    assert "super(_Base, self).__init__()" in source and "assert issubclass(_Base, nn.Module)" in source
    assert classes(source).count("ModelNew") == 1 and "def relu_scale(" in source


@pytest.mark.parametrize(
    "label", ["cuda-graph+cudnn-benchmark", "channels-last+cudnn-benchmark", "channels-last"]
)
def test_compositions_over_a_kernel_match_the_reference_on_cpu(label):
    cand, pairs = run_pair(CONV_TASK, apply_transform(KERNEL, label))
    for expected, actual in pairs:
        assert_same(expected, actual)


def test_a_composition_over_a_composition_has_one_of_each_helper():
    inner = apply_transform(KERNEL, "channels-last")
    source = apply_transform(inner, "cuda-graph+cudnn-benchmark")
    assert sorted(c for c in classes(source) if c != "ModelNew") == ["_Base", "_Base2", "_Base3"]
    assert source.count("def _map_tensors(") == 1 and source.count("def _graphable(") == 1
    cand, pairs = run_pair(CONV_TASK, source, calls=3)
    for expected, actual in pairs:
        assert_same(expected, actual)
    assert cand.model.model.model.conv.weight.is_contiguous(memory_format=torch.channels_last)


def test_a_program_that_cannot_be_wrapped_is_refused():
    with pytest.raises(ValueError, match="already uses the name _map_tensors"):
        apply_transform(KERNEL + "\n\ndef _map_tensors(x):\n    return x\n", "channels-last")
    with pytest.raises(ValueError, match="no top-level class ModelNew"):
        apply_transform(CONV_TASK.source, "channels-last")
    with pytest.raises(ValueError, match="already uses"):
        repaired_twin(repaired_twin(FLAG_SETTER))


def test_a_stacked_program_is_its_base_block_then_one_block_per_transform():
    """Composing is appending: each wrapper block is the same text over any program, so a policy
    that wrote each block can write a stack of them it never saw."""
    stack = ("torch-compile-default", "channels-last", "cuda-graph")
    for source, of in ((CONV_TASK.source, "Model"), (KERNEL, "ModelNew")):
        program = stacked_program(source, stack, of=of)
        assert program == stack_base(source, of=of) + "".join(wrapper_block(s) for s in stack)
        assert classes(program).count("ModelNew") == 4 and program.count("def _map_tensors(") == 1
    # a pair's label appends its steps, innermost first
    pair = stacked_program(KERNEL, ["cuda-graph+cudnn-benchmark"], of="ModelNew")
    assert pair == stacked_program(KERNEL, ["cudnn-benchmark", "cuda-graph"], of="ModelNew")
    with pytest.raises(ValueError, match="is a pair"):
        wrapper_block("cuda-graph+cudnn-benchmark")
    with pytest.raises(ValueError, match="already uses the name _map_tensors"):
        stack_base(KERNEL + "\n\ndef _map_tensors(x):\n    return x\n", of="ModelNew")


@pytest.mark.parametrize(
    "stack", [(), ("channels-last",), ("channels-last", "cudnn-benchmark", "cuda-graph"), ("cuda-graph",) * 2]
)
def test_stacked_programs_match_the_reference_on_cpu(stack):
    source = stacked_program(CONV_TASK.source, stack)
    cand, pairs = run_pair(CONV_TASK, source, calls=3)
    for expected, actual in pairs:
        assert_same(expected, actual)
    inner = cand.model if stack else cand
    if stack:  # the innermost block built the base: the reference's weights, drawn first
        while hasattr(inner, "model"):
            inner = inner.model
    assert isinstance(inner.conv, torch.nn.Conv2d)
    if "channels-last" in stack:
        assert inner.conv.weight.is_contiguous(memory_format=torch.channels_last)


@pytest.fixture
def cudnn_flags() -> Iterator[tuple[bool, bool]]:
    cudnn = torch.backends.cudnn
    before = (cudnn.benchmark, cudnn.deterministic)
    yield before
    cudnn.benchmark, cudnn.deterministic = before


def test_the_repaired_twin_scopes_what_the_kernel_sets(cudnn_flags):
    cudnn = torch.backends.cudnn
    namespace = load_candidate(repaired_twin(FLAG_SETTER))
    assert (cudnn.benchmark, cudnn.deterministic) == cudnn_flags  # restored after the import
    model = namespace["ModelNew"](3, 4, 3)
    assert (cudnn.benchmark, cudnn.deterministic) == cudnn_flags  # and after __init__
    model(torch.randn(1, 3, 6, 6))
    assert (cudnn.benchmark, cudnn.deterministic) == cudnn_flags  # and after forward
    flipped = (not cudnn_flags[0], not cudnn_flags[1])
    assert model.model.seen == [flipped]  # inside forward: what the kernel set at import and in __init__


# -- through the evaluator (CPU) -------------------------------------------------------------------


def eval_config(tmp_path, *, time: bool) -> EvalConfig:
    return EvalConfig(
        device="cpu",
        correctness_trials=2,
        build_cache=tmp_path / "builds",
        time=time,
        timing=TimingConfig(warmup_ms=1, min_samples=3, max_samples=6, budget_s=0.5, bootstrap_resamples=100),
        sandbox=SandboxConfig(call_timeout_s=30, import_timeout_s=120),
    )


def evaluate_all(task: Task, sources: dict[str, str], config: EvalConfig) -> dict:
    with EvalPool(config, workers=2, spares=0) as pool:
        requests = [EvalRequest(task, src, request_id=label) for label, src in sources.items()]
        return {req.request_id: result for req, result in pool.evaluate_many(requests)}


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_compositions_are_correct_through_the_evaluator(tmp_path):
    """Over the reference, over a kernel (torch.compile included), over a composition."""
    over_kernel = apply_transform(KERNEL, "torch-compile-default+channels-last")
    sources = {
        "reference": apply_transform(CONV_TASK.source, "channels-last+cudnn-benchmark", of="Model"),
        "kernel": over_kernel,
        "composition": apply_transform(apply_transform(KERNEL, "channels-last"), "cuda-graph"),
    }
    results = evaluate_all(CONV_TASK, sources, eval_config(tmp_path, time=False))
    for label, result in results.items():
        assert result.correct and not result.rejected, (label, result.error, result.findings)


def test_a_repaired_twin_is_accepted_where_its_base_is_rejected(tmp_path):
    sources = {"base": FLAG_SETTER, "twin": repaired_twin(FLAG_SETTER)}
    results = evaluate_all(CONV_TASK, sources, eval_config(tmp_path, time=True))
    base, twin = results["base"], results["twin"]
    assert base.correct and not base.ok and repairable(base)
    assert {f.code for f in base.findings if f.severity is Severity.REJECT} == {"global_state_changed"}
    assert twin.ok and twin.speedup is not None, (twin.error, twin.findings)
    assert not repairable(twin)


# -- on a GPU --------------------------------------------------------------------------------------

SCALE_TASK = Task(
    "scale_add",
    """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0


def get_inputs():
    return [torch.randn(4096, 256)]


def get_init_inputs():
    return []
""",
)

INLINE_KERNEL = r'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void scale_add_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 2.0f + 1.0f;
}

torch::Tensor scale_add(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    scale_add_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
cpp_source = "torch::Tensor scale_add(torch::Tensor x);"

scale_add_ext = load_inline(
    name="cudal1_test_scale_add",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["scale_add"],
    extra_include_paths=[],
    verbose=False,
)


class ModelNew(nn.Module):
    def forward(self, x):
        return scale_add_ext.scale_add(x.contiguous())
'''


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_over_a_load_inline_kernel_captures_and_matches(tmp_path):
    source = apply_transform(INLINE_KERNEL, "cuda-graph+cudnn-benchmark")
    assert 'cuda_source = """\n#include <torch/extension.h>\n' in source
    cand, pairs = run_pair(SCALE_TASK, source, calls=4, device="cuda")
    for expected, actual in pairs:
        assert_same(expected, actual)
    assert cand._graph is not None and not cand._ungraphable
    config = eval_config(tmp_path, time=True).model_copy(update={"device": "cuda"})
    results = evaluate_all(
        SCALE_TASK,
        {"graph": source, "compile": apply_transform(INLINE_KERNEL, "torch-compile-default")},
        config,
    )
    for label, result in results.items():
        assert result.ok, (label, result.error, result.findings)
