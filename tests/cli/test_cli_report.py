"""``cudal1 report`` over a real CPU run and verify reports from two GPUs: the paper's statistics,
baselines measured in the same run, cost, portability, the three formats, and an HTML page that a
real headless Chromium renders with its figures and tables."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest
from run_fixtures import CONV, fast_config
from typer.testing import CliRunner

from cudal1.cli import app
from cudal1.schema import Correctness, Environment, EvalResult, SpeedOfLight, Stage, StageRecord, Timing
from cudal1.search.optimize import optimize
from cudal1.search.verify import Row


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    cfg = fast_config(tmp, rounds=0, baseline_labels=["cuda-graph", "cudnn-benchmark", "channels-last"])
    optimize([CONV], tmp / "run", cfg)
    return tmp / "run"


def result(task: str, gpu: str, speedup: float) -> EvalResult:
    t = (1.0, 1.0)
    timing = Timing("cuda", 1, t, t, t, t, speedup, speedup * 0.98, speedup * 1.02, speedup, "precision")
    return EvalResult(
        task=task, candidate_hash="h", device="cuda",
        stages=(StageRecord(Stage.TIMING, True, 1.0),),
        correctness=Correctness(5, 5, 0.0, 0.0, 1.0, "float64"), timing=timing,
        environment=Environment(gpu=gpu, device_s={"sampling": 2.5, "check_calls": 0.5}),
        sol=SpeedOfLight("fp32", 1e9, 1e6, 0.01, 0.02, 20.0, 20.0 * speedup, "nominal"),
    )  # fmt: skip


def verify_report(path: Path, gpu: str, speedups: dict[str, float]) -> Path:
    rows, results = [], {}
    for i, (task, x) in enumerate(speedups.items()):
        rows.append(
            asdict(
                Row(
                    i,
                    int(task[1]),
                    task,
                    "verified",
                    claimed=2.0,
                    measured=x,
                    ci_low=x * 0.98,
                    ci_high=x * 1.02,
                )
            )
        )
        results[str(i)] = result(task, gpu, x).to_dict()
    rows.append(asdict(Row(9, 3, "L3_9", "incorrect", claimed=3.0, stage="correctness")))
    path.write_text(json.dumps({"environment": {"gpu": gpu}, "rows": rows, "results": results}))
    return path


def invoke(*args: str) -> str:
    out = CliRunner().invoke(app, ["report", *args])
    assert out.exit_code == 0, out.output
    return out.stdout


def test_run_report_in_every_format(run_dir: Path) -> None:
    data = json.loads(invoke(str(run_dir), "--format", "json"))
    stats = data["stats"]["cpu"]["all"]
    assert stats["tasks"] == 1 and stats["correct"] == 1
    (entry,) = data["entries"]
    # on a CPU, CUDA graphs and cuDNN flags are the reference renamed: not proposed, not reported
    assert entry["task"] == CONV.name and "channels-last" in entry["baselines"]
    assert not {"cuda-graph", "cudnn-benchmark"} & set(entry["baselines"])
    # the kept kernel is a variant only when it beat the reference beyond its interval
    assert entry["speedup"] == 1.0 if entry["label"] == "reference" else entry["ci_low"] > 1.0
    assert data["costs"][0]["kind"] == "run" and data["costs"][0]["gpu_seconds"] > 0

    table = invoke(str(run_dir))
    words = " ".join(table.split())
    assert "speedup (x) over eager on cpu" in words and "channels_last" in words and "…" not in table
    assert "CUDA graph" not in words and "GPU: cpu" not in words
    assert all(len(line) <= 80 for line in table.splitlines())
    md = invoke(str(run_dir), "--format", "md")
    assert "| group | tasks | correct | >1.01x | mean | max | p75 | p50 | p25 | geomean |" in md


def test_portability_across_gpus(tmp_path: Path) -> None:
    h100 = verify_report(tmp_path / "h100.json", "NVIDIA H100", {"L1_1": 2.0, "L2_2": 1.5})
    h200 = verify_report(tmp_path / "h200.json", "NVIDIA H200", {"L1_1": 2.2, "L2_2": 1.4})
    data = json.loads(invoke(str(h100), str(h200), "--format", "json"))
    assert set(data["stats"]) == {"NVIDIA H100", "NVIDIA H200"}
    h100_all = data["stats"]["NVIDIA H100"]["all"]
    assert (h100_all["tasks"], h100_all["correct"], h100_all["faster"]) == (3, 2, 2)
    assert h100_all["mean"] == pytest.approx(1.75) and h100_all["geomean"] == pytest.approx(3**0.5)
    titles = [t["title"] for t in data["tables"]]
    assert "portability: speedup over eager on each GPU" in titles
    portability = data["tables"][titles.index("portability: speedup over eager on each GPU")]
    assert ["L1_1", "1", "2.000x", "2.200x"] in portability["rows"]
    # 2.5 s of timing per result held the device alone (its checks share it), two results
    assert data["costs"][0]["gpu_seconds"] == pytest.approx(5.0)


def test_bad_inputs_exit_2(tmp_path: Path) -> None:
    missing = CliRunner().invoke(app, ["report", str(tmp_path / "nothing")])
    assert missing.exit_code == 2
    (tmp_path / "x.json").write_text("{}")
    assert CliRunner().invoke(app, ["report", str(tmp_path / "x.json")]).exit_code == 2


_CHECK = """<script>
window.addEventListener("load", () => {
  const figures = [...document.images].filter((i) => i.complete && i.naturalWidth > 100).length;
  const tables = document.querySelectorAll("table tbody tr").length;
  document.body.setAttribute("data-check", `figures=${figures} rows=${tables}`);
});
</script></body>"""


def chromium() -> str | None:
    return next(
        (p for name in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(name))), None
    )


def test_html_page_renders_in_headless_chromium(run_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")
    browser = chromium()
    if browser is None:
        pytest.skip("no chromium binary on PATH (CI installs it: apt-get install chromium)")
    h100 = verify_report(tmp_path / "h100.json", "NVIDIA H100", {"L1_1": 2.0, "L2_2": 1.5})
    page = tmp_path / "report.html"
    invoke(str(run_dir), str(h100), "--html", str(page))
    text = page.read_text()
    assert text.count('src="data:image/png;base64,') == 4 and "<table>" in text
    assert "http://" not in text and "https://" not in text  # self-contained

    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("</body>", _CHECK))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000"]
    dom = subprocess.run(
        [browser, *flags, "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert 'data-check="figures=4 rows=' in dom.stdout, dom.stderr[-2000:]
    rows = int(dom.stdout.split('data-check="figures=4 rows=')[1].split('"')[0])
    assert rows >= 8  # stats (two GPUs), baselines, portability, per task, cost
    shot = tmp_path / "report.png"
    subprocess.run(
        [browser, *flags, f"--screenshot={shot}", "--window-size=1200,2400", page.as_uri()],
        capture_output=True,
        timeout=120,
    )
    assert shot.is_file() and shot.stat().st_size > 20_000


def test_report_of_a_grpo_run_says_its_reward_bar(tmp_path: Path) -> None:
    """A GRPO run reads like a search run, with the bar its reward counted speedups over; a
    run directory whose config is neither is bad input, not a traceback."""
    from candidate_fixtures import make_result

    from cudal1.config import GRPOStageConfig
    from cudal1.run.directory import RunDirectory, remember_tasks
    from cudal1.run.rows import Provenance

    run = RunDirectory(tmp_path / "grpo")
    run.write_config(GRPOStageConfig())
    with run.session() as db:
        remember_tasks(db, [CONV])
        for label, x, backend in (("torch-compile-default", 2.0, "baseline"), ("grpo-s3-1", 3.0, "policy")):
            source = f"# {label}\n" + CONV.source.replace("class Model(", "class ModelNew(")
            cand = db.add_candidate(CONV, source, Provenance(backend=backend), label=label)
            db.record_result(cand, make_result(CONV.name, source, x))
    result = CliRunner().invoke(app, ["report", str(run.path), "--format", "md"])
    assert result.exit_code == 0, result.output
    assert "GRPO reward bar" in result.stdout and "best-baseline" in result.stdout
    assert "| over best baseline |" in result.stdout and "| 1.500x |" in result.stdout  # 3.0x over 2.0x
    assert CliRunner().invoke(app, ["runs", "show", str(run.path)]).exit_code == 0
    (run.path / "config.yaml").write_text("rounds: 1\noptim: {}\n")
    result = CliRunner().invoke(app, ["report", str(run.path)])
    assert result.exit_code == 2 and "not a search or GRPO run's config" in result.stderr
