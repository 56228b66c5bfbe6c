"""What a candidate must leave as it found it, observed in a fresh process as in a worker
(``eval/process/state.py``): the namespace-patch snapshot and poisoned free memory."""

from __future__ import annotations

import pytest
import torch

from cudal1.eval.checks.global_state import GLOBAL_STATE_CHANGED, observation_findings
from cudal1.eval.process import state


def test_torch_wrapping_its_own_functions_is_not_a_patch_but_a_replacement_is():
    import subprocess
    import sys

    script = (
        "from cudal1.eval.process.state import global_state\n"
        "global_state()\n"
        "import torch._dynamo\n"  # wraps torch.manual_seed, as the first torch.compile does
        "print(sorted(k for k in global_state() if k.startswith('ns:')))\n"
        "import torch.nn.functional as F\n"
        "F.gelu = lambda x, approximate='none': x\n"
        "print(sorted(k for k in global_state() if k.startswith('ns:')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    after_dynamo, after_patch = out.stdout.strip().splitlines()
    assert after_dynamo == "[]"
    assert after_patch == "['ns:torch.nn.functional.gelu']"


# -- poisoned free memory ---------------------------------------------------------------------
POISON_PROBE = """
import torch
from cudal1.eval.process.state import poisoned
for shape in [(256, 256), (64,), (4096, 4096)]:  # heap, a small bin, a fresh mmap
    torch.ones(*shape)  # a freed block full of ones: what a stale-memory hack would read back
    with poisoned(torch.device("cpu"), [4 * shape[0]]) if {poison} else torch.no_grad():
        e = torch.empty(*shape)
    print(float(torch.isnan(e).float().mean()), end=" ")
print(float(torch.isnan(torch.empty(256, 256)).float().mean()))  # and off again afterwards
"""


def test_poisoned_fills_every_cpu_allocation_during_the_call_and_none_after():
    """In a fresh process, as in a worker (pytest's own allocations make the heap unpredictable)."""
    import subprocess
    import sys

    def run(poison: bool) -> list[float]:
        out = subprocess.run(
            [sys.executable, "-c", POISON_PROBE.format(poison=poison)],
            capture_output=True,
            text=True,
            check=True,
        )
        return [float(v) for v in out.stdout.split()]

    assert run(True) == [1.0, 1.0, 1.0, 0.0]
    assert run(False)[:3] != [1.0, 1.0, 1.0]  # unpoisoned, nothing fills them with NaN


@pytest.mark.gpu
def test_poison_on_gpu():
    import torch

    from cudal1.eval.process.state import poisoned

    dev = torch.device("cuda")
    torch.ones(1024, 1024, device=dev)
    with poisoned(dev, [1024 * 1024 * 4]):
        assert bool(torch.isnan(torch.empty(1024, 1024, device=dev)).all())


def test_the_current_gpu_left_switched_is_a_change_only_where_cuda_ran_before(monkeypatch):
    """A candidate that ends its forward on another GPU has the worker's events, flush and reads
    act there: a change of process state. Where CUDA had not started before the call (a CPU
    evaluation), a candidate that merely starts it has switched nothing."""
    current = {"device": 1}
    monkeypatch.setattr(state.torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(state.torch.cuda, "current_device", lambda: current["device"])
    monkeypatch.setattr(state, "_current_stream", lambda: "default")
    monkeypatch.setattr(state, "persisting_l2_limit", lambda: 0)
    before = state.global_state()
    assert before[state.CURRENT_DEVICE] == 1
    current["device"] = 0
    changes = state.state_changes(before, state.global_state())
    assert changes == {state.CURRENT_DEVICE: [1, 0]}
    found = observation_findings({"observations": {"state_changes": changes}}, None, "x")
    assert [(f.code, f.severity.value) for f in found] == [(GLOBAL_STATE_CHANGED, "reject")]
    cpu_before = {k: v for k, v in before.items() if k != state.CURRENT_DEVICE}
    assert state.state_changes(cpu_before, state.global_state()) == {}


def test_an_output_in_the_memory_of_a_live_earlier_output_is_kept_memory():
    """A module that returns what it kept (a tensor made once, held anywhere) is caught on its
    second call; fresh results are not, even where the allocator reuses a freed output's memory;
    a view of a kept tensor is kept memory too."""
    kept = state.EarlierOutputs()
    cache = torch.ones(4, 1)
    assert kept.shared(cache) == []
    assert kept.shared((cache,)) == ["output 0 is the memory of an earlier call's output, which the module kept"]
    assert kept.shared(cache[1:]) != []

    fresh = state.EarlierOutputs()
    for _ in range(4):
        out = torch.ones(4, 1) * 2  # the last call's output is freed before the next is made
        assert fresh.shared(out) == []
        del out
    honest = [torch.ones(3), torch.zeros(3)]  # held by the caller, not returned again
    assert fresh.shared(honest) == []
    assert fresh.shared([torch.ones(3)]) == []
    assert kept.shared(torch.empty(0)) == []  # nothing to share

    rotating = state.EarlierOutputs()
    caches = [torch.ones(2) for _ in range(20)]  # more kept tensors than a window would hold
    assert all(rotating.shared(c) == [] for c in caches)
    assert rotating.shared(caches[0]) != []  # the first one used twice
    viewed = state.EarlierOutputs()  # a fresh view of a kept tensor each call: the base is kept
    assert all(viewed.shared(c.view(2, 1)) == [] for c in caches)
    assert viewed.shared(caches[5].view(1, 2)) != []

    # A timed sample's K calls, all held by the worker: a call that returns an earlier call's
    # tensor is named by its index; K fresh outputs are not.
    timed = state.EarlierOutputs()
    assert timed.shared_calls([torch.ones(2) for _ in range(5)]) == []
    one = torch.ones(2)
    assert timed.shared_calls([torch.ones(2), one, torch.ones(2), one]) == [
        "call 3, output 0 is the memory of an earlier call's output, which the module kept"
    ]
