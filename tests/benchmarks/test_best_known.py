"""The best-known-kernel benchmark's reading of a run: who wins a task, whether cudal1's kept kernel
holds against the best of torch.compile, CUDA graph and the published kernel, the draw, and
evaluations per GPU-hour over the benchmark's own wall time, which a killed call still leaves."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from candidate_fixtures import GEMM_TASK, make_result

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from best_known import (  # noqa: E402
    compare_task,
    draw,
    main,
    parse_shard,
    summarize,
    throughput_facts,
)
from wall_log import WALL_FILE, WallLog, call_seconds, total_wall_s  # noqa: E402

from cudal1.config import OptimizeConfig  # noqa: E402
from cudal1.run.database import CandidateDB  # noqa: E402
from cudal1.run.directory import RunDirectory, add_wall_time, start_session  # noqa: E402
from cudal1.run.records import TaskRecord  # noqa: E402
from cudal1.run.rows import Provenance  # noqa: E402
from cudal1.schema import Candidate, Task  # noqa: E402
from cudal1.tasks.shard import part_of  # noqa: E402


def _store(db, label, speedup, backend="baseline", origin="", base_id=None, **kw):
    source = f"class ModelNew:\n    LABEL = {label!r}\n"
    cid = db.add_candidate(
        GEMM_TASK, source, Provenance(backend=backend, origin=origin, base_id=base_id), label=label
    )
    db.record_result(cid, make_result(GEMM_TASK.name, source, speedup, **kw))
    return cid


def _record(db, best_id):
    rows = db.evaluated(GEMM_TASK.name)
    best = next(r for r in rows if r.id == best_id)
    return TaskRecord(GEMM_TASK.name, 1, best, None, best.result, db.counts(GEMM_TASK.name), 1), rows


@pytest.fixture
def db(tmp_path):
    with CandidateDB(tmp_path / "c.db") as d:
        yield d


def test_a_composition_over_the_published_kernel_wins_and_holds(db):
    _store(db, "torch-compile-default", 1.5)
    _store(db, "torch-compile-max-autotune", 1.8)
    _store(db, "cuda-graph", 1.1)
    seed = _store(db, "seed:h100", 1.6, backend="seed", origin="seed cuda-l1:h100")
    kept = _store(
        db, "cuda-graph@seed", 2.4, backend="compose", origin="seed cuda-l1:h100 > cuda-graph", base_id=seed
    )
    c = compare_task(*_record(db, kept))
    assert c.best_compile.name == "torch-compile-max-autotune" and c.published.speedup == 1.6
    assert c.best_other.speedup == 1.8 and c.kept_holds and c.composed_win
    assert c.kept.origin == "seed cuda-l1:h100 > cuda-graph"
    s = summarize([c])
    assert s["kept_below_best_other"] == [] and s["composed_wins"][0]["task"] == GEMM_TASK.name
    assert s["kept_geomean_over_best_compile"] == pytest.approx(2.4 / 1.8)


def test_a_kept_kernel_below_the_best_compile_mode_is_named(db):
    _store(db, "torch-compile-default", 3.0)
    weak = _store(db, "seed:h100", 1.2, backend="seed")
    c = compare_task(*_record(db, weak))
    assert not c.kept_holds and summarize([c])["kept_below_best_other"] == [GEMM_TASK.name]


def test_a_competitor_re_measured_in_a_final_stands_at_its_final(db):
    """L1_89 on an H200: a compile mode's search said 4.79x, its final 1.73x; the kept kernel's final
    is compared with that final, not with the search's number."""
    ma = _store(db, "torch-compile-max-autotune-no-cudagraphs", 4.79)
    default = _store(db, "torch-compile-default", 4.78)
    record, rows = _record(db, default)
    record = dataclasses.replace(record, final=make_result(GEMM_TASK.name, "x", 4.7))
    finals = {ma: make_result(GEMM_TASK.name, "x", 1.73), default: record.final}
    c = compare_task(record, rows, finals)
    assert c.kept.speedup == 4.7 and c.best_other.speedup == 4.7 and c.kept_holds
    assert dict((m.name, m.speedup) for m in c.compile)["torch-compile-max-autotune-no-cudagraphs"] == 1.73
    assert not compare_task(record, rows).kept_holds  # against the search's 4.79x it would not hold
    # Before the default mode's final: the kept max-autotune kernel at 1.73x, its rival due.
    first, rows = _record(db, ma)
    first = dataclasses.replace(first, final=finals[ma])
    c = compare_task(first, rows, {ma: finals[ma]})
    assert c.rival_due == "torch-compile-default" and not c.kept_holds
    assert summarize([c])["rival_finals_due"] == {GEMM_TASK.name: "torch-compile-default"}


def test_a_rival_that_failed_its_final_is_no_rival(db):
    """L3_48 on an H100 and an H200: max-autotune-no-cudagraphs read 2.88x in the search and was
    incorrect in its fresh build; the kept max-autotune kernel (2.70x) is not below it."""
    from cudal1.schema import Stage

    ncg = _store(db, "torch-compile-max-autotune-no-cudagraphs", 2.88)
    kept = _store(db, "torch-compile-max-autotune", 2.69)
    record, rows = _record(db, kept)
    record = dataclasses.replace(record, final=make_result(GEMM_TASK.name, "x", 2.70))
    wrong = make_result(GEMM_TASK.name, "x", None, correct=False, failed_stage=Stage.CORRECTNESS)
    c = compare_task(record, rows, {kept: record.final, ncg: wrong})
    ncg_cell = next(m for m in c.compile if m.name == "torch-compile-max-autotune-no-cudagraphs")
    assert ncg_cell.speedup is None and ncg_cell.status.startswith("final failed")
    assert c.kept_holds and c.kept_final and summarize([c])["kept_without_final"] == []


def test_the_reference_kept_holds_unless_a_rival_beats_eager_beyond_its_interval(db):
    """L2_21 on an H200: nothing beat the reference beyond its interval and the published kernel
    read 1.0006x [0.976, 1.026]; that is no rival the reference falls below."""
    _store(db, "seed:h100", 1.0006, backend="seed")
    record, rows = _record(db, _store(db, "reference", 1.0))
    record = dataclasses.replace(record, best=None)  # the task keeps the reference
    c = compare_task(record, rows)
    assert c.kept.origin == "reference" and c.best_other.ci_low < 1.0 and c.kept_holds
    _store(db, "torch-compile-default", 1.2)  # 1.2x, its interval well above 1.0
    assert not compare_task(record, db.evaluated(GEMM_TASK.name)).kept_holds


def test_a_rejected_published_kernel_shows_why_and_does_not_count(db):
    _store(db, "torch-compile-default", 1.3)
    _store(db, "seed:h100", 40.0, backend="seed", reject=True)
    kept = _store(db, "torch-compile-reduce-overhead", 1.4)
    c = compare_task(*_record(db, kept))
    assert c.published.speedup is None and c.published.status
    assert c.best_other.name == "torch-compile-reduce-overhead" and c.kept_holds and not c.composed_win


def test_the_draw_is_seeded_per_level_and_skips_records_without_a_kernel():
    records = []
    for level in (1, 2):
        for i in range(6):
            task = Task(name=f"L{level}_{i}", source=f"class Model: X = {level}{i}\n", level=level)
            records.append((task, None if i == 0 else Candidate(task.name, "class ModelNew: pass\n")))
    first, again = draw(records, 3, seed=7), draw(records, 3, seed=7)
    assert [t.name for t, _ in first] == [t.name for t, _ in again]
    assert [t.level for t, _ in first] == [1, 1, 1, 2, 2, 2]
    assert all(t.name not in ("L1_0", "L2_0") for t, _ in first)


def test_a_task_with_nothing_measured_yet_has_no_verdict(db):
    db.add_candidate(
        GEMM_TASK, "class ModelNew:\n    PENDING = 1\n", Provenance(backend="baseline"), label="cuda-graph"
    )
    record = TaskRecord(GEMM_TASK.name, 1, None, None, None, db.counts(GEMM_TASK.name), 0)
    c = compare_task(record, [])
    assert c.kept.speedup is None and c.kept.status == "not run"
    assert summarize([c])["tasks_measured"] == 0


def test_a_vs_a_reads_the_reference_anchor_into_a_column_and_a_summary_line(db):
    from best_known import a_vs_a_summary, table
    from rich.console import Console

    _store(db, "cuda-graph", 1.2)
    anchor = _store(db, "reference", 0.95, backend="baseline", origin="reference")
    c = compare_task(*_record(db, anchor))
    assert c.anchor is not None and c.anchor.speedup == pytest.approx(0.95) and not c.anchor.contains_one
    s = a_vs_a_summary([c])
    assert s["measured"] == 1 and s["contain_one"] == 0 and s["clocks"] == {"events": 1}
    assert s["line"].startswith("A-vs-A (the reference as its own candidate): 0/1 intervals contain 1.0")
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table([c], a_vs_a=True))
    text = console.export_text()
    assert "A-vs-A [95% CI] clock" in text and "0.950 [0.941,0.959] events !" in text
    assert "0/1 intervals contain 1.0" in text
    console.print(table([c]))
    assert console.export_text().count("A-vs-A") == 0


def test_the_a_vs_a_mode_runs_optimize_with_its_flag(tmp_path):
    import argparse

    from best_known import optimize_command

    args = argparse.Namespace(
        budget_s=1.0, final_budget_s=3.0, workers=6, resume=False, set=None, a_vs_a=True, session_s=0.0
    )
    command = optimize_command(args, tmp_path / "t.jsonl", tmp_path / "run")
    assert "--a-vs-a" in command and not any(a.startswith("budget.max_wall_s") for a in command)
    args.a_vs_a, args.session_s = False, 300.0
    command = optimize_command(args, tmp_path / "t.jsonl", tmp_path / "run")
    assert "--a-vs-a" not in command and "budget.max_wall_s=300.0" in command


def test_a_session_its_time_limit_stopped_leaves_the_benchmark_incomplete(tmp_path):
    """optimize closes a session that ``--session-s`` stopped (finals included) as complete; the
    benchmark, whose search is not done, is not."""
    from best_known import compare_run

    run = RunDirectory(tmp_path / "optimize")
    run.path.mkdir(parents=True)
    with CandidateDB(run.path / "candidates.db") as db:
        start_session(db, run, [GEMM_TASK], OptimizeConfig(), note="")
        _store(db, "reference", 1.0)
        db.set_meta("complete", "1")
        db.set_meta("stop_reason", "max_wall_s")
    assert compare_run(run.path)[1]["complete"] is False
    with CandidateDB(run.path / "candidates.db") as db:
        db.set_meta("stop_reason", "")  # the session that finished the search
    assert compare_run(run.path)[1]["complete"] is True


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_killed_call_leaves_its_time_up_to_its_last_step_and_resumed_calls_add_up(tmp_path):
    path = tmp_path / WALL_FILE
    clock = FakeClock(100.0)
    first = WallLog(path, fresh=True, clock=clock)
    clock.now = 140.0
    first.tick()
    clock.now = 190.0
    first.tick()  # then the GPU session is killed: no closing line
    with path.open("a") as out:
        out.write('{"call": 1, "wall')  # a line cut short by the kill
    clock.now = 5000.0  # another session, another machine: its own clock
    second = WallLog(path, fresh=False, clock=clock)
    clock.now = 5030.0
    second.tick()
    assert call_seconds(path) == {1: 90.0, 2: 30.0} and total_wall_s(path) == 120.0
    WallLog(path, fresh=True, clock=clock)  # a new benchmark, not --resume: the old calls go
    assert call_seconds(path) == {1: 0.0}


def test_waiting_on_a_call_records_its_time_and_returns_its_status(tmp_path):
    path = tmp_path / WALL_FILE
    log = WallLog(path, fresh=True)
    proc = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(0.3); sys.exit(3)"])
    assert log.wait(proc, step_s=0.05) == 3
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert "started" in lines[0] and {line["call"] for line in lines} == {1}
    assert len(lines) >= 2 and lines[-1]["wall_s"] >= 0.3  # it slept that long at least
    assert total_wall_s(path) == lines[-1]["wall_s"]


def test_evaluations_per_gpu_hour_use_the_benchmarks_time_else_the_runs():
    facts = throughput_facts(120, 2, bench_wall_s=7200.0, run_wall_s=1800.0)
    assert facts["evaluations_per_gpu_hour"] == 30.0 and facts["wall_from"] == "benchmark"
    older = throughput_facts(120, 2, bench_wall_s=None, run_wall_s=1800.0)
    assert older["evaluations_per_gpu_hour"] == 120.0 and older["wall_from"] == "run"


def test_the_report_counts_a_killed_calls_time_in_table_and_json(tmp_path, capsys):
    run = RunDirectory(tmp_path / "bench" / "optimize")
    run.path.mkdir(parents=True)
    with CandidateDB(run.path / "candidates.db") as db:
        start_session(db, run, [GEMM_TASK], OptimizeConfig(), note="")
        for label in ("reference", "torch-compile-default", "cuda-graph"):
            _store(db, label, 1.0)
        add_wall_time(db, 60.0)  # the one session that ended; the killed one recorded nothing
    wall = tmp_path / "bench" / WALL_FILE
    wall.write_text('{"call": 1, "wall_s": 3000.0}\n{"call": 2, "wall_s": 600.0}\n')
    out, md = tmp_path / "bench.json", tmp_path / "bench.md"
    (tmp_path / "bench" / "commands.txt").write_text("python benchmarks/best_known.py r.jsonl\nx --resume\n")
    args = ["unused.jsonl", "--run", str(tmp_path / "bench"), "--report-only", "--json", str(out)]
    assert main([*args, "--markdown", str(md)]) == 0
    text = md.read_text()
    assert "| task | compile best |" in text and f"| {GEMM_TASK.name} |" in text
    assert "`python benchmarks/best_known.py r.jsonl`, then 1 call with `--resume`" in text
    assert "3 evaluations in 3600 s" in text and "- complete: no" in text
    facts = json.loads(out.read_text())["facts"]
    assert (facts["wall_s"], facts["run_wall_s"], facts["evaluations"]) == (3600.0, 60.0, 3)
    assert facts["evaluations_per_gpu_hour"] == 3.0  # 3 in one hour, not 180 in the run's minute
    assert "3 evaluations in 3600 s (benchmark wall time) on 1 GPU(s): 3.0 per GPU-hour" in " ".join(
        capsys.readouterr().out.split()
    )


def test_the_shards_of_a_draw_cover_it_once_with_every_level_in_each():
    tasks = [Task(f"L{level}_{i}", f"src {level} {i}", level=level) for level in (1, 2, 3) for i in range(4)]
    drawn = [(t, Candidate(t.name, "k")) for t in tasks]
    parts = [part_of(drawn, (k, 3)) for k in (1, 2, 3)]
    names = [t.name for part in parts for t, _ in part]
    assert sorted(names) == sorted(t.name for t in tasks) and len(set(names)) == len(names)
    assert all({t.level for t, _ in part} == {1, 2, 3} for part in parts)
    assert part_of(drawn, None) == drawn
    assert parse_shard("2/4") == (2, 4)
    for bad in ("0/4", "5/4", "2", "a/b"):
        with pytest.raises(Exception, match="K"):
            parse_shard(bad)


def _shard_run(bench: Path, shard: str, task: Task, wall_s: float, gpu: str, done: bool) -> None:
    run = RunDirectory(bench / f"shard-{shard}" / "optimize")
    run.path.mkdir(parents=True)
    with CandidateDB(run.path / "candidates.db") as db:
        start_session(db, run, [task], OptimizeConfig(), note="")
        for label in ("reference", "torch-compile-default"):
            source = f"class ModelNew:\n    LABEL = {label!r}\n"
            cid = db.add_candidate(task, source, Provenance(backend="baseline"), label=label)
            result = make_result(task.name, source, 1.5 if label != "reference" else 1.0)
            db.record_result(
                cid, dataclasses.replace(result, environment=dataclasses.replace(result.environment, gpu=gpu))
            )
        if done:
            db.set_meta("complete", "1")
    (run.path.parent / WALL_FILE).write_text(json.dumps({"call": 1, "wall_s": wall_s}) + "\n")
    (run.path.parent / "commands.txt").write_text(
        f"python benchmarks/best_known.py r.jsonl --shard {shard.replace('-of-', '/')}\n"
    )


def test_the_report_reads_every_shard_into_one_table_over_their_gpu_time(tmp_path):
    """Two lanes measured half the draw each: one table, sorted by level; evaluations per GPU-hour
    over the shards' GPU time added up (not the longest shard's wall); incomplete while one is."""
    other = Task("L2_7", GEMM_TASK.source.replace("Model", "Model", 1) + "\n# L2_7\n", level=2)
    bench = tmp_path / "bench"
    _shard_run(bench, "2-of-2", other, 1800.0, "NVIDIA H200", done=False)
    _shard_run(bench, "1-of-2", GEMM_TASK, 1800.0, "NVIDIA H200", done=True)
    out = tmp_path / "b.json"
    assert main(["unused.jsonl", "--run", str(bench), "--report-only", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [r["task"] for r in report["rows"]] == [GEMM_TASK.name, "L2_7"]
    facts = report["facts"]
    assert (facts["shards"], facts["evaluations"], facts["gpu_hours"]) == (2, 4, 1.0)
    assert facts["evaluations_per_gpu_hour"] == 4.0 and facts["complete"] is False
    assert facts["gpu"] == "NVIDIA H200"


def test_shards_on_different_gpus_name_both(tmp_path):
    bench = tmp_path / "bench"
    _shard_run(bench, "1-of-2", GEMM_TASK, 600.0, "NVIDIA H100 80GB HBM3", done=True)
    _shard_run(
        bench,
        "2-of-2",
        Task("L2_7", GEMM_TASK.source + "\n# L2_7\n", level=2),
        600.0,
        "NVIDIA H200",
        done=True,
    )
    md = tmp_path / "b.md"
    assert main(["unused.jsonl", "--run", str(bench), "--report-only", "--markdown", str(md)]) == 0
    text = md.read_text()
    assert "each task's run on one NVIDIA H100 80GB HBM3 / NVIDIA H200" in text
    assert "`python benchmarks/best_known.py r.jsonl --shard 1/2`" in text and "- complete: yes" in text
