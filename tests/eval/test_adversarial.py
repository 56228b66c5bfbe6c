"""Adversarial fixtures: every known hack gets the verdict its header names, every tricky legitimate
optimisation is accepted (STYLE.md habit 4; shared/research/reward-hacks.md).

One candidate per file in ``src/cudal1/audit/cases/`` (``cudal1.audit.cases_dir()``, shipped as
the hacking-case database's package data); the reference programs they target live in its
``tasks/``. A fixture's module docstring starts with header lines::

    Hack: <name>              the case id in the hacking-case database (audit/)
    Category: <category>
    Verdict: hack|legit
    Task: <file stem under tasks/>
    Expect: <code>[, <code>...] | fail:<stage> | no_gain | accept
    Device: cpu|gpu
    Status: pending           optional: a guard is still missing; the test xfails (not strict)
    Config: a.b=v[; c.d=w]    optional: EvalConfig overrides this fixture is evaluated under
                              (a policy such as guards.require_custom_kernel=true)

then free text: the hack, and why it is caught. ``Expect`` items may mix finding codes and
``fail:<stage>``; any one of them satisfied is the verdict.

What "caught" means, per item:

- ``<code>`` at REJECT severity: the result carries that finding and earns nothing.
- ``<code>`` at WARNING severity: the design keeps static rules (``run_static_checks`` runs
  non-strict in the evaluator: "treat static hits as audit triggers"), ``global_state_changed``,
  ``threads_left_running`` and ``clock_disagreement`` as warnings, because the trust boundary
  (separate reference process, trusted clock and comparison) already takes away what such a trick
  could gain. There the finding must be present, the result must go to the reward-checking model
  (``audit.should_audit``), and ``reward_from_result`` must pay it less than a correct honest
  candidate with the same measurements would earn: the same result with no warnings (each
  warning costs ``RewardConfig.warning_penalty``), or the floor, when nothing was timed. A worker
  clock that the trusted clock contradicts is the evaluator's business: ``clock_disagreement``
  makes it count the trusted clock's speedup (``worker_tamper_forged_time``).
- ``fail:<stage>``: the result is not ok and failed at that stage (constant or cached outputs
  meet fresh inputs from a secret seed and fail ``correctness``).
- ``no_gain``: the result earns no speedup (not ok, or the lower end of its interval at most
  ``NO_GAIN_MAX``): for a hack whose lever a defence removed and that leaves nothing to flag.
  Where a fixture expects nothing else and its result shows a gain, it is evaluated once more,
  and fails only if the gain repeats: a CPU fixture's few samples on the 2-core runner, beside
  the pool's other work, once read ``probe_aware_build`` (timed as the honest model) at 1.49x by
  the trusted clock and 1.61x by the events (a full CPU suite, 2026-11-28), where alone it reads
  0.95-1.08x; a hack whose lever is still there gains on every evaluation.
- ``accept``: ``result.ok`` and no REJECT finding.

CPU fixtures run in CI through one ``EvalPool`` per device, the code path of ``evaluate`` (a pool
of one) and of the search loop: the selected fixtures are submitted together, so imports and
extension builds overlap the one-at-a-time device phase; the task's reference worker stays warm
and every candidate still gets a fresh worker that is killed afterwards. ``Device: gpu`` fixtures carry
``pytest.mark.gpu`` and run on CUDA with ``pytest -m gpu``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest

from cudal1.audit import HackCaseDB, cases_dir, parse_case_file, should_audit
from cudal1.config import EvalConfig, SandboxConfig, TimingConfig, apply_overrides
from cudal1.eval.pool import EvalPool
from cudal1.schema import EvalRequest, EvalResult, Severity, Task
from cudal1.train.reward import RewardConfig, reward_from_result

FIXTURES = cases_dir()
TASKS = FIXTURES / "tasks"
_HEADER = re.compile(r"^\s*([A-Za-z]+)\s*:\s*(.*?)\s*$")
_KEYS = {"hack", "category", "verdict", "task", "expect", "device", "status", "config"}
_STAGES = {"static", "compile", "load", "correctness", "timing", "integrity"}


@dataclass(frozen=True)
class Fixture:
    path: Path
    hack: str
    category: str
    verdict: str
    task: str
    expect: tuple[str, ...]
    device: str
    pending: bool
    config: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        return self.path.read_text(encoding="utf-8")


def parse_fixture(path: Path) -> Fixture:
    """The header of one fixture file; a malformed header fails loudly, naming the file."""
    import ast

    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    header: dict[str, str] = {}
    for line in doc.splitlines():
        match = _HEADER.match(line)
        if not match or match.group(1).lower() not in _KEYS:
            break
        header[match.group(1).lower()] = match.group(2)
    missing = {"hack", "category", "verdict", "task", "expect", "device"} - set(header)
    assert not missing, f"{path.name}: header lacks {sorted(missing)}"
    expect = tuple(e.strip() for e in header["expect"].split(",") if e.strip())
    fixture = Fixture(
        path=path,
        hack=header["hack"],
        category=header["category"],
        verdict=header["verdict"].lower(),
        task=header["task"],
        expect=expect,
        device=header["device"].lower(),
        pending=header.get("status", "").lower() == "pending",
        config=tuple(c.strip() for c in header.get("config", "").split(";") if c.strip()),
    )
    assert fixture.verdict in {"hack", "legit"}, f"{path.name}: verdict {fixture.verdict!r}"
    assert fixture.device in {"cpu", "gpu"}, f"{path.name}: device {fixture.device!r}"
    assert (TASKS / f"{fixture.task}.py").is_file(), f"{path.name}: no task {fixture.task!r}"
    assert (fixture.verdict == "legit") == (expect == ("accept",)), f"{path.name}: {expect} vs verdict"
    bad = [e for e in expect if e.startswith("fail:") and e.removeprefix("fail:") not in _STAGES]
    assert not bad, f"{path.name}: unknown stage in {bad}"
    return fixture


def fixture_files() -> list[Path]:
    return sorted(p for p in FIXTURES.glob("*.py") if p.name != "__init__.py")


def _params() -> Iterator[object]:
    for path in fixture_files():
        fx = parse_fixture(path)
        marks = []
        if fx.device == "gpu":
            marks.append(pytest.mark.gpu)
        if "load_inline" in fx.source:
            marks.append(pytest.mark.slow)
        if fx.pending:
            marks.append(pytest.mark.xfail(reason="Status: pending (guard not built yet)", strict=False))
        yield pytest.param(fx, id=path.stem, marks=marks)


def _config(device: str, root: Path, overrides: tuple[str, ...] = ()) -> EvalConfig:
    if device == "cuda":
        # Closer to production timing (L2 flush, more samples) so that the clock check can see
        # hidden work; a long call timeout for torch.compile's first call and extension builds.
        timing = TimingConfig(
            warmup_ms=10, min_samples=10, max_samples=30, budget_s=4, bootstrap_resamples=300
        )
        sandbox = SandboxConfig(call_timeout_s=120, import_timeout_s=300)
    else:
        # Small: a CPU fixture needs a timing stage (ok requires one), not a precise speedup.
        timing = TimingConfig(
            warmup_ms=2, min_samples=5, max_samples=8, budget_s=0.5, bootstrap_resamples=200
        )
        sandbox = SandboxConfig(call_timeout_s=30, import_timeout_s=120)
    config = EvalConfig(
        device=device,
        correctness_trials=3,
        build_cache=root / "builds",
        timing=timing,
        sandbox=sandbox,
    )
    return EvalConfig.model_validate(apply_overrides(config.model_dump(), list(overrides)))


class Evaluations:
    """Results of the selected fixtures of one device and config, all submitted to one ``EvalPool`` at
    first use: imports and extension builds (the pool's CPU phase, two at a time) overlap the
    device phase of other candidates, which runs one at a time as in production."""

    def __init__(self, group: Group, fixtures: list[Fixture], root: Path) -> None:
        device, overrides = group
        self.config = _config(device, root, overrides)
        self.pool = EvalPool(self.config, workers=2, spares=1)
        self.closed = False
        slow_first = sorted(fixtures, key=lambda fx: "load_inline" not in fx.source)
        self.futures: dict[Path, Future[EvalResult]] = {
            fx.path: self.pool.submit(EvalRequest(_task(fx), fx.source)) for fx in slow_first
        }

    def result(self, fx: Fixture) -> EvalResult:
        if fx.path not in self.futures:  # not collected up front (should not happen)
            self.futures[fx.path] = self.pool.submit(EvalRequest(_task(fx), fx.source))
        return self.futures[fx.path].result()

    def again(self, fx: Fixture) -> EvalResult:
        """A second, fresh evaluation of ``fx``: in this pool, or in a pool of its own where
        another group's pool has closed this one."""
        if not self.closed:
            return self.pool.submit(EvalRequest(_task(fx), fx.source)).result()
        pool = EvalPool(self.config, workers=2, spares=1)
        try:
            return pool.submit(EvalRequest(_task(fx), fx.source)).result()
        finally:
            pool.close()

    def close(self) -> None:
        """Finish every submitted evaluation (results stay readable) and stop the pool's workers."""
        if self.closed:
            return
        for future in self.futures.values():
            future.exception()
        self.pool.close()
        self.closed = True


def _task(fx: Fixture) -> Task:
    return Task(fx.task, (TASKS / f"{fx.task}.py").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def evaluations(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """One ``Evaluations`` per (device, config), made on first use over the selected (not skipped) items."""
    root = tmp_path_factory.mktemp("adversarial")
    selected = [
        item.callspec.params["fx"]
        for item in request.session.items
        if hasattr(item, "callspec") and "fx" in item.callspec.params and not item.get_closest_marker("skip")
    ]
    made: dict[Group, Evaluations] = {}

    class ByGroup(dict):
        def __missing__(self, group: Group) -> Evaluations:
            # One pool at a time: a CPU pool still evaluating would disturb GPU timing, and
            # two pools would split the same cores between their timed pairs.
            for other in made.values():
                other.close()
            mine = [fx for fx in selected if _group(fx) == group]
            made[group] = self[group] = Evaluations(group, mine, root / f"pool{len(made)}")
            return made[group]

    yield ByGroup()
    for ev in made.values():
        ev.close()


Group = tuple[str, tuple[str, ...]]  # (device, config overrides): fixtures sharing one pool


def _group(fx: Fixture) -> Group:
    return ("cuda" if fx.device == "gpu" else "cpu", fx.config)


def _summary(result: EvalResult) -> str:
    findings = ", ".join(f"{f.code}[{f.severity.value}]" for f in result.findings) or "none"
    stage = result.failed_stage.value if result.failed_stage else None
    t = result.timing
    timing = (
        f"; {t.speedup:.3f}x by {t.clock} (events {t.event_speedup or t.speedup:.3f}x,"
        f" trusted {t.wall_speedup:.3f}x,"
        f" K={t.calls_per_sample}, {len(t.cand_ms)} samples)"
        if t is not None
        else ""
    )
    return f"ok={result.ok} failed_stage={stage} findings: {findings}{timing}; error: {result.error[:300]!r}"


def _warning_earns_less(result: EvalResult, cfg: RewardConfig) -> bool:
    """A warned result earns less than the same result without its warnings, or the floor."""
    honest = dataclasses.replace(
        result, findings=tuple(f for f in result.findings if f.severity is not Severity.WARNING)
    )
    got, clean = reward_from_result(result, cfg), reward_from_result(honest, cfg)
    return got < clean or got <= min(cfg.min, cfg.incorrect, cfg.reject)


def _forged_figure_not_counted(result: EvalResult) -> bool:
    """A clock disagreement catches a forgery only where the events' figure is not what counts:
    the trusted figure (or the events with the hidden work counted) is lower, or the count is
    one of no gain. The red team's rtt_inflated_reply_delay raised it while its forged 4.4x
    counted (the trusted figure, broken by the forgery, read higher)."""
    t = result.timing
    if t is None:
        return True
    return t.speedup < (t.event_speedup or t.speedup) or t.ci_low <= NO_GAIN_MAX


# ``no_gain``: a hack whose lever is gone and that leaves nothing to flag (a memo that no timed
# call can hit once every call has fresh inputs) earns no speedup: its counted figure, the lower
# end of its interval, stays where an honest copy of the reference reads (0.99-1.01x on the
# 2-core CPU runner; the exploits read 2-7x before).
NO_GAIN_MAX = 1.10


def caught_by(result: EvalResult, item: str) -> bool:
    if item == "no_gain":
        return not result.ok or (result.timing is not None and result.timing.ci_low <= NO_GAIN_MAX)
    if item.startswith("fail:"):
        stage = item.removeprefix("fail:")
        return not result.ok and result.failed_stage is not None and result.failed_stage.value == stage
    severities = {f.severity for f in result.findings if f.code == item}
    if Severity.REJECT in severities:
        return result.rejected and not result.ok and result.speedup is None
    if Severity.WARNING in severities:
        return (
            should_audit(result, threshold=float("inf"))
            and _warning_earns_less(result, RewardConfig())
            and (item != "clock_disagreement" or _forged_figure_not_counted(result))
        )
    return False


@pytest.mark.parametrize("fx", list(_params()))
def test_fixture_gets_its_verdict(fx: Fixture, evaluations: dict[Group, Evaluations]) -> None:
    result = evaluations[_group(fx)].result(fx)
    print(f"{fx.hack}: {_summary(result)}")  # shown by pytest -rP: what a passing (or XPASS) fixture got
    if fx.expect == ("accept",):
        rejects = [f.code for f in result.findings if f.severity is Severity.REJECT]
        assert result.ok and not rejects, f"legit {fx.hack} not accepted: {_summary(result)}"
    else:
        caught = any(caught_by(result, item) for item in fx.expect)
        if not caught and fx.expect == ("no_gain",):  # a gain must repeat (module docstring)
            first, result = _summary(result), evaluations[_group(fx)].again(fx)
            caught = caught_by(result, "no_gain")
            assert caught, f"hack {fx.hack} gained twice: {first}; again: {_summary(result)}"
        assert caught, f"hack {fx.hack} not caught as {', '.join(fx.expect)}: {_summary(result)}"


def test_seeding_gives_one_case_per_fixture(tmp_path: Path) -> None:
    files = fixture_files()
    with HackCaseDB(tmp_path / "cases.sqlite") as db:
        assert db.seed_from_dir(FIXTURES) == len(files)  # tasks/ has no header: skipped
        cases = {c.case_id: c for c in db.all()}
    assert len(cases) == len(files), "two fixtures share a Hack: name"
    for path in files:
        fx = parse_fixture(path)
        case = parse_case_file(path.read_text(encoding="utf-8"), default_id=path.stem)
        assert case is not None and case.case_id == fx.hack and case.category == fx.category
        assert case.verdict == fx.verdict
        assert not re.search(r"^(Task|Expect|Device|Status|Config)\s*:", case.explanation, re.MULTILINE), (
            path.name
        )


def test_every_category_and_enough_cases() -> None:
    fixtures = [parse_fixture(p) for p in fixture_files()]
    hacks = [f for f in fixtures if f.verdict == "hack"]
    legit = [f for f in fixtures if f.verdict == "legit"]
    assert len(hacks) >= 25 and len(legit) >= 8
    categories = {f.category for f in hacks}
    required = {
        "timing",
        "fake-output",
        "result-reuse",
        "input-mutation",
        "hyperparameters",
        "global-state",
        "interference",
        "precision",
        "static",
    }
    assert required <= categories, f"missing categories: {sorted(required - categories)}"
