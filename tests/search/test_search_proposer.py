"""The built-in proposer's baselines: self-contained sources that match the reference on CPU."""

from __future__ import annotations

import ast
import itertools
import sys
import types

import pytest
import torch
from candidate_fixtures import GEMM_TASK

from cudal1.schema import Task
from cudal1.search.proposer import baseline_candidates

CONV_TASK = Task(
    name="conv_relu",
    source='''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A small convolution with a bias and a residual scale."""

    def __init__(self, in_channels, out_channels, kernel_size, scale=0.5):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)
        self.scale = scale

    def forward(self, x):
        return F.relu(self.conv(x)) * self.scale


def get_inputs():
    return [torch.randn(2, 3, 8, 8)]


def get_init_inputs():
    return [3, 4, 3]
''',
)

# Two inputs, a keyword-only argument with a default, and no __init__ of its own.
BMM_TASK = Task(
    name="bmm_scale",
    source="""from __future__ import annotations

import torch
from torch import nn


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, *, alpha: float = 2.0) -> tuple[torch.Tensor, torch.Tensor]:
        prod = torch.bmm(a, b)
        return prod * alpha, prod.sum(dim=-1)


def get_inputs():
    return [torch.randn(2, 3, 5), torch.randn(2, 5, 4)]


def get_init_inputs():
    return []
""",
)

_COUNTER = itertools.count()
TASKS = [GEMM_TASK, CONV_TASK, BMM_TASK]
EAGER_VARIANTS = (
    "cuda-graph",
    "cudnn-benchmark",
    "channels-last",
    "cuda-graph+cudnn-benchmark",
    "channels-last+cudnn-benchmark",
)
COMPILE_VARIANTS = (
    "torch-compile-default",
    "torch-compile-reduce-overhead",
    "torch-compile-max-autotune",
    "torch-compile-max-autotune-no-cudagraphs",
)


def load_candidate(source: str) -> dict:
    """Import a candidate as a real module, as an evaluator does (dynamo looks modules up by name)."""
    name = f"cudal1_search_test_candidate_{next(_COUNTER)}"
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module.__dict__


def run_pair(task: Task, source: str, calls: int = 2, device: str = "cpu") -> tuple[object, list]:
    """Build reference and candidate under the same seed; outputs of every call, kept to the end."""
    ref_ns: dict = {}
    exec(compile(task.source, f"<{task.name}>", "exec"), ref_ns)
    cand_ns = load_candidate(source)
    init = ref_ns["get_init_inputs"]()
    torch.manual_seed(0)
    ref = ref_ns["Model"](*init).to(device)
    torch.manual_seed(0)
    cand = cand_ns["ModelNew"](*init).to(device)
    pairs = []
    with torch.no_grad():
        for i in range(calls):
            torch.manual_seed(100 + i)
            inputs = [x.to(device) for x in ref_ns["get_inputs"]()]
            pairs.append((ref(*inputs), cand(*inputs)))
    return cand, pairs


def assert_same(expected, actual, tol: float = 1e-5) -> None:
    if isinstance(expected, torch.Tensor):
        assert (
            isinstance(actual, torch.Tensor)
            and actual.shape == expected.shape
            and actual.dtype == expected.dtype
        )
        assert actual.device == expected.device and actual.is_contiguous() == expected.is_contiguous()
        assert torch.allclose(actual, expected, rtol=tol, atol=tol / 10)
    else:
        assert type(actual) is type(expected) and len(actual) == len(expected)
        for e, a in zip(expected, actual, strict=True):
            assert_same(e, a, tol)


def labels(task: Task, *, cuda: bool = True) -> list[str]:
    return [label for label, _ in baseline_candidates(task, cuda=cuda)]


def test_variants_offered_per_task():
    assert labels(GEMM_TASK) == [
        *COMPILE_VARIANTS,
        "cuda-graph",
        "cudnn-benchmark",
        "cuda-graph+cudnn-benchmark",
    ]
    assert labels(CONV_TASK)[6:] == [
        "channels-last",
        "torch-compile-default+channels-last",
        "cuda-graph+cudnn-benchmark",
        "channels-last+cudnn-benchmark",
    ]


def test_a_cpu_gets_no_cuda_only_variants():
    """CUDA graphs and cuDNN flags run the reference unchanged on a CPU: the reference renamed."""
    assert labels(GEMM_TASK, cuda=False) == list(COMPILE_VARIANTS)
    assert labels(CONV_TASK, cuda=False) == [
        *COMPILE_VARIANTS,
        "channels-last",
        "torch-compile-default+channels-last",
    ]


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_sources_are_self_contained_and_never_name_model(task):
    for label, source in baseline_candidates(task):
        tree = ast.parse(source)
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        assert "Model" not in names and "Model" not in classes, label
        assert {"ModelNew", "_Reference"} <= classes, label
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert not functions & {"get_inputs", "get_init_inputs"}, label
        assert "cudnn.benchmark =" not in source and "allow_tf32 =" not in source, label


def test_signatures_mirror_the_reference():
    sources = dict(baseline_candidates(BMM_TASK))
    tree = ast.parse(sources["cudnn-benchmark"])
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert ast.unparse(methods["__init__"].args) == "self"
    assert (
        ast.unparse(methods["forward"].args) == "self, a: torch.Tensor, b: torch.Tensor, *, alpha: float=2.0"
    )
    assert sources["cudnn-benchmark"].startswith("# cudal1 baseline proposal: cudnn-benchmark.")
    assert "\nfrom __future__ import annotations\n" in sources["cudnn-benchmark"]


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_eager_variants_match_the_reference_on_cpu(task):
    sources = dict(baseline_candidates(task))
    for label in EAGER_VARIANTS:
        if label in sources:
            _, pairs = run_pair(task, sources[label])
            for expected, actual in pairs:
                assert_same(expected, actual)


def test_cudnn_flags_are_restored_after_forward():
    before = (
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.allow_tf32,
    )
    run_pair(CONV_TASK, dict(baseline_candidates(CONV_TASK))["cudnn-benchmark"])
    assert (
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.allow_tf32,
    ) == before


def test_cuda_graph_variant_falls_back_to_eager_on_cpu():
    cand, pairs = run_pair(GEMM_TASK, dict(baseline_candidates(GEMM_TASK))["cuda-graph"], calls=3)
    assert cand._graph is None and cand._graph_key is None and not cand._ungraphable
    outputs = [actual for _, actual in pairs]
    assert not torch.equal(outputs[0], outputs[1])  # fresh inputs, fresh outputs: nothing cached


def test_channels_last_variant_really_uses_channels_last():
    cand, _ = run_pair(CONV_TASK, dict(baseline_candidates(CONV_TASK))["channels-last"])
    assert cand.model.conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert list(cand.state_dict()) == ["model.conv.weight", "model.conv.bias"]


def test_a_pair_applies_its_transforms_innermost_first():
    source = dict(baseline_candidates(CONV_TASK))["channels-last+cudnn-benchmark"]
    cand, _ = run_pair(CONV_TASK, source)
    assert type(cand.model).__name__ == "_Base" and type(cand.model.model).__name__ == "_Reference"
    assert cand.model.model.conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert source.count("def _map_tensors(") == 1


def test_task_without_model_is_refused():
    with pytest.raises(ValueError, match="no top-level class Model"):
        baseline_candidates(Task("bad", "import torch\n"))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("label", COMPILE_VARIANTS)
def test_compile_variants_match_the_reference_on_cpu(label):
    cand, pairs = run_pair(GEMM_TASK, dict(baseline_candidates(GEMM_TASK))[label])
    for expected, actual in pairs:
        assert_same(expected, actual)
    assert list(cand.state_dict()) == ["model.linear.weight", "model.linear.bias"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_every_variant_matches_the_reference_on_cuda(task):
    """Outputs of earlier calls are compared only after later calls: replays must not overwrite them."""
    for label, source in baseline_candidates(task):
        cand, pairs = run_pair(task, source, calls=4, device="cuda")
        for expected, actual in pairs:
            assert_same(expected, actual, tol=1e-3)  # cuDNN may pick other (TF32) algorithms per layout
        if label == "cuda-graph":
            assert cand._graph is not None and not cand._ungraphable, "the graph was not captured"
