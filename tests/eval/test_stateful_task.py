"""A stateful reference (KernelBench L3_33/L3_34, the vanilla RNN): its forward replaces a tensor
attribute, so each call's output depends on the calls before it. The function such a task defines
is its first call from the state the model was built in (KernelBench's harness compares the first
call of freshly built models), so every checked set and every timed sample starts from that state
on both sides (``process.model_state``)."""

from __future__ import annotations

import pytest
import torch

from cudal1.audit import cases_dir
from cudal1.eval.pool import EvalPool, evaluate
from cudal1.eval.process.model_state import BuiltStates, stateful_attributes
from cudal1.eval.process.protocol import Command
from cudal1.eval.process.sandbox import WorkerProcess
from cudal1.schema import Severity, Stage, Task

# The audit cases' stateful task: KernelBench L3_33 at CPU-small sizes.
RNN = (cases_dir() / "tasks" / "vanilla_rnn.py").read_text()

AS_REFERENCE = RNN.replace("class Model(", "class ModelNew(")


def _variant(forward: str) -> str:
    """The reference's constructor (the same random draws in the same order), another forward."""
    head, _, rest = AS_REFERENCE.partition("    def forward(self, x):\n")
    _, _, tail = rest.partition("\n\n\ndef get_inputs")
    return head + "    def forward(self, x):\n" + forward + "\n\n\ndef get_inputs" + tail


# Zeros for the hidden state: right on no call (the reference starts from a random one).
IGNORES_STATE = _variant(
    "        h = torch.zeros_like(self.hidden).to(x.device)\n"
    "        h = self.tanh(self.i2h(torch.cat((x, h), dim=1)))\n"
    "        return self.h2o(h)"
)
# Right on every first call from the state as built, never updates it: wrong from the second call.
NEVER_UPDATES = _variant(
    "        h = self.tanh(self.i2h(torch.cat((x, self.hidden.to(x.device)), dim=1)))\n"
    "        return self.h2o(h)"
)


@pytest.fixture
def rnn() -> Task:
    return Task("vanilla_rnn", RNN, level=3)


# L3_34: the same model returning its hidden state, the very tensor the next call replaces.
RNN_HIDDEN = RNN.replace("return self.h2o(self.hidden)", "return self.hidden")


@pytest.mark.parametrize("source", [RNN, RNN_HIDDEN], ids=["output", "hidden"])
def test_the_reference_as_its_own_candidate_is_right_and_timed(source, fast_config):
    rnn = Task("vanilla_rnn", source, level=3)
    result = evaluate(rnn, source.replace("class Model(", "class ModelNew("), fast_config)
    assert result.ok, result.error
    assert result.correctness is not None and result.correctness.passed == 5
    assert result.timing is not None and result.speedup is not None
    found = [f for f in result.findings if f.code == "stateful_reference"]
    assert len(found) == 1 and found[0].severity is Severity.INFO
    assert found[0].evidence["state"] == ["hidden"]


def test_a_candidate_that_ignores_the_state_is_wrong(rnn, fast_config):
    result = evaluate(rnn, IGNORES_STATE, fast_config)
    assert result.failed_stage is Stage.CORRECTNESS
    assert result.correctness is not None and result.correctness.passed == 0


def test_a_candidate_that_never_updates_the_state_is_wrong(rnn, fast_config):
    """Every checked set starts from the state as built, where it is right: the second call
    (``probes.state_carried``) is where it is not."""
    result = evaluate(rnn, NEVER_UPDATES, fast_config)
    assert result.failed_stage is Stage.CORRECTNESS
    assert result.correctness is not None and result.correctness.passed == 5
    assert any(f.code == "state_not_carried" and f.severity is Severity.REJECT for f in result.findings)


def _sent(monkeypatch) -> list[tuple[str, str, dict]]:
    """Every request the trusted side sends to a worker: (role, command, arguments)."""
    sent: list[tuple[str, str, dict]] = []
    original = WorkerProcess._send

    def record(self, cmd, args):
        sent.append((str(self.role), Command(cmd).value, dict(args)))
        return original(self, cmd, args)

    monkeypatch.setattr(WorkerProcess, "_send", record)
    return sent


def test_the_state_is_put_back_on_both_sides(rnn, fast_config, monkeypatch):
    """The first evaluation builds the candidate again once the reference found the task
    stateful; the next one on the same reference worker builds it keeping its state from the start."""
    sent = _sent(monkeypatch)
    with EvalPool(fast_config, workers=1, spares=0) as pool:
        first = pool.evaluate(rnn, AS_REFERENCE)
        second = pool.evaluate(rnn, AS_REFERENCE)
    assert first.ok and second.ok, (first.error, second.error)
    builds = [(role, a.get("keep_state")) for role, cmd, a in sent if cmd == "build" and a["slot"] == "main"]
    assert builds == [
        ("candidate", False),
        ("reference", None),
        ("candidate", True),
        ("candidate", True),
        ("reference", None),
    ]
    assert [a["after"] for _, cmd, a in sent if cmd == "run" and "after" in a] == [1, 1] * 2
    assert all(any(f.code == "stateful_reference" for f in r.findings) for r in (first, second))


def test_a_stateless_task_pays_nothing(task, fast_config, candidate, monkeypatch):
    """No state kept, no second build, no extra call, no finding: the requests are those of
    before (a stateless model's detection is one extra call at the reference's first build)."""
    sent = _sent(monkeypatch)
    result = evaluate(task, candidate("        return torch.relu(self.lin(x))"), fast_config)
    assert result.ok
    builds = [(role, a.get("keep_state")) for role, cmd, a in sent if cmd == "build" and a["slot"] == "main"]
    assert builds == [("candidate", False), ("reference", None)]
    assert not any("after" in a for _, cmd, a in sent if cmd == "run")
    assert not any(f.code in {"stateful_reference", "state_not_carried"} for f in result.findings)
    assert "state" not in result.environment.probes


def test_what_reads_as_stateful():
    torch.manual_seed(0)
    namespace: dict = {}
    exec(RNN, namespace)
    rnn = namespace["Model"](*namespace["get_init_inputs"]())
    x = namespace["get_inputs"]()
    hidden = rnn.hidden
    assert stateful_attributes(rnn, lambda: x) == ["hidden"]
    assert torch.equal(rnn.hidden, hidden)  # left as built
    # A training-mode batch norm's running statistics change without moving its output.
    norm = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8))
    assert stateful_attributes(norm, lambda: [torch.randn(4, 8)]) == []

    def never() -> list:
        raise AssertionError("a model without state attributes is not called")

    assert stateful_attributes(torch.nn.Identity(), never) == []

    class Counter(torch.nn.Module):  # state in a Python number
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            return x * self.calls

    counter = Counter()
    assert stateful_attributes(counter, lambda: [torch.ones(2)]) == ["calls"]
    assert counter.calls == 0


class LazyBuffers(torch.nn.Module):
    """CUDA-L1's L3_33 kernel: a flag set on the first call together with buffers that start as
    ``None``."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = torch.zeros(2)
        self._ready = False
        self.buffer = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._ready:
            self.buffer = torch.empty(2)
            self._ready = True
        torch.add(self.hidden, x, out=self.buffer)
        self.hidden = self.buffer.clone()
        return self.buffer


def test_a_flag_goes_back_with_the_buffers_it_guards():
    """Putting back the buffers (``None``) and not the flag left the kernel calling into
    ``None`` (H100, 2026-11-26)."""
    model = LazyBuffers()
    states = BuiltStates()
    states.keep(model)
    assert torch.equal(model(torch.ones(2)), torch.ones(2))
    states.restore(model)
    assert model._ready is False and model.buffer is None
    assert torch.equal(model(torch.ones(2)), torch.ones(2))


def test_the_state_is_put_back_in_fresh_memory():
    """L3_34 returns its hidden state itself: putting the state back must not change an output
    a previous call returned."""
    model = torch.nn.Module()
    model.hidden = torch.ones(2)
    states = BuiltStates()
    states.restore(model)  # nothing kept: nothing done
    states.keep(model)
    returned = model.hidden = model.hidden * 3
    states.restore(model)
    assert torch.equal(model.hidden, torch.ones(2)) and torch.equal(returned, torch.full((2,), 3.0))
    del model
    assert not states._by_id  # a dropped model takes its copies with it


def test_the_state_is_put_back_where_the_forward_left_it():
    """State made on the CPU and moved by the first forward (KernelBench's RNN) goes back on the
    device it was moved to, so no timed call of either side copies it there again (the meta
    device stands in for a GPU)."""
    model = torch.nn.Module()
    model.hidden = torch.ones(2)
    states = BuiltStates()
    states.keep(model)
    model.hidden = torch.zeros(2, device="meta")  # what `self.hidden.to(x.device)` left
    states.restore(model)
    assert model.hidden.device.type == "meta" and model.hidden.shape == (2,)
    model.hidden = torch.full((2,), 5.0)  # back on the CPU: restored there, with its value
    states.restore(model)
    assert torch.equal(model.hidden, torch.ones(2))
