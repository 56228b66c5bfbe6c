"""Tests for cudal1.tasks: source checks, imports, loaders and the bundled suite."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from cudal1.schema import Task
from cudal1.tasks import (
    TaskError,
    bundled_root,
    bundled_tasks,
    check_task_source,
    cpu_overrides,
    import_task_module,
    load_cuda_l1_records,
    load_kernelbench_dir,
    load_task_file,
    load_tasks,
    override_constants,
)

GOOD = """\
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale

n = 8

def get_inputs():
    return [torch.randn(n)]

def get_init_inputs():
    return [2.0]
"""

NEW = GOOD.replace("class Model(", "class ModelNew(")

GPU_TASKS = bundled_tasks("gpu")
CPU_TASKS = bundled_tasks("cpu")


def _ids(tasks: list[Task]) -> list[str]:
    return [f"L{t.level}-{t.name}" for t in tasks]


def _build(task: Task, device: str | None = None):
    module = import_task_module(task)
    torch.manual_seed(0)
    with torch.device(device) if device else torch.device("cpu"):
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
    return module, model, inputs


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


# ---------------------------------------------------------------- check_task_source / import


def test_check_accepts_good_source():
    check_task_source(GOOD, "good.py")


def test_check_names_missing_definitions():
    with pytest.raises(TaskError, match=r"^bad\.py: missing .*class Model"):
        check_task_source(NEW, "bad.py")
    source = GOOD.replace("def get_inputs", "def make_inputs").replace("def get_init_inputs", "def init")
    with pytest.raises(TaskError) as err:
        check_task_source(source, "bad.py")
    assert "def get_inputs" in str(err.value) and "def get_init_inputs" in str(err.value)
    assert "class Model" not in str(err.value)


def test_check_only_counts_top_level_definitions():
    nested = (
        "def outer():\n    class Model: pass\n    def get_inputs(): pass\n    def get_init_inputs(): pass\n"
    )
    with pytest.raises(TaskError, match="class Model"):
        check_task_source(nested, "nested.py")


def test_check_reports_syntax_error_line():
    broken = GOOD.replace("return x * self.scale", "return x * (self.scale")
    with pytest.raises(TaskError, match=r"^broken\.py: syntax error at line \d+"):
        check_task_source(broken, "broken.py")


def test_import_runs_source_in_fresh_module():
    task = Task("demo", GOOD)
    module = import_task_module(task)
    assert module.__file__ == "<demo>"
    assert module.__name__ in sys.modules
    model = module.Model(*module.get_init_inputs())
    (x,) = module.get_inputs()
    assert torch.equal(model(x), x * 2.0)
    assert import_task_module(task) is not module  # fresh every time


def test_import_supports_dataclasses():
    source = GOOD + "\nimport dataclasses\n@dataclasses.dataclass\nclass Cfg:\n    a: int = 1\n"
    assert import_task_module(Task("dc", source)).Cfg().a == 1


def test_import_wraps_errors_and_names_file(tmp_path: Path):
    path = tmp_path / "raises.py"
    task = Task("raises", GOOD + "\nraise RuntimeError('boom')\n", path=str(path))
    before = set(sys.modules)
    with pytest.raises(TaskError, match=rf"^{re.escape(str(path))}: failed to import: RuntimeError: boom$"):
        import_task_module(task)
    assert set(sys.modules) == before


def test_import_wraps_sys_exit():
    with pytest.raises(TaskError, match="failed to import: SystemExit"):
        import_task_module(Task("quits", GOOD + "\nimport sys\nsys.exit(3)\n"))


def test_import_rejects_model_that_is_not_a_module():
    source = GOOD.replace("class Model(nn.Module)", "class Model(object)").replace("super().__init__()", "")
    with pytest.raises(TaskError, match=r"^<plain>: Model is not a subclass of torch.nn.Module"):
        import_task_module(Task("plain", source))


def test_import_rejects_non_callable_get_inputs():
    source = GOOD + "\nget_inputs = [1, 2]\n"
    with pytest.raises(TaskError, match=r"^<notcallable>: get_inputs is not callable"):
        import_task_module(Task("notcallable", source))


def test_import_checks_syntax_before_running(tmp_path: Path):
    with pytest.raises(TaskError, match="syntax error at line 1"):
        import_task_module(Task("syn", "def (:\n", path=str(tmp_path / "syn.py")))


# ------------------------------------------------------------------------ override_constants


def test_override_replaces_only_named_values():
    source = "import torch\nn = 8  # keep this comment\nm: int = 3\nk = n * 2\n"
    out = override_constants(source, {"n": 2, "m": 5}, "x.py")
    assert out == "import torch\nn = 2  # keep this comment\nm: int = 5\nk = n * 2\n"


def test_override_unknown_or_repeated_name_is_an_error():
    with pytest.raises(TaskError, match=r"^x\.py: size override 'q' is not assigned"):
        override_constants("n = 1\n", {"q": 2}, "x.py")
    with pytest.raises(TaskError, match="assigned 2 times"):
        override_constants("n = 1\nn = 2\n", {"n": 3}, "x.py")
    with pytest.raises(TaskError, match="not assigned"):
        override_constants("def f():\n    n = 1\n", {"n": 3}, "x.py")


def test_override_rejects_non_literal():
    with pytest.raises(TaskError, match="not a Python literal"):
        override_constants("n = 1\n", {"n": object()}, "x.py")


# ----------------------------------------------------------------------- files and directories


def _write(path: Path, text: str = GOOD) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_load_task_file_name_level_origin(tmp_path: Path):
    task = load_task_file(_write(tmp_path / "level2" / "7_Conv.py"))
    assert (task.name, task.level, task.origin, task.path) == (
        "7_Conv",
        2,
        "file",
        str(tmp_path / "level2" / "7_Conv.py"),
    )
    assert load_task_file(_write(tmp_path / "misc" / "x.py")).level == 0


def test_load_task_file_errors_name_the_file(tmp_path: Path):
    path = _write(tmp_path / "no_model.py", NEW)
    with pytest.raises(TaskError, match=rf"^{re.escape(str(path))}: missing"):
        load_task_file(path)
    with pytest.raises(TaskError, match="cannot read"):
        load_task_file(tmp_path / "absent.py")


def test_load_kernelbench_root_orders_by_level_then_id(tmp_path: Path):
    for rel in [
        "level10/1_Late.py",
        "level2/10_B.py",
        "level2/2_A.py",
        "level1/2_Y.py",
        "level1/1_X.py",
        "level1/extra.py",
        "level1/__init__.py",
        "notes/1_ignored.py",
    ]:
        _write(tmp_path / rel)
    tasks = load_kernelbench_dir(tmp_path)
    assert [(t.level, t.name) for t in tasks] == [
        (1, "1_X"),
        (1, "2_Y"),
        (1, "extra"),
        (2, "2_A"),
        (2, "10_B"),
        (10, "1_Late"),
    ]
    assert {t.origin for t in tasks} == {"kernelbench"}
    assert [t.name for t in load_kernelbench_dir(tmp_path / "level2")] == ["2_A", "10_B"]
    assert [t.level for t in load_kernelbench_dir(tmp_path / "level2")] == [2, 2]


def test_load_kernelbench_dir_errors(tmp_path: Path):
    with pytest.raises(TaskError, match="no task files"):
        load_kernelbench_dir(tmp_path)
    _write(tmp_path / "level1" / "1_A.py")
    _write(tmp_path / "level2" / "1_A.py")
    with pytest.raises(TaskError, match="task name '1_A' is used by"):
        load_kernelbench_dir(tmp_path)
    _write(tmp_path / "level2" / "1_A.py", "class Model(:\n")
    with pytest.raises(TaskError, match=r"level2/1_A\.py: syntax error"):
        load_kernelbench_dir(tmp_path)


def test_load_tasks_dispatch(tmp_path: Path):
    py = _write(tmp_path / "level3" / "1_T.py")
    assert [t.name for t in load_tasks(py)] == ["1_T"]
    assert [t.level for t in load_tasks(tmp_path)] == [3]
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_text("\n".join(json.dumps(_release(1, i, "None")) for i in (1, 2, 1)) + "\n")
    assert [t.name for t in load_tasks(jsonl)] == ["L1_1", "L1_2"]
    with pytest.raises(TaskError, match="unknown task format"):
        load_tasks(_write(tmp_path / "x.txt", "hi"))
    with pytest.raises(TaskError, match="no such file"):
        load_tasks(tmp_path / "missing.py")


# --------------------------------------------------------------------------------- CUDA-L1


def _release(level: int, task_id: int, custom, score=1.5) -> dict:
    # Field set of optimized_cuda_code/<gpu>.json in github.com/deepreinforce-ai/CUDA-L1.
    return {
        "level_id": level,
        "task_id": task_id,
        "ref_code": GOOD,
        "custom_code": custom,
        "cuda_graph_code": GOOD,
        "cudnn_code": GOOD,
        "score_default": score,
        "score_torch_compile_default": 1.1,
        "score_torch_compile_reduce_overhead": 1.2,
        "score_cuda_graph": 0.9,
        "score_cudnn": 1.0,
    }


RELEASE = [_release(1, 1, NEW, 2.75), _release(1, 2, None, None), _release(3, 7, "None", 1.128)]


def _check_release(pairs, label: str):
    assert [(t.name, t.level, t.origin, t.path) for t, _ in pairs] == [
        ("L1_1", 1, "cuda-l1", None),
        ("L1_2", 1, "cuda-l1", None),
        ("L3_7", 3, "cuda-l1", None),
    ]
    first = pairs[0][1]
    assert first is not None and first.source == NEW and first.task_name == "L1_1"
    assert first.claimed_speedup == 2.75 and first.label == label
    assert pairs[1][1] is None and pairs[2][1] is None


def test_release_jsonl_even_with_json_suffix(tmp_path: Path):
    for name in ("h100.json", "h100.jsonl"):
        path = tmp_path / name
        path.write_text("\n".join(json.dumps(r) for r in RELEASE) + "\n\n")
        _check_release(load_cuda_l1_records(path), "cuda-l1:h100")


def test_release_json_list(tmp_path: Path):
    path = tmp_path / "a100.json"
    path.write_text(json.dumps(RELEASE, indent=2))
    _check_release(load_cuda_l1_records(path), "cuda-l1:a100")


def test_release_codes_keyed_by_level(tmp_path: Path):
    # Layout of optimized_cuda_code/codes/<gpu>.json: {"1": [{task_id, ref_code, custom_code, score}]}.
    path = tmp_path / "h20.json"
    data = {
        "1": [{"task_id": 4, "ref_code": GOOD, "custom_code": NEW, "score": "1.750"}],
        "2": [{"task_id": 9, "ref_code": GOOD, "custom_code": None, "score": "None"}],
    }
    path.write_text(json.dumps(data, indent=2))
    pairs = load_cuda_l1_records(path)
    assert [(t.name, t.level) for t, _ in pairs] == [("L1_4", 1), ("L2_9", 2)]
    assert pairs[0][1] is not None and pairs[0][1].claimed_speedup == 1.75
    assert pairs[1][1] is None


def test_release_malformed_line_names_file_and_line(tmp_path: Path):
    path = tmp_path / "bad.jsonl"
    lines = [json.dumps(RELEASE[0]), json.dumps(RELEASE[1]), '{"level_id": 1, "task_id": ']
    path.write_text("\n".join(lines))
    with pytest.raises(TaskError, match=rf"^{re.escape(str(path))} line 3: malformed JSON"):
        load_cuda_l1_records(path)
    path.write_text(json.dumps(RELEASE[0]) + "\n[1, 2]\n")
    with pytest.raises(TaskError, match=rf"^{re.escape(str(path))} line 2: expected a JSON object"):
        load_cuda_l1_records(path)


def test_release_bad_records(tmp_path: Path):
    path = tmp_path / "bad.json"
    cases = [
        ({**RELEASE[0], "ref_code": NEW}, "record 0: task L1_1 ref_code: missing"),
        ({**RELEASE[0], "ref_code": None}, "ref_code is missing"),
        ({**RELEASE[0], "score_default": "fast"}, "score_default 'fast' is not a number"),
        ({**RELEASE[0], "custom_code": 3}, "custom_code is int"),
        ({"ref_code": GOOD}, "neither 'task' nor"),
    ]
    for record, message in cases:
        path.write_text(json.dumps([record]))
        with pytest.raises(TaskError, match=f"^{re.escape(str(path))}.*{message}"):
            load_cuda_l1_records(path)
    path.write_text('[{"level_id": 1,\n "task_id": }]')
    with pytest.raises(TaskError, match="malformed JSON at line 2"):
        load_cuda_l1_records(path)


def test_release_conflicting_ref_code(tmp_path: Path):
    path = tmp_path / "c.jsonl"
    other = {**RELEASE[0], "ref_code": GOOD.replace("n = 8", "n = 9")}
    path.write_text(json.dumps(RELEASE[0]) + "\n" + json.dumps(other) + "\n")
    with pytest.raises(TaskError, match="two different ref_code"):
        load_cuda_l1_records(path)


def test_cudal1_export_records(tmp_path: Path):
    path = tmp_path / "export.jsonl"
    records = [
        {"task": "1_gemm", "level": 1, "ref_code": GOOD, "custom_code": NEW, "claimed_speedup": 1.3},
        {
            "task": "1_gemm",
            "level": 1,
            "ref_code": GOOD,
            "custom_code": NEW + "\n",
            "claimed_speedup": None,
            "label": "search",
            "origin": "bundled",
        },
    ]
    path.write_text("\n".join(json.dumps(r) for r in records))
    (t1, c1), (t2, c2) = load_cuda_l1_records(path)
    assert (t1.name, t1.level, t1.origin) == ("1_gemm", 1, "cuda-l1")
    assert c1 is not None and c1.claimed_speedup == 1.3 and c1.task_name == "1_gemm"
    assert t2.origin == "bundled" and c2 is not None and c2.label == "search" and c2.claimed_speedup is None


def test_an_unknown_origin_in_an_export_record_is_an_error(tmp_path: Path):
    path = tmp_path / "export.jsonl"
    path.write_text(json.dumps({"task": "1_gemm", "ref_code": GOOD, "custom_code": NEW, "origin": "bundeld"}))
    with pytest.raises(TaskError, match=r"origin 'bundeld' is not one of bundled, kernelbench"):
        load_cuda_l1_records(path)


# ---------------------------------------------------------------------------- bundled suite


def test_bundled_suite_shape():
    assert bundled_root().is_dir()
    levels = [t.level for t in GPU_TASKS]
    assert levels == sorted(levels)
    assert {lvl: levels.count(lvl) for lvl in set(levels)} == {1: 6, 2: 6, 3: 4}
    assert {t.origin for t in GPU_TASKS} == {"bundled"}
    assert [t.name for t in CPU_TASKS] == [t.name for t in GPU_TASKS]
    with pytest.raises(ValueError):
        bundled_tasks("tpu")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "task", GPU_TASKS + CPU_TASKS, ids=_ids(GPU_TASKS) + [f"cpu-{i}" for i in _ids(CPU_TASKS)]
)
def test_bundled_task_checks_and_imports(task: Task):
    check_task_source(task.source, task.name)
    module = import_task_module(task)
    assert issubclass(module.Model, torch.nn.Module)
    assert "cuda" not in task.source  # the evaluator places inputs; tasks stay device-agnostic


def test_cpu_overrides_change_exactly_the_named_constants():
    overrides = cpu_overrides()
    gpu = {t.name: t for t in GPU_TASKS}
    assert set(overrides) == set(gpu)  # every bundled task has CPU sizes
    for cpu_task in CPU_TASKS:
        gpu_task = gpu[cpu_task.name]
        assert cpu_task.source != gpu_task.source
        assert cpu_task.path == gpu_task.path
        cpu_consts, gpu_consts = _constants(cpu_task.source), _constants(gpu_task.source)
        for name, value in overrides[cpu_task.name].items():
            assert cpu_consts[name] == value
            assert gpu_consts[name] != value, f"{cpu_task.name}: {name} override equals the GPU size"
        untouched = set(gpu_consts) - set(overrides[cpu_task.name])
        assert {n: cpu_consts[n] for n in untouched} == {n: gpu_consts[n] for n in untouched}


def _constants(source: str) -> dict:
    return {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }


@pytest.mark.parametrize("task", CPU_TASKS, ids=_ids(CPU_TASKS))
def test_cpu_variant_is_small_fast_and_finite(task: Task):
    _, model, inputs = _build(task)
    assert inputs and all(isinstance(x, torch.Tensor) and x.device.type == "cpu" for x in inputs)
    assert _nbytes(inputs) < 1_000_000
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad():
        first = model(*inputs)
        with FlopCounterMode(display=False) as counter:
            out = model(*inputs)
    assert torch.isfinite(out).all()
    assert torch.equal(out, first)  # deterministic forward
    # Work, not time, keeps the CPU suite fast (tests assert no timings): under 100
    # MFLOP, i.e. a few ms on a 2-core CPU.
    assert counter.get_total_flops() < 100e6


@pytest.mark.parametrize("task", GPU_TASKS, ids=_ids(GPU_TASKS))
def test_gpu_variant_shapes_and_size(task: Task):
    # Meta tensors run the GPU-size forward without memory or time: shapes must agree, and the
    # work must be in the band that takes ~0.05-5 ms on an H100 (fp32 ~50 TFLOP/s, ~3 TB/s).
    _, model, inputs = _build(task, device="meta")
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(*inputs)
    moved = _nbytes([*inputs, out, *model.parameters()])
    estimate_ms = max(counter.get_total_flops() / 50e12, moved / 3e12) * 1e3
    assert 0.03 < estimate_ms < 5, f"{task.name}: ~{estimate_ms:.3f} ms on an H100"
    assert moved < 300e6
