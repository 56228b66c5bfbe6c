"""The reference timed undisturbed (issue 21, item 6), with fake endpoints on one fake clock: the
candidate stands still exactly while the reference runs, and work a candidate leaves behind that
slows the reference's next turn is ``reference_disturbed``, while honest pairs with noise, order
effects under the margin or a drifting machine are not. No processes, no GPU."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from cudal1.config import TimingConfig
from cudal1.eval.checks.interference import SLOWDOWN_MARGIN, reference_disturbed, slower_beyond
from cudal1.eval.timing.paired import (
    REFERENCE_AGAIN,
    PairedOutcome,
    SampleInputs,
    SampleRequest,
    TimedReply,
    Warmup,
    measure_paired,
)


class Device:
    """One clock and one device shared by both fakes: what ran last on it, and a log of calls."""

    def __init__(self) -> None:
        self.now = 0.0
        self.log: list[str] = []
        self.last = ""  # the side whose calls ran on it last
        self.leftover = 0.0  # slowdown the candidate's last turn left for the next turn on the device

    def __call__(self) -> float:
        return self.now


class Side:
    """A worker whose calls take ``call_ms`` (times 1 +- ``noise``, and ``spike`` x on a fraction
    ``spikes`` of turns: a host hiccup); a candidate may leave work behind (``leave``: the next
    turn on the device, whichever side's, runs that much slower; its own ``prepare`` absorbs it).
    ``after_own`` (reference): how much faster a turn that follows its own runs (an honest order
    effect); ``drift``: the machine slows by this fraction per simulated second."""

    def __init__(
        self,
        device: Device,
        name: str,
        call_ms: float,
        *,
        noise: float = 0.02,
        leave: float = 0.0,
        after_own: float = 0.0,
        spikes: float = 0.0,
        spike: float = 1.0,
        drift: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.device, self.name, self.call_ms = device, name, call_ms
        self.noise, self.leave, self.after_own = noise, leave, after_own
        self.spikes, self.spike, self.drift = spikes, spike, drift
        self.rng = random.Random(seed)
        self.host_ahead = True
        self.paused = False
        self.ran = True  # since the last resume (True before the first pause)
        self.pending: TimedReply | None = None

    def _call(self, what: str) -> None:
        assert not self.paused, f"{self.name}.{what} while stopped"
        self.ran = True
        self.device.log.append(f"{self.name}.{what}")

    def warmup(self, min_calls: int, min_ms: float) -> Warmup:
        self._call("warmup")
        self.device.now += 3 * self.call_ms / 1000
        return Warmup(3, 3 * self.call_ms)

    def round_trip_ms(self) -> float:
        return 0.0

    def prepare(self) -> None:
        self._call("prepare")
        if self.name == "cand":
            self.device.leftover = 0.0  # its own leftover: waited for here, outside the clocks

    def start(self, request: SampleRequest) -> None:
        self._call("start")
        factor = 1 + self.rng.uniform(-self.noise, self.noise) + self.drift * self.device.now
        factor *= 1 + self.device.leftover
        if self.device.last == self.name:
            factor /= 1 + self.after_own
        self.device.last = self.name
        if self.rng.random() < self.spikes:
            factor *= self.spike
        self.device.leftover = 0.0
        t = request.calls * self.call_ms * factor
        self.device.now += t / 1000
        self.pending = TimedReply(t, True, [request.seed], [[0]] * request.calls)

    def finish(self) -> TimedReply:
        self._call("finish")
        if self.leave:
            self.device.leftover = self.leave
        assert self.pending is not None
        return self.pending

    def fetch(self) -> None:  # an output check's request
        self._call("fetch")
        self.device.last = self.name

    def pause(self) -> bool:
        assert not self.paused
        self.device.log.append(f"{self.name}.pause")
        self.paused, ran, self.ran = True, self.ran, False
        return ran

    def resume(self) -> None:
        assert self.paused
        self.device.log.append(f"{self.name}.resume")
        self.paused = False


def _cfg(**kw: float) -> TimingConfig:
    base = dict(warmup_ms=1, min_samples=30, max_samples=60, budget_s=1e9, bootstrap_resamples=200)
    base.update(kw)
    return TimingConfig(**base)  # type: ignore[arg-type]


def _measure(ref: Side, cand: Side, seed: int, **kw: float) -> PairedOutcome:
    def check(sample: int, call: int, digests: list[int]) -> None:
        cand.fetch()

    seeds = itertools.count(1)
    inputs = SampleInputs(lambda: next(seeds), lambda label, want, got: None)
    return measure_paired(ref, cand, _cfg(**kw), check, inputs, clock=ref.device, rng=random.Random(seed))


def _pair(seed: int, ref_kw: dict | None = None, cand_kw: dict | None = None) -> tuple[Side, Side]:
    device = Device()
    ref = Side(device, "ref", 1.0, seed=2 * seed, **(ref_kw or {}))
    cand = Side(device, "cand", 0.8, seed=2 * seed + 1, **(cand_kw or {}))
    return ref, cand


def test_the_candidate_is_stopped_exactly_around_each_reference_turn():
    """From just before the reference's prepare to just after its last reply of the turn (its
    second timing included), and never while the candidate itself is called."""
    ref, cand = _pair(0)
    out = _measure(ref, cand, seed=3, launch_samples=4)
    log = [e for e in ref.device.log if not e.endswith("warmup")]
    ref_turns = 0
    for i, event in enumerate(log):
        if event == "cand.pause":
            ref_turns += 1
            assert log[i + 1] == "ref.prepare"
        if event == "cand.resume":
            assert log[i - 1] == "ref.finish"
    stopped = False
    for event in log:
        stopped = {"cand.pause": True, "cand.resume": False}.get(event, stopped)
        assert event.startswith("cand") or event == "ref.warmup" or stopped, event
    assert out.launch is not None
    samples = len(out.ref_ms) + len(out.launch.ref_ms) + 1  # and the final checked pair
    again = len(out.ref_again_ms) + len(out.launch.ref_again_ms)
    assert ref_turns == samples and again >= 1
    assert samples + again <= log.count("ref.start") <= samples + again + 1  # the final pair's own


def test_a_reference_error_leaves_the_candidate_free_to_run():
    ref, cand = _pair(0)

    def broken(request: SampleRequest) -> None:
        raise RuntimeError("the reference's worker died")

    ref.start = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        _measure(ref, cand, seed=1)
    assert not cand.paused


def test_each_reference_sample_says_whether_the_candidate_ran_before_it():
    """After the candidate's turn or an output check: ran; after the reference's own turn with
    nothing of the candidate's in between: clean. The second timings are all clean."""
    ref, cand = _pair(1)
    out = _measure(ref, cand, seed=5, check_output_fraction=0.3)
    turns = [e for e in ref.device.log if e in ("ref.start", "cand.start", "cand.fetch")]
    expected, previous = [], "cand.start"  # the warm-ups: the candidate's last
    ref_seen = 0
    for event in turns:
        if event == "ref.start":
            if ref_seen < len(out.ref_ms) + len(out.ref_again_ms):
                expected.append(previous != "ref.start")
            ref_seen += 1
        previous = event
    assert sum(out.ref_after_cand) < len(out.ref_after_cand)  # some are clean
    assert len(out.ref_again_ms) >= 1
    # Every clean turn (again or after its own) followed a reference turn directly.
    assert expected.count(False) == out.ref_after_cand.count(False) + len(out.ref_again_ms)


def test_a_candidate_whose_turn_slows_the_next_reference_sample_by_20pc_is_found():
    """Work left behind after each of its turns: the reference's next turn runs 20% slower; the
    candidate's own next turn waits for it in its untimed prepare. Caught on every seed."""
    for seed in range(20):
        ref, cand = _pair(seed, ref_kw={"noise": 0.05}, cand_kw={"noise": 0.05, "leave": 0.20})
        out = _measure(ref, cand, seed=seed)
        finding, facts = reference_disturbed(out)
        assert finding is not None, (seed, facts)
        assert finding.code == "reference_disturbed" and finding.severity.value == "reject"
        assert finding.evidence["slowdown"] == pytest.approx(0.20, abs=0.05)
        assert facts["after"] >= 3 and facts["clean"] >= 3


@pytest.mark.parametrize(
    "ref_kw",
    [
        {"noise": 0.10},  # CPU-sized noise
        {"noise": 0.02, "spikes": 0.1, "spike": 1.5},  # host hiccups, on either side
        {"noise": 0.05, "after_own": 0.04},  # an honest order effect, under the margin
        {"noise": 0.05, "drift": 0.5},  # the machine slowing down as the stage runs
    ],
)
def test_honest_pairs_are_not_flagged(ref_kw):
    flagged = []
    for seed in range(60):
        ref, cand = _pair(seed, ref_kw=ref_kw, cand_kw=ref_kw)
        finding, facts = reference_disturbed(_measure(ref, cand, seed=seed))
        if finding is not None:
            flagged.append((seed, facts))
    assert flagged == []


def test_a_disturbance_under_the_margin_is_not_held_against_the_candidate():
    ref, cand = _pair(0, ref_kw={"noise": 0.005}, cand_kw={"noise": 0.005, "leave": SLOWDOWN_MARGIN / 2})
    finding, facts = reference_disturbed(_measure(ref, cand, seed=0))
    assert finding is None and facts["slowdown"] == pytest.approx(SLOWDOWN_MARGIN / 2, abs=0.01)


def test_too_few_clean_samples_give_no_verdict():
    out = PairedOutcome(1, ref_ms=[2.0] * 10, ref_wall_ms=[2.0] * 10, ref_after_cand=[True] * 10)
    out.ref_again_ms = out.ref_again_wall_ms = [1.0, 1.0]
    assert reference_disturbed(out) == (None, {})


def test_the_rank_test_is_exact_for_small_groups():
    """Against enumerating every split of the pooled samples: the one-sided p of the observed
    count of (after, clean) pairs where the after sample is larger."""
    rng = random.Random(0)
    for m, n in [(3, 3), (4, 6), (7, 3)]:
        after = [rng.uniform(1, 2) for _ in range(m)]
        clean = [rng.uniform(1, 2) for _ in range(n)]
        pooled = after + clean
        observed = sum(a > c for a in after for c in clean)
        splits = list(itertools.combinations(range(m + n), m))
        count = 0
        for idx in splits:
            xs = [pooled[i] for i in idx]
            ys = [pooled[i] for i in range(m + n) if i not in idx]
            count += sum(x > y for x in xs for y in ys) >= observed
        assert slower_beyond(after, clean, 0.0) == pytest.approx(count / len(splits))
    # Complete separation: 1 / C(m + n, m).
    assert slower_beyond([2.0] * 8, [1.0] * 22, 0.1) == pytest.approx(1 / math.comb(30, 8))
    assert slower_beyond([1.05] * 8, [1.0] * 22, 0.1) == pytest.approx(1.0)  # 5% slower: under the margin
    # Beyond the exact range, the normal approximation.
    assert slower_beyond([2.0 + i / 1e3 for i in range(100)], [1.0 + i / 1e3 for i in range(100)], 0.1) < 1e-20


def test_second_timings_happen_at_about_the_stated_rate():
    ref, cand = _pair(2, ref_kw={"noise": 0.3}, cand_kw={"noise": 0.3})
    out = _measure(ref, cand, seed=2, min_samples=400, max_samples=400)
    after = sum(out.ref_after_cand)
    assert len(out.ref_again_ms) == pytest.approx(REFERENCE_AGAIN * after, rel=0.3)


def test_processes_that_left_the_candidates_group_are_reference_disturbed_whatever_the_times():
    """The pause cannot stop them, and what they do may fall on clean turns too: found by the
    evaluator (``WorkerProcess.outside_group``), they reject however the times read."""
    ref, cand = _pair(0)
    out = _measure(ref, cand, seed=0)
    assert reference_disturbed(out)[0] is None
    finding, _ = reference_disturbed(out, [4242])
    assert finding is not None and finding.code == "reference_disturbed"
    assert finding.evidence["outside_group"] == [4242] and "process group" in finding.message
