"""The evaluator/worker message format: round trips, and no code execution on decode."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
import torch

from cudal1.eval.process.wire import DigestBatch, WireError, decode, digest, encode


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


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_reply_holds_one_copy_of_its_outputs_in_the_senders_memory(device):
    """The bytes a worker makes to reply count against a candidate's memory cap: a strided output
    (and on a GPU, any output) costs the message and nothing beside it. Before, a CPU copy was
    made and then the message from it: twice the outputs, which failed a 4.3 GB task at 12.6 GB.
    The peak is read from the kernel's own high-water mark, reset just before the encoding (the
    process's earlier peak, or pages the host reclaimed since, would hide the growth)."""
    code = f"""
import re, torch
from cudal1.eval.process.wire import decode, encode
def kb(field):
    return int(re.search(field + r":\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
t = torch.randn(4096, 8192, device="{device}").t()  # 128 MiB, not contiguous
if t.is_cuda:
    torch.cuda.synchronize()
open("/proc/self/clear_refs", "w").write("5")  # the peak resident size restarts from here
base = kb("VmRSS")
message = encode({{"out": t}})
grew = (kb("VmHWM") - base) * 1024
assert torch.equal(decode(message)["out"], t.cpu())
print(grew / t.nbytes)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    grew = float(done.stdout.split()[-1])
    assert 0.9 < grew < 1.25, f"the message cost {grew:.2f}x its outputs in the sender's memory"


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


class _Lazy(torch.Tensor):
    """A subclass whose Python hook would fill it when first touched (audit/cases/lazy_output.py)."""

    touched = False

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        _Lazy.touched = True
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_digest_batch_gives_each_tensor_its_digest_without_running_subclass_hooks(device):
    """A timed sample's digests (its input sets, then every call's outputs) in a few batched
    kernels: the same values ``digest`` gives one tensor at a time (on the CPU, from a fetched
    copy), for every dtype and layout, with stacking across chunks, empty tensors and
    non-tensors; a subclass's hook never runs."""
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(64, 33, generator=gen)
    host = [
        [base, 3, base.t(), torch.empty(0)],
        [base.half(), base.bfloat16(), (base > 0), base.double()],
        [torch.randint(-100, 100, (7,), dtype=torch.int8), torch.complex(base, -base)],
        *[[torch.randn(5000, generator=gen)] for _ in range(900)],  # > one 16 MiB stack chunk
    ]
    groups = [[x.to(device) if isinstance(x, torch.Tensor) else x for x in group] for group in host]
    lazy = torch.randn(4, generator=gen).to(device).as_subclass(_Lazy)
    batch = DigestBatch()
    batch.add(groups[0])
    batch.queue()  # a first part summed before the rest is added, as a sample's inputs are
    for group in groups[1:]:
        batch.add(group)
    batch.add([lazy])
    _Lazy.touched = False
    found = batch.read()
    assert not _Lazy.touched
    expect = [[digest(x) if isinstance(x, torch.Tensor) else None for x in group] for group in host]
    assert found[:-1] == expect
    assert found[-1] == [digest(lazy.as_subclass(torch.Tensor).cpu())]


def test_a_requests_bytes_travel_as_their_own_message_and_come_back_in_place():
    """A forwarded reply (a candidate's outputs, gigabytes for some tasks) is not copied into the
    request: the request names it, and it follows as its own message."""
    import socket
    from multiprocessing.connection import Connection

    from cudal1.eval.process.wire import receive_message, send_message

    left, right = socket.socketpair()
    a, b = Connection(left.detach()), Connection(right.detach())
    reply = encode({"ok": True, "outputs": {"values": [torch.arange(1000, dtype=torch.float32)]}})
    send_message(a, {"cmd": "compare", "key": "k1", "reply": reply})
    first = b.recv_bytes()
    assert len(first) < 200 and decode(first)["__follows__"] == ["reply"]
    assert b.recv_bytes() == reply  # the reply itself, whole, next

    send_message(a, {"cmd": "compare", "key": "k2", "reply": reply})
    got = receive_message(b)
    assert got["key"] == "k2" and got["reply"] == reply and "__follows__" not in got
    out = decode(got["reply"])["outputs"]["values"][0]
    out += 1  # decoded tensors own their memory
    assert torch.equal(out, torch.arange(1000, dtype=torch.float32) + 1)

    a.send_bytes(encode({"cmd": "compare", "__follows__": "reply"}))
    with pytest.raises(WireError):
        receive_message(b)


def test_a_tensor_is_filled_only_from_the_senders_bytes():
    """A reply whose tensor has fewer bytes than its shape needs (an empty buffer above all, which
    used to decode as uninitialised memory, whatever the heap held), a buffer that runs past the
    message, bytes after it, or a buffer index out of range: each is refused, not decoded."""
    import json
    import struct

    def message(meta, payload=b"", blen=None, tail=b""):
        head = json.dumps(meta).encode()
        n = len(payload) if blen is None else blen
        return b"CL1W" + struct.pack("<II", len(head), 1) + head + struct.pack("<Q", n) + payload + tail

    good = {"__tensor__": 0, "dtype": "float32", "shape": [2], "device": "cpu", "type": "Tensor"}
    assert torch.equal(decode(message(good, torch.ones(2).numpy().tobytes())), torch.ones(2))
    for bad in (
        message({**good, "shape": [8]}),  # no bytes at all for 8 floats
        message(good, b"\x00" * 4),  # half of them
        message({**good, "shape": [-2]}, b"\x00" * 8),
        message(good, b"\x00" * 8, blen=64),  # a length past the end
        message(good, b"\x00" * 8, tail=b"extra"),
        message({**good, "__tensor__": -1}, b"\x00" * 8),
        message({"__bytes__": 3}, b"abc"),
    ):
        with pytest.raises(WireError):
            decode(bad)
    assert decode(encode({"e": torch.empty(0, 3)}))["e"].shape == (0, 3)  # empty with no bytes: fine


def test_a_reply_the_wire_cannot_carry_is_the_commands_failure_not_the_workers_end():
    """A sparse output cannot be encoded: the worker answers that command with its failure and
    goes on serving (it used to die while sending)."""
    from multiprocessing import Pipe

    from cudal1.eval.process import worker
    from cudal1.eval.process.protocol import Command

    class SparseReplies(worker.CandidateServer):
        def handlers(self):
            return {**super().handlers(), Command.PING: lambda: {"out": torch.eye(3).to_sparse()}}

    ours, theirs = Pipe()
    for cmd in ("ping", "hello", "exit"):
        ours.send_bytes(encode({"cmd": cmd}))
    worker.serve(theirs, SparseReplies())
    failed = decode(ours.recv_bytes())
    assert not failed["ok"] and "storage" in failed["error"]
    assert decode(ours.recv_bytes())["ok"]  # the next command is answered
