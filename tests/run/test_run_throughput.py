"""Throughput facts from a hand-made run: evaluations per device-hour, the devices' held share and
the seconds by part, as the run record, ``runs show``, its Markdown and the report state them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import get_args

from candidate_fixtures import GEMM_TASK
from rich.console import Console

from cudal1.config import OptimizeConfig
from cudal1.report.paper import report_data, run_source, throughput_table
from cudal1.report.runs import render_run_markdown, render_run_summary, summarize_run, throughput_line
from cudal1.report.tables import to_rich
from cudal1.run.directory import RunDirectory, add_wall_time, record_final, start_session
from cudal1.run.records import load_run
from cudal1.run.rows import Provenance
from cudal1.run.selection import PHASE_PART, device_held_seconds, phase_seconds
from cudal1.run.throughput import devices_used, run_throughput
from cudal1.schema import DevicePhase, Environment, EvalResult, PoolPlacement, Stage, StageRecord, Task

OTHER = Task("other", GEMM_TASK.source, level=2)
# One evaluation: compile 10 s; load 25 s, of which the first calls 20 s; correctness 30 s
# (reference build 5 + checked calls 25); timing 40 s (sampling 35 + late probes 5). By part the
# late probes are checks (they share the device); the sampling alone holds it.
DEVICE_S = {
    "first_calls": 20.0,
    "reference_build": 5.0,
    "check_calls": 25.0,
    "sampling": 35.0,
    "late_probes": 5.0,
}


def _result(task: str, placement: PoolPlacement | None = None, phases: bool = True) -> EvalResult:
    stages = (
        StageRecord(Stage.STATIC, True, 0.5),
        StageRecord(Stage.COMPILE, True, 10.0),
        StageRecord(Stage.LOAD, True, 25.0),
        StageRecord(Stage.CORRECTNESS, True, 30.0),
        StageRecord(Stage.TIMING, True, 40.0),
    )
    env = Environment(
        gpu="NVIDIA H100 80GB HBM3",
        device_s=DEVICE_S if phases else {},
        pool=placement or PoolPlacement("local", devices=1),
    )
    return EvalResult(task=task, candidate_hash="", device="cuda:0", stages=stages, environment=env)


def _run(path: Path, wall_s: float) -> None:
    """Two tasks, three evaluated candidates and one final re-evaluation, ``wall_s`` of wall time."""
    run = RunDirectory(path)
    with run.session() as db:
        start_session(db, run, [GEMM_TASK, OTHER], OptimizeConfig(), note="")
        for task, n in ((GEMM_TASK, 2), (OTHER, 1)):
            for i in range(n):
                cid = db.add_candidate(task, f"class ModelNew: X = {i}\n", Provenance(), label=f"s{i}")
                db.record_result(cid, _result(task.name))
        record_final(db, db.evaluated(GEMM_TASK.name)[0], _result(GEMM_TASK.name))
        add_wall_time(db, wall_s)


def test_a_results_seconds_split_into_build_first_calls_correctness_and_timing() -> None:
    assert set(PHASE_PART) == set(get_args(DevicePhase))  # every phase the evaluator records has a part
    assert phase_seconds(_result("t")) == {
        "build": 15.0,
        "first calls": 20.0,
        "correctness": 35.0,
        "timing": 35.0,
    }
    # Held alone: the timing's phases (sampling); the checks and the late probes share the device.
    assert device_held_seconds(_result("t")) == 35.0
    old = _result("t", phases=False)  # a result from before phases were recorded
    assert phase_seconds(old) == {"build": 35.0, "first calls": 0.0, "correctness": 30.0, "timing": 40.0}


def test_the_run_record_counts_every_evaluation_over_its_wall_time(tmp_path: Path) -> None:
    _run(tmp_path / "run", wall_s=1800.0)
    t = load_run(tmp_path / "run").throughput
    assert (t.evaluations, t.devices, t.wall_s) == (4, 1, 1800.0)
    assert t.per_device_hour == 8.0  # 4 evaluations in half an hour on one device
    assert t.held_s == 4 * 35.0 and t.held_share == 140.0 / 1800.0
    assert dict(t.part_s) == {"build": 60.0, "first calls": 80.0, "correctness": 140.0, "timing": 140.0}


def test_runs_show_states_throughput_at_80_columns_and_in_markdown_and_json(tmp_path: Path) -> None:
    _run(tmp_path / "run", wall_s=1800.0)
    summary = summarize_run(load_run(tmp_path / "run"))
    assert (summary.evaluations, summary.devices, summary.evaluations_per_device_hour) == (4, 1, 8.0)
    assert summary.seconds_by_part == {
        "build": 60.0,
        "first calls": 80.0,
        "correctness": 140.0,
        "timing": 140.0,
    }
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render_run_summary(summary, 80))
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines())
    words = " ".join(text.split())
    assert "4 evaluations on 1 GPU, 8 per GPU-hour; timing held it 8% of the wall time" in words
    assert "build 60, first calls 80 (beside others); checks 140 (device shared); timing 140 (alone)" in words
    markdown = render_run_markdown(summary)
    assert "8 per GPU-hour" in markdown and "checks 140" in markdown
    assert summary.to_dict()["evaluations_per_device_hour"] == 8.0


def test_the_report_has_a_throughput_table_for_runs(tmp_path: Path) -> None:
    _run(tmp_path / "run", wall_s=3600.0)
    source = run_source(load_run(tmp_path / "run"))
    table = throughput_table([source])
    assert table is not None
    assert table.plain_rows() == [[str(tmp_path / "run"), "4", "1", "4", "4", "60", "80", "140", "140"]]
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(to_rich(table, 80))
    assert all(len(line) <= 80 for line in console.export_text().splitlines())
    data = report_data([source])
    assert data["costs"][0]["throughput"]["per_device_hour"] == 4.0
    assert any(t["title"] == "throughput" for t in data["tables"])


def test_devices_come_from_where_the_pool_placed_the_results() -> None:
    assert devices_used([_result("t", PoolPlacement("local", devices=2))]) == 2
    ray = [
        _result("t", PoolPlacement("ray", node="n1", gpu_ids=("0",))),
        _result("t", PoolPlacement("ray", node="n1", gpu_ids=("1",))),
        _result("t", PoolPlacement("ray", node="n2", gpu_ids=("0",))),
        _result("t", PoolPlacement("ray", node="n2", gpu_ids=("0",))),
    ]
    assert devices_used(ray) == 3
    assert devices_used([]) == 1
    assert run_throughput([], 0.0).per_device_hour is None


def test_a_cpu_run_counts_per_device_hour_not_per_gpu_hour(tmp_path: Path) -> None:
    _run(tmp_path / "run", wall_s=1800.0)
    summary = summarize_run(load_run(tmp_path / "run"))
    cpu = dataclasses.replace(summary, device="cpu", gpu="x86_64")  # a CPU result names its processor
    assert throughput_line(cpu).startswith("4 evaluations on 1 device, 8 per device-hour")
    assert "per GPU-hour" in throughput_line(summary)
