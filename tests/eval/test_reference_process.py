"""The trusted reference's worker (``eval/reference_process.py``), driven in this process."""

from __future__ import annotations

import pytest
import torch

from cudal1.config import SandboxConfig
from cudal1.eval import reference_process
from cudal1.eval.process.protocol import Command, Role
from cudal1.eval.process.sandbox import WorkerProcess
from cudal1.eval.process.wire import WireError, encode
from cudal1.eval.reference_process import ENTRY, ReferenceServer, candidate_outputs


def test_reference_work_is_counted_once_per_signature(monkeypatch):
    """The flop count is per shapes, not per evaluation: a task's later candidates reuse it."""
    calls = []
    real = reference_process.count_work
    monkeypatch.setattr(
        reference_process, "count_work", lambda model, inputs: calls.append(1) or real(model, inputs)
    )
    server = ReferenceServer()
    server.model = torch.nn.Linear(4, 4)
    server.inputs = {"a": [torch.zeros(2, 4)], "b": [torch.ones(2, 4)], "c": [torch.ones(3, 4)]}
    assert server.work("a") == server.work("b")
    assert len(calls) == 1
    assert server.work("c")["work"]["flops"] > server.work("a")["work"]["flops"]
    assert len(calls) == 2


def test_reference_server_answers_exactly_the_reference_commands():
    handled = set(ReferenceServer().handlers())
    assert handled == {c for c in Command if c.accepts(Role.REFERENCE)} - {Command.EXIT}


def test_a_cpu_has_no_queue_to_wait_for():
    """QUIET (the wait before sampling for other processes' GPU work) answers at once on a CPU,
    through a reference worker's own process as the timing stage sends it on a GPU."""
    with WorkerProcess(SandboxConfig(call_timeout_s=60), role=Role.REFERENCE, entry=ENTRY) as worker:
        reply = worker.request(Command.QUIET, max_s=2.0, quiet_us=200.0)
    assert reply["quiet"] and reply["waited_ms"] == 0.0 and reply["probes"] == 0


def test_a_promoted_slot_replaces_the_main_model_and_its_float64_twin():
    """The re-drawn-weights probe's models become the timed ones: no third model is kept."""
    server = ReferenceServer()
    server.module = type(
        "Task",
        (),
        {"Model": lambda self=None: torch.nn.Linear(4, 4), "get_inputs": lambda: [torch.randn(2, 4)]},
    )
    server.build([], seed=1, device="cpu", float64=True)
    server.twins = {"float16": server.model.half()}  # as the calibrated sets leave them
    server.build([], seed=1, device="cpu", slot="weights", reinit=2, float64=True)
    redrawn, redrawn64 = server.slots["weights"], server.slots64["weights"]
    server.promote("weights")
    assert server.model is redrawn and server.model64 is redrawn64
    assert not server.slots and not server.slots64 and not server.twins


def test_a_candidates_reply_that_does_not_decode_is_its_wrong_answer():
    """The forwarded reply is the candidate's bytes: one that does not decode, or lacks a type and
    a device per value, is refused by ``candidate_outputs`` (the compare then fails the candidate)
    rather than failing the reference worker, which the evaluator would take for its own fault."""
    t = torch.ones(3)
    good = {"values": [t], "types": ["torch.Tensor"], "devices": ["cpu"], "structure": "Tensor"}
    assert torch.equal(candidate_outputs(encode({"ok": True, "outputs": good}))["values"][0], t)
    for bad, error in (
        (b"CL1W" + b"\x00" * 8, WireError),
        (encode({"ok": True}), KeyError),
        (encode({"ok": True, "outputs": {**good, "types": []}}), ValueError),
        (encode({"ok": True, "outputs": {**good, "devices": [7]}}), ValueError),
        (encode({"ok": True, "outputs": {**good, "values": {"a": 1}}}), TypeError),
    ):
        with pytest.raises(error):
            candidate_outputs(bad)
