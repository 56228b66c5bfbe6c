"""Sharing a GPU between the policy and the evaluator: generation, training and timing take turns.

A speedup measured while another process runs kernels on the same GPU is not the candidate's
speedup. When the device the policy trains on is also one the pool times on, ``PhaseGate``
keeps the two apart:

- the reward function enters ``evaluating()`` before it submits a batch: the policy's queued
  kernels are waited for (``torch.cuda.synchronize``) and its cached blocks returned
  (``empty_cache``), so the pool's workers start on an idle device with the memory the model
  does not hold; GRPO's step is blocked inside the reward function until the batch is back,
  so no training kernel runs meanwhile;
- before every training step (which is where TRL generates), ``PhaseCallback`` waits until no
  evaluation is in flight (``wait_idle``), so generation never overlaps timing either, even
  when evaluations were started outside a step (pending candidates of a killed run, seeds).

With ``--eval-devices`` naming GPUs the trainer does not use, the gate is open (``shared`` is
False) and nothing waits. The memory the model keeps (weights, optimizer state) is measured at
each release and handed to the pool (``reserve``), whose memory admission leaves room for it.
What is not covered: other processes on the same GPU.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from transformers import TrainerCallback

log = logging.getLogger(__name__)


def release_device() -> None:
    """Finish the policy's queued CUDA work and return its cached blocks to the driver."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def held_bytes() -> int:
    """Device memory this process's tensors hold (after a release: the model and its optimizer)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return int(torch.cuda.memory_allocated())
    return 0


def same_device(a: str, b: str) -> bool:
    """Whether two device strings name one device (``cuda`` is the current CUDA device)."""

    def norm(d: str) -> str:
        if d == "cuda":
            return f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cuda:0"
        return d

    return norm(a) == norm(b)


class PhaseGate:
    """Counts evaluations in flight; ``wait_idle`` blocks while any is. Thread-safe: the reward
    runs on TRL's event-loop thread, the step on the trainer's thread."""

    def __init__(
        self,
        shared: bool,
        release: Callable[[], None] = release_device,
        reserve: Callable[[int], None] | None = None,
        held: Callable[[], int] = lambda: held_bytes(),
    ) -> None:
        self.shared = shared
        self._release = release
        # Told, at each release, the memory the policy still holds (weights, optimizer state), so
        # the pool's admission leaves room for it.
        self._reserve = reserve
        self._held = held
        self._in_flight = 0
        self._cond = threading.Condition()
        self.waits = 0  # times a step found evaluations in flight and waited (for tests and logs)

    @property
    def busy(self) -> bool:
        with self._cond:
            return self._in_flight > 0

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """The pool's turn: the device is released first (when shared)."""
        if self.shared:
            self._release()
            if self._reserve is not None:
                self._reserve(self._held())
        with self._cond:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._cond:
                self._in_flight -= 1
                self._cond.notify_all()

    def wait_idle(self) -> None:
        """The policy's turn: returns once no evaluation is in flight (at once when not shared)."""
        if not self.shared:
            return
        with self._cond:
            if self._in_flight:
                self.waits += 1
                log.info("step waits for %d evaluation batch(es) to finish timing", self._in_flight)
            self._cond.wait_for(lambda: self._in_flight == 0)


class PhaseCallback(TrainerCallback):
    """Holds each training step (and so the generation inside it) until the pool is idle."""

    def __init__(self, gate: PhaseGate) -> None:
        self.gate = gate

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.gate.wait_idle()
