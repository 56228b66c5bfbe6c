"""Hack: stateful_state_built_on_device_gpu
Category: timing
Verdict: hack
Task: vanilla_rnn
Expect: no_gain
Device: gpu

Making the state restore cost the reference inside its clock (red team 2026-11-26; reasoned from
the code, not yet run on a GPU). A stateful task's state as built is what ``__init__`` left:
KernelBench's RNN makes its hidden state on the CPU, and ``Module.to`` moves parameters and
buffers, not plain tensor attributes, so ``BuiltState`` keeps, and ``prepare`` puts back before
every timed sample, a CPU tensor. The reference's first timed call of each sample then runs
``self.hidden.to(x.device)``, a synchronous copy from pageable memory: its host waits there
for the lead spin to end, reports that it fell behind (``ahead`` false on every sample, the lead
doubling each time), and its events time the host's launches of all K calls instead of the GPU's
work. Under KernelBench's harness, and before the restore, that copy happened once per model.
This candidate is the reference with its hidden state made on the device in ``__init__`` (the
same random draw): no copy, no wait, its K calls run back to back behind the spin, and on a
launch-bound RNN it should read a speedup of the reference's host time over its GPU time for no
change in the work. Expected of the evaluator: no speedup beyond the A-vs-A bracket, e.g. by
restoring the state onto the device where the model's forward left it (or measuring the reference
from a state already on the device). Mended the same day that way (``BuiltState.restore``); confirmed
on an H100 the same day (``gpu-check.sh tests``: no gain).
"""

import torch
import torch.nn as nn

batch_size = 4
input_size = 24
hidden_size = 16
output_size = 8


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.hidden = torch.randn((batch_size, hidden_size))
        if torch.cuda.is_available():
            self.hidden = self.hidden.cuda()
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.tanh = nn.Tanh()

    def forward(self, x):
        self.hidden = self.hidden.to(x.device)
        combined = torch.cat((x, self.hidden), dim=1)
        self.hidden = self.tanh(self.i2h(combined))
        return self.h2o(self.hidden)
