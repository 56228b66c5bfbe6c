"""``K/N``: the K-th of N parts of a list of work, every N-th item from the K-th. How a machine of
several GPUs splits work into lanes, one part a lane: verify's records (``cudal1 verify
--shard``), the best-known benchmark's draw, the GPU tests (``pytest --shard``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

Shard = tuple[int, int]  # (K, N), 1 <= K <= N


def parse_shard(value: str) -> Shard:
    """``K/N`` as (K, N); a ``ValueError`` that says what is wrong otherwise."""
    try:
        k, n = (int(part) for part in value.split("/"))
    except ValueError:
        raise ValueError(f"{value}: expected K/N, e.g. 1/4") from None
    if not 1 <= k <= n:
        raise ValueError(f"{value}: K must be between 1 and N")
    return k, n


def part_of(items: Sequence[T], shard: Shard | None) -> list[T]:
    """The K-th of N parts of ``items``; all of them without ``shard``."""
    return list(items if shard is None else items[shard[0] - 1 :: shard[1]])
