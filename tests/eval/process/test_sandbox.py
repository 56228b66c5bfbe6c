"""Worker sandboxes left by a run killed with SIGKILL are removed by the next run; a live
evaluator's sandboxes and directories the evaluator did not name are kept."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from cudal1.config import SandboxConfig
from cudal1.eval.process import sandbox
from cudal1.eval.process.sandbox import WorkerProcess

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
