"""Clean reference baselines for the drift guard (shared/research/reward-hacks.md, "slow-reference").

The reference is timed live in its own worker, which never loads candidate code, so a candidate
cannot slow it from inside; from outside, its process is stopped while the reference runs, and
work it left on the GPU that slowed the reference is ``reference_disturbed``
(``checks/interference.py``). What is left is the machine: throttling, a noisy neighbour, a
changed driver, or sabotage this design has not foreseen. The first timed evaluation of a task on
a device whose reference was not found disturbed stores the reference's median per call; later
ones compare their live median with it (``drift_finding``). A candidate evaluated first that
slowed the reference by less than that check's margin (10%) stores a baseline that much slower,
and later honest runs then read up to 10% faster: inside the 15% this warns at, and only ever a
warning. A baseline is keyed by task hash, device name, torch version, calls per sample (K
changes what a per-call time includes) and the weights timed (``schema.TimedWeights``: a task
whose speed depends on its weights' values must not compare the two regimes), and is never
overwritten: delete the file to re-baseline after a deliberate change.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from cudal1.schema import Finding, Severity, Stage, TimedWeights, Timing

log = logging.getLogger(__name__)


def baseline_path(
    root: Path, task_hash: str, device_name: str, torch_version: str, calls: int, weights: TimedWeights
) -> Path:
    # The default weights' key is the one baselines had before re-drawn weights were timed.
    regime = "" if weights == "default" else f"|{weights}"
    text = f"{task_hash}|{device_name}|{torch_version}|{calls}{regime}"
    return root / f"{hashlib.sha256(text.encode()).hexdigest()[:24]}.json"


def reference_drift(
    root: Path,
    timing: Timing,
    task_hash: str,
    device_name: str,
    torch_version: str,
    threshold: float,
    weights: TimedWeights = "default",
) -> Finding | None:
    """The drift finding for this run's reference time, storing it as the baseline when none exists."""
    path = baseline_path(root, task_hash, device_name, torch_version, timing.calls_per_sample, weights)
    live = timing.ref_median_ms
    key = {
        "baseline": str(path),
        "device_name": device_name,
        "torch": torch_version,
        "calls_per_sample": timing.calls_per_sample,
        "weights": weights,
    }
    try:
        stored = json.loads(path.read_text())
    except FileNotFoundError:
        _store(path, {"ref_median_ms": live, "samples": len(timing.ref_ms), "created": time.time(), **key})
        return None
    except (OSError, ValueError) as exc:
        log.warning("reference baseline %s unreadable: %s", path, exc)
        return None
    return drift_finding(live, float(stored.get("ref_median_ms", 0.0)), threshold, key)


def drift_finding(
    live_ms: float, baseline_ms: float, threshold: float, evidence: dict[str, Any]
) -> Finding | None:
    """``reference_drift`` (WARNING): the reference's live median is off its clean baseline by more
    than ``threshold`` (reward-hacks.md: ±15%), so this machine or run is not timing what the
    baseline did (sabotage, throttling, a neighbour). Recorded for audit; the paired speedup,
    measured in the same conditions for both sides, still stands."""
    if not (baseline_ms > 0 and math.isfinite(live_ms)):
        return None
    drift = live_ms / baseline_ms - 1
    if abs(drift) <= threshold:
        return None
    return Finding(
        "reference_drift",
        Severity.WARNING,
        Stage.INTEGRITY,
        f"the reference ran {drift:+.0%} against its baseline ({live_ms:.4g} ms vs {baseline_ms:.4g} ms)",
        {"live_ms": live_ms, "baseline_ms": baseline_ms, "drift": drift, "threshold": threshold, **evidence},
    )


def _store(path: Path, record: dict[str, object]) -> None:
    """Atomically, so two pools timing the same task never leave half a file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("could not store reference baseline %s: %s", path, exc)
