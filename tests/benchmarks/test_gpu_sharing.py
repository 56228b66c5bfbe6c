"""benchmarks/gpu_sharing.py: a result's timed window joined with the GPUs' per-second log (dated
``nvidia-smi dmon``/``pmon`` lines, as the GPU check's lanes keep them)."""

from __future__ import annotations

import dataclasses
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from candidate_fixtures import GEMM_TASK, make_result

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from gpu_sharing import main  # noqa: E402

from cudal1.run.database import CandidateDB  # noqa: E402
from cudal1.run.rows import Provenance  # noqa: E402
from cudal1.schema import Environment, Task  # noqa: E402

T0 = datetime(2026, 11, 28, 9, 1, 30, tzinfo=UTC).timestamp()
UUID = "aaaa-1111"
SOURCE = "class ModelNew: X = 1\n"
DMON = """\
#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk  pviol  tviol
#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %      %      %    MHz    MHz      %   bool
{rows}"""
PMON = """\
#Date       Time        gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command
#YYYYMMDD   HH:MM:SS    Idx           #    C/G      %      %      %      %      %      %    name
{rows}"""


def _dmon(second: int, gpu: int, sm: int, clock: int) -> str:
    return f"20261128   09:01:{second:02d}    {gpu}     300     40     40    {sm}      5      0      0      0      0   3201   {clock}      0      0"


def _pmon(second: int, gpu: int, pid: int, sm: int) -> str:
    return f"20261128   09:01:{second:02d}    {gpu}     {pid}     C     {sm}      0      -      -      -      -    python3"


def test_other_processes_and_low_clocks_in_a_timed_window_are_found(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one line a window
    rows = tmp_path / "p1.rows.jsonl"  # the first window from a verify's rows, the second from a run
    windows = []
    for task, start, pids in (("L1_1", T0, [10, 11]), ("L1_2", T0 + 10, [20, 21])):
        settled = {"settled": {"quiet": True, "waited_ms": 412.5}} if task == "L1_1" else {}
        env = Environment(
            timed_window={"start": start, "end": start + 3.4, "pids": pids, "gpu_uuid": UUID, **settled}
        )
        windows.append(dataclasses.replace(make_result(task, SOURCE, 1.0), environment=env))
    rows.write_text(json.dumps({"row": {"index": 0, "task": "L1_1"}, "result": windows[0].to_dict()}) + "\n")
    run = tmp_path / "run"
    with CandidateDB(run / "optimize" / "candidates.db") as db:
        task = Task("L1_2", GEMM_TASK.source)
        db.record_result(
            db.add_candidate(task, SOURCE, Provenance(), label="s0"), windows[1]
        )
    host = tmp_path / "host"
    host.mkdir()
    # GPU 1 is the timed one (its uuid); GPU 0's busy seconds are another lane's.
    dmon = [_dmon(s, 1, 50, 1980 if s < 40 else 1500) for s in range(28, 46)]
    dmon += [_dmon(s, 0, 90, 900) for s in range(28, 46)]
    pmon = [_pmon(31, 1, 10, 40), _pmon(32, 1, 11, 40), _pmon(32, 1, 99, 30), _pmon(31, 0, 77, 90)]
    pmon += [_pmon(30, 1, 98, 20), _pmon(34, 1, 97, 20)]  # at the window's edges only
    pmon += [_pmon(41, 1, 20, 40), _pmon(42, 1, 21, 40)]
    (host / "dmon.txt").write_text(DMON.format(rows="\n".join(dmon)))
    (host / "pmon.txt").write_text(PMON.format(rows="\n".join(pmon)))
    gpus = tmp_path / "gpu.txt"
    gpus.write_text("index, uuid, name\n0, GPU-bbbb-2222, NVIDIA H200\n1, GPU-aaaa-1111, NVIDIA H200\n")
    assert main([str(rows), str(run), "--host", str(host), "--gpus", str(gpus), "--all"]) == 0
    out = capsys.readouterr().out
    # The first window (09:01:30-33) saw pid 99 beside its pair, at the top clock; the second
    # (09:01:40-43) saw only its pair, at 1500 MHz; GPU 0's pid 77 belongs to neither.
    # 99 ran inside the window (second 32 covers 31-32); 97 at its edge (second 34 covers
    # 33-34, and the window ends at 33.4); 98 before it (second 30 covers 29-30).
    assert "97 (20), 99 (30)*" in out
    assert "412.5" in out  # how long the first window waited for the GPU to come quiet
    assert "77 (" not in out and "98 (" not in out and "1500-1500" in out
    assert "2 timed windows, 2 inside the log; other processes on the GPU in 1 (1 inside a whole second" in out
    assert "(1980 MHz) in 1" in out
