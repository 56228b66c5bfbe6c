"""CPU placement rules (eval/devices.py) on a described machine: no processes, no GPU."""

from __future__ import annotations

from cudal1.eval.devices import cpu_share, split_cpus


def test_timed_pair_gets_a_whole_physical_core():
    """Both sides of the pair run on one logical CPU whose SMT sibling stays idle: nvcc never
    shares a core with a timed side, and both sides launch at the same core's speed."""
    smt = {c: {c % 8, c % 8 + 8} for c in range(16)}  # 8 physical cores, siblings c and c + 8
    timing, general = split_cpus(["cuda:0", "cuda:1"], list(range(16)), smt.__getitem__)
    assert timing == {"cuda:0": 7, "cuda:1": 6}
    assert general == set(range(16)) - {6, 7, 14, 15}
    plain = {c: {c} for c in range(4)}
    assert split_cpus(["cuda:0"], list(range(4)), plain.__getitem__) == ({"cuda:0": 3}, {0, 1, 2})
    assert split_cpus(["cuda:0"], [0, 1], plain.__getitem__) == ({}, None)


def test_pools_sharing_a_node_get_whole_cores_of_their_own():
    """One Ray actor per GPU, each with a pool: 8 physical cores (siblings c and c + 8) over 4 GPUs."""
    smt = {c: {c % 8, c % 8 + 8} for c in range(16)}
    shares = [cpu_share(i, 4, list(range(16)), smt.__getitem__) for i in range(4)]
    assert shares[0] == {0, 1, 8, 9} and shares[3] == {6, 7, 14, 15}
    assert set().union(*shares) == set(range(16)) and sum(map(len, shares)) == 16
    assert cpu_share(1, 4, [0, 1], None) == {0, 1}  # fewer cores than GPUs: all of them
