"""The evaluator/worker message format: round trips, and no code execution on decode."""

from __future__ import annotations

import pickle

import pytest
import torch

from cudal1.eval.process.wire import WireError, decode, digest, encode


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool, torch.float64]
)
def test_tensors_round_trip_bit_exact(dtype):
    t = (torch.randn(3, 5) * 10).to(dtype)
    back = decode(encode({"x": t}))["x"]
    assert back.dtype == dtype and back.shape == t.shape
    assert torch.equal(
        back.view(torch.uint8) if dtype is not torch.bool else back,
        t.view(torch.uint8) if dtype is not torch.bool else t,
    )


def test_structure_round_trips():
    msg = {"a": [1, 2.5, "s", None, (torch.zeros(0), True)], "b": {"c": torch.ones(2, 2).t()}}
    back = decode(encode(msg))
    assert back["a"][:4] == [1, 2.5, "s", None]
    assert isinstance(back["a"][4], tuple) and back["a"][4][0].numel() == 0
    assert torch.equal(back["b"]["c"], torch.ones(2, 2))


def test_pickle_payload_is_rejected_not_executed():
    evil = pickle.dumps({"x": 1})
    with pytest.raises(WireError):
        decode(evil)
    with pytest.raises(WireError):
        decode(b"CL1W" + b"\xff" * 20)


def test_unknown_objects_travel_as_descriptions():
    class Odd:
        pass

    back = decode(encode({"o": Odd()}))
    assert back["o"]["unsupported"] == "Odd"


def test_digest_is_exact_and_order_independent():
    t = torch.randn(1000)
    assert digest(t) == digest(t.clone())
    assert digest(t) == digest(t.flip(0))
    u = t.clone()
    u[17] = torch.nextafter(u[17], torch.tensor(10.0))
    assert digest(u) != digest(t)
    assert digest(t.reshape(10, 100).t()) == digest(t)
