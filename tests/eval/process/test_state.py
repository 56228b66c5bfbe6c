"""What a candidate must leave as it found it, observed in a fresh process as in a worker
(``eval/process/state.py``): the namespace-patch snapshot and poisoned free memory."""

from __future__ import annotations

import pytest


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
from cudal1.eval.process.state import poison
shape, nbytes = (256, 256), 256 * 256 * 4
for _ in range(3):  # glibc serves this size from the heap once a freed mmap raised its threshold
    torch.empty(*shape)
torch.ones(*shape)  # a freed block full of ones: what a stale-memory hack would read back
if {poison}:
    poison(torch.device("cpu"), [nbytes])
e = torch.empty(*shape)
print(float(torch.isnan(e).float().mean()), float((e == 1).float().mean()))
"""


def test_poison_fills_the_block_the_allocator_hands_out_next():
    """In a fresh process, as in a worker (pytest's own allocations make the heap unpredictable)."""
    import subprocess
    import sys

    def run(poison: bool) -> tuple[float, float]:
        out = subprocess.run(
            [sys.executable, "-c", POISON_PROBE.format(poison=poison)],
            capture_output=True,
            text=True,
            check=True,
        )
        nan, ones = out.stdout.split()
        return float(nan), float(ones)

    # Unpoisoned, the block is often (not always: glibc may consolidate or trim it) the freed ones.
    assert run(True)[0] > 0.99  # poisoned, it comes back NaN (but for the free list's pointers)


@pytest.mark.gpu
def test_poison_on_gpu():
    import torch

    from cudal1.eval.process.state import poison

    dev = torch.device("cuda")
    torch.ones(1024, 1024, device=dev)
    poison(dev, [1024 * 1024 * 4])
    assert bool(torch.isnan(torch.empty(1024, 1024, device=dev)).all())
