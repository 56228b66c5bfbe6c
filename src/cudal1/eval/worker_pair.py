"""The checked conversation between one evaluation's two workers: the candidate's (untrusted) and
the task's reference worker (trusted, shared by the task's candidates under its lock).

Both make the same inputs from secret seeds drawn here (``Seeds``) and their digests must agree;
the candidate's outputs are compared in the reference's worker; what the candidate's worker
observed around a call becomes findings (``checks.global_state``). The correctness and timing
stages and the behavioural probes (``checks.probes``, whose ``ProbeTarget`` this is) all talk to
the workers through this class.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from cudal1.config import EvalConfig
from cudal1.eval.checks.allowance import Isolated
from cudal1.eval.checks.compare import Comparison
from cudal1.eval.checks.global_state import observation_findings
from cudal1.eval.checks.precision import PrecisionLevels, PrecisionTracker, tf32_allowance
from cudal1.eval.checks.stage_failure import StageFailed
from cudal1.eval.devices import device_type
from cudal1.eval.process.protocol import Command
from cudal1.eval.process.sandbox import WorkerProcess
from cudal1.eval.process.wire import header
from cudal1.eval.record import EvaluationRecord
from cudal1.eval.workers import ReferenceWorker
from cudal1.schema import Finding, Severity, Stage, Task


class Seeds:
    """Secret per-evaluation seeds (or reproducible ones from ``EvalConfig.seed``).

    Each seed is a keyed hash of its position (HMAC-SHA256 keyed by ``base``: secret random bits,
    or the configured seed), not the next output of a Mersenne Twister: the candidate's worker
    sees one seed per timed sample, and a few hundred consecutive twister outputs would let it
    rebuild the generator and know every later sample's inputs ahead. ``base`` is recorded in
    the result once the evaluation is over, so its seeds can be made again."""

    def __init__(self, base: int | None) -> None:
        self.base = base if base is not None else secrets.randbits(62)
        self._key = str(self.base).encode()
        self._count = 0
        self.init = self.next()

    def next(self) -> int:
        self._count += 1
        mac = hmac.new(self._key, self._count.to_bytes(8, "little"), hashlib.sha256).digest()
        return int.from_bytes(mac[:8], "little") >> 2  # 62 bits, as torch.manual_seed takes


@dataclass
class WorkerPair:
    """One evaluation's workers and what it has learnt from them about each input set."""

    task: Task
    config: EvalConfig
    device: str
    record: EvaluationRecord
    cand: WorkerProcess | None = None
    ref: ReferenceWorker | None = None  # the reference worker attached last (the device's)
    # Taken around each request to either worker: the pool's shared hold of the device, so that
    # a timing waiting for the device alone waits for one request, not for a whole stage
    # (``admission.DeviceAccess``); none inside ``holding_device``.
    hold: Callable[[], AbstractContextManager[object]] = nullcontext
    # The seed both main models' weights were re-drawn from (``promote``), or None: the weights
    # the init seed gave them.
    main_reinit: int | None = None
    # The task's state attributes that move its output, where the reference found the task
    # stateful (``process.model_state``): both sides' models then start every checked call and
    # timed sample from their state as built. Only the reference's word sets it.
    stateful: list[str] = field(default_factory=list)
    _input_digests: dict[str, list[Any]] = field(default_factory=dict)
    _out_bytes: dict[str, list[int]] = field(default_factory=dict)
    _ref_digests: dict[str, list[Any]] = field(default_factory=dict)
    _cand_digests: dict[str, list[Any]] = field(default_factory=dict)
    _levels: dict[str, PrecisionLevels] = field(default_factory=dict)
    _isolated: dict[str, Isolated] = field(default_factory=dict)

    @property
    def findings(self) -> list[Finding]:
        return self.record.findings

    def note_probe(self, probe: str, facts: dict[str, Any]) -> None:
        self.record.note_probe(probe, facts)

    @contextmanager
    def holding_device(self) -> Iterator[None]:
        """The caller holds the device for the block (alone, for timing): no request takes a
        hold of its own."""
        saved, self.hold = self.hold, nullcontext
        try:
            yield
        finally:
            self.hold = saved

    def reference(self, cmd: Command, **args: Any) -> dict[str, Any]:
        """A request to the reference worker; its failure is the task's (``StageFailed``)."""
        assert self.ref is not None
        with self.hold():
            return self.ref.request(cmd, **args)

    def candidate(self, cmd: Command, **args: Any) -> dict[str, Any]:
        assert self.cand is not None
        with self.hold():
            return self.cand.request(cmd, **args)

    def reference_alive(self) -> bool:
        return self.ref is not None and self.ref.process.alive

    def build_model(
        self, args: list[Any], seed: int, slot: str, *, candidate: bool, reinit: int | None = None
    ) -> dict[str, Any]:
        """Model (reference, with its float64 twin) or ModelNew (candidate) in ``slot``; with
        ``reinit``, its weights re-drawn from that seed (``process.probe_values``)."""
        common: dict[str, Any] = {"args": args, "seed": seed, "device": self.device, "slot": slot}
        if reinit is not None:
            common["reinit"] = reinit
        if candidate:
            return self.candidate(Command.BUILD, keep_state=bool(self.stateful), **common)
        reply = self.reference(Command.BUILD, float64=self.config.tolerance.float64_reference, **common)
        self.stateful = list(reply.get("stateful") or [])
        if self.ref is not None:
            self.ref.stateful = self.stateful
        return reply

    def build_main_reference(self, args: list[Any], seed: int) -> None:
        """The reference's main model. Where it finds the task stateful and the candidate's main
        model was built without keeping its state (the first evaluation of the task on this
        reference worker, before anyone knew), the candidate's is built again, keeping it; its
        first calls are not made again (the checked calls pay for what they built)."""
        kept = bool(self.stateful)
        self.build_model(args, seed, "main", candidate=False)
        if not self.stateful:
            return
        self.findings.append(
            Finding(
                "stateful_reference",
                Severity.INFO,
                Stage.CORRECTNESS,
                f"the reference's forward changes its {', '.join(self.stateful)[:300]}, and its output "
                "depends on it: every checked call and timed sample starts from the models' state as "
                "built, on both sides (KernelBench compares the first call of freshly built models)",
                {"state": self.stateful[:50]},
            )
        )
        if not kept:
            self.build_model(args, seed, "main", candidate=True)

    def make_inputs(
        self,
        seed: int,
        key: str,
        sizes: dict[str, int] | None = None,
        slot: str = "main",
        levels: bool = False,
        after: int = 0,
    ) -> dict[str, Any]:
        """Both workers make the same inputs from a seed drawn here; the reference keeps its outputs
        (and with ``levels`` calibrates what reduced precision looks like on them; ``after``:
        see ``run_reference``). Returns the reference's reply to running on them."""
        self.same_inputs(Command.MAKE_INPUTS, key, seed=seed, key=key, sizes=sizes)
        return self.run_reference(key, slot, levels, after)

    def same_inputs(self, cmd: Command, label: str, **args: Any) -> dict[str, Any]:
        """Both workers make inputs (``cmd``) from the same arguments; their digests must agree.
        Returns the reference's reply. In random order: the side that makes them last finds them
        in the CPU's caches, and a fixed order favoured one side of the timed pair."""
        if secrets.randbits(1):
            want = self.reference(cmd, **args)
            got = self.candidate(cmd, **args)
        else:
            got = self.candidate(cmd, **args)
            want = self.reference(cmd, **args)
        self.check_inputs(want["digest"], got["digest"], label)
        return want

    def check_inputs(self, want: list[Any], got: list[Any], key: str) -> None:
        if list(got) != list(want):
            self.findings.append(
                Finding(
                    "input_generation_tampered",
                    Severity.REJECT,
                    Stage.INTEGRITY,
                    "the candidate's process made different inputs from the same seed",
                    {"key": key},
                )
            )
            raise StageFailed(
                Stage.CORRECTNESS, "inputs made in the candidate's process differ from the reference's"
            )
        self._input_digests[key] = list(want)

    def run_reference(
        self, key: str, slot: str = "main", levels: bool = False, after: int = 0
    ) -> dict[str, Any]:
        """The reference's outputs on set ``key``, kept in its worker; the reply says whether
        they are all finite (``finite``). ``after`` (a stateful task's): the outputs of the call
        after that many on the same set, from the state as built."""
        guards = self.config.guards
        allowed = tf32_allowance(guards.precision_policy, guards.conv_tf32, device_type(self.device))
        args: dict[str, Any] = {"after": after} if after else {}
        r = self.reference(
            Command.RUN, key=key, slot=slot, levels=levels, allowed=allowed if levels else None, **args
        )
        if "precision_levels" in r:
            self._levels[key] = PrecisionLevels.from_reply(r["precision_levels"])
        if r.get("float64_error"):
            self.record.note(float64_error=r["float64_error"])
        self._out_bytes[key] = list(r.get("out_bytes") or [])
        self._ref_digests[key] = list(r.get("digest") or [])
        return r

    def run_candidate(
        self, key: str, slot: str = "main", fresh: bool = True, after: int = 0, near_miss: bool = False
    ) -> Comparison:
        """One checked candidate call on fresh copies of set ``key`` (or on the stored tensors
        themselves), free memory poisoned first; ``after``: as ``run_reference``'s; ``near_miss``:
        as the reference worker's ``compare`` (a probe's set)."""
        assert self.cand is not None
        poison = self._out_bytes.get(key) if self.config.guards.poison else None
        args: dict[str, Any] = {"after": after} if after else {}
        with self.hold():
            raw = self.cand.request_raw(Command.RUN, key=key, slot=slot, poison=poison, fresh=fresh, **args)
        observed = observation_findings(
            header(raw), self._input_digests.get(key), key, self.config.guards.process_state
        )
        for finding in observed:
            if all(f.code != finding.code for f in self.findings):
                self.findings.append(finding)
        cmp, digests = self.compare(key, raw, near_miss=near_miss)
        self._cand_digests[key] = digests
        return cmp

    def outputs_changed(self, key: str, other: str) -> tuple[bool, bool]:
        """Whether the reference's, and the candidate's, outputs differ between two input sets."""
        return (
            self._ref_digests.get(key) != self._ref_digests.get(other),
            self._cand_digests.get(key) != self._cand_digests.get(other),
        )

    def forget(self, keys: list[str], slots: list[str] | None = None) -> None:
        assert self.cand is not None and self.ref is not None
        for proc in (self.ref.process, self.cand):
            with self.hold():
                proc.request(Command.FORGET, keys=keys, slots=slots or [])

    def promote(self, slot: str, reinit: int) -> None:
        """Both workers' models in ``slot``, built with weights re-drawn from ``reinit``, replace
        their main models: they are what is timed and what the late probes run."""
        self.reference(Command.PROMOTE, slot=slot)
        self.candidate(Command.PROMOTE, slot=slot)
        self.main_reinit = reinit

    def compare(
        self, key: str | None, raw_reply: bytes, min_scale: float = 1.0, index: int = 0, near_miss: bool = False
    ) -> tuple[Comparison, list[Any]]:
        """The candidate's reply (to ``RUN`` on set ``key``, or with ``key`` None to
        ``FETCH_OUTPUT`` of call ``index`` of the last timed sample) compared in the reference's
        worker with its outputs (of the same call); and the reply's output digests."""
        r = self.reference(
            Command.COMPARE,
            key=key,
            reply=raw_reply,
            tolerance=self.config.tolerance.model_dump(),
            device=self.device,
            min_scale=min_scale,
            index=index,
            near_miss=near_miss,
        )
        if key is not None and r.get("isolated"):
            self._isolated[key] = Isolated(**r["isolated"])
        return Comparison(**r["comparison"]), list(r["digests"])

    def levels(self, key: str) -> PrecisionLevels | None:
        """What reduced precision looks like on set ``key``, where the reference calibrated it."""
        return self._levels.get(key)

    def first_levels(self) -> PrecisionLevels | None:
        """The levels the first calibrated set showed (the timed outputs are judged against them)."""
        return next(iter(self._levels.values()), None)

    def precision_tracker(self) -> PrecisionTracker:
        return PrecisionTracker(self.config.guards.precision_policy)

    def isolated(self, key: str) -> Isolated | None:
        """On calibrated set ``key``: the candidate's error that the allowed operations at TF32
        do not explain (``checks.allowance``), where it could be isolated."""
        return self._isolated.get(key)
