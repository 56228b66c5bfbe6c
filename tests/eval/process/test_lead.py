"""The lead without a GPU (``eval/process/lead.py``): nothing to spin, and it says so. The GPU's
side is ``test_lead_gpu.py``."""

from __future__ import annotations

import torch

from cudal1.eval.process import lead


def test_a_cpu_has_no_lead():
    assert lead.prepare(torch.device("cpu")) == "none"
    assert lead.kind() == "none" and "no GPU" in lead.reason()
    lead.spin(100.0)  # nothing queued, nothing raised
    assert lead.marks() is None
    assert not lead.altered()  # settings are sealed on a GPU only
