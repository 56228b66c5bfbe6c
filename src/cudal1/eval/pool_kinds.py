"""The one place a pool is made from the config: ``PoolConfig.kind`` picks the local pool (this
machine's devices) or the Ray pool (GPU actors of a cluster); both are a ``pool.Pool``."""

from __future__ import annotations

from collections.abc import Sequence

from cudal1.config import EvalConfig, PoolConfig
from cudal1.eval.pool import WORKERS_PER_DEVICE, EvalPool, Pool
from cudal1.eval.ray_pool import RayPool


def make_pool(
    config: EvalConfig,
    pool: PoolConfig | None = None,
    *,
    at_most: int | None = None,
    spares: int | None = None,
    devices: Sequence[str] | None = None,
) -> Pool:
    """A pool as ``pool`` says. For a local pool, ``spares`` and ``devices`` override the config's
    and ``at_most`` caps its workers (a final round of fewer candidates than workers). A Ray
    pool's size is the cluster's: one actor per GPU unless ``pool.ray.actors`` says otherwise."""
    pool = pool or PoolConfig()
    if pool.kind == "ray":
        return RayPool(config, pool)
    devices = list(pool.devices if devices is None else devices)
    workers = pool.workers or WORKERS_PER_DEVICE * max(len(devices), 1)
    return EvalPool(
        config,
        workers=min(workers, at_most or workers),
        spares=pool.spares if spares is None else spares,
        devices=devices,
    )
