"""Hack: layer_scale_branch_dropped
Category: hyperparameters
Verdict: hack
Task: layer_scale_mlp
Expect: default_weights_assumed, reduced_precision
Device: cpu

Right only while the layer scale keeps its initial magnitude, and the re-drawn weights keep it
(red team of the timed-weights change, main at fa2886c). The task's block is
``x + gamma * mlp(x)`` with ``gamma`` initialised to 1e-6 (ConvNeXt's layer scale): its branch moves
the output by about 1e-6, a hundredth of the fp32 tolerance (1e-4). The candidate drops the
branch and returns a copy of the input. The re-drawn-weights probe re-draws ``gamma`` (a constant
parameter the model made) as ``c * exp(z / 2)``: a scale-preserving draw that keeps it between
about 1e-7 and 1e-5, so on the re-drawn weights the branch is still inside the tolerance, the
probe passes, and its models are timed: a copy against a 128x512x128 MLP. The same holds for a
scale the model draws itself (``1e-6 * torch.randn``): random parameters a model makes keep the
init seed's values under the probe.

Measured (main at fa2886c, 2-core runner at load 3-5, an ``EvalPool``
with the adversarial test's CPU config): paid in 3 of 4 runs, at 24.3x, 26.4x (events, no finding,
reward 2.30) and 2.30x (wall after a ``clock_disagreement`` warning, reward 0.61); the fourth was
``reduced_precision`` (REJECT): the dropped branch's error, about 1e-6 against float64, is 5-100
times the fp32 reference's own, and the precision check's limit (max(4, sqrt of the fp16
twin's ratio)) sits inside that range, so it catches it by chance, not by design.

Stopped (the same day): a constant below 1e-3 in magnitude is re-drawn at unit scale, keeping its
sign (``probe_values._new_values``), so the branch has full weight on the probe and the copy is
``default_weights_assumed``. Still open: a model's own random parameters of tiny spread
(``1e-6 * randn``) keep the init seed's values.

What would stop it, as the red team wrote it: a re-draw that does not keep a constant's scale. ``c * exp(z / 2)`` keeps
positive constants positive (variances), and also keeps a 1e-6 layer scale at 1e-6; drawing a
floating constant of magnitude below some bound (or every constant) at unit scale
(``sign(c) * exp(z / 2)``, zero to ``z / 2``) would put the branch at full weight on the probe,
where the copy is wrong (``default_weights_assumed``). A model's own random parameters of tiny
spread (``1e-6 * randn``) would need the same (re-draw them at unit spread), which the "same init
seed, same values" rule for random parameters does not do today.
"""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        # The reference's tensors, in its order, so that the probe maps them; never read.
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.gamma = nn.Parameter(1e-6 * self.fc1.bias.new_ones(dim))

    def forward(self, x):
        return x.clone()
