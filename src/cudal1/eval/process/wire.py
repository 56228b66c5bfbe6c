"""The message format between the evaluator and its workers.

A candidate worker is untrusted, so the evaluator must never unpickle what it sends: pickle runs
code chosen by the sender. Messages here are a JSON header plus raw tensor bytes; decoding builds
only dicts, lists, numbers, strings and plain CPU tensors.

Also here: ``digest``, an exact, order-independent checksum of tensor bits that a worker reports
inside the timed window and the evaluator recomputes from fetched outputs (see ``timing``), and
``DigestBatch``, the same checksums of a whole timed sample computed on the device in a few
batched kernels and read back at once.
"""

from __future__ import annotations

import json
import math
import struct
from multiprocessing.connection import Connection
from typing import Any

import torch

_MAGIC = b"CL1W"
# The request key that lists the request's values sent as messages of their own after it.
_FOLLOWS = "__follows__"
_DTYPES = {
    str(dt).removeprefix("torch."): dt
    for dt in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.complex64,
        torch.complex128,
    )
}


class WireError(ValueError):
    """A message that does not decode: a worker that misbehaves or died mid-message."""


def encode(obj: Any) -> bytearray:
    """One message: magic, header length and buffer count, the JSON header, then each buffer with
    its length. The message is allocated once at its full size and every tensor is copied straight
    into it from wherever it lies (a GPU output included): a reply holds one host copy of its
    outputs in the sending worker's memory, not a CPU copy and then the message built from it (a
    strided GPU output is first made contiguous on the GPU, a device copy outside the host cap).
    That memory counts against a candidate's cap (``memory.py``), and a task whose outputs are
    4.3 GB (``L2_34`` of the CUDA-L1 release) was failed for 12.6 GB the worker itself had made."""
    buffers: list[torch.Tensor | bytes] = []
    header = json.dumps(_to_json(obj, buffers), allow_nan=True).encode()
    sizes = [b.nbytes if isinstance(b, torch.Tensor) else len(b) for b in buffers]
    out = bytearray(12 + len(header) + sum(8 + n for n in sizes))
    struct.pack_into("<4sII", out, 0, _MAGIC, len(header), len(buffers))
    out[12 : 12 + len(header)] = header
    pos = 12 + len(header)
    for buf, n in zip(buffers, sizes, strict=True):
        struct.pack_into("<Q", out, pos, n)
        pos += 8
        if isinstance(buf, bytes):
            out[pos : pos + n] = buf
        elif n:
            into = torch.frombuffer(out, dtype=torch.uint8, count=n, offset=pos)
            into.view(buf.dtype).view(buf.shape).copy_(buf)
        pos += n
    return out


def send_message(conn: Connection, obj: dict[str, Any]) -> None:
    """Send a request whose top-level ``bytes`` values (a candidate's reply forwarded whole, which
    holds its outputs: gigabytes for some tasks) travel as messages of their own after it, so
    they are neither copied into the request nor out of it again (``receive_message``)."""
    follows = [k for k, v in obj.items() if isinstance(v, bytes | bytearray)]
    head = {k: v for k, v in obj.items() if k not in follows}
    conn.send_bytes(encode({**head, _FOLLOWS: follows} if follows else head))
    for key in follows:
        conn.send_bytes(obj[key])


def receive_message(conn: Connection) -> Any:
    """A message ``send_message`` sent: the request, with its ``bytes`` values read back in.
    EOFError when the other end closed."""
    message = decode(conn.recv_bytes())
    follows = message.pop(_FOLLOWS, None) if isinstance(message, dict) else None
    if follows is not None:
        if not isinstance(follows, list) or not all(isinstance(k, str) for k in follows):
            raise WireError("bad list of following messages")
        for key in follows:
            message[key] = conn.recv_bytes()
    return message


def decode(data: bytes) -> Any:
    try:
        if data[:4] != _MAGIC:
            raise WireError("bad magic")
        hlen, nbuf = struct.unpack_from("<II", data, 4)
        pos = 12
        header = json.loads(data[pos : pos + hlen])
        pos += hlen
        buffers = []
        for _ in range(nbuf):
            (blen,) = struct.unpack_from("<Q", data, pos)
            pos += 8
            if pos + blen > len(data):
                raise WireError("a buffer runs past the message's end")
            buffers.append(memoryview(data)[pos : pos + blen])
            pos += blen
        if pos != len(data):
            raise WireError("bytes after the message's last buffer")
        return _from_json(header, buffers)
    except WireError:
        raise
    except Exception as exc:  # any malformed input becomes one error type
        raise WireError(f"undecodable message: {type(exc).__name__}: {exc}") from None


def header(data: bytes) -> Any:
    """The JSON part of a message only: cheap, for forwarding large replies undecoded."""
    try:
        if data[:4] != _MAGIC:
            raise WireError("bad magic")
        (hlen,) = struct.unpack_from("<I", data, 4)
        return _from_json(json.loads(data[12 : 12 + hlen]), None)
    except WireError:
        raise
    except Exception as exc:
        raise WireError(f"undecodable message: {type(exc).__name__}: {exc}") from None


def _to_json(obj: Any, buffers: list[torch.Tensor | bytes]) -> Any:
    if isinstance(obj, torch.Tensor):
        return _tensor_to_json(obj, buffers)
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, bytes | bytearray | memoryview):
        buffers.append(bytes(obj))
        return {"__bytes__": len(buffers) - 1}
    if isinstance(obj, list | tuple):
        return {
            "__seq__": "tuple" if isinstance(obj, tuple) else "list",
            "items": [_to_json(x, buffers) for x in obj],
        }
    if isinstance(obj, dict):
        return {"__map__": [[str(k), _to_json(v, buffers)] for k, v in obj.items()]}
    if isinstance(obj, torch.dtype):
        return {"__dtype__": str(obj).removeprefix("torch.")}
    return {"__repr__": type(obj).__name__, "text": repr(obj)[:200]}


def _tensor_to_json(t: torch.Tensor, buffers: list[torch.Tensor | bytes]) -> dict[str, Any]:
    meta = {
        "__tensor__": len(buffers),
        "dtype": str(t.dtype).removeprefix("torch."),
        "shape": list(t.shape),
        "device": str(t.device.type),
        "type": type(t).__name__,
    }
    # A sparse or other non-strided layout fails here (no storage to view): the command's failure.
    plain = t.detach().as_subclass(torch.Tensor)
    buffers.append(plain)  # copied by ``encode`` straight into the message, from its own device
    return meta


def _from_json(node: Any, buffers: list[memoryview] | None) -> Any:
    """Rebuild a message; with ``buffers`` None, tensors and bytes stay as their descriptions."""
    if not isinstance(node, dict):
        if isinstance(node, list):
            raise WireError("raw JSON list in message")
        return node
    if buffers is None and ("__tensor__" in node or "__bytes__" in node):
        return node
    if "__tensor__" in node:
        assert buffers is not None
        dtype = _DTYPES.get(node["dtype"])
        if dtype is None:
            raise WireError(f"unsupported dtype {node['dtype']!r}")
        raw = _buffer(buffers, node["__tensor__"])
        shape = [int(s) for s in node["shape"]]
        if any(s < 0 for s in shape) or len(raw) != math.prod(shape) * dtype.itemsize:
            # Never filled from anything but the sender's bytes: a tensor whose buffer is short
            # (an empty one with a shape above all) would hold whatever the heap held.
            raise WireError(f"a {node['dtype']} tensor of shape {shape} with {len(raw)} bytes")
        if not len(raw):
            return torch.empty(shape, dtype=dtype)
        # One copy, out of the message into memory the tensor owns (and may write).
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)
    if "__bytes__" in node:
        assert buffers is not None
        return bytes(_buffer(buffers, node["__bytes__"]))
    if "__seq__" in node:
        items = [_from_json(x, buffers) for x in node["items"]]
        return tuple(items) if node["__seq__"] == "tuple" else items
    if "__map__" in node:
        return {str(k): _from_json(v, buffers) for k, v in node["__map__"]}
    if "__dtype__" in node:
        return _DTYPES[node["__dtype__"]]
    if "__repr__" in node:
        return {"unsupported": node["__repr__"], "text": node.get("text", "")}
    raise WireError("unknown node")


def _buffer(buffers: list[memoryview], index: Any) -> memoryview:
    i = int(index)
    if not 0 <= i < len(buffers):
        raise WireError(f"no buffer {i}")
    return buffers[i]


_INT_BY_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def digest(t: torch.Tensor) -> int:
    """Wrapping int64 sum of the tensor's element bit patterns: exact and order-independent,
    so a GPU computes the same value as the CPU does from a fetched copy."""
    bits = _bits(t)
    return int(bits.to(torch.int64).sum().item()) if bits.numel() else 0


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as a flat tensor of same-sized integers (their bit patterns)."""
    plain = t.detach().contiguous().reshape(-1)
    if plain.dtype.is_complex:
        plain = torch.view_as_real(plain).reshape(-1)
    if plain.dtype is torch.bool:
        plain = plain.view(torch.uint8)
    return plain.view(_INT_BY_SIZE[plain.element_size()])


# Same-shaped outputs are stacked and summed in one kernel per chunk of at most this many bytes:
# a sample of K = 2000 tiny calls digested one tensor at a time queued thousands of kernels (and
# the stacked copy stays a small share of the memory the K outputs already hold).
_STACK_BYTES = 16 * 2**20


class DigestBatch:
    """``digest`` of many tensors (a timed sample's input sets, then every call's outputs),
    computed where they are in a few batched kernels and read back in one transfer per device.

    ``add`` takes one group (a set's inputs, a call's outputs: tensors and other leaves, None
    for the others); ``queue`` launches the sums of what was added so far without waiting for
    them (inputs are summed before the calls that might overwrite them); ``read`` waits once and
    returns each group's digests, in the order added. The tensors are read as plain tensors with
    ``__torch_function__`` overrides disabled, so a subclass's Python code does not run here."""

    def __init__(self) -> None:
        self._groups: list[list[int | None]] = []
        self._pending: list[tuple[tuple[int, int], torch.Tensor]] = []  # (group, leaf), bits
        self._sums: list[tuple[list[tuple[int, int]], torch.Tensor]] = []

    def add(self, leaves: list[Any]) -> None:
        g = len(self._groups)
        self._groups.append([0 if isinstance(x, torch.Tensor) else None for x in leaves])
        with torch._C.DisableTorchFunctionSubclass():
            for i, x in enumerate(leaves):
                if not isinstance(x, torch.Tensor) or not x.numel():
                    continue
                if x.is_contiguous():
                    self._pending.append(((g, i), _bits(x)))
                else:  # its bits are a copy: summed now, so that K copies are never held at once
                    self._sums.append(([(g, i)], _bits(x).sum(dtype=torch.int64).reshape(1)))

    def queue(self) -> None:
        buckets: dict[tuple[torch.device, torch.dtype, int], list[tuple[tuple[int, int], torch.Tensor]]] = {}
        for where, bits in self._pending:
            buckets.setdefault((bits.device, bits.dtype, bits.numel()), []).append((where, bits))
        self._pending = []
        with torch._C.DisableTorchFunctionSubclass():
            for (_, _, numel), members in buckets.items():
                per_chunk = max(1, _STACK_BYTES // (numel * members[0][1].element_size()))
                for i in range(0, len(members), per_chunk):
                    chunk = members[i : i + per_chunk]
                    if len(chunk) == 1:
                        sums = chunk[0][1].sum(dtype=torch.int64).reshape(1)
                    else:
                        sums = torch.stack([b for _, b in chunk]).sum(dim=1, dtype=torch.int64)
                    self._sums.append(([w for w, _ in chunk], sums))

    def read(self) -> list[list[int | None]]:
        self.queue()
        by_device: dict[torch.device, list[tuple[list[tuple[int, int]], torch.Tensor]]] = {}
        for where, sums in self._sums:
            by_device.setdefault(sums.device, []).append((where, sums))
        for parts in by_device.values():
            values = torch.cat([s for _, s in parts]).tolist()  # the one wait on this device
            for (g, i), value in zip((w for ws, _ in parts for w in ws), values, strict=True):
                self._groups[g][i] = int(value)
        self._sums = []
        return self._groups


def flatten_outputs(out: Any) -> list[Any]:
    """The leaves of a forward's return value in a fixed order (tensors and scalars)."""
    if isinstance(out, list | tuple):
        leaves: list[Any] = []
        for item in out:
            leaves.extend(flatten_outputs(item))
        return leaves
    if isinstance(out, dict):
        leaves = []
        for key in sorted(out):
            leaves.extend(flatten_outputs(out[key]))
        return leaves
    return [out]
