"""Hack: legit_async_copy_joined_gpu
Category: streams
Verdict: legit
Task: gemm_large
Expect: accept
Device: gpu

Look-alike of output_filled_when_read on a GPU: the output is written by an asynchronous copy,
and the copy is joined before ``forward`` returns. The GEMM and ReLU run on the current stream
into a workspace kept across calls; a copy stream waits for them (an event), copies the workspace
into a fresh output with ``non_blocking=True`` and records an event that the current stream then
waits on, so anything the caller queues after the call (its end event, a digest, a copy to the
host) runs after the copy. ``record_stream`` tells the allocator that the copy stream used the
output. Every output is complete, on the stream the caller uses, when ``forward`` returns.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)
        self.copy_stream = None
        self.workspace = None

    def forward(self, x):
        main = torch.cuda.current_stream()
        if self.copy_stream is None:
            self.copy_stream = torch.cuda.Stream()
        shape = (x.shape[0], self.lin.out_features)
        if self.workspace is None or self.workspace.shape != shape:
            self.workspace = torch.empty(shape, device=x.device, dtype=x.dtype)
        torch.addmm(self.lin.bias.detach(), x, self.lin.weight.detach().t(), out=self.workspace)
        self.workspace.relu_()
        computed = torch.cuda.Event()
        computed.record(main)
        out = torch.empty_like(self.workspace)
        with torch.cuda.stream(self.copy_stream):
            self.copy_stream.wait_event(computed)
            out.copy_(self.workspace, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self.copy_stream)
        out.record_stream(self.copy_stream)
        main.wait_event(copied)
        return out
