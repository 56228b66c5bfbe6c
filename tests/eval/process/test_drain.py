"""The wait before sampling until the GPU has no other process's work (``eval/process/drain.py``):
the rule on a scripted probe and clock, and on a GPU a stopped process's queued kernels waited out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import torch

from cudal1.eval.process.drain import gpu_round_trip, wait_until_quiet


class Script:
    """A probe that returns the given round trips, and a clock that moves 1 ms a probe."""

    def __init__(self, round_trips_us: list[float]) -> None:
        self.left = list(round_trips_us)
        self.now = 0.0

    def probe(self) -> float:
        self.now += 0.001
        return self.left.pop(0)

    def clock(self) -> float:
        return self.now


def test_quiet_after_three_fast_round_trips_in_a_row():
    s = Script([2000, 30, 1500, 30, 40, 30, 30])
    got = wait_until_quiet(s.probe, max_s=1.0, quiet_us=200, clock=s.clock)
    assert got["quiet"] and got["probes"] == 6 and got["slowest_us"] == 2000
    assert s.left == [30]  # stopped as soon as three in a row were fast


def test_a_gpu_that_stays_busy_is_waited_for_at_most_max_s():
    s = Script([1500.0] * 100)
    got = wait_until_quiet(s.probe, max_s=0.01, quiet_us=200, clock=s.clock)
    assert not got["quiet"] and got["probes"] == 10 and got["waited_ms"] == pytest.approx(10.0)


HOG = """
import os, signal, sys, torch
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
for _ in range(int(sys.argv[1])):
    torch.cuda._sleep(2_000_000)  # about 1 ms each at an H100's or H200's clock
print("queued", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)  # stopped as a quiet window stops a worker; its kernels run on
"""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_stopped_processs_queued_kernels_are_waited_out():
    """Alone, the GPU is quiet at once; behind another process that queued about 300 ms of
    kernels and then stopped, the wait lasts until they have run."""
    device = torch.device("cuda", torch.cuda.current_device())
    probe = gpu_round_trip(device)
    alone = wait_until_quiet(probe, max_s=2.0, quiet_us=200)
    assert alone["quiet"] and alone["waited_ms"] < 50, alone
    hog = subprocess.Popen([sys.executable, "-c", HOG, "300"], stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout is not None and hog.stdout.readline().strip() == "queued"
        behind = wait_until_quiet(probe, max_s=5.0, quiet_us=200)
    finally:
        os.kill(hog.pid, signal.SIGCONT)
        hog.kill()
        hog.wait()
    assert behind["quiet"] and behind["waited_ms"] > 100 and behind["slowest_us"] > 200, behind
