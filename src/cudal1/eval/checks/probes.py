"""Behavioural probes: one extra input set each, beyond the regular correctness sets.

- Sparse perturbation (``ignores_input_change``, REJECT; in the correctness stage): the last
  checked set again, with 1..k elements of its first floating input moved far, at positions drawn
  from the secret seed, on fresh storage. A result cache keyed by a content fingerprint (a few
  probed elements) or by address survives fresh allocations; it does not survive this, because
  the reference's output moves and the cached one does not (reward-hacks.md, "five hardest", 2).
- Alternative shapes (``shape_specialised``, WARNING by default, ``guards.alternative_shapes``):
  one set with the task's module-level batch-size constant changed. KernelBench-style tasks fix
  their sizes, so a kernel specialised to them is legitimate there; it is flagged for audit,
  and rejected where the configuration says the task's sizes are not fixed.
- Default weights (``default_weights_assumed``, REJECT; ``default_weights_unmapped``, WARNING):
  both models rebuilt beside the timed ones, then every parameter and buffer of the reference
  whose elements are all equal at initialisation (zero biases, unit norm weights) is given random
  values, the same in the candidate's parameter of that name and shape. A candidate that skips
  a bias add or a norm's affine step because it does nothing at initialisation computes another
  function as soon as the weights are trained; one whose parameters have other names cannot be
  checked this way, and says so in a warning.
- Perturbed init inputs (``init_inputs_ignored``, REJECT): both models rebuilt beside the timed
  ones with every nonzero float init input scaled by 1.5 (value hyperparameters: scales, slopes;
  integers are structural, kernel and hidden sizes, which a kernel may specialise on). ModelNew
  must take the same constructor as Model; one that bakes the task's value in computes another
  function as soon as the value changes.

What these do not cover: a fingerprint that happens to include a perturbed position (the
positions are secret and few, so the chance is small, not zero); constants other than batch
size; hyperparameters passed as integers or nested values.

The last two run after timing, so a candidate that crashes its worker on unexpected sizes (an
out-of-bounds kernel) costs it the finding, not its measurement. A probe whose reference side
fails (the task cannot take the change) is skipped and says so in ``environment.probes``.
"""

from __future__ import annotations

import ast
import random
from typing import Any, Protocol

from cudal1.config import EvalConfig
from cudal1.eval.checks.compare import Comparison
from cudal1.eval.checks.stage_failure import StageFailed
from cudal1.eval.process.protocol import Command
from cudal1.eval.process.sandbox import RemoteError, WorkerError
from cudal1.schema import Finding, Severity, Stage, Task

PERTURBED, SHAPES, INIT, WEIGHTS = "perturbed", "shapes", "init", "weights"


class ProbeTarget(Protocol):
    """What a probe needs of an evaluation (``worker_pair.WorkerPair`` provides it)."""

    task: Task
    config: EvalConfig

    @property
    def findings(self) -> list[Finding]: ...
    def note_probe(self, probe: str, facts: dict[str, Any]) -> None: ...

    def reference(self, cmd: Command, **args: Any) -> dict[str, Any]: ...
    def candidate(self, cmd: Command, **args: Any) -> dict[str, Any]: ...
    def reference_alive(self) -> bool: ...
    def build_model(self, args: list[Any], seed: int, slot: str, *, candidate: bool) -> None: ...
    def make_inputs(
        self,
        seed: int,
        key: str,
        sizes: dict[str, int] | None = None,
        slot: str = "main",
        levels: bool = False,
    ) -> None: ...
    def check_inputs(self, want: list[Any], got: list[Any], key: str) -> None: ...
    def run_reference(self, key: str, slot: str = "main", levels: bool = False) -> None: ...
    def run_candidate(self, key: str, slot: str = "main", fresh: bool = True) -> Comparison: ...
    def outputs_changed(self, key: str, other: str) -> tuple[bool, bool]: ...
    def forget(self, keys: list[str], slots: list[str] | None = None) -> None: ...


def _note(ev: ProbeTarget, probe: str, **facts: Any) -> None:
    ev.note_probe(probe, facts)


def sparse_perturbation(ev: ProbeTarget, key: str, seed: int) -> None:
    """Raises StageFailed (correctness) with an ``ignores_input_change`` finding on a miss."""
    limit = ev.config.guards.perturbed_elements
    if limit == 0:
        return
    args: dict[str, Any] = {
        "key": key,
        "new_key": PERTURBED,
        "seed": seed,
        "count": 1 + random.Random(seed).randrange(limit),
    }
    try:
        want = ev.reference(Command.PERTURB, **args)
    except StageFailed as exc:
        _note(ev, "perturbation", skipped=f"reference could not perturb: {exc}")
        return
    if want["digest"] is None:
        _note(ev, "perturbation", skipped="no floating-point input to perturb")
        return
    # The candidate first runs on the set's own tensors (no fresh copy), then sees the very same
    # tensors changed in place: a cache keyed on addresses, ids or shapes now returns stale data.
    primed = ev.run_candidate(key, fresh=False)
    if not primed.ok:
        raise StageFailed(Stage.CORRECTNESS, f"input set at its stored address: {primed.message}")
    if any(f.code == "input_mutated" for f in ev.findings):
        # Its stored inputs are no longer what the seed made, so the perturbed set would differ
        # between the workers and read as tampered input generation; the mutation is the finding.
        _note(ev, "perturbation", skipped="the candidate mutates its inputs")
        return
    ev.check_inputs(want["digest"], ev.candidate(Command.PERTURB, **args, in_place=True)["digest"], PERTURBED)
    try:
        ev.run_reference(PERTURBED)
    except StageFailed as exc:
        _note(ev, "perturbation", skipped=str(exc))
        ev.forget([PERTURBED])
        return
    cmp = ev.run_candidate(PERTURBED, fresh=False)
    reference_changed, candidate_changed = ev.outputs_changed(PERTURBED, key)
    facts = {
        "positions": want["positions"],
        "reference_changed": reference_changed,
        "candidate_changed": candidate_changed,
    }
    _note(ev, "perturbation", ok=cmp.ok, **facts)
    ev.forget([PERTURBED])
    if cmp.ok:
        return
    if facts["reference_changed"]:
        how = "its output did not change" if not facts["candidate_changed"] else "its output is wrong"
        ev.findings.append(
            probe_finding(
                "ignores_input_change",
                Severity.REJECT,
                f"after {len(want['positions'])} input element(s) changed, the reference's output "
                f"moved and the candidate's did not follow ({how}): a result cache keyed on part of the input",
                {**facts, "message": cmp.message},
            )
        )
    raise StageFailed(Stage.CORRECTNESS, f"sparsely perturbed input set: {cmp.message}")


def run_late_probes(ev: ProbeTarget, seed: int, init_args: list[Any], init_seed: int) -> None:
    """Alternative shapes, then perturbed init inputs; what goes wrong here is a finding or a note,
    never a failed stage (the measurement is already taken)."""
    rng = random.Random(seed)
    current = "shape_specialised"
    try:
        if ev.config.guards.alternative_shapes != "off":
            alternative_shapes(ev, rng.getrandbits(62), init_args, init_seed)
        current = "init_inputs_ignored"
        if ev.config.guards.init_inputs:
            perturbed_init_inputs(ev, rng.getrandbits(62), init_args, init_seed)
        current = "default_weights_assumed"
        if ev.config.guards.default_weights:
            default_weights(ev, rng.getrandbits(62), init_args, init_seed)
    except StageFailed as exc:  # inputs tampered with: its REJECT finding is already recorded
        _note(ev, "late", stopped=str(exc))
    except WorkerError as exc:
        if not ev.reference_alive():
            _note(ev, "late", stopped=f"reference worker died: {exc}")
        else:  # the candidate's worker died or hung on a probe
            ev.findings.append(_probe_failure(ev, current, f"the candidate's worker failed: {exc}"))


def batch_constants(source: str) -> dict[str, int]:
    """Top-level ``NAME = <int>`` assignments whose name says batch (KernelBench's ``batch_size``)."""
    found: dict[str, int] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
            if "batch" in name.lower() and isinstance(value, ast.Constant) and type(value.value) is int:
                found[name] = value.value
    return found


def alternative_size(n: int) -> int:
    """About half, and odd where that differs from ``n``: cheaper, and off the usual tile multiples."""
    m = n // 2 + 1
    return m if m != n else n + 1


def alternative_shapes(ev: ProbeTarget, seed: int, init_args: list[Any], init_seed: int) -> None:
    sizes = {k: alternative_size(v) for k, v in batch_constants(ev.task.source).items()}
    if not sizes:
        _note(ev, "shapes", skipped="the task has no module-level batch-size constant")
        return
    try:
        # The reference's timed model lost its float64 twin before timing; rebuild one beside it.
        ev.build_model(init_args, init_seed, SHAPES, candidate=False)
        ev.make_inputs(seed, SHAPES, sizes=sizes, slot=SHAPES)
    except StageFailed as exc:
        if not exc.reference:
            raise
        _note(ev, "shapes", skipped=str(exc), sizes=sizes)
        ev.forget([SHAPES], [SHAPES])
        return
    try:
        cmp = ev.run_candidate(SHAPES)
        problem = None if cmp.ok else cmp.message
    except RemoteError as exc:
        problem = str(exc)
    _note(ev, "shapes", sizes=sizes, ok=problem is None)
    ev.forget([SHAPES], [SHAPES])
    if problem is not None:
        ev.findings.append(_probe_failure(ev, "shape_specialised", problem, sizes=sizes))


def scaled_init_inputs(args: list[Any]) -> list[Any] | None:
    """Every nonzero top-level float times 1.5; None when there is none to scale."""
    out = [a * 1.5 if type(a) is float and a != 0.0 else a for a in args]
    return out if out != args else None


def perturbed_init_inputs(ev: ProbeTarget, seed: int, init_args: list[Any], init_seed: int) -> None:
    args = scaled_init_inputs(init_args)
    if args is None:
        _note(ev, "init_inputs", skipped="no nonzero float init input")
        return
    try:
        ev.build_model(args, init_seed, INIT, candidate=False)
        ev.make_inputs(seed, INIT, slot=INIT)
    except StageFailed as exc:
        if not exc.reference:
            raise
        _note(ev, "init_inputs", skipped=str(exc), args=args)
        ev.forget([INIT], [INIT])
        return
    try:
        ev.build_model(args, init_seed, INIT, candidate=True)
        cmp = ev.run_candidate(INIT, slot=INIT)
        problem = None if cmp.ok else cmp.message
    except RemoteError as exc:
        problem = str(exc)
    _note(ev, "init_inputs", args=args, ok=problem is None)
    ev.forget([INIT], [INIT])
    if problem is not None:
        ev.findings.append(_probe_failure(ev, "init_inputs_ignored", problem, init_inputs=args))


def default_weights(ev: ProbeTarget, seed: int, init_args: list[Any], init_seed: int) -> None:
    try:
        ev.build_model(init_args, init_seed, WEIGHTS, candidate=False)
        ref_set = ev.reference(Command.SET_WEIGHTS, slot=WEIGHTS, seed=seed)["changed"]
        if not ref_set:
            _note(ev, "default_weights", skipped="no constant-initialised parameter or buffer")
            ev.forget([], [WEIGHTS])
            return
        ev.make_inputs(seed, WEIGHTS, slot=WEIGHTS)
    except StageFailed as exc:
        if not exc.reference:
            raise
        _note(ev, "default_weights", skipped=str(exc))
        ev.forget([WEIGHTS], [WEIGHTS])
        return
    names = [name for name, _ in ref_set]
    try:
        ev.build_model(init_args, init_seed, WEIGHTS, candidate=True)
        cand_set = ev.candidate(Command.SET_WEIGHTS, slot=WEIGHTS, seed=seed, names=names)["changed"]
        cmp = ev.run_candidate(WEIGHTS, slot=WEIGHTS)
        problem = None if cmp.ok else cmp.message
    except RemoteError as exc:
        cand_set, problem = [], str(exc)
    # The candidate's word on which names it set is only used to name the unmapped ones: its
    # output on the new weights is what is judged.
    unmapped = [name for name, shape in ref_set if [name, shape] not in cand_set]
    _note(ev, "default_weights", set=names, unmapped=unmapped, ok=problem is None)
    ev.forget([WEIGHTS], [WEIGHTS])
    if unmapped:  # its weights did not all change with the reference's: the comparison says nothing
        ev.findings.append(
            probe_finding(
                "default_weights_unmapped",
                Severity.WARNING,
                "parameters the reference initialises to a constant have no counterpart of the same "
                f"name and shape in the candidate, so its use of them is unchecked: {', '.join(unmapped)[:500]}",
                {"unmapped": unmapped, "problem": (problem or "")[:2000]},
            )
        )
    elif problem is not None:
        ev.findings.append(_probe_failure(ev, "default_weights_assumed", problem, weights=names))


def probe_finding(code: str, severity: Severity, message: str, evidence: dict[str, Any]) -> Finding:
    """Findings of the behavioural probes: ``ignores_input_change``, ``shape_specialised``,
    ``init_inputs_ignored``, ``default_weights_assumed``, ``default_weights_unmapped``."""
    return Finding(code, severity, Stage.INTEGRITY, message, evidence)


def _probe_failure(ev: ProbeTarget, code: str, problem: str, **evidence: Any) -> Finding:
    if code == "shape_specialised":
        severity = Severity.REJECT if ev.config.guards.alternative_shapes == "reject" else Severity.WARNING
        message = f"the candidate fails when the task's batch size changes: {problem}"
    elif code == "default_weights_assumed":
        severity = Severity.REJECT
        message = (
            "the candidate is right only while the reference's constant-initialised parameters keep "
            f"their initial values (zero biases, unit norm weights): {problem}"
        )
    else:
        severity = Severity.REJECT
        message = f"the candidate does not follow its init inputs (float ones scaled by 1.5): {problem}"
    return probe_finding(code, severity, message[:2000], {**evidence, "problem": problem[:2000]})
