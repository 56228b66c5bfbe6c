"""Worker sandboxes left by a run killed with SIGKILL are removed by the next run; a live
evaluator's sandboxes and directories the evaluator did not name are kept; a module planted in a
sandbox never shadows an import of the trusted side."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from cudal1.config import SandboxConfig
from cudal1.eval.process import sandbox
from cudal1.eval.process.protocol import Command
from cudal1.eval.process.sandbox import WorkerProcess
from cudal1.eval.process.wire import digest

KILLED_RUN = """
import os
from cudal1.config import SandboxConfig
from cudal1.eval.process.sandbox import WorkerProcess
worker = WorkerProcess(SandboxConfig(call_timeout_s=30))
worker.wait_ready()
print(worker.dir, worker.proc.pid, flush=True)
os.kill(os.getpid(), 9)
"""


def _killed_run(tmp: Path) -> Path:
    """A run that starts one worker and is killed: its sandbox stays behind."""
    env = {**os.environ, "TMPDIR": str(tmp)}
    out = subprocess.run(
        [sys.executable, "-c", KILLED_RUN], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    left, worker_pid = out.stdout.split()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(int(worker_pid), signal.SIGKILL)  # its worker, in a session of its own
    return Path(left)


def test_the_next_run_removes_the_sandboxes_of_a_killed_one(tmp_path, monkeypatch):
    orphan = _killed_run(tmp_path)
    assert orphan.is_dir() and (orphan / "worker.log").exists()
    live = tmp_path / f"cudal1-candidate-{os.getpid()}-live"  # this process's: still in use
    unnamed = tmp_path / "cudal1-candidate-old"  # no evaluator pid in its name: not ours to judge
    for kept in (live, unnamed):
        kept.mkdir()

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(sandbox, "_swept", sandbox.threading.Event())
    with WorkerProcess(SandboxConfig(call_timeout_s=30)) as worker:
        assert worker.dir.parent == tmp_path and worker.dir.name.startswith(
            f"cudal1-candidate-{os.getpid()}-"
        )
        assert not orphan.exists()
        assert live.is_dir() and unnamed.is_dir()
    assert not worker.dir.exists()


@pytest.mark.parametrize("pid, exists", [(os.getpid(), True), (1, True), (2**62, False)])
def testprocess_exists(pid, exists):
    """pid 1 belongs to another user or to us: either way it is alive and kept."""
    assert sandbox.process_exists(pid) is exists


# A trusted module the worker imports late (here the task's get_inputs, trusted code, imports a
# stdlib module and a name only a planted file defines); 1.0 where the import came from the
# worker's own directory.
LATE_IMPORT_TASK = """
import torch, torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x

def get_inputs():
    import colorsys
    try:
        import cudal1_planted
        planted = 1.0
    except ImportError:
        planted = 0.0
    return [torch.tensor([float("cudal1-" in (colorsys.__file__ or "")), planted])]

def get_init_inputs():
    return []
"""
PLANTING_CANDIDATE = """
from pathlib import Path
import torch.nn as nn

for name in ("colorsys.py", "cudal1_planted.py"):  # written at import, into the working directory
    Path.cwd().joinpath(name).write_text("raise SystemExit('shadow module imported')\\n")

class ModelNew(nn.Module):
    def forward(self, x):
        return x
"""


def _late_import_flags(worker: WorkerProcess) -> int:
    worker.request(Command.LOAD_TASK, source=LATE_IMPORT_TASK, name="late_import")
    return worker.request(Command.MAKE_INPUTS, seed=0, key="x")["digest"][0]


def test_a_module_planted_in_the_sandbox_never_shadows_a_trusted_import():
    """Workers run with ``-P`` (and PYTHONSAFEPATH): the candidate writes ``colorsys.py`` and a
    module of a new name into its working directory at import, and the same files are planted in
    a second worker's directory (any worker's is writable by the same user); trusted imports made
    afterwards, in either worker, find the standard library's module and not the planted one."""
    clean = digest(torch.tensor([0.0, 0.0]))
    with (
        WorkerProcess(SandboxConfig(call_timeout_s=60)) as first,
        WorkerProcess(SandboxConfig(call_timeout_s=60)) as second,
    ):
        first.request(Command.LOAD_CANDIDATE, source=PLANTING_CANDIDATE)
        assert (first.dir / "colorsys.py").is_file()
        assert _late_import_flags(first) == clean
        for name in ("colorsys.py", "cudal1_planted.py"):
            (second.dir / name).write_text((first.dir / name).read_text())
        assert _late_import_flags(second) == clean
        assert Path(f"/proc/{second.proc.pid}/environ").read_bytes().count(b"PYTHONSAFEPATH=1") == 1


def test_worker_import_path_drops_entries_that_mean_the_working_directory():
    assert sandbox.import_path("/src", "") == "/src"
    assert sandbox.import_path("/src", "/a::relative:.:/src:/b:") == "/src:/a:/b"
