"""Behavioural probes: one extra input set each, beyond the regular correctness sets.

- Sparse perturbation (``ignores_input_change``, REJECT; in the correctness stage): the last
  checked set again, with 1..k elements of its first floating input moved far, at positions drawn
  from the secret seed, on fresh storage. A result cache keyed by a content fingerprint (a few
  probed elements) or by address survives fresh allocations; it does not survive this, because
  the reference's output moves and the cached one does not (reward-hacks.md, "five hardest", 2).
- State carried (``state_not_carried``, REJECT; in the correctness stage, on a stateful task
  only: ``process.model_state``): every other checked call starts from the state the models were
  built in, so a candidate that never updates its state would pass them; here both sides call
  twice on one fresh set and the second call, from the state the first left, is compared.
- Alternative shapes (``shape_specialised``, WARNING by default, ``guards.alternative_shapes``):
  one set with the task's module-level batch-size constant changed. KernelBench-style tasks fix
  their sizes, so a kernel specialised to them is legitimate there; it is flagged for audit,
  and rejected where the configuration says the task's sizes are not fixed.
- Shifted inputs (``input_range_assumed``, REJECT; in the correctness stage, ``guards.input_range``):
  the last checked set with every float input that is not integer-valued scaled and shifted out
  of the generator's range (``process.probe_values.shifted``: ``5x + 2 std(x)``; indices, labels
  and masks stay). A candidate right only in the range the task's generator draws from (it drops
  a clamp that ``randn`` never reaches, or approximates a function only where the inputs fall)
  fails it. Where the reference's own output is not finite on the moved inputs (a log of a value
  the move made negative, an overflow), the set says nothing and is skipped with an INFO
  ``probe_skipped`` finding.
- Re-initialised weights (``default_weights_assumed``, or ``default_weights_unmapped`` where a
  tensor the reference re-drew has no counterpart in the candidate; both REJECT; in the
  correctness stage, ``guards.default_weights``): both models rebuilt beside the default ones with
  every floating parameter and buffer re-drawn *as they are built* (the rule, and why through
  construction, is ``process.probe_values``'s: a candidate that folds or reshapes its weights
  in ``__init__`` folds the new values). A candidate right only while weights keep their
  initial values (a zero-initialised gate it skips, a norm's affine step, a threshold that the
  default weights never cross) computes another function here. Its output on the new weights is
  what is judged; the counterparts only name the cause. A non-finite reference output on the new
  weights skips the set (INFO ``probe_skipped``). Where the candidate passes, the two re-drawn
  models replace the default-weight ones and are what the timing measures
  (``WorkerPair.promote``, ``environment.timed_weights``): a candidate fast only while the
  weights keep their initial values (it skips a branch its zero-initialised gate turns off, and
  is exact elsewhere: ``audit/cases/gate_checked_at_runtime.py``) was right here and fast at
  the defaults, and is now never timed at the defaults. Where the probe is off, skipped, or
  has nothing to re-draw, the default-weight models are timed, and the result says so.
- Perturbed init inputs (``init_inputs_ignored``, REJECT): both models rebuilt beside the timed
  ones with every nonzero float init input scaled by 1.5 (value hyperparameters: scales, slopes;
  integers are structural, kernel and hidden sizes, which a kernel may specialise on). ModelNew
  must take the same constructor as Model; one that bakes the task's value in computes another
  function as soon as the value changes.

What these do not cover: a fingerprint that happens to include a perturbed position (the
positions are secret and few, so the chance is small, not zero); constants other than batch
size; hyperparameters passed as integers or nested values; a threshold beyond even the shifted
range; a candidate that recognises a probe in its own process (the probes' models are built by
the same worker code, but the re-drawing constructors are visible there); a speed that holds only
at the initial weights on a task the re-drawn-weights probe is skipped on (the reference's output
is not finite with re-drawn weights), or with ``guards.default_weights`` off: the timing then
runs at the defaults.

Alternative shapes and init inputs run after timing, so a candidate that crashes its worker on
unexpected sizes (an out-of-bounds kernel) costs it the finding, not its measurement. A probe
whose reference side fails (the task cannot take the change) is skipped and says so in
``environment.probes``.
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

PERTURBED, SHIFTED, SHAPES, INIT, WEIGHTS = "perturbed", "shifted", "shapes", "init", "weights"
STATE = "state"


class ProbeTarget(Protocol):
    """What a probe needs of an evaluation (``worker_pair.WorkerPair`` provides it)."""

    task: Task
    config: EvalConfig
    main_reinit: int | None  # the seed the main models' weights were re-drawn from, if they were
    stateful: list[str]  # the reference's state attributes, where the task is stateful

    @property
    def findings(self) -> list[Finding]: ...
    def note_probe(self, probe: str, facts: dict[str, Any]) -> None: ...

    def reference(self, cmd: Command, **args: Any) -> dict[str, Any]: ...
    def candidate(self, cmd: Command, **args: Any) -> dict[str, Any]: ...
    def reference_alive(self) -> bool: ...
    def build_model(
        self, args: list[Any], seed: int, slot: str, *, candidate: bool, reinit: int | None = None
    ) -> dict[str, Any]: ...
    def make_inputs(
        self,
        seed: int,
        key: str,
        sizes: dict[str, int] | None = None,
        slot: str = "main",
        levels: bool = False,
        after: int = 0,
    ) -> dict[str, Any]: ...
    def same_inputs(self, cmd: Command, label: str, **args: Any) -> dict[str, Any]: ...
    def check_inputs(self, want: list[Any], got: list[Any], key: str) -> None: ...
    def run_reference(
        self, key: str, slot: str = "main", levels: bool = False, after: int = 0
    ) -> dict[str, Any]: ...
    def run_candidate(
        self, key: str, slot: str = "main", fresh: bool = True, after: int = 0, near_miss: bool = False
    ) -> Comparison: ...
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


def state_carried(ev: ProbeTarget, seed: int) -> None:
    """Raises StageFailed (correctness) with a ``state_not_carried`` finding when the candidate's
    second call, from the state its first left, is wrong."""
    ev.make_inputs(seed, STATE, after=1)
    problem = _candidate_problem(ev, STATE, after=1)
    _note(ev, "state", ok=problem is None, state=ev.stateful[:50])
    ev.forget([STATE])
    if problem is None:
        return
    message = (
        f"the reference's forward changes its {', '.join(ev.stateful)[:300]} and the next call "
        f"depends on it; the candidate's second call from the state as built is wrong ({problem})"
    )
    ev.findings.append(
        probe_finding("state_not_carried", Severity.REJECT, message[:2000], {"problem": problem[:2000]})
    )
    raise StageFailed(Stage.CORRECTNESS, f"second call from the state the first left: {problem}")


def shifted_inputs(ev: ProbeTarget, key: str) -> None:
    """Raises StageFailed (correctness) with an ``input_range_assumed`` finding on a miss. Runs
    before the sparse perturbation, which changes the candidate's stored copy of ``key``."""
    try:
        ev.same_inputs(Command.SHIFT_INPUTS, SHIFTED, key=key, new_key=SHIFTED)
        # levels: the allowed operations at TF32 are calibrated on these inputs too, so that a
        # convolution the policy lets run at TF32 is judged here as on the task's own sets (on an
        # H200 such a candidate's error grew from 0.5x to 1.2x the tolerance on this set).
        finite = ev.run_reference(SHIFTED, levels=True)["finite"]
    except StageFailed as exc:
        if not exc.reference:
            raise
        _skipped(ev, "input_range", str(exc), [SHIFTED])
        return
    if not finite:
        _skipped(ev, "input_range", "the reference's output is not finite on the shifted inputs", [SHIFTED])
        return
    problem = _candidate_problem(ev, SHIFTED, probe="input_range")
    _note(ev, "input_range", ok=problem is None)
    ev.forget([SHIFTED])
    if problem is None:
        return
    message = (
        "the candidate is right only inside the range the task's generator draws its inputs from: "
        f"on inputs scaled by 5 and shifted by 2 standard deviations it fails ({problem})"
    )
    ev.findings.append(
        probe_finding("input_range_assumed", Severity.REJECT, message[:2000], {"problem": problem[:2000]})
    )
    raise StageFailed(Stage.CORRECTNESS, f"shifted input set: {problem}")


def reinitialised_weights(ev: ProbeTarget, seed: int, init_args: list[Any], init_seed: int) -> bool:
    """Raises StageFailed (correctness) with a ``default_weights_assumed`` or
    ``default_weights_unmapped`` finding on a miss. Returns True when both re-drawn models passed:
    they stay in slot ``WEIGHTS`` for the caller to time (``WorkerPair.promote``) and to forget
    otherwise; False when the probe did not apply or was skipped (nothing is left behind)."""
    try:
        redrawn = ev.build_model(init_args, init_seed, WEIGHTS, candidate=False, reinit=seed)["redrawn"]
        if not redrawn:  # nothing to re-draw: the probe does not apply (no finding)
            _note(ev, "default_weights", skipped="the reference has no floating parameter or buffer")
            ev.forget([], [WEIGHTS])
            return False
        # levels: the allowed operations at TF32 calibrated on this set too (``shifted_inputs``).
        finite = ev.make_inputs(seed, WEIGHTS, slot=WEIGHTS, levels=True)["finite"]
    except StageFailed as exc:
        if not exc.reference:
            raise
        _skipped(ev, "default_weights", f"{exc}; timed at the default weights", [WEIGHTS], [WEIGHTS])
        return False
    if not finite:
        why = "the reference's output is not finite with its weights re-drawn; timed at the default weights"
        _skipped(ev, "default_weights", why, [WEIGHTS], [WEIGHTS])
        return False
    try:
        theirs = ev.build_model(init_args, init_seed, WEIGHTS, candidate=True, reinit=seed).get("redrawn")
        problem = _candidate_problem(ev, WEIGHTS, WEIGHTS, probe="default_weights")
    except RemoteError as exc:
        theirs, problem = [], str(exc)
    # The candidate's word on what it re-drew only names a cause; its output is what is judged.
    made = {tuple(k[1:]) for k in theirs or [] if isinstance(k, list) and len(k) == 4}
    unmapped = [label for label, *k in redrawn if tuple(k) not in made]
    _note(ev, "default_weights", redrawn=len(redrawn), unmapped=unmapped[:50], ok=problem is None)
    if problem is None:
        ev.forget([WEIGHTS])  # the input set; the models stay
        return True
    ev.forget([WEIGHTS], [WEIGHTS])
    ev.findings.append(_weights_finding(problem, [label for label, *_ in redrawn], unmapped))
    raise StageFailed(Stage.CORRECTNESS, f"re-initialised weights: {problem}")


def _weights_finding(problem: str, redrawn: list[str], unmapped: list[str]) -> Finding:
    evidence = {"redrawn": redrawn[:200], "unmapped": unmapped[:200], "problem": problem[:2000]}
    if unmapped:
        message = (
            "with every weight re-drawn as the models were built, the candidate computes another "
            "function, and it never made tensors that take the place of the reference's "
            f"{', '.join(unmapped)[:400]}: it relies on their initial values ({problem})"
        )
        return probe_finding("default_weights_unmapped", Severity.REJECT, message[:2000], evidence)
    message = (
        "the candidate is right only while the weights keep their initial values (a zero-initialised "
        f"gate, a norm's unit weight and zero bias, a threshold the default weights never cross): {problem}"
    )
    return probe_finding("default_weights_assumed", Severity.REJECT, message[:2000], evidence)


def _candidate_problem(
    ev: ProbeTarget, key: str, slot: str = "main", after: int = 0, probe: str = ""
) -> str | None:
    """What is wrong with the candidate's output on set ``key``, or None; a crash is wrong too.
    ``probe``: the probe's name, for the probes that look for a wrong answer beyond the task's
    inputs or weights, not for its precision. There a near miss that the allowed operations at
    TF32 explain passes, noted: on an H200 every TF32-convolution transform of a conv + sum task
    was 0.5x the tolerance on the task's inputs and 1.2x on the scaled ones (2026-11-28)."""
    try:
        cmp = ev.run_candidate(key, slot=slot, after=after, near_miss=bool(probe))
    except RemoteError as exc:
        return str(exc)
    if cmp.by_allowance:
        _note(ev, probe, past_tolerance=round(cmp.max_rel_err, 3), explained_by="convolutions at TF32")
    return None if cmp.ok else cmp.message


def _skipped(ev: ProbeTarget, probe: str, why: str, keys: list[str], slots: list[str] | None = None) -> None:
    """A probe the task cannot take: a note, an INFO finding (visible, costs nothing), and its
    inputs and models dropped."""
    _note(ev, probe, skipped=why)
    ev.findings.append(
        probe_finding(
            "probe_skipped", Severity.INFO, f"{probe} probe skipped: {why}"[:2000], {"probe": probe}
        )
    )
    ev.forget(keys, slots or [])


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
        # The reference's timed model lost its float64 twin before timing; rebuild one beside it,
        # with the candidate's main model's weights (re-drawn where those were timed).
        ev.build_model(init_args, init_seed, SHAPES, candidate=False, reinit=ev.main_reinit)
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


def probe_finding(code: str, severity: Severity, message: str, evidence: dict[str, Any]) -> Finding:
    """Findings of the behavioural probes: ``state_not_carried``, ``ignores_input_change``, ``input_range_assumed``,
    ``default_weights_assumed``, ``default_weights_unmapped``, ``probe_skipped`` (INFO),
    ``shape_specialised``, ``init_inputs_ignored``."""
    return Finding(code, severity, Stage.INTEGRITY, message, evidence)


def _probe_failure(ev: ProbeTarget, code: str, problem: str, **evidence: Any) -> Finding:
    if code == "shape_specialised":
        severity = Severity.REJECT if ev.config.guards.alternative_shapes == "reject" else Severity.WARNING
        message = f"the candidate fails when the task's batch size changes: {problem}"
    else:
        severity = Severity.REJECT
        message = f"the candidate does not follow its init inputs (float ones scaled by 1.5): {problem}"
    return probe_finding(code, severity, message[:2000], {**evidence, "problem": problem[:2000]})
