"""The lead without a GPU (``eval/process/lead.py``): nothing to spin, and it says so. The GPU's
side is ``test_lead_gpu.py``."""

from __future__ import annotations

import contextlib

import pytest
import torch

from cudal1.eval.process import lead


def test_a_cpu_has_no_lead():
    assert lead.prepare(torch.device("cpu")) == "none"
    assert lead.kind() == "none" and "no GPU" in lead.reason()
    lead.spin(100.0)  # nothing queued, nothing raised
    assert lead.marks() is None
    assert not lead.altered()  # settings are sealed on a GPU only


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh lead whose preparation on a "GPU" is faked to what it leaves (no CUDA needed);
    the current GPU is the second."""
    monkeypatch.setattr(lead, "_LEAD", lead._Lead())
    monkeypatch.setattr(lead.torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(lead.torch.cuda, "current_device", lambda: 1)

    def full_gpu(device: torch.device) -> str:  # what the GPU's preparation leaves, in short
        lead._LEAD.kind, lead._LEAD.programs, lead._LEAD.maxnreg = "full-gpu", 528, 128
        return ""

    monkeypatch.setattr(lead, "_prepare_full_gpu", full_gpu)
    monkeypatch.setattr(lead, "_sleep_cycles_per_us", lambda: 1000.0)


def test_the_lead_is_sealed_once_so_a_move_to_another_gpu_is_a_change(two_gpus):
    """The lead is sealed at its first preparation, which the worker makes where its task loads,
    before any candidate code: the pool assigns the GPU before that (tests/eval/
    test_pool_devices.py), so a lead prepared again on another GPU, or as the fallback, is the
    candidate's doing. On two H200s the pool assigned the GPU after the load, and this seal read
    the trusted side's move as tampering; the mend is in the pool, not here."""
    timed, other = torch.device("cuda", 0), torch.device("cuda", 1)
    assert lead.prepare(timed) == "full-gpu" and not lead.altered()
    assert lead.prepare(timed) == "full-gpu" and not lead.altered()  # the timed sample's prepare
    lead.prepare(other)  # a candidate that moves the lead to another GPU of the machine
    assert lead.altered()
    lead.prepare(timed)  # the next sample prepares it where it is timed again
    assert not lead.altered()
    lead.prepare(timed, full_gpu=False)  # a candidate that re-prepares it as the fallback
    assert lead.kind() == "one-sm" and lead.altered()
