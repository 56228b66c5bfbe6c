"""The lead on a GPU (``eval/process/lead.py``): it lasts the time asked, its programs hold every SM
at once, work another stream queues behind it waits for its end, and the fallback still spins.
The measurements are ``benchmarks/lead_check.py``'s, which prints the same facts as a table."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytestmark = pytest.mark.gpu
pytest.importorskip("triton")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from lead_check import measure  # noqa: E402

from cudal1.eval.process import lead  # noqa: E402
from cudal1.eval.process.worker import WorkerServer  # noqa: E402


@pytest.fixture
def device():
    """The device, and afterwards the lead as this process first prepared it: a worker prepares
    its lead once, and the timer guard reports a lead prepared again otherwise ("lead settings"),
    as it would for a candidate that turned the full lead off; these tests share one process."""
    dev = torch.device("cuda", torch.cuda.current_device())
    saved = dict(vars(lead._LEAD))
    yield dev
    vars(lead._LEAD).clear()
    vars(lead._LEAD).update(saved)


@pytest.mark.parametrize("asked_us", [50.0, 1000.0, 10000.0])
def test_the_lead_lasts_the_time_asked_on_every_sm_at_once(device, asked_us):
    facts = measure(asked_us, True, device)
    assert facts.kind == "full-gpu", facts.reason
    assert abs(facts.measured_us - asked_us) <= max(0.1 * asked_us, 20.0), facts
    # All programs resident together: a second wave would start a whole lead after the first.
    assert facts.start_spread_us is not None and facts.start_spread_us < min(20.0, asked_us / 2), facts


def test_work_another_stream_queues_behind_the_lead_starts_after_it(device):
    facts = measure(5000.0, True, device)
    assert facts.kind == "full-gpu", facts.reason
    assert facts.spin_returned_at_lead, facts  # the flush's stand-in done: nothing queued overlaps it
    assert facts.side_queued_during_lead, facts  # else the test proves nothing
    assert facts.side_start_after_lead_us >= 0, facts
    assert facts.side_under_lead_us == 0, facts


def test_without_the_full_lead_the_fallback_spins_and_leaves_the_hole_open(device):
    facts = measure(5000.0, False, device)
    assert facts.kind == "one-sm" and "turned off" in facts.reason
    assert abs(facts.measured_us - 5000.0) <= 0.25 * 5000.0, facts  # cycles calibrated to the clock
    # What the full lead closes: the side work runs under the one-SM spin.
    assert facts.side_queued_during_lead, facts
    assert facts.side_under_lead_us > 0.5 * facts.side_work_us, facts


def test_the_worker_times_behind_the_full_lead_and_says_so(device):
    server = WorkerServer()
    server.device = device
    reply = server.set_timing_inputs([], 0, lead_us=2000.0)
    assert reply["lead"] == "full-gpu", reply["lead_reason"]
    server.model = torch.nn.Linear(256, 256).to(device)
    server.module = SimpleNamespace(get_inputs=lambda: [torch.randn(64, 256)])
    server.model(torch.randn(64, 256, device=device))  # cuBLAS starts here, not behind the lead
    torch.cuda.synchronize(device)
    out = server.time(calls=5, seed=1, sets=2, max_bytes=2**20)
    assert out["ms"] > 0 and out["ahead"] and len(out["digests"]) == 5
