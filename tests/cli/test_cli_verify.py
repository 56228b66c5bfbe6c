"""``cudal1 verify`` end to end on CPU: a tiny CUDA-L1-style records file with a correct candidate,
a wrong one, a record without code, one that flips a global flag and one that mutates its input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudal1.cli import app

REF = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.lin(x))


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return [32]
"""


def model_new(forward_body: str) -> str:
    return f"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
{forward_body}
"""


CORRECT = model_new("        return torch.clamp_min(self.lin(x), 0.0)")
WRONG = model_new("        return torch.relu(self.lin(x)) + 0.5")
FLAG = model_new("        torch.backends.cudnn.benchmark = True\n        return torch.relu(self.lin(x))")
MUTATES = model_new("        out = torch.relu(self.lin(x))\n        x.zero_()\n        return out")

RECORDS = [
    {"level_id": 1, "task_id": 1, "ref_code": REF, "custom_code": CORRECT, "score_default": 2.5},
    {"level_id": 1, "task_id": 2, "ref_code": REF, "custom_code": WRONG, "score_default": 1.7},
    {"level_id": 2, "task_id": 3, "ref_code": REF, "custom_code": "None", "score_default": None},
    {"level_id": 2, "task_id": 4, "ref_code": REF, "custom_code": FLAG, "score_default": 1.3},
    {"level_id": 3, "task_id": 5, "ref_code": REF, "custom_code": MUTATES, "score_default": 3.0},
]

FAST = [
    "--set", "correctness_trials=2",
    "--set", "timing_input_sets=1",
    "--set", "timing.warmup_ms=2",
    "--set", "timing.min_samples=5",
    "--set", "timing.max_samples=10",
    "--set", "timing.bootstrap_resamples=200",
    "--set", "sandbox.call_timeout_s=20",
]  # fmt: skip


@pytest.fixture
def records_file(tmp_path: Path) -> Path:
    path = tmp_path / "h100.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return path


def test_verify_end_to_end(records_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    args = ["verify", str(records_file), "--device", "cpu", "--workers", "2", "--budget-s", "1",
            "--json-out", str(out), "--set", f"build_cache={tmp_path / 'builds'}", *FAST]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.output.count("[") >= 5 and "/5] " in result.output  # one progress line per record

    report = json.loads(out.read_text())
    assert report["complete"] is True
    rows = {r["task"]: r for r in report["rows"]}
    assert [r["index"] for r in report["rows"]] == [0, 1, 2, 3, 4]

    ok = rows["L1_1"]
    assert ok["status"] == "verified", ok
    assert ok["claimed"] == 2.5 and ok["measured"] > 0 and ok["ci_low"] <= ok["measured"] <= ok["ci_high"]
    assert ok["ref_ms"] > 0 and ok["cand_ms"] > 0

    assert rows["L1_2"]["status"] == "incorrect" and rows["L1_2"]["stage"] == "correctness"
    assert rows["L1_2"]["claimed"] == 1.7 and rows["L1_2"]["measured"] is None

    assert rows["L2_3"]["status"] == "no code" and "2" not in report["results"]

    flag = rows["L2_4"]
    assert "global_state_changed (reject)" in flag["findings"], flag
    assert flag["status"] == "rejected"  # flags left changed in the process: the prompt forbids it

    assert rows["L3_5"]["status"] == "rejected" and "input_mutated (reject)" in rows["L3_5"]["findings"]

    full = report["results"]["0"]
    assert full["ok"] is True and full["timing"]["ref_ms"]
    s = report["summary"]
    assert s["counts"] == {
        "verified": 1,
        "rejected": 2,
        "incorrect": 1,
        "failed": 0,
        "untimed": 0,
        "evaluator error": 0,
        "no code": 1,
        "not run": 0,
    }
    assert s["compared"] == 1 and s["claimed"]["mean"] == pytest.approx(2.5)

    logged = [json.loads(line) for line in (tmp_path / "report.rows.jsonl").read_text().splitlines()]
    assert sorted(entry["row"]["index"] for entry in logged) == [0, 1, 2, 3, 4]
    assert "no code" in result.output and "input_mutated" in result.output


def test_missing_and_broken_records_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["verify", str(tmp_path / "nope.jsonl"), "--device", "cpu"])
    assert missing.exit_code == 2 and "no such records file" in " ".join(missing.output.split())
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"level_id": 1, "task_id": 1, "ref_code": "x"\n')
    res = runner.invoke(app, ["verify", str(broken), "--device", "cpu"])
    assert res.exit_code == 2 and "malformed JSON" in " ".join(res.output.split())


def test_only_no_code_records_needs_no_evaluator(records_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        app, ["verify", str(records_file), "--levels", "2", "--limit", "1", "--json-out", str(out)]
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())["rows"]
    assert [(r["task"], r["status"]) for r in rows] == [("L2_3", "no code")]


def test_deadline_leaves_records_not_run(records_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = ["verify", str(records_file), "--device", "cpu", "--deadline-s", "0", "--json-out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert report["summary"]["counts"]["not run"] == 4 and report["summary"]["counts"]["no code"] == 1
    assert {r["claimed"] for r in report["rows"] if r["status"] == "not run"} == {2.5, 1.7, 1.3, 3.0}


def test_resume_keeps_finished_rows_and_evaluates_the_rest(records_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    base = ["verify", str(records_file), "--device", "cpu", "--json-out", str(out), *FAST]
    first = CliRunner().invoke(app, [*base, "--tasks", "L1_2"])
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(app, [*base, "--tasks", "L1_2,L2_3", "--resume"])
    assert again.exit_code == 0, again.output
    assert "1 already done" in " ".join(again.output.split())
    report = json.loads(out.read_text())
    assert [(r["task"], r["status"]) for r in report["rows"]] == [("L1_2", "incorrect"), ("L2_3", "no code")]
    logged = [
        json.loads(line)["row"]["task"] for line in (tmp_path / "r.rows.jsonl").read_text().splitlines()
    ]
    assert logged == ["L1_2", "L2_3"]  # L1_2 was not evaluated again
    no_json = CliRunner().invoke(app, ["verify", str(records_file), "--resume"])
    assert no_json.exit_code == 2 and "--resume needs --json-out" in " ".join(no_json.output.split())


def test_parts_verified_apart_report_as_one(records_file: Path, tmp_path: Path) -> None:
    """--shard K/N in two lanes, then their rows files put together and resumed: the whole
    selection's report, nothing evaluated twice."""
    base = ["verify", str(records_file), "--device", "cpu", "--tasks", "L1_2,L2_3,L2_4", *FAST]
    for k in (1, 2):
        part = CliRunner().invoke(app, [*base, "--shard", f"{k}/2", "--json-out", str(tmp_path / f"p{k}.json")])
        assert part.exit_code == 0, part.output
    parts = [json.loads((tmp_path / f"p{k}.json").read_text())["rows"] for k in (1, 2)]
    assert [[r["task"] for r in rows] for rows in parts] == [["L1_2", "L2_4"], ["L2_3"]]
    whole = tmp_path / "all.json"
    (tmp_path / "all.rows.jsonl").write_text(
        "".join((tmp_path / f"p{k}.rows.jsonl").read_text() for k in (1, 2))
    )
    merged = CliRunner().invoke(app, [*base, "--json-out", str(whole), "--resume"])
    assert merged.exit_code == 0, merged.output
    assert "3 already done" in " ".join(merged.output.split())
    report = json.loads(whole.read_text())
    assert [r["task"] for r in report["rows"]] == ["L1_2", "L2_3", "L2_4"] and report["complete"]
    bad = CliRunner().invoke(app, [*base, "--shard", "3/2"])
    assert bad.exit_code == 2 and "K must be between 1 and N" in " ".join(bad.output.split())


def test_json_on_stdout_is_the_report_file_and_report_reads_it(records_file: Path, tmp_path: Path) -> None:
    """--format json is the one way to JSON on stdout; the report file is --json-out PATH."""
    out = tmp_path / "r.json"
    args = [
        "verify",
        str(records_file),
        "--levels",
        "2",
        "--limit",
        "1",
        "--format",
        "json",
        "--json-out",
        str(out),
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == json.loads(out.read_text())
    (tmp_path / "stdout.json").write_text(res.stdout)
    assert (
        CliRunner().invoke(app, ["report", str(tmp_path / "stdout.json"), "--format", "json"]).exit_code == 0
    )
    for command in (
        ["verify", str(records_file)],
        ["eval", "5_gelu", str(records_file)],
        ["runs", "show", "x"],
    ):
        assert CliRunner().invoke(app, [*command, "--json", str(out)]).exit_code == 2  # no second way


@pytest.mark.parametrize("name", ["release.json", "release.jsonl"])
def test_report_on_a_records_file_points_to_verify(records_file: Path, tmp_path: Path, name: str) -> None:
    """The CUDA-L1 release is JSON Lines: report said "Extra data: line 2 column 1"."""
    path = tmp_path / name
    path.write_text(records_file.read_text())
    res = CliRunner().invoke(app, ["report", str(path)])
    assert res.exit_code == 2
    message = " ".join(res.output.split())
    assert f"{path}: this is a records file" in message
    assert (
        f"run `cudal1 verify {path} --format json > report.json` (or --json-out report.json) first" in message
    )
