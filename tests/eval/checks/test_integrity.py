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
