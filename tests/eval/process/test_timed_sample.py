"""One timed sample in the workers, driven in this process: the inputs made inside the timed
request, every call's output kept and digested before the reply, one call fetched and compared
in the reference's worker with the reference's output of the same call (issue 21)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch

from cudal1.config import ToleranceConfig
from cudal1.eval.process.wire import decode, digest, encode
from cudal1.eval.process.worker import CandidateServer, WorkerServer
from cudal1.eval.reference_process import ReferenceServer

TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))


def get_inputs():
    return [torch.randn(3, 8)]


def get_init_inputs():
    return []
"""


@pytest.fixture(autouse=True)
def _threads() -> Iterator[None]:
    threads = torch.get_num_threads()  # a CPU build sets one thread per worker
    yield
    torch.set_num_threads(threads)


DEVICES = ["cpu", pytest.param("cuda:0", marks=pytest.mark.gpu)]


def _ready(server: WorkerServer, device: str = "cpu") -> WorkerServer:
    server.load_task(TASK, "timed_sample", device=device)
    server.build([], seed=1, device=device)
    server.make_inputs(seed=2, key="warm")
    server.set_timing_inputs(["warm"], flush_bytes=1 << 20, lead_us=50.0)
    return server


def _candidate(model_new: type, device: str = "cpu") -> CandidateServer:
    server = CandidateServer()
    server.candidate = SimpleNamespace(ModelNew=model_new)
    return _ready(server, device)  # type: ignore[return-value]


def _compare(ref: ReferenceServer, cand: CandidateServer, call: int) -> tuple[bool, list[int | None]]:
    raw = encode({"ok": True, **cand.fetch_output(call)})
    r = ref.compare(None, raw, ToleranceConfig().model_dump(), ref.device.type, index=call)
    return r["comparison"]["ok"], r["digests"]


@pytest.mark.parametrize("device", DEVICES)
def test_every_call_is_digested_and_any_one_matches_the_references_same_call(device):
    ref = _ready(ReferenceServer(), device)
    model = type(ref.model)
    cand = _candidate(model, device)
    sample = {"calls": 6, "seed": 11, "sets": 4, "max_bytes": 1 << 20, "start": 3}
    want, got = ref.time(**sample), cand.time(**sample)
    assert got["input_digest"] == want["input_digest"] and len(want["input_digest"]) == 4
    assert len(got["digests"]) == 6 and got["tampered"] == []
    assert len({id(out) for out in cand.timed_outputs}) == 6  # every output kept
    for call in range(6):
        ok, fetched = _compare(ref, cand, call)
        assert ok and fetched == got["digests"][call]
        assert got["digests"][call] == [digest(cand.timed_outputs[call].cpu())]
    assert cand.timed_inputs(0) is cand.timed_sets[3] and cand.timed_inputs(1) is cand.timed_sets[0]


def test_a_call_that_skipped_its_work_fails_when_it_is_the_one_fetched():
    ref = _ready(ReferenceServer())
    reference_model = type(ref.model)

    class SkipsTheThird(reference_model):  # type: ignore[misc, valid-type]
        calls = 0

        def forward(self, x):
            SkipsTheThird.calls += 1
            return torch.zeros(3, 4) if SkipsTheThird.calls == 3 else super().forward(x)

    cand = _candidate(SkipsTheThird)
    cand.model.load_state_dict(ref.model.state_dict())
    SkipsTheThird.calls = 0
    sample = {"calls": 5, "seed": 4, "sets": 5, "max_bytes": 1 << 20}
    ref.time(**sample)
    cand.time(**sample)
    results = [_compare(ref, cand, call)[0] for call in range(5)]
    assert results == [True, True, False, True, True]


def test_the_sets_of_a_sample_stay_within_their_bytes_and_are_new_each_sample():
    ref = _ready(ReferenceServer())
    one_set = 3 * 8 * 4
    ref.time(calls=4, seed=1, sets=4, max_bytes=2 * one_set)
    first = ref.timed_sets
    assert len(first) == 2
    reply = ref.time(calls=4, seed=1, sets=4, max_bytes=0)
    assert len(ref.timed_sets) == 1  # at least one, whatever the budget
    assert ref.timed_sets[0][0].data_ptr() != first[0][0].data_ptr()  # made while the last ones lived
    assert reply["input_digest"] == [digest(first[0][0])]  # the same seed, the same values


def test_a_timed_reply_is_plain_data_that_crosses_the_wire():
    cand = _candidate(type(_ready(ReferenceServer()).model))
    reply = cand.time(calls=2, seed=3, sets=2, max_bytes=1 << 20, lead_us=None)
    assert decode(encode(reply)) == reply
