"""A GRPO run launched as several processes (``accelerate launch`` or ``torchrun``, one process
per training GPU): what the processes share and who does what.

- One run directory and one candidate database: every process opens the same ``candidates.db``
  (SQLite's own locking queues their writes, ``run.database``); prompts are built from it in
  every process, so each sees what the others found.
- One evaluator: the main process starts the evaluator service (``eval.pool_service``) on the
  evaluation devices and tells every process where it is and its key through the launcher's
  own collective (``broadcast_object_list``), never through a file; every process, the main one
  included, submits to it through a ``RemotePool``.
- The main process alone checks that the run may start, writes the config, records the
  session, stores round 0 (baselines and seeds) and evaluates what is pending; the others wait
  for the database to say the run is ready (a poll, not a collective: round 0 can take longer
  than a collective's timeout). A failure of the main process's setup reaches every process as
  the same error.
- Each process rewards its own completions; a candidate another process stored first (the same
  source) is evaluated there and waited for here (``PoolReward``), never twice.
- The main process alone saves the final model and writes ``steps.jsonl`` and ``run.log``; the
  others write ``steps-rank-N.jsonl`` and ``run-rank-N.log``.

Training and evaluation may not share a GPU under such a launch: the phase gate that makes them
take turns (``train.phases``) sees only its own process. The evaluation devices must be GPUs
no process trains on (``--eval-devices``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from cudal1.run.database import CandidateDB
from cudal1.run.rows import CandidateStatus
from cudal1.train.models import TrainError

T = TypeVar("T")

READY_KEY = "grpo:ready"  # meta: the session id whose round 0 is done
READY_POLL_S = 1.0


def launched_processes() -> int:
    """How many processes the launcher started (1 outside a multi-process launch)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


@dataclass(frozen=True)
class Ranks:
    """This process's place in the launch."""

    index: int = 0
    count: int = 1
    _state: Any = None  # accelerate's PartialState, where there are several processes

    @property
    def main(self) -> bool:
        return self.index == 0

    @property
    def several(self) -> bool:
        return self.count > 1

    @classmethod
    def current(cls, cpu: bool) -> Ranks:
        """The launch this process is part of. ``cpu`` must be what the trainer will ask for
        (``use_cpu``): accelerate's state is made once per process and the trainer reuses it."""
        if launched_processes() <= 1:
            return cls()
        from accelerate import PartialState

        state = PartialState(cpu=cpu)
        return cls(state.process_index, state.num_processes, state)

    def from_main(self, make: Callable[[], T]) -> T:
        """``make()`` run in the main process, its value (or its error, as a RuntimeError of the
        same text) in every process."""
        if not self.several:
            return make()
        from accelerate.utils import broadcast_object_list

        box: list[Any] = [None]
        if self.main:
            try:
                box = [("ok", make())]
            except Exception as exc:
                box = [("error", exc)]
        broadcast_object_list(box, from_process=0)
        kind, value = box[0]
        if kind == "error":
            if self.main:
                raise value
            raise type(value)(*value.args) if isinstance(value, Exception) else RuntimeError(str(value))
        return value  # type: ignore[no-any-return]

    def training_device(self, device: str, asked: str) -> str:
        """This process's training device: ``cuda:LOCAL_RANK`` on GPUs (the launcher's rule), or
        the CPU. A config that names one GPU would put every process on it: TrainError."""
        if not device.startswith("cuda"):
            return device
        if asked not in ("auto", "cuda"):
            raise TrainError(
                f"device {asked}: under a multi-process launch each process trains on its own GPU "
                "(cuda:LOCAL_RANK); set device to auto"
            )
        return f"cuda:{self._state.local_process_index}"

    def barrier(self) -> None:
        if self.several:
            self._state.wait_for_everyone()

    def file_name(self, name: str) -> str:
        """The main process's file keeps its name; another process's names its rank."""
        if self.main:
            return name
        stem, dot, suffix = name.rpartition(".")
        return f"{stem}-rank-{self.index}{dot}{suffix}"

    def label_prefix(self) -> str:
        """What this process's completions' labels start with (``grpo-s{step}-...``)."""
        return "" if not self.several else f"r{self.index}-"


def mark_ready(db: CandidateDB, run_id: int) -> None:
    db.set_meta(READY_KEY, str(run_id))


def wait_until_ready(db: CandidateDB, run_id: int) -> None:
    """Until the main process says session ``run_id``'s round 0 is done (a main process that
    fails ends the launch: the launcher stops every process)."""
    while db.get_meta(READY_KEY) != str(run_id):
        time.sleep(READY_POLL_S)


async def wait_for_rows(
    db: CandidateDB, ids: list[int], *, timeout_s: float, poll_s: float = READY_POLL_S
) -> None:
    """Until rows another process evaluates are no longer pending, or ``timeout_s`` passed
    (what is still pending then has no verdict here)."""
    waiting, started = set(ids), time.monotonic()
    while waiting and time.monotonic() - started < timeout_s:
        await asyncio.sleep(poll_s)
        waiting = {i for i in waiting if db.get(i).status is CandidateStatus.PENDING}
