"""Each static rule fires on a small hack and stays silent on its legitimate near-miss."""

from __future__ import annotations

import textwrap

import pytest

from cudal1.eval.checks.static import RULES, run_static_checks
from cudal1.schema import Severity, Stage


def codes(source: str, **kwargs: bool) -> set[str]:
    return {f.code for f in run_static_checks(textwrap.dedent(source), **kwargs)}


# (rule code, source that must trigger it)
POSITIVE = [
    (
        "calls_reference_model",
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return Model()(x)\n",
    ),
    ("calls_reference_model", "class ModelNew(Model):\n    pass\n"),
    ("calls_reference_model", "ref = globals()['Model']\n"),
    ("file_access", "def f():\n    with open('/tmp/cache.pt', 'rb') as fh:\n        return fh.read()\n"),
    ("file_access", "import torch\ntorch.save(x, 'out.pt')\n"),
    ("file_access", "from pathlib import Path\nPath('c').write_text('1')\n"),
    ("file_access", "import os\nos.remove('x')\n"),
    ("file_access", "import shutil\nshutil.rmtree('x')\n"),
    ("file_access", "import torch as T\ny = T.load('cache.pt')\n"),
    ("network_access", "import socket\ns = socket.socket()\n"),
    ("network_access", "from urllib.request import urlopen\nurlopen('http://x')\n"),
    ("network_access", "import requests\n"),
    ("subprocess_access", "import subprocess\nsubprocess.run(['ls'])\n"),
    ("subprocess_access", "import os\nos.system('ls')\n"),
    ("subprocess_access", "from os import execv\nexecv('/bin/sh', [])\n"),
    ("subprocess_access", "import pty\n"),
    ("ctypes_access", "import ctypes\nctypes.CDLL('libc.so.6')\n"),
    ("ctypes_access", "from cffi import FFI\n"),
    ("dynamic_code", "exec('import os')\n"),
    ("dynamic_code", "m = __import__('o' + 's')\n"),
    ("frame_introspection", "import sys\nf = sys._getframe(1)\n"),
    ("frame_introspection", "import inspect\nfor fr in inspect.stack():\n    pass\n"),
    ("frame_introspection", "import gc\nobjs = gc.get_objects()\n"),
    ("frame_introspection", "def f(frame):\n    return frame.f_back.f_locals\n"),
    ("timing_patch", "import torch\ntorch.cuda.Event.elapsed_time = lambda self, other: 0.1\n"),
    ("timing_patch", "import time\ntime.perf_counter = lambda: 0.0\n"),
    ("timing_patch", "import torch\nsetattr(torch.cuda, 'synchronize', lambda: None)\n"),
    ("timing_patch", "import torch\ncuda = torch.cuda\ncuda.synchronize = lambda: None\n"),
    ("timing_patch", "import torch\ntorch.cuda.Event.record = lambda self, stream=None: None\n"),
    ("comparison_patch", "import torch\ntorch.allclose = lambda *a, **k: True\n"),
    ("comparison_patch", "import torch\ntorch.testing.assert_close = lambda *a, **k: None\n"),
    ("comparison_patch", "import torch\ntorch.equal = lambda a, b: True\n"),
    ("global_state_flags", "import torch\ntorch.backends.cudnn.benchmark = True\n"),
    ("global_state_flags", "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n"),
    ("global_state_flags", "import torch\ntorch.set_float32_matmul_precision('high')\n"),
    ("global_state_flags", "import torch\ntorch.backends.cudnn.flags(enabled=False).__enter__()\n"),
    (
        "broad_exception_fallback",
        BROAD := """
        import torch
        class ModelNew(torch.nn.Module):
            def forward(self, x):
                try:
                    return my_kernel(x)
                except Exception:
                    return torch.relu(x)
        """,
    ),
    ("broad_exception_fallback", "try:\n    y = k(x)\nexcept:\n    y = x.relu()\n"),
    ("thread_or_stream", "import threading\nt = threading.Thread(target=work)\nt.start()\n"),
    ("thread_or_stream", "import torch\ns = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    y = k(x)\n"),
    ("thread_or_stream", "from concurrent.futures import ThreadPoolExecutor\nex = ThreadPoolExecutor(2)\n"),
    ("tensor_subclass_output", "import torch\nclass Lazy(torch.Tensor):\n    pass\n"),
    ("tensor_subclass_output", "import torch\nt = torch.Tensor._make_subclass(Lazy, buf)\n"),
    (
        "tensor_subclass_output",
        "class P:\n    def __torch_function__(self, func, types, args=(), kwargs=None):\n        pass\n",
    ),
    ("precision_downgrade", "def f(x):\n    return x.half()\n"),
    ("precision_downgrade", "import torch\nwith torch.autocast('cuda'):\n    y = x @ x\n"),
    ("precision_downgrade", "import torch\ny = x.to(dtype=torch.bfloat16)\n"),
    ("precision_downgrade", 'src = """\n__global__ void k(__half* x) {}\n"""\n'),
]


@pytest.mark.parametrize(("code", "source"), POSITIVE, ids=[f"{c}-{i}" for i, (c, _) in enumerate(POSITIVE)])
def test_rule_fires(code: str, source: str) -> None:
    assert code in codes(source)


LOAD_INLINE_KERNEL = '''
    """A fused ReLU. This docstring says pass, Stream, Model(), open(), exec and subprocess."""
    import torch
    import torch.nn as nn
    from torch.utils.cpp_extension import load_inline

    cuda_src = """
    // a comment that mentions __half and subprocess
    __global__ void relu(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
    }
    """
    ext = load_inline(name="relu", cpp_sources="", cuda_sources=cuda_src, functions=["relu"])


    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()
            self.time = 0.0  # an attribute of our own, not the time module

        def forward(self, x):
            # Model(x) would be the reference; we pass on it. torch.cuda.synchronize = no
            return ext.relu(x)
'''

NEAR_MISSES = {
    "load_inline kernel with hack words in docstring and comments": LOAD_INLINE_KERNEL,
    "cudnn flags as a context manager": """
        import torch
        class ModelNew(torch.nn.Module):
            def forward(self, x):
                with torch.backends.cudnn.flags(enabled=True, benchmark=True):
                    return self.conv(x)
        """,
    "joined side stream": """
        import torch
        class ModelNew(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.side = torch.cuda.Stream()

            def forward(self, x):
                self.side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(self.side):
                    y = x * 2
                torch.cuda.current_stream().wait_stream(self.side)
                y.record_stream(torch.cuda.current_stream())
                return y
        """,
    "joined thread": """
        import threading
        def run(work):
            t = threading.Thread(target=work)
            t.start()
            t.join()
            return ",".join(["a", "b"])
        """,
    "torch.compile": """
        import torch
        class ModelNew(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.f = torch.compile(lambda x: x.relu(), mode="max-autotune")

            def forward(self, x):
                return self.f(x)
        """,
    "optional import in try/except ImportError": """
        try:
            import triton
            import triton.language as tl
        except ImportError:
            triton = None
        """,
    "broad except that re-raises": """
        import logging
        log = logging.getLogger(__name__)
        def f(x):
            try:
                return kernel(x)
            except Exception as exc:
                log.error("kernel failed: %s", exc)
                raise
        """,
    "executor in with": """
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(2) as ex:
            results = list(ex.map(str, range(3)))
        """,
    "local names that shadow nothing imported": """
        def f(record, time, open):
            record.elapsed = time
            return open
        """,
    "re.compile is not the compile builtin": "import re\npattern = re.compile('a+')\n",
}


@pytest.mark.parametrize("source", NEAR_MISSES.values(), ids=NEAR_MISSES.keys())
def test_near_miss_is_silent(source: str) -> None:
    assert codes(source) == set()


def test_load_inline_satisfies_require_custom_kernel() -> None:
    assert codes(LOAD_INLINE_KERNEL, require_custom_kernel=True) == set()


def test_triton_satisfies_require_custom_kernel() -> None:
    source = "import triton\n@triton.jit\ndef k(x_ptr):\n    pass\n"
    assert "whole_reference_fallback" not in codes(source, require_custom_kernel=True)


def test_whole_reference_fallback_only_when_required() -> None:
    source = """
        import torch
        import torch.nn.functional as F
        class ModelNew(torch.nn.Module):
            def forward(self, x):
                return F.gelu(torch.ops.aten.relu(x))
        """
    assert "whole_reference_fallback" not in codes(source)
    findings = run_static_checks(textwrap.dedent(source), require_custom_kernel=True)
    (finding,) = [f for f in findings if f.code == "whole_reference_fallback"]
    assert finding.evidence["lines"] == [5]  # the forward definition
    assert finding.severity is Severity.REJECT  # a policy the user asked for, not an audit hint


def test_custom_op_namespace_counts_as_kernel() -> None:
    source = "import torch\ny = torch.ops.my_ext.fused_gelu(x)\n"
    assert "whole_reference_fallback" not in codes(source, require_custom_kernel=True)


SECURITY = {
    "file_access",
    "network_access",
    "subprocess_access",
    "ctypes_access",
    "dynamic_code",
    "frame_introspection",
    "timing_patch",
    "comparison_patch",
    "tensor_subclass_output",
}


def test_rule_registry() -> None:
    assert {r.code for r in RULES if r.security} == SECURITY
    assert len({r.code for r in RULES}) == len(RULES)
    for rule in RULES:
        assert rule.check.__doc__ and len(rule.check.__doc__.strip().splitlines()) >= 2, rule.code


@pytest.mark.parametrize(("code", "source"), POSITIVE, ids=[f"{c}-{i}" for i, (c, _) in enumerate(POSITIVE)])
def test_strict_rejects_only_security_rules(code: str, source: str) -> None:
    for f in run_static_checks(textwrap.dedent(source)):
        assert f.severity is Severity.WARNING
    for f in run_static_checks(textwrap.dedent(source), strict=True):
        assert f.severity is (Severity.REJECT if f.code in SECURITY else Severity.WARNING)


def test_evidence_has_rule_lines_and_snippets() -> None:
    source = "import torch\n\n\ntorch.backends.cudnn.benchmark = True\n"
    (finding,) = run_static_checks(source)
    assert finding.stage is Stage.STATIC
    assert finding.evidence == {
        "rule": "global_state_flags",
        "lines": [4],
        "snippets": ["torch.backends.cudnn.benchmark = True"],
    }
    assert "line 4" in finding.message
    assert finding.to_dict()["code"] == "global_state_flags"


def test_multiline_snippet_is_truncated() -> None:
    (finding,) = [
        f for f in run_static_checks(textwrap.dedent(BROAD)) if f.code == "broad_exception_fallback"
    ]
    assert finding.evidence["snippets"] == ["except Exception: ..."]


def test_aliased_imports_resolve() -> None:
    source = "import subprocess as sp\nimport torch.backends.cudnn as cudnn\nsp.check_output(['id'])\ncudnn.benchmark = 1\n"
    assert codes(source) == {"subprocess_access", "global_state_flags"}


def test_unparseable_source_is_rejected() -> None:
    (finding,) = run_static_checks("def f(:\n")
    assert finding.code == "syntax_error"
    assert finding.severity is Severity.REJECT


def test_shadowing_is_scope_aware() -> None:
    source = "def g(open):\n    return open\n\nopen('x')\n"
    (finding,) = run_static_checks(source)
    assert finding.code == "file_access"
    assert finding.evidence["lines"] == [4]


def test_builtins_module_is_dynamic_code() -> None:
    assert "dynamic_code" in codes("import builtins\nf = getattr(builtins, 'op' + 'en')\n")
