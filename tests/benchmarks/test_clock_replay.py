"""benchmarks/clock_replay.py: stored GPU results replayed through the CPU's checks of the worker
clock, counting what they would have flagged."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from clock_replay import main, replay  # noqa: E402
from gpu_sharing import Stored  # noqa: E402


def _result(ref_call: float, cand_call: float, cand_wall_call: float, device: str = "cuda:0") -> dict:
    """A GPU result's timing: 30 samples of K=10 calls, walls the calls plus 0.05 ms of overhead
    a call (jittered), the candidate's wall at ``cand_wall_call`` a call."""
    rng = random.Random(0)
    n, gap = 30, 0.05
    return {
        "timing": {
            "device": device,
            "calls_per_sample": 10,
            "ref_ms": [ref_call] * n,
            "cand_ms": [cand_call] * n,
            "ref_wall_ms": [ref_call + gap + rng.uniform(-0.002, 0.002) for _ in range(n)],
            "cand_wall_ms": [cand_wall_call + gap + rng.uniform(-0.002, 0.002) for _ in range(n)],
        }
    }


def test_a_forged_worker_clock_is_flagged_and_an_honest_one_is_not():
    honest = replay(Stored("rows", "t", "", "", _result(1.0, 0.5, 0.5)))
    forged = replay(Stored("rows", "t", "", "", _result(1.0, 0.5, 1.0)))  # the events say 2x, the wall 1x
    assert honest is not None and not honest.flagged_net and not honest.flagged_quotient
    assert forged is not None and forged.flagged_net and forged.events == 2.0
    assert replay(Stored("rows", "t", "", "", _result(1.0, 0.5, 1.0, device="cpu"))) is None  # GPU results only


def test_the_summary_counts_what_each_view_flags(tmp_path: Path, capsys):
    rows = tmp_path / "p1.rows.jsonl"
    lines = [
        {"row": {"task": "honest"}, "result": _result(1.0, 0.5, 0.5)},
        {"row": {"task": "forged"}, "result": _result(1.0, 0.5, 1.0)},
        {"row": {"task": "no code"}, "result": None},
    ]
    rows.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main([str(rows)]) == 0
    out = capsys.readouterr().out
    assert "2 GPU results with samples; the net-wall view flags 1" in out and "forged" in out
