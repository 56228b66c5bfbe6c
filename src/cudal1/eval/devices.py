"""Device names and CPU placement: which device ``"auto"`` means, how many GPUs this process
sees, and which CPU cores a pool's timed pairs and its other work run on.

The placement rules are pure functions of a CPU list and an SMT-sibling lookup (both
injectable, so they are tested without the machine they describe); ``pool.EvalPool`` applies
them to what it owns, its worker processes and its own threads, never to its caller's process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def resolve_device(device: str) -> str:
    """``"auto"`` to the first GPU where there is one, else the CPU; ``"cuda"`` to ``"cuda:0"``."""
    if device == "cuda":
        return "cuda:0"
    if device != "auto":
        return device
    import torch  # lazy: the CLI resolves devices before anything needs torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def visible_gpus() -> int:
    """CUDA devices this process sees (0 without CUDA)."""
    import torch  # lazy, as in resolve_device

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def device_type(device: str) -> str:
    """``"cuda"`` of ``"cuda:1"``: what decides whether there is a GPU queue to run ahead of."""
    return device.split(":")[0]


def split_cpus(
    devices: list[str], cpus: list[int] | None = None, siblings: Callable[[int], set[int]] | None = None
) -> tuple[dict[str, int], set[int] | None]:
    """Per device, one logical CPU of a physical core of its own (its SMT siblings left idle), on
    which both sides of the timed pair run, one after the other; everything else (imports, nvcc
    builds) runs on the remaining physical cores, when the machine has them to spare.

    One core for both sides, not one each: a launch-bound call is timed at the speed of the core
    that launches it, and on the GPU machines (virtual CPUs) two cores' speeds drift apart and
    back over seconds. With a core each, A-vs-A pairs of launch-bound tasks read 0.79-1.65x over
    consecutive stretches of one measurement and 1.31x [1.24, 1.39] overall on an H100 (issue
    10); on one core, both sides of a sample see the same speed and the pairing cancels it."""
    physical = _physical_cores(cpus, siblings)
    if len(physical) < len(devices) + 2:  # the rest needs two cores at least
        return {}, None
    # From the end: CPU 0 takes most interrupts.
    timing = {d: physical[-1 - i][0] for i, d in enumerate(devices)}
    general = {cpu for core in physical[: len(physical) - len(devices)] for cpu in core}
    return timing, general


def cpu_share(
    index: int, parts: int, cpus: list[int] | None = None, siblings: Callable[[int], set[int]] | None = None
) -> set[int]:
    """Share ``index`` of ``parts`` of the CPUs (default: this process's affinity), whole
    physical cores each (SMT siblings stay together), so that pools sharing a node (one Ray actor
    per GPU) neither time on nor build beside each other's cores. All of them when there are
    fewer physical cores than parts."""
    physical = _physical_cores(cpus, siblings)
    size = len(physical) // max(parts, 1)
    if size == 0:
        return {cpu for core in physical for cpu in core}
    return {cpu for core in physical[index % parts * size : (index % parts + 1) * size] for cpu in core}


def _physical_cores(cpus: list[int] | None, siblings: Callable[[int], set[int]] | None) -> list[list[int]]:
    """The logical CPUs of ``cpus`` (default: this process's affinity) grouped by physical core."""
    cpus = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    siblings = siblings or _siblings
    cores: dict[int, list[int]] = {}  # first logical CPU of a physical core -> its logical CPUs
    for cpu in cpus:
        group = sorted(siblings(cpu) & set(cpus)) or [cpu]
        cores.setdefault(group[0], group)
    return sorted(cores.values())


def _siblings(cpu: int) -> set[int]:
    """Logical CPUs sharing ``cpu``'s physical core (Linux sysfs); just ``cpu`` where unknown."""
    try:
        text = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text()
    except OSError:
        return {cpu}
    found: set[int] = set()
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        if lo.strip().isdigit():
            found.update(range(int(lo), int(hi or lo) + 1))
    return found or {cpu}


def pin_current_thread(cpus: set[int] | None) -> None:
    """Linux applies ``sched_setaffinity(0, ...)`` to the calling thread only."""
    if cpus:
        os.sched_setaffinity(0, cpus)
