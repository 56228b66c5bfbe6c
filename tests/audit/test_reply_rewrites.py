"""The audit cases that rewrite their worker's replies do rewrite them: each one's rewrite, run on
a reply as the worker encodes it, makes a message the trusted side refuses. Their hooks swallow
every error and send the reply unchanged, so a rewrite broken by a change of the wire format would
leave the case testing nothing while its verdict still matched (it did once: the encoder's
buffers became tensors, and two rewrites raised on them)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from cudal1.eval.process import wire

CASES = Path(__file__).resolve().parents[2] / "src" / "cudal1" / "audit" / "cases"


def _case(name: str):
    spec = importlib.util.spec_from_file_location(f"case_{name}", CASES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _reply() -> bytearray:
    """A checked call's reply as a worker sends it: outputs, and a tensor that is not one."""
    return wire.encode({"ok": True, "outputs": {"values": [torch.randn(4, 3), 2.0]}, "inputs": [torch.ones(2)]})


@pytest.mark.parametrize(
    ("case", "rewrite", "refused"),
    [
        ("late_probe_reply_undecodable", "_undecodable", "unsupported dtype 'float8'"),
        ("reply_dtype_resource_words", "_relabelled", "unsupported dtype 'out of memory'"),
        ("empty_buffer_reply_reference_heap", "_empty_output_buffers", "with 0 bytes"),
    ],
)
def test_each_reply_rewrite_makes_a_message_the_trusted_side_refuses(case, rewrite, refused):
    message = _reply()
    assert wire.decode(message)["inputs"][0].tolist() == [1.0, 1.0]
    rewritten = getattr(_case(case), rewrite)(message)
    with pytest.raises(wire.WireError, match=refused):
        wire.decode(rewritten)
    assert wire.header(rewritten)["inputs"][0]["shape"] == [2]  # the rest of the reply as it was
