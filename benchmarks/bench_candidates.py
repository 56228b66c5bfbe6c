"""Candidate sources for the evaluator benchmark: the reference as its own candidate, small
load_inline CUDA kernels for a few bundled tasks, scoped-cuDNN variants, and planted failures."""

from __future__ import annotations

import ast

from cudal1.schema import Task


def self_candidate(task: Task) -> str:
    """The task's own code with ``Model`` renamed ``ModelNew``: an A-vs-A candidate."""
    tree = ast.parse(task.source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            node.name = "ModelNew"
        elif isinstance(node, ast.Name) and node.id == "Model":
            node.id = "ModelNew"
    return ast.unparse(tree)


_GELU = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = """
__global__ void gelu_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }
}
torch::Tensor gelu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    gelu_kernel<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline("bench_gelu_THREADS", cpp_sources="torch::Tensor gelu(torch::Tensor x);",
                  cuda_sources="#define BLOCK THREADS\n" + cuda_src, functions=["gelu"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.gelu(x.contiguous())
'''

_EPILOGUE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = """
__global__ void epilogue_kernel(const float* y, const float* bias, const float* x, float* out,
                                long n, long cols, float scale) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) { OP }
}
torch::Tensor epilogue(torch::Tensor y, torch::Tensor bias, torch::Tensor x, double scale) {
    auto out = torch::empty_like(y);
    long n = y.numel();
    epilogue_kernel<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(y.data_ptr<float>(), bias.data_ptr<float>(),
        x.data_ptr<float>(), out.data_ptr<float>(), n, y.size(1), (float)scale);
    return out;
}
"""
ext = load_inline("bench_NAME_THREADS",
                  cpp_sources="torch::Tensor epilogue(torch::Tensor y, torch::Tensor b, torch::Tensor x, double s);",
                  cuda_sources="#define BLOCK THREADS\n" + cuda_src, functions=["epilogue"])


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.linear = nn.Linear(args[0], args[1] if len(args) > 1 and isinstance(args[1], int) else args[0])
        self.scale = args[1] if len(args) > 1 and isinstance(args[1], float) else 1.0

    def forward(self, x):
        x = x.contiguous()
        y = torch.mm(x, self.linear.weight.t())
        return ext.epilogue(y, self.linear.bias, x, self.scale)
'''

_BIAS_GELU = "float v = y[i] + bias[i % cols]; out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));"
_SCALE_RESIDUAL = "out[i] = (y[i] + bias[i % cols]) * scale + x[i];"

_CUDNN_SCOPED = '''
import torch
import torch.nn as nn

{task_body}


class ModelNew(ModelRef):
    def forward(self, *args):
        with torch.backends.cudnn.flags(enabled=True, benchmark=True, deterministic=False, allow_tf32=True):
            return super().forward(*args)
'''


def _gelu(block: int) -> str:
    return _GELU.replace("THREADS", str(block))


def _epilogue(name: str, op: str, block: int) -> str:
    return _EPILOGUE.replace("OP", op).replace("NAME", name).replace("THREADS", str(block))


def _cudnn_scoped(task: Task) -> str:
    body = self_candidate(task).replace("class ModelNew", "class ModelRef").replace("ModelNew", "ModelRef")
    return _CUDNN_SCOPED.replace("{task_body}", body)


# Launch-bound tasks (issue 10): a 3-layer MLP at batch 64 and a chain of small elementwise ops,
# about 0.1 ms and 0.02 ms on an H100, where host launch cost decides the time. Their A-vs-A
# entries in the mixed batch must bracket 1.0 while other candidates build beside them.
LAUNCH_BOUND = {
    "lb_mlp3": """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 256))

    def forward(self, x):
        return self.net(x)


def get_inputs():
    return [torch.randn(64, 512)]


def get_init_inputs():
    return []
""",
    "lb_elementwise_chain": """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        for _ in range(6):
            x = torch.tanh(x * 1.01 + 0.1)
        return x


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
""",
}


def launch_bound_tasks() -> dict[str, Task]:
    return {name: Task(name, source, level=0) for name, source in LAUNCH_BOUND.items()}


def mixed_batch(tasks: dict[str, Task]) -> list[tuple[str, str, str]]:
    """(label, task name, source): one A-vs-A entry per task given (launch-bound ones included), 10
    load_inline CUDA candidates (2 planted to fail), 4 cuDNN-scoped variants, 3 planted failures."""
    batch = [(f"self:{name}", name, self_candidate(t)) for name, t in tasks.items()]
    batch += [(f"cuda-gelu-{b}", "5_gelu", _gelu(b)) for b in (128, 256, 512, 1024)]
    batch += [(f"cuda-bias-gelu-{b}", "1_gemm_bias_gelu", _epilogue("bias_gelu", _BIAS_GELU, b)) for b in (256, 512)]
    batch += [
        (f"cuda-scale-residual-{b}", "3_matmul_scale_residual", _epilogue("scale_res", _SCALE_RESIDUAL, b))
        for b in (256, 512)
    ]
    conv_tasks = ("2_conv2d", "2_conv_bn_relu", "6_conv_maxpool_sigmoid_sum", "2_conv_block")
    batch += [(f"cudnn-scoped:{n}", n, _cudnn_scoped(tasks[n])) for n in conv_tasks]
    batch += [
        ("planted:wrong-gelu", "5_gelu", _gelu(256).replace("erff(v * 0.70710678118654752f)", "tanhf(v)")),
        ("planted:cuda-syntax", "5_gelu", _gelu(64).replace("float v = x[i];", "float v = x[i]")),
        ("planted:raises", "3_softmax", self_candidate(tasks["3_softmax"]).replace("return", "raise RuntimeError('x'); return", 1)),
    ]
    return batch
