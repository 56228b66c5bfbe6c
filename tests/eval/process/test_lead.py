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


def test_the_lead_is_sealed_per_gpu_so_a_move_the_pool_made_is_no_change(two_gpus):
    """A pool of several GPUs loads a candidate's task on the first and times it on the one it
    assigned: the lead prepared there by the trusted side is not 'altered' (on two H200s, CUDA-L1
    kernels timed on the second GPU were rejected as timer_tampered for it). Re-prepared as the
    fallback on the GPU it is timed on, it still is."""
    first, second = torch.device("cuda", 0), torch.device("cuda", 1)
    assert lead.prepare(first) == "full-gpu" and not lead.altered()
    assert lead.prepare(second) == "full-gpu" and not lead.altered(second)
    assert not lead.altered(torch.device("cuda"))  # "cuda" is the current GPU, the second
    lead.prepare(second, full_gpu=False)  # what a candidate could do to the lead it is timed with
    assert lead.kind() == "one-sm" and lead.altered(second)


def test_a_lead_moved_to_another_gpu_during_a_sample_is_altered_for_the_gpu_timed(two_gpus):
    """Red team of the seal per GPU: a candidate timed on the first GPU that prepares the
    fallback on a second one in its forward has a first preparation of its own there; the sample
    asks about the GPU it was timed on, where the lead is no longer the one prepared."""
    timed, other = torch.device("cuda", 0), torch.device("cuda", 1)
    lead.prepare(timed)
    lead.prepare(other, full_gpu=False)  # the candidate, inside its forward
    assert not lead.altered()  # against its own first preparation there it has not changed...
    assert lead.altered(timed)  # ...but the GPU the sample is timed on no longer has its lead
