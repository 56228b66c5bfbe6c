"""The worker protocol: one enum of commands, each naming the roles that may receive it; the
untrusted side imports no orchestration."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cudal1.config import SandboxConfig
from cudal1.eval.process.protocol import Command, Role
from cudal1.eval.process.sandbox import RemoteError, WorkerProcess
from cudal1.eval.process.worker import CandidateServer
from cudal1.schema import Stage


def test_every_command_names_its_roles_and_stage():
    for cmd in Command:
        assert cmd.roles and isinstance(cmd.stage, Stage)
    assert Command.COMPARE.roles == {Role.REFERENCE}
    assert Command.LOAD_CANDIDATE.roles == {Role.CANDIDATE}
    assert not Command.INIT_INPUTS.accepts(Role.CANDIDATE)


def test_candidate_server_answers_exactly_the_candidate_commands():
    handled = set(CandidateServer().handlers())
    assert handled == {c for c in Command if c.accepts(Role.CANDIDATE)} - {Command.EXIT}


def test_a_candidate_worker_refuses_reference_commands():
    with WorkerProcess(SandboxConfig(call_timeout_s=30)) as worker:
        with pytest.raises(ValueError, match="not a command for a candidate worker"):
            worker.request(Command.COMPARE, key="x", reply=b"", tolerance={}, device="cpu")
        worker.wait_ready()
        worker.send(Command.INIT_INPUTS, seed=0)  # past the trusted side's own check
        with pytest.raises(RemoteError, match="does not take 'init_inputs'"):
            worker.receive(Command.INIT_INPUTS)
        assert worker.request(Command.PING)["ok"]


@pytest.mark.parametrize("module", ["cudal1.eval.process.worker", "cudal1.eval.reference_process"])
def test_worker_processes_import_no_orchestration(module):
    script = (
        f"import sys, {module}\n"
        "bad = [m for m in sys.modules if m.startswith(('pydantic', 'cudal1.config', 'cudal1.eval.pool',"
        " 'cudal1.eval.evaluator', 'cudal1.llm', 'cudal1.search', 'yaml'))]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
