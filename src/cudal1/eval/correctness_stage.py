"""The correctness stage: the candidate against the reference on ``correctness_trials`` fresh
input sets from secret seeds, then three sets no generator makes (``checks.probes``): the last
set shifted out of the generator's range, the last set sparsely perturbed, and a set on both
models rebuilt with their weights re-drawn. Where the candidate passes on the re-drawn weights,
those two models become the main ones: the timing stage measures them, not the default-weight
models the checked sets ran on.

Each set's errors are judged against the tolerance in the reference's worker; its effective
precision against the levels the reference calibrated on that set (``checks.precision``). The
first wrong set ends the stage. On a stateful task (``process.model_state``) every set starts
from the models' state as built, and one more set checks the call after (``probes.state_carried``).
"""

from __future__ import annotations

from typing import Any

from cudal1.eval.checks import probes
from cudal1.eval.checks.stage_failure import StageFailed
from cudal1.eval.worker_pair import Seeds, WorkerPair
from cudal1.schema import Correctness, Stage


def check_correctness(pair: WorkerPair, seeds: Seeds, init_args: list[Any]) -> None:
    """Records ``Correctness`` (and any ``reduced_precision`` finding); raises ``StageFailed``
    on a wrong set. ``init_args``: the models' constructor arguments (the re-drawn weights'
    models are built with them)."""
    record = pair.record
    worst_abs, worst_rel, scale, against = 0.0, 0.0, 1.0, "reference"
    precision = pair.precision_tracker()
    n = pair.config.correctness_trials
    for trial in range(n):
        key = f"check{trial}"
        with record.phase("check_inputs"):
            pair.make_inputs(seeds.next(), key, levels=True)
        with record.phase("check_calls"):
            cmp = pair.run_candidate(key)
        if trial < n - 1:  # the last set stays for the sparse perturbation
            pair.forget([key])
        against = cmp.against
        precision.add(cmp, pair.levels(key), pair.isolated(key))
        if not cmp.ok:
            failed = (cmp.max_abs_err, cmp.max_rel_err, cmp.scale, against, cmp.message)
            # The effective precision is recorded, but no reduced_precision finding: a wrong
            # answer (a constant, a stale cache) would read as "low precision" and hide its cause.
            record.correctness = Correctness(n, trial, *failed, *precision.record())
            raise StageFailed(Stage.CORRECTNESS, f"input set {trial + 1}/{n}: {cmp.message}")
        worst_abs, worst_rel = max(worst_abs, cmp.max_abs_err), max(worst_rel, cmp.max_rel_err)
        scale = max(scale, cmp.scale)
    record.correctness = Correctness(n, n, worst_abs, worst_rel, scale, against, "", *precision.record())
    record.findings.extend(precision.findings())
    guards = pair.config.guards
    if pair.stateful:
        with record.phase("state_carried"):
            probes.state_carried(pair, seeds.next())
    if guards.input_range:
        with record.phase("shifted_inputs"):
            probes.shifted_inputs(pair, f"check{n - 1}")
    with record.phase("perturbation"):
        probes.sparse_perturbation(pair, f"check{n - 1}", seeds.next())
    pair.forget([f"check{n - 1}"])
    if guards.default_weights:
        with record.phase("reinitialised_weights"):
            reinit = seeds.next()
            if probes.reinitialised_weights(pair, reinit, init_args, seeds.init):
                # The models the candidate passed on are the ones timed: a speed that holds only
                # at the initial weights is never measured (audit case gate_checked_at_runtime).
                pair.promote(probes.WEIGHTS, reinit)
