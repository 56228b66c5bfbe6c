"""The benchmark's CUDA candidates must be valid CUDA: compile their kernels with nvcc on the CPU
machine (torch's CPU build cannot build CUDA extensions, but nvcc and torch's headers are here).
A broken template once made every load_inline candidate of the GPU benchmark fail to build."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_candidates import _SCALE_RESIDUAL, _epilogue, _gelu, mixed_batch  # noqa: E402

from cudal1.tasks import bundled_tasks  # noqa: E402

pytestmark = pytest.mark.slow


def _cuda_source(candidate: str) -> str:
    """A candidate's kernel source with its own ``BLOCK``, to follow others in one file."""
    kernel = candidate.split('cuda_src = """')[1].split('"""')[0]
    block = re.search(r"#define BLOCK (\d+)", candidate)
    assert block, "the candidate must define BLOCK as a number"
    return f"#undef BLOCK\n#define BLOCK {block.group(1)}\n{kernel}"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_kernels_compile(tmp_path):
    """Every CUDA template, in one translation unit: nvcc spends ~100 s of a 2-core runner on
    torch's headers whatever follows them, so one file costs what one kernel did."""
    import torch.utils.cpp_extension as ext

    sources = [_gelu(256), _epilogue("scale_res", _SCALE_RESIDUAL, 256)]
    cu = tmp_path / "k.cu"
    cu.write_text("#include <torch/extension.h>\n" + "\n".join(_cuda_source(s) for s in sources))
    includes = [f"-I{p}" for p in ext.include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    proc = subprocess.run(
        ["nvcc", "-std=c++17", *includes, "-c", str(cu), "-o", str(tmp_path / "k.o")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_mixed_batch_has_30_candidates_with_cuda_ones():
    tasks = {t.name: t for t in bundled_tasks("gpu")}
    batch = mixed_batch(tasks)
    assert len(batch) >= 30
    assert sum("load_inline(" in src for _, _, src in batch) >= 8
    assert all(name in tasks for _, name, _ in batch)
