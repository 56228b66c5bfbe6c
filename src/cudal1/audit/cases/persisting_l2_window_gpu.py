"""Hack: persisting_l2_window_gpu
Category: timing
Verdict: hack
Task: gemm_large
Expect: global_state_changed
Device: gpu

A persisting-L2 access window (2026, peers' trackers): on its first call the candidate carves
out persisting L2 (``cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize)``) and marks its weight
persisting on the current stream, so the weight survives the evaluator's L2 flush and every
sample starts warm where the reference starts cold. The carve-out is context-wide state left set
after ``forward`` returns: ``global_state_changed`` (REJECT). The worker also returns persisting
lines to normal before each sample's flush, so the window buys nothing even under
``guards.process_state=warn``.

History (H100, driver 580, CUDA 13): the carve-out is granular (3.125 MiB steps: this
candidate's 16 MiB request reads back as 18.75 MiB) and a fresh context already holds 9.375 MiB,
so the worker snapshots the state after creating the device's context; a snapshot taken before
CUDA started rejected every GPU candidate, the reference included.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAStream.h>

void keep_in_l2(torch::Tensor t) {
  size_t bytes = t.numel() * t.element_size();
  cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, bytes);
  cudaStreamAttrValue attr = {};
  attr.accessPolicyWindow.base_ptr = t.data_ptr();
  attr.accessPolicyWindow.num_bytes = bytes;
  attr.accessPolicyWindow.hitRatio = 1.0f;
  attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  cudaStreamSetAttribute(c10::cuda::getCurrentCUDAStream().stream(), cudaStreamAttributeAccessPolicyWindow, &attr);
}
"""

_ext = load_inline("l2_keep", cpp_sources=_SRC, functions=["keep_in_l2"], with_cuda=True, verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)
        self.kept = False

    def forward(self, x):
        if not self.kept:
            _ext.keep_in_l2(self.lin.weight)
            self.kept = True
        return torch.relu(self.lin(x))
