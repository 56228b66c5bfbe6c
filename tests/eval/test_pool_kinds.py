"""``make_pool``: the local pool as the config says, and a Ray pool that, without Ray
installed, names the extra to install."""

from __future__ import annotations

import sys

import pytest

from cudal1.config import PoolConfig
from cudal1.eval.pool_kinds import make_pool
from cudal1.eval.ray_pool import RayPoolError


def test_local_workers_default_to_two_per_device_and_can_be_capped(fast_config):
    with make_pool(fast_config, PoolConfig(spares=0, devices=("cpu",))) as pool:
        assert pool.capacity == 2 and list(pool.devices) == ["cpu"]
    with make_pool(fast_config, PoolConfig(spares=0), at_most=1) as pool:
        assert pool.capacity == 1
    with make_pool(fast_config, PoolConfig(workers=3, spares=0)) as pool:
        assert pool.capacity == 3


def test_without_ray_the_ray_pool_names_the_extra(fast_config, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now fails, as where it is missing
    with pytest.raises(RayPoolError, match=r"cudal1\[ray\]"):
        make_pool(fast_config, PoolConfig(kind="ray"))
