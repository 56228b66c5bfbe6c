"""The evaluator end to end on CPU: every stage, with candidates that crash, hang, raise, return
the wrong shape, are numerically wrong, and are right."""

from __future__ import annotations

import os
import threading

import pytest

from cudal1.config import EvalConfig
from cudal1.eval.pool import EvalPool, evaluate
from cudal1.schema import EvalRequest, EvalResult, Stage

RIGHT_BODY = "        return torch.relu(self.lin(x))"


def _eval(task, source, config: EvalConfig) -> EvalResult:
    return evaluate(task, source, config)


def test_right_candidate_passes_every_stage(task, fast_config, candidate):
    RIGHT = candidate(RIGHT_BODY)
    result = _eval(task, RIGHT, fast_config)
    assert [s.stage for s in result.stages] == [
        Stage.STATIC,
        Stage.COMPILE,
        Stage.LOAD,
        Stage.CORRECTNESS,
        Stage.TIMING,
    ]
    assert all(s.ok for s in result.stages)
    assert result.correctness is not None and result.correctness.passed == 5
    assert result.correctness.against == "float64"
    t = result.timing
    assert t is not None and result.ok
    assert len(t.ref_ms) == len(t.cand_ms) == len(t.ref_wall_ms) == len(t.cand_wall_ms) >= 5
    assert t.ci_low <= t.speedup <= t.ci_high
    assert t.stop_reason in {"precision", "budget", "max_samples"}


def test_segfault_costs_only_the_candidate(task, fast_config, candidate):
    """The first call crashes, before the device is taken: a load failure, the candidate's."""
    src = candidate("        import ctypes\n        ctypes.string_at(0)\n        return x")
    result = _eval(task, src, fast_config)
    assert result.failed_stage is Stage.LOAD
    assert "SIGSEGV" in result.error
    assert not result.ok and result.speedup is None


def test_hang_is_killed_after_the_timeout(task, fast_config, candidate):
    """A first call that never returns is killed after the first calls' time limit."""
    src = candidate("        while True:\n            pass")
    result = _eval(task, src, fast_config)
    assert result.failed_stage is Stage.LOAD
    limit = fast_config.sandbox.first_calls_timeout_s
    assert f"timed out after {limit:.0f}s during first_calls" in result.error


def test_without_first_calls_a_hang_is_a_correctness_failure(task, fast_config, candidate):
    src = candidate("        while True:\n            pass")
    result = _eval(task, src, fast_config.model_copy(update={"first_calls": 0}))
    assert result.failed_stage is Stage.CORRECTNESS
    assert "timed out" in result.error


def test_hang_at_import_is_a_compile_failure(task, fast_config):
    src = "import time\nwhile True:\n    time.sleep(1)\n"
    cfg = fast_config.model_copy(
        update={"sandbox": fast_config.sandbox.model_copy(update={"import_timeout_s": 3})}
    )
    result = _eval(task, src, cfg)
    assert result.failed_stage is Stage.COMPILE
    assert "timed out" in result.error


def test_exception_in_forward_is_reported_with_its_message(task, fast_config, candidate):
    result = _eval(task, candidate("        raise ValueError('boom from forward')"), fast_config)
    assert result.failed_stage is Stage.LOAD
    # The load stage's message is the candidate's own traceback (its frames only), ending in its error.
    assert 'File "candidate.py"' in result.error and "in forward" in result.error
    assert result.error.splitlines()[-1] == "ValueError: boom from forward"


def test_without_first_calls_a_forward_failure_is_a_correctness_failure(task, fast_config, candidate):
    cfg = fast_config.model_copy(update={"first_calls": 0})
    result = _eval(task, candidate("        raise ValueError('boom from forward')"), cfg)
    assert result.failed_stage is Stage.CORRECTNESS
    assert "ValueError: boom from forward" in result.error
    assert "first_calls" not in result.environment.device_s


def test_wrong_shape_is_named(task, fast_config, candidate):
    result = _eval(task, candidate("        return torch.relu(self.lin(x))[:, :3]"), fast_config)
    assert result.failed_stage is Stage.CORRECTNESS
    assert "output has shape (16, 3); the reference's is (16, 32)" in result.error


def test_numerically_wrong_fails_with_its_error(task, fast_config, candidate):
    result = _eval(task, candidate("        return torch.relu(self.lin(x)) * 1.01"), fast_config)
    assert result.failed_stage is Stage.CORRECTNESS
    assert result.correctness is not None and result.correctness.passed == 0
    assert result.correctness.max_rel_err > 1
    assert "differs" in result.error


def test_nan_never_passes(task, fast_config, candidate):
    body = "        y = torch.relu(self.lin(x))\n        y[0, 0] = float('nan')\n        return y"
    result = _eval(task, candidate(body), fast_config)
    assert result.failed_stage is Stage.CORRECTNESS
    assert "NaN" in result.error


def test_wrong_dtype_is_named(task, fast_config, candidate):
    result = _eval(task, candidate("        return torch.relu(self.lin(x)).double()"), fast_config)
    assert "output has dtype float64; the reference's is float32" in result.error


def test_syntax_error_fails_static_with_line(task, fast_config):
    result = _eval(task, "import torch\ndef broken(:\n", fast_config)
    assert result.failed_stage is Stage.STATIC
    assert "line 2" in result.error


def test_missing_model_new_fails_compile(task, fast_config):
    result = _eval(task, "import torch\n", fast_config)
    assert result.failed_stage is Stage.COMPILE
    assert "ModelNew" in result.error


def test_constructor_mismatch_fails_load(task, fast_config, candidate):
    RIGHT = candidate(RIGHT_BODY)
    src = RIGHT.replace("def __init__(self, n):", "def __init__(self):").replace(
        "nn.Linear(n, n)", "nn.Linear(32, 32)"
    )
    result = _eval(task, src, fast_config)
    assert result.failed_stage is Stage.LOAD
    assert "TypeError" in result.error


def test_candidate_sees_no_secrets_and_runs_in_its_own_dir(task, fast_config, monkeypatch, candidate):
    monkeypatch.setenv("CUDAL1_TEST_SECRET_KEY", "hunter2")
    body = (
        "        import os\n"
        "        if 'CUDAL1_TEST_SECRET_KEY' in os.environ:\n"
        "            raise RuntimeError('saw the secret')\n"
        f"        if os.getcwd() == {os.getcwd()!r}:\n"
        "            raise RuntimeError('shares the evaluator cwd')\n"
        "        return torch.relu(self.lin(x))"
    )
    result = _eval(task, candidate(body), fast_config)
    assert result.ok, result.error


def test_inputs_come_from_a_secret_seed_per_evaluation(task, fast_config, candidate):
    RIGHT = candidate(RIGHT_BODY)
    a = _eval(task, RIGHT, fast_config)
    b = _eval(task, RIGHT, fast_config)
    assert a.environment.seed != b.environment.seed


def test_broken_task_is_reported_as_the_task_not_the_candidate(task, fast_config, candidate):
    RIGHT = candidate(RIGHT_BODY)
    from cudal1.schema import Task

    broken = Task("broken", task.source + "\nraise ImportError('no such thing')\n")
    result = _eval(broken, RIGHT, fast_config)
    assert result.failed_stage is Stage.LOAD
    assert "reference" in result.error and "no such thing" in result.error


def test_pool_streams_results_and_survives_crashes(task, fast_config, candidate):
    RIGHT = candidate(RIGHT_BODY)
    sources = {
        "segv": candidate("        import ctypes\n        ctypes.string_at(0)\n        return x"),
        "right": RIGHT,
        "raise": candidate("        raise ValueError('x')"),
        "right2": candidate("        return torch.clamp_min(self.lin(x), 0)"),
    }
    with EvalPool(fast_config, workers=2, spares=1) as pool:
        got = {
            req.request_id: res
            for req, res in pool.evaluate_many(EvalRequest(task, s, k) for k, s in sources.items())
        }
    assert set(got) == set(sources)
    assert got["right"].ok and got["right2"].ok
    assert not got["segv"].ok and not got["raise"].ok


@pytest.mark.parametrize("flag", [True, False])
def test_timing_can_be_switched_off(task, fast_config, flag, candidate):
    RIGHT = candidate(RIGHT_BODY)
    result = _eval(task, RIGHT, fast_config.model_copy(update={"time": flag}))
    assert result.correct
    assert (result.timing is not None) is flag


def test_a_slow_build_does_not_hold_the_device(task, fast_config, candidate):
    """ModelNew's constructor (where many CUDA-L1 kernels call load_inline) runs before the device
    is taken: a candidate that reaches the device later but builds fast is timed first."""
    sources = {
        "slow_build": candidate("        return torch.relu(self.lin(x))", init_extra="        time.sleep(6)"),
        "slow_import": "import time\ntime.sleep(1)\n" + candidate(RIGHT_BODY),
    }
    sources["slow_build"] = "import time\n" + sources["slow_build"]
    with EvalPool(fast_config, workers=2, spares=2) as pool:
        order = [
            req.request_id
            for req, res in pool.evaluate_many(EvalRequest(task, s, k) for k, s in sources.items())
            if res.ok
        ]
    assert order == ["slow_import", "slow_build"]


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


def test_pool_pins_its_own_threads_never_its_caller(task, fast_config, candidate, monkeypatch):
    """Where cores allow a timed pair of its own, the pool keeps its threads off those cores,
    but the caller's threads (a trainer's, another pool's) stay where the caller put them."""
    from cudal1.eval import pool as pool_module

    caller = os.sched_getaffinity(0)
    general = {min(caller)}
    monkeypatch.setattr(
        pool_module, "split_cpus", lambda devices, cpus=None: (dict.fromkeys(devices, 0), general)
    )
    with EvalPool(fast_config, workers=1, spares=0) as pool:
        result = pool.evaluate(task, candidate(RIGHT_BODY))
        assert os.sched_getaffinity(0) == caller
        mine = [t for t in threading.enumerate() if t.name.startswith("cudal1-eval")]
        assert mine and all(os.sched_getaffinity(t.native_id) == general for t in mine)
    assert result.ok, result.error
    assert os.sched_getaffinity(0) == caller


def test_cpu_timing_interval_carries_the_cpu_reproducibility_floor(task, fast_config, candidate):
    """On CPU the interval adds the floor measured between CPU processes, not the GPU's."""
    timing = fast_config.timing.model_copy(
        update={"reproducibility_floor": 0.0, "reproducibility_floor_cpu": 0.3}
    )
    result = _eval(task, candidate(RIGHT_BODY), fast_config.model_copy(update={"timing": timing}))
    t = result.timing
    assert t is not None and result.ok
    assert t.speedup - t.ci_low >= 0.3 * t.speedup * 0.999
    assert t.ci_high - t.speedup >= 0.3 * t.speedup * 0.999
    # The GPU's gaps between kernels are no part of the CPU's floor, which was measured whole.
    assert result.environment.reproducibility == {"floor": 0.3, "reference_launches": 0}
