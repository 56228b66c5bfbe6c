"""How fast a run got through its evaluations, from what its stored results say: evaluations per
device-hour, the share of the wall time its devices were held, and where the seconds went.

The measurement behind these facts (issue 20): ``optimize`` with the built-in baselines over 19
CUDA-L1 tasks on one H100 and 6 workers did 53 evaluations in 8 minutes, about 400 per GPU-hour,
with 3 of the 6 workers busy. A run's summary states the same figures, so that a change to the
pool or the evaluator shows in every run that follows it.

- evaluations per device-hour = evaluations / (the run's wall hours x its devices); every stored
  result counts (failures too: they cost the pool their time), final re-evaluations included;
- devices: the timing devices the results were placed on (``schema.PoolPlacement``);
- held share = the seconds the timing devices were held alone, for timing
  (``selection.device_held_seconds``), over the wall time of all of them;
- seconds by part (``selection.phase_seconds``): build and first calls run beside other
  evaluations, off the device; correctness (every check and probe) shares the device with other
  evaluations' checks; timing has it alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cudal1.run.selection import PARTS, Part, device_held_seconds, phase_seconds
from cudal1.schema import EvalResult


@dataclass(frozen=True)
class Throughput:
    evaluations: int
    devices: int
    wall_s: float
    held_s: float  # the timing devices were held alone (timing), summed over results
    part_s: Mapping[Part, float] = field(default_factory=dict)  # seconds by part, summed

    @property
    def per_device_hour(self) -> float | None:
        """Evaluations per device-hour of wall time; None before any wall time was recorded."""
        if self.wall_s <= 0:
            return None
        return self.evaluations / (self.wall_s / 3600 * self.devices)

    @property
    def held_share(self) -> float | None:
        """The share of the devices' wall time they were held alone, for timing."""
        if self.wall_s <= 0:
            return None
        return self.held_s / (self.wall_s * self.devices)


def run_throughput(results: Iterable[EvalResult], wall_s: float) -> Throughput:
    """The throughput facts of a run whose stored results are ``results``."""
    stored = list(results)
    parts = dict.fromkeys(PARTS, 0.0)
    for result in stored:
        for part, seconds in phase_seconds(result).items():
            parts[part] += seconds
    return Throughput(
        evaluations=len(stored),
        devices=devices_used(stored),
        wall_s=wall_s,
        held_s=sum(device_held_seconds(r) for r in stored),
        part_s=parts,
    )


def devices_used(results: Iterable[EvalResult]) -> int:
    """The timing devices ``results`` ran on, at least 1: a local pool's device count (its
    results say it), a Ray pool's GPUs by node, else the distinct devices the results name."""
    local = 0
    remote: set[tuple[str, str]] = set()
    named: set[str] = set()
    for result in results:
        placement = result.environment.pool
        if placement is None:
            named.add(result.device)
        elif placement.kind == "local":
            local = max(local, placement.devices or 1)
        else:
            gpus = placement.gpu_ids or (placement.actor or result.device,)
            remote.update((placement.node or "", gpu) for gpu in gpus)
    return max(1, local + len(remote) if local or remote else len(named))
