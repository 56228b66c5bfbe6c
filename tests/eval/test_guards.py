"""Behavioural guards (eval/checks/probes.py, the worker's observations, the precision policy) on CPU: RNG and
stream state, poisoned free memory, sparse perturbation, alternative shapes, perturbed init
inputs, effective precision, reference drift. Each hack test fails without its guard; an honest
candidate gets none of the new findings."""

from __future__ import annotations

import hashlib
import json

import pytest

from cudal1.audit import cases_dir
from cudal1.config import GuardConfig, ToleranceConfig
from cudal1.eval.checks.drift import baseline_path, drift_finding
from cudal1.eval.checks.global_state import observation_findings, side_stream_findings
from cudal1.eval.checks.precision import PrecisionLevels, effective_precision, precision_finding
from cudal1.eval.checks.probes import alternative_size, batch_constants, scaled_init_inputs
from cudal1.eval.pool import evaluate
from cudal1.schema import Severity, Stage, Task

TASKS = cases_dir() / "tasks"
NEW_CODES = {
    "rng_state_changed",
    "current_stream_changed",
    "side_streams",
    "ignores_input_change",
    "shape_specialised",
    "init_inputs_ignored",
    "input_range_assumed",
    "default_weights_assumed",
    "default_weights_unmapped",
    "probe_skipped",
    "reduced_precision",
    "reference_drift",
}

BATCHED = """
import torch, torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)

    def forward(self, x):
{body}
"""
SCALED = """
import torch, torch.nn as nn, torch.nn.functional as F

class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
{body}
"""
SOFTMAX = "import torch, torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n{body}\n"


def _task(name: str) -> Task:
    return Task(name, (TASKS / f"{name}.py").read_text())


def _codes(result) -> dict[str, Severity]:
    return {f.code: f.severity for f in result.findings}


@pytest.fixture
def cfg(fast_config):
    return fast_config.model_copy(update={"time": False})


# -- global state: RNG and stream ------------------------------------------------------------
def test_reseeding_the_rng_at_import_is_a_warning(task, cfg, candidate):
    src = "import torch\ntorch.manual_seed(42)\n" + candidate("        return torch.relu(self.lin(x))")
    result = evaluate(task, src, cfg)
    assert _codes(result).get("rng_state_changed") is Severity.WARNING
    assert result.correct and not result.rejected


def test_consuming_the_rng_in_forward_is_a_warning(task, cfg, candidate):
    body = "        torch.rand(1)\n        return torch.relu(self.lin(x))"
    result = evaluate(task, candidate(body), cfg)
    finding = next(f for f in result.findings if f.code == "rng_state_changed")
    assert finding.severity is Severity.WARNING and finding.evidence["during"] == "the call"


def test_stream_and_side_stream_rules():
    reply = {"observations": {"state_changes": {"cuda.current_stream": ["default", "stream 0x1"]}}}
    codes = {f.code: f.severity for f in observation_findings(reply, None, "check0")}
    assert codes == {"current_stream_changed": Severity.REJECT}  # not also global_state_changed
    assert [f.code for f in side_stream_findings(["model.stream"])] == ["side_streams"]
    assert side_stream_findings([]) == []


@pytest.mark.gpu
def test_current_stream_left_switched_is_rejected_on_gpu(task, cfg, candidate):
    src = "import torch\ntorch.cuda.set_stream(torch.cuda.Stream())\n" + candidate(
        "        return torch.relu(self.lin(x))"
    )
    result = evaluate(task, src, cfg.model_copy(update={"device": "cuda"}))
    assert _codes(result).get("current_stream_changed") is Severity.REJECT


@pytest.mark.gpu
def test_scoped_stream_is_fine_and_stream_attributes_are_listed_on_gpu(task, cfg, candidate):
    body = "        with torch.cuda.stream(self.s):\n            y = torch.relu(self.lin(x))\n        torch.cuda.current_stream().wait_stream(self.s)\n        return y"
    src = candidate(body, init_extra="        self.s = torch.cuda.Stream()\n")
    result = evaluate(task, src, cfg.model_copy(update={"device": "cuda"}))
    assert result.correct, result.error
    assert "current_stream_changed" not in _codes(result)
    finding = next(f for f in result.findings if f.code == "side_streams")
    assert finding.severity is Severity.WARNING and finding.evidence["streams"] == ["model.s"]


DOUBLE = Task(
    "double",
    "import torch, torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x * 2\n\n"
    "def get_inputs():\n    return [torch.randn(256, 256)]\n\ndef get_init_inputs():\n    return []\n",
)


def test_unwritten_output_fails_correctness(cfg):
    body = "        out = torch.empty_like(x)\n        out[:128] = x[:128] * 2\n        return out"
    result = evaluate(DOUBLE, SOFTMAX.format(body=body), cfg)
    assert result.failed_stage is Stage.CORRECTNESS
    # On CPU, glibc hands the poisoned block back most of the time, not always (see _poison);
    # either way the unwritten half fails, with the poison named when it was the poison.
    assert "poison" in result.error or "output differs" in result.error


# -- sparse perturbation ----------------------------------------------------------------------
FINGERPRINT = """
        flat = x.reshape(-1)
        key = (float(flat[0]), float(flat[-1]))
        if key not in self.cache:
            self.cache[key] = torch.relu(self.lin(x))
        return self.cache[key].clone()"""


def test_fingerprint_cache_is_caught_by_sparse_perturbation(task, cfg, candidate):
    src = candidate(FINGERPRINT, init_extra="        self.cache = {}\n")
    result = evaluate(task, src, cfg.model_copy(update={"seed": 1234}))
    finding = next(f for f in result.findings if f.code == "ignores_input_change")
    assert finding.severity is Severity.REJECT
    assert finding.evidence["reference_changed"] and not finding.evidence["candidate_changed"]
    assert result.failed_stage is Stage.CORRECTNESS and "perturbed" in result.error
    # Off, the same cache passes every fresh set: the guard is what catches it.
    off = evaluate(task, src, cfg.model_copy(update={"guards": GuardConfig(perturbed_elements=0)}))
    assert off.correct


# -- alternative shapes and init inputs -----------------------------------------------------
def test_hardcoded_batch_size_is_shape_specialised(cfg):
    src = BATCHED.format(body="        return torch.relu(self.lin(x.reshape(16, -1)))")
    result = evaluate(_task("batched_linear"), src, cfg)
    assert result.correct  # right on the task's own sizes...
    assert _codes(result).get("shape_specialised") is Severity.WARNING  # ...not on others
    assert result.environment.probes["shapes"]["sizes"] == {"batch_size": 9}
    strict = cfg.model_copy(update={"guards": GuardConfig(alternative_shapes="reject")})
    assert _codes(evaluate(_task("batched_linear"), src, strict)).get("shape_specialised") is Severity.REJECT


def test_hardcoded_init_value_is_rejected(cfg):
    result = evaluate(
        _task("elementwise"), SCALED.format(body="        return F.gelu(x * 1.7 + self.bias)"), cfg
    )
    assert result.correct
    finding = next(f for f in result.findings if f.code == "init_inputs_ignored")
    assert finding.severity is Severity.REJECT and not result.ok
    assert finding.evidence["init_inputs"] == [64, pytest.approx(2.55)]


def test_probe_helpers():
    src = "batch_size = 16\nBatch = 3\nn = 5\nflag = True\n"
    assert batch_constants(src) == {"batch_size": 16, "Batch": 3}
    assert [alternative_size(v) for v in (1, 2, 3, 16, 128)] == [2, 3, 2, 9, 65]
    assert scaled_init_inputs([64, 0.5, 0.0, "x"]) == [64, 0.75, 0.0, "x"]
    assert scaled_init_inputs([3, 8, 3]) is None


# -- precision --------------------------------------------------------------------------------
def test_fp16_arithmetic_in_an_fp32_task_is_reduced_precision(cfg):
    src = SOFTMAX.format(body="        return torch.softmax(x.half(), dim=-1).float()")
    # The perturbation and shifted-input probes off: a perturbed or scaled set makes the softmax
    # peaked, and fp16 then falls outside the fp32 tolerance (for some secret seeds, or always),
    # which is not what this test is about.
    cfg = cfg.model_copy(update={"guards": GuardConfig(perturbed_elements=0, input_range=False)})
    result = evaluate(_task("softmax_wide"), src, cfg)
    assert result.correct  # inside the fp32 tolerance: the outputs are all near 1e-3
    # fp16 rounding of the inputs, amplified by exp: between the 10-bit and the bf16 level.
    assert result.correctness is not None
    assert result.correctness.effective_precision in {"tf32/float16", "bfloat16"}
    assert _codes(result).get("reduced_precision") is Severity.REJECT and not result.ok
    relaxed = cfg.model_copy(
        update={"guards": GuardConfig(perturbed_elements=0, input_range=False, precision_policy="allow_half")}
    )
    assert "reduced_precision" not in _codes(evaluate(_task("softmax_wide"), src, relaxed))


CONV_SIGMOID_SUM = """
import torch, torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 32, 3)

    def forward(self, x):
        h = torch.nn.functional.max_pool2d(self.conv(x), 2)
        return torch.sigmoid(h).sum(dim=(2, 3))

def get_inputs():
    return [torch.randn(32, 8, 32, 32)]

def get_init_inputs():
    return []
"""
# The task's convolution with its operands rounded to TF32 (round to nearest, ties away), as
# cuDNN's TF32 algorithms do: what channels_last or torch.compile gets on a GPU by default.
TF32_CONV = """
import torch, torch.nn as nn, torch.nn.functional as F

def tf32(x):
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 32, 3)

    def forward(self, x):
        h = F.max_pool2d(F.conv2d(tf32(x), tf32(self.conv.weight), self.conv.bias), 2)
        return torch.sigmoid(h).sum(dim=(2, 3)){extra}
"""


def test_tf32_convolutions_pass_the_probes_where_their_error_outgrows_the_tolerance(cfg):
    """On an H200 every transform of a conv + maxpool + sigmoid + sum task (TF32 convolutions,
    which the 'task' policy allows) was 0.5x the tolerance on the task's inputs and 1.2x on the
    input-range probe's, and failed there (2026-11-28). A tolerance tight enough for the same to
    happen on a CPU: the probes' sets calibrate the allowance now, and a near miss there that it
    explains passes, noted; the task's own sets keep the tolerance."""
    guards = GuardConfig(conv_tf32="any_device", perturbed_elements=0)
    tight = cfg.model_copy(update={"guards": guards, "tolerance": ToleranceConfig(fp32=4e-5)})
    task = Task("conv_sigmoid_sum", CONV_SIGMOID_SUM)
    honest = evaluate(task, TF32_CONV.format(extra=""), tight)
    assert honest.correct and not honest.rejected, (honest.error, _codes(honest))
    assert honest.correctness is not None and honest.correctness.max_rel_err < 1
    noted = {k: v for k, v in honest.environment.probes.items() if "past_tolerance" in v}
    assert "input_range" in noted and all(v["ok"] for v in noted.values()), honest.environment.probes
    off = evaluate(task, TF32_CONV.format(extra=" + 0.01"), tight)  # about 2x the tolerance more
    assert not off.correct and "differs" in off.error


def test_precision_levels():
    """Without calibration, the unit roundoffs' quotients place the levels."""
    assert effective_precision(1.0, "float32")[0] == "float32"
    assert effective_precision(0.0, "float32")[0] == "float32"
    assert effective_precision(30.0, "float32")[0] == "float32"  # another fp32 summation order
    assert effective_precision(8192.0, "float32")[0] == "tf32/float16"
    assert effective_precision(65536.0, "float32")[0] == "bfloat16"
    assert effective_precision(4.0, "bfloat16")[0] == "bfloat16"
    assert effective_precision(None, "float32") is None
    assert precision_finding(8192.0, "float32", "allow_tf32") is None
    assert precision_finding(65536.0, "float32", "allow_tf32") is not None
    assert precision_finding(65536.0, "float32", "allow_half") is None


def test_calibrated_levels_judge_a_tf32_matmul_by_what_the_task_shows():
    """A 2048-term TF32 matmul showed 17.5x the fp32 reference's error on an H100 (issue 10):
    far under the nominal 8192x, but beyond what fp32 arithmetic in another order shows, once the
    reference's own fp16 and bf16 runs calibrate the levels for this task."""
    levels = PrecisionLevels(float16=30.0, bfloat16=240.0)
    assert effective_precision(17.5, "float32", levels)[0] == "tf32/float16"
    finding = precision_finding(17.5, "float32", "task", levels=levels)
    assert finding is not None and finding.severity is Severity.REJECT
    assert finding.evidence["limit"] == pytest.approx(30.0**0.5)
    assert precision_finding(2.5, "float32", "task", levels=levels) is None  # another fp32 order
    assert precision_finding(17.5, "float32", "allow_tf32", levels=levels) is None
    # Where the task's convolutions ran, up to twice what they show at TF32 (no isolation here).
    assert (
        precision_finding(17.5, "float32", "task", levels=PrecisionLevels(30.0, 240.0, allowed=9.0)) is None
    )
    assert precision_finding(240.0, "float32", "allow_tf32", levels=levels) is not None
    # Never under the tolerance's own factor: a task where fp16 barely differs flags nothing small.
    assert precision_finding(3.9, "float32", "task", levels=PrecisionLevels(float16=5.0)) is None


# -- reference drift --------------------------------------------------------------------------
def test_reference_drift_against_the_stored_baseline(task, fast_config, candidate):
    src = candidate("        return torch.relu(self.lin(x))")
    first = evaluate(task, src, fast_config)
    assert first.ok and "reference_drift" not in _codes(first)
    [path] = (fast_config.build_cache.parent / "baselines").glob("*.json")
    stored = json.loads(path.read_text())
    assert stored["ref_median_ms"] == pytest.approx(first.timing.ref_median_ms)
    stored["ref_median_ms"] *= 5  # as if the reference had been 5x slower when the baseline was taken
    path.write_text(json.dumps(stored))
    second = evaluate(task, src, fast_config)
    if second.timing is not None and second.timing.calls_per_sample != stored["calls_per_sample"]:
        pytest.skip("this run chose another K, so it has a baseline of its own")
    finding = next(f for f in second.findings if f.code == "reference_drift")
    assert finding.severity is Severity.WARNING and finding.evidence["drift"] < -0.15
    assert second.ok  # recorded, not rejected


def test_drift_rule():
    assert drift_finding(1.1, 1.0, 0.15, {}) is None
    assert drift_finding(1.2, 1.0, 0.15, {}).code == "reference_drift"
    assert drift_finding(0.8, 1.0, 0.15, {}).evidence["drift"] == pytest.approx(-0.2)


# -- honest candidates ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("task_name", "template", "body"),
    [
        ("batched_linear", BATCHED, "        return torch.relu(self.lin(x))"),
        ("elementwise", SCALED, "        return F.gelu(x * self.scale + self.bias)"),
        ("softmax_wide", SOFTMAX, "        return torch.softmax(x, dim=-1)"),
    ],
)
def test_honest_candidate_gets_none_of_the_new_findings(cfg, task_name, template, body):
    result = evaluate(_task(task_name), template.format(body=body), cfg)
    assert result.correct, result.error
    assert not NEW_CODES & set(_codes(result)), _codes(result)
    assert result.correctness is not None and result.correctness.effective_precision == "float32"
    probes = result.environment.probes
    assert probes["perturbation"]["ok"] and probes["perturbation"]["reference_changed"]
    assert probes["input_range"]["ok"] and probes["default_weights"].get("ok") is not False


def test_drift_baselines_are_kept_per_timed_weights(tmp_path):
    """Timed at re-drawn weights, a reference is not compared with its default-weight baseline,
    whose key stays what it was before re-drawn weights were timed."""
    key = ("task", "cpu", "2.13.0", 8)
    default = baseline_path(tmp_path, *key, "default")
    assert default.name == hashlib.sha256(b"task|cpu|2.13.0|8").hexdigest()[:24] + ".json"
    assert baseline_path(tmp_path, *key, "redrawn") != default
