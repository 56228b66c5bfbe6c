"""Runtime integrity findings on CPU: a candidate that gets the numbers right but mutates its
inputs, aliases them, patches comparison functions, changes global flags, leaves threads or
returns tensor subclasses is named for it."""

from __future__ import annotations

from cudal1.config import GuardConfig
from cudal1.eval.pool import evaluate
from cudal1.schema import Severity, Task

IDENTITY_TASK = Task(
    "scale_one",
    """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 1.0


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
""",
)


def _codes(result) -> dict[str, Severity]:
    return {f.code: f.severity for f in result.findings}


def test_input_mutation_is_rejected(task, fast_config, candidate):
    body = "        y = torch.relu(self.lin(x))\n        x.mul_(0.5)\n        return y"
    result = evaluate(task, candidate(body), fast_config)
    assert _codes(result).get("input_mutated") is Severity.REJECT
    assert not result.ok and result.speedup is None
    # The mutated stored inputs are not mistaken for tampered input generation (seen on a
    # CUDA-L1 record that ReLUs its input in place).
    assert "input_generation_tampered" not in _codes(result)


def test_returning_the_input_itself_is_rejected(fast_config):
    src = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    result = evaluate(IDENTITY_TASK, src, fast_config)
    assert result.correct  # the values are right...
    assert _codes(result).get("output_aliases_owned_memory") is Severity.REJECT  # ...but it is no result
    assert not result.ok


def test_patching_comparison_functions_is_rejected(task, fast_config, candidate):
    src = candidate("        return torch.relu(self.lin(x))") + "\ntorch.allclose = lambda *a, **k: True\n"
    result = evaluate(task, src, fast_config)
    assert _codes(result).get("functions_patched") is Severity.REJECT
    assert "torch.allclose" in next(f.message for f in result.findings if f.code == "functions_patched")


def test_global_flags_left_changed_are_rejected_unless_the_policy_warns(task, fast_config, candidate):
    """The prompt forbids it: a module that changes its caller's process is no drop-in."""
    src = "import torch\ntorch.backends.cudnn.benchmark = True\n" + candidate(
        "        return torch.relu(self.lin(x))"
    )
    result = evaluate(task, src, fast_config)
    finding = next(f for f in result.findings if f.code == "global_state_changed")
    assert finding.severity is Severity.REJECT and result.correct and not result.ok
    assert finding.evidence["changed"]["cudnn.benchmark"] == [False, True]
    warn = fast_config.model_copy(update={"guards": GuardConfig(process_state="warn")})
    result = evaluate(task, src, warn)
    assert _codes(result).get("global_state_changed") is Severity.WARNING
    assert result.ok  # the reference ran in its own process: the speedup itself stands


def test_scoped_flags_are_fine(task, fast_config, candidate):
    body = "        with torch.backends.cudnn.flags(enabled=True, benchmark=True):\n            return torch.relu(self.lin(x))"
    result = evaluate(task, candidate(body), fast_config)
    assert result.ok, result.error
    assert "global_state_changed" not in _codes(result)


def test_threads_left_running_are_rejected(task, fast_config, candidate):
    body = (
        "        import threading, time\n"
        "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "        return torch.relu(self.lin(x))"
    )
    result = evaluate(task, candidate(body), fast_config.model_copy(update={"time": False}))
    assert _codes(result).get("threads_left_running") is Severity.REJECT


def test_tensor_subclass_output_is_rejected(task, fast_config, candidate):
    extra = "\n\nclass Sneaky(torch.Tensor):\n    pass\n"
    body = "        return torch.relu(self.lin(x)).as_subclass(Sneaky)"
    result = evaluate(task, candidate(body) + extra, fast_config)
    assert _codes(result).get("output_not_plain_tensor") is Severity.REJECT
    assert not result.ok


def test_honest_candidate_has_no_runtime_findings(task, fast_config, candidate):
    result = evaluate(task, candidate("        return torch.relu(self.lin(x))"), fast_config)
    runtime = {
        "input_mutated",
        "output_aliases_owned_memory",
        "functions_patched",
        "global_state_changed",
        "threads_left_running",
        "output_not_plain_tensor",
    }
    assert not runtime & set(_codes(result))


def test_observation_rules_without_workers():
    from cudal1.eval.checks.integrity import observation_findings

    clean = {
        "outputs": {"values": [{"__tensor__": 0, "type": "Tensor"}]},
        "observations": {
            "inputs_digest": [7],
            "aliases": [],
            "state_changes": {},
            "threads_before": 3,
            "threads_after": 3,
        },
    }
    assert observation_findings(clean, [7], "check0") == []
    dirty = {
        "outputs": {"values": [{"__tensor__": 0, "type": "Lazy"}]},
        "observations": {
            "inputs_digest": [8],
            "aliases": ["output 0 shares memory with a input"],
            "state_changes": {"id:torch.allclose": [1, 2], "cudnn.benchmark": [False, True]},
            "threads_before": 3,
            "threads_after": 5,
        },
    }
    codes = {f.code: f.severity for f in observation_findings(dirty, [7], "check0")}
    # The worker's list of threads the candidate started decides when present: a library thread
    # (torch.compile's tqdm monitor) raises the count without being the candidate's ...
    library = {
        **clean,
        "observations": {**clean["observations"], "threads_after": 4, "candidate_threads": []},
    }
    assert observation_findings(library, [7], "check0") == []
    # ... and a thread started at construction is the candidate's, though older than the call.
    spinning = {**clean, "observations": {**clean["observations"], "candidate_threads": ["Thread-1 (_spin)"]}}
    (found,) = observation_findings(spinning, [7], "check0")
    assert found.code == "threads_left_running" and found.evidence["threads"] == ["Thread-1 (_spin)"]
    assert codes == {
        "output_not_plain_tensor": Severity.REJECT,
        "input_mutated": Severity.REJECT,
        "output_aliases_owned_memory": Severity.REJECT,
        "functions_patched": Severity.REJECT,
        "global_state_changed": Severity.REJECT,
        "threads_left_running": Severity.REJECT,
    }
    relaxed = {f.code: f.severity for f in observation_findings(dirty, [7], "check0", "warn")}
    assert relaxed["global_state_changed"] is relaxed["threads_left_running"] is Severity.WARNING


def test_tf32_level_errors_are_the_task_precision_for_conv_references_on_cuda():
    from cudal1.eval.checks.integrity import precision_finding, reference_may_use_tf32

    conv_task = "import torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.c = nn.Conv2d(3, 8, 3)\n"
    gemm_task = (
        "import torch\nclass Model:\n    def forward(self, a, b):\n        return torch.matmul(a, b)\n"
    )
    assert reference_may_use_tf32(conv_task, "cuda")
    assert not reference_may_use_tf32(conv_task, "cpu")
    assert not reference_may_use_tf32(gemm_task, "cuda")
    tf32_like = 3000.0  # errors ~2^-13 relative in an fp32 task
    assert precision_finding(tf32_like, "float32", "task") is not None
    assert precision_finding(tf32_like, "float32", "task", tf32_default=True) is None
    assert precision_finding(2.0**16, "float32", "task", tf32_default=True) is not None  # bf16-like
