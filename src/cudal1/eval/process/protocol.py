"""The commands between the trusted side and a worker: one enum, shared by both ends.

Each command names the roles that may receive it and the stage its failure counts against. A
worker rejects a command its role does not take (a candidate worker never compares outputs,
measures FLOPs or hands out init inputs: those are the trusted reference's), and a misspelt
command is an error where it is written, not a run-time ``getattr`` miss.
"""

from __future__ import annotations

from enum import StrEnum

from cudal1.schema import Stage


class Role(StrEnum):
    CANDIDATE = "candidate"  # imports one untrusted candidate; killed after its evaluation
    REFERENCE = "reference"  # trusted: imports only task code, compares, serves many evaluations


class Command(StrEnum):
    HELLO = "hello"
    DEVICE_INFO = "device_info"
    LOAD_TASK = "load_task"
    LOAD_CANDIDATE = "load_candidate"
    INIT_INPUTS = "init_inputs"
    MAKE_INPUTS = "make_inputs"
    BUILD = "build"
    FIRST_CALLS = "first_calls"
    RUN = "run"
    PERTURB = "perturb"
    SHIFT_INPUTS = "shift_inputs"
    COMPARE = "compare"
    SET_TIMING_INPUTS = "set_timing_inputs"
    WARMUP = "warmup"
    PREPARE = "prepare"
    TIME = "time"
    FETCH_OUTPUT = "fetch_output"
    WORK = "work"
    PREWARM = "prewarm"
    PEAKS = "peaks"
    FORGET = "forget"
    PROMOTE = "promote"
    PING = "ping"
    QUIET = "quiet"
    EXIT = "exit"

    @property
    def roles(self) -> frozenset[Role]:
        return _SPEC[self][0]

    @property
    def stage(self) -> Stage:
        """The stage a failure of this command counts against."""
        return _SPEC[self][1]

    def accepts(self, role: Role) -> bool:
        return role in self.roles


_BOTH = frozenset(Role)
_REF = frozenset({Role.REFERENCE})
_CAND = frozenset({Role.CANDIDATE})

_SPEC: dict[Command, tuple[frozenset[Role], Stage]] = {
    Command.HELLO: (_BOTH, Stage.LOAD),
    Command.DEVICE_INFO: (_REF, Stage.LOAD),
    Command.LOAD_TASK: (_BOTH, Stage.COMPILE),
    Command.LOAD_CANDIDATE: (_CAND, Stage.COMPILE),
    Command.INIT_INPUTS: (_REF, Stage.LOAD),
    Command.MAKE_INPUTS: (_BOTH, Stage.CORRECTNESS),
    Command.BUILD: (_BOTH, Stage.LOAD),
    # The candidate's first forward calls, before the device is held (``CandidateServer.first_calls``).
    Command.FIRST_CALLS: (_CAND, Stage.LOAD),
    Command.RUN: (_BOTH, Stage.CORRECTNESS),
    Command.PERTURB: (_BOTH, Stage.CORRECTNESS),
    Command.SHIFT_INPUTS: (_BOTH, Stage.CORRECTNESS),
    Command.COMPARE: (_REF, Stage.CORRECTNESS),
    Command.SET_TIMING_INPUTS: (_BOTH, Stage.TIMING),
    Command.WARMUP: (_BOTH, Stage.TIMING),
    Command.PREPARE: (_BOTH, Stage.TIMING),
    # One timed sample: its inputs made inside the request, K calls, every output digested, one reply.
    Command.TIME: (_BOTH, Stage.TIMING),
    # One call's outputs of the last timed sample, the call drawn after its reply.
    Command.FETCH_OUTPUT: (_CAND, Stage.TIMING),
    Command.WORK: (_REF, Stage.TIMING),
    Command.PREWARM: (_REF, Stage.LOAD),
    Command.PEAKS: (_REF, Stage.TIMING),
    Command.FORGET: (_BOTH, Stage.CORRECTNESS),
    # A probe's model becomes the main one, the model timed (``WorkerServer.promote``).
    Command.PROMOTE: (_BOTH, Stage.CORRECTNESS),
    Command.PING: (_BOTH, Stage.TIMING),
    # Before the sampling: the GPU left to finish other processes' queued work (``drain``).
    Command.QUIET: (_REF, Stage.TIMING),
    Command.EXIT: (_BOTH, Stage.LOAD),
}
