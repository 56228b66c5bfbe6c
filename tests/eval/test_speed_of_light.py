"""Speed-of-light numbers reach the EvalResult (and the JSON) on CPU; the gate itself is a GPU
matter (tests/eval/test_roofline.py covers its arithmetic)."""

from __future__ import annotations

from cudal1.eval.evaluator import evaluate
from cudal1.schema import EvalResult


def test_eval_reports_speed_of_light_for_both_sides(task, fast_config, candidate):
    result = evaluate(task, candidate("        return torch.relu(self.lin(x))"), fast_config)
    assert result.ok, result.error
    sol = result.sol
    assert sol is not None
    assert sol.precision == "float32"
    assert sol.flops == 2 * 16 * 32 * 32  # one 16x32 @ 32x32 matmul
    assert sol.bytes_floor_ms > 0 and sol.flops_floor_ms > 0
    assert sol.ref_percent > 0 and sol.cand_percent > 0
    assert not [f for f in result.findings if f.code == "faster_than_memory_floor"]
    again = EvalResult.from_dict(result.to_dict())
    assert again.sol == sol


def test_reference_work_is_counted_once_per_signature(monkeypatch):
    """The flop count is per shapes, not per evaluation: a task's later candidates reuse it."""
    import torch

    from cudal1.eval import roofline
    from cudal1.eval.worker import Worker

    calls = []
    real = roofline.count_work
    monkeypatch.setattr(roofline, "count_work", lambda model, inputs: calls.append(1) or real(model, inputs))
    worker = Worker()
    worker.model = torch.nn.Linear(4, 4)
    worker.inputs = {"a": [torch.zeros(2, 4)], "b": [torch.ones(2, 4)], "c": [torch.ones(3, 4)]}
    assert worker.cmd_work("a") == worker.cmd_work("b")
    assert len(calls) == 1
    assert worker.cmd_work("c")["work"]["flops"] > worker.cmd_work("a")["work"]["flops"]
    assert len(calls) == 2
