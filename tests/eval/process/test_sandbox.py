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
import time
from pathlib import Path

import pytest
import torch

from cudal1.config import SandboxConfig
from cudal1.eval.process import launch, leftovers, sandbox
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
    assert leftovers.process_exists(pid) is exists


# Started from a thread that ends at once, as the spare pool's fill does: the parent-death signal
# follows the thread that forked the worker, so this is the case that must not kill it early.
ORPHANING_RUN = """
import os, signal, threading, time
from cudal1.config import SandboxConfig
from cudal1.eval.process.sandbox import WorkerProcess
box = []
starter = threading.Thread(target=lambda: box.append(WorkerProcess(SandboxConfig(call_timeout_s=60))))
starter.start()
starter.join()
worker = box[0]
worker.wait_ready()
time.sleep(1.0)
assert worker.alive, "the worker died with the thread that started it"
worker.suspend()  # as a quiet window stops it
print(worker.proc.pid, flush=True)
time.sleep(0.5)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and has not exited (a zombie waiting for its reaper has)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_stopped_worker_dies_when_its_evaluator_is_killed(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", ORPHANING_RUN],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 30  # generous: the kernel signals it as the parent exits
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    running = _running(pid)
    if running:
        os.killpg(pid, signal.SIGKILL)  # do not leave it behind for the next test
    assert not running, "the worker outlived the evaluator that started it"


# A worker that has started a process of its own (as a load_inline build starts compilers),
# stopped with it by a quiet window when the evaluator is killed.
STRANDING_RUN = """
import os, signal, time
from pathlib import Path
from cudal1.config import SandboxConfig
from cudal1.eval.process.protocol import Command
from cudal1.eval.process.sandbox import WorkerProcess
worker = WorkerProcess(SandboxConfig(call_timeout_s=60))
source = "import subprocess\\nsubprocess.Popen(['sleep', '600'])\\nclass ModelNew:\\n    pass\\n"
worker.request(Command.LOAD_CANDIDATE, source=source)
pid = worker.proc.pid
children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
worker.suspend()
print(pid, children[0], flush=True)
time.sleep(0.5)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_next_run_kills_what_a_killed_runs_worker_left_stopped(tmp_path, monkeypatch):
    out = subprocess.run(
        [sys.executable, "-c", STRANDING_RUN],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    worker, child = (int(pid) for pid in out.stdout.split())
    try:
        deadline = time.monotonic() + 30
        while _running(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(worker)
        assert _running(child), "the worker's own child should still be there, stopped"
        removed = leftovers.remove_orphaned_sandboxes(tmp_path)
        assert len(removed) == 1 and not removed[0].exists()
        deadline = time.monotonic() + 30
        while _running(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(child), "the stranded child outlived the sweep"
    finally:
        for pid in (worker, child):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


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
    assert launch.import_path("/src", "") == "/src"
    assert launch.import_path("/src", "/a::relative:.:/src:/b:") == "/src:/a:/b"


# At import: a child that leaves the worker's process group (setsid), and a grandchild of a
# double fork whose parent is then init (the middle process exits); both sleep. A plain child
# stays in the group.
LEAVING_CANDIDATE = """
import os, subprocess, time
subprocess.Popen(["sleep", "600"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
os.wait()
subprocess.Popen(["sleep", "600"])
class ModelNew:
    pass
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_processes_that_leave_the_group_are_found_and_killed_with_the_worker():
    """Neither SIGSTOP nor SIGKILL to the group reaches them: ``outside_group`` finds them (the
    timing rejects a candidate that has any: ``reference_disturbed``), and closing the worker
    kills them too. The plain child is in the group and not listed."""
    worker = WorkerProcess(SandboxConfig(call_timeout_s=60))
    try:
        worker.request(Command.LOAD_CANDIDATE, source=LEAVING_CANDIDATE)
        deadline = time.monotonic() + 10
        while len(strays := worker.outside_group()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(strays) == 2
        assert all(os.getpgid(pid) != worker.proc.pid for pid in strays)
    finally:
        worker.close()
    deadline = time.monotonic() + 10
    while any(_running(pid) for pid in strays) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_running(pid) for pid in strays), "a process that left the group outlived its worker"


def _heap(worker: WorkerProcess) -> str:
    """Where the worker's heap lies (its address range in /proc/PID/maps)."""
    maps = Path(f"/proc/{worker.proc.pid}/maps").read_text().splitlines()
    return next(line.split()[0] for line in maps if line.endswith("[heap]"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_with_a_fixed_layout_lay_out_their_memory_alike():
    """``fixed_layout`` (issue 22: identical code in two fresh workers timed a few % apart): both
    workers of a pair start unrandomised with one string-hash seed, so their heaps begin at one
    address; without it each is randomised, and two heaps never met in the same place."""
    if int(Path("/proc/self/personality").read_text(), 16) & launch.ADDR_NO_RANDOMIZE:
        pytest.skip("this process already runs without address-space randomisation")
    fixed = SandboxConfig(call_timeout_s=60, fixed_layout=True)
    with WorkerProcess(fixed) as first, WorkerProcess(fixed) as second:
        for worker in (first, second):
            worker.wait_ready()
            personality = int(Path(f"/proc/{worker.proc.pid}/personality").read_text(), 16)
            assert personality & launch.ADDR_NO_RANDOMIZE
            assert b"PYTHONHASHSEED=0\0" in Path(f"/proc/{worker.proc.pid}/environ").read_bytes()
        assert _heap(first) == _heap(second)
    with (
        WorkerProcess(SandboxConfig(call_timeout_s=60)) as first,
        WorkerProcess(SandboxConfig(call_timeout_s=60)) as second,
    ):
        for worker in (first, second):
            worker.wait_ready()
            assert (
                not int(Path(f"/proc/{worker.proc.pid}/personality").read_text(), 16)
                & launch.ADDR_NO_RANDOMIZE
            )
            assert b"PYTHONHASHSEED" not in Path(f"/proc/{worker.proc.pid}/environ").read_bytes()
        assert _heap(first) != _heap(second)
