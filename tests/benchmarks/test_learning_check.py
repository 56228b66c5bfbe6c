"""The learning check's pieces that need no training: its arms and their held-out rule, the
tokenizer's cut at block boundaries, the control's shuffled rewards, the pre-measured arms'
reward wrapper, the paired test and the pass rule."""

from __future__ import annotations

import asyncio
import json
import random
import sys
from pathlib import Path

import pytest
from candidate_fixtures import GEMM_TASK, make_result

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from learning_arms import (  # noqa: E402
    REFERENCE_ARM,
    Arm,
    PremeasuredReward,
    ShuffledReward,
    adopt_arms,
    arm_label,
    arm_source,
    arm_stacks,
    held_out,
    shuffle_rewards,
)
from learning_stats import (  # noqa: E402
    Interval,
    gained,
    is_flat,
    judge_seed,
    mean_interval,
    paired_difference,
    trend,
)
from tiny_policy import split_blocks  # noqa: E402

from cudal1.run.database import CandidateDB  # noqa: E402
from cudal1.schema import source_hash  # noqa: E402
from cudal1.search.parsing import extract  # noqa: E402
from cudal1.search.transforms import stacked_program  # noqa: E402
from cudal1.tasks import bundled_tasks  # noqa: E402
from cudal1.train.datasets import format_answer  # noqa: E402

TASKS = {t.name: t for t in bundled_tasks("cpu")}


def test_arms_are_stacks_in_one_order_and_conv_blocks_only_for_convolutions():
    conv, softmax = TASKS["2_conv2d"], TASKS["3_softmax"]
    gpu = [arm_label(s) for s in arm_stacks(conv, cuda=True)]
    assert len(gpu) == len(set(gpu)) == 20 and REFERENCE_ARM in gpu
    assert "torch-compile-default+channels-last+cudnn-benchmark+cuda-graph" in gpu  # every wrapper at once
    assert len([arm_label(s) for s in arm_stacks(conv, cuda=True, depth=3)]) == 19
    assert not any("reduce-overhead" in a and "cuda-graph" in a for a in gpu)
    assert [arm_label(s) for s in arm_stacks(softmax, cuda=True)] == [
        REFERENCE_ARM,
        "cuda-graph",
        "torch-compile-default",
        "torch-compile-default+cuda-graph",
        "torch-compile-reduce-overhead",
    ]
    cpu = [arm_label(s) for s in arm_stacks(conv, cuda=False)]
    assert cpu == [
        REFERENCE_ARM,
        "channels-last",
        "torch-compile-default",
        "torch-compile-default+channels-last",
    ]


def test_an_arm_is_found_again_from_a_reply_that_writes_it():
    stack = ("torch-compile-default", "channels-last")
    source = arm_source(TASKS["2_conv2d"], stack)
    reply = format_answer(stacked_program(TASKS["2_conv2d"].source, stack))
    assert extract(reply).code == source


def arm(label: str, speedup: float | None, task: str = "t") -> Arm:
    return Arm(task, label, f"# {label}", None, speedup, 0.0)


def test_the_combinations_faster_than_every_single_block_are_held_out():
    arms = [
        arm(REFERENCE_ARM, 1.0),
        arm("torch-compile-default", 1.5),
        arm("cuda-graph", 0.9),
        arm("torch-compile-default+cuda-graph", 1.7),
        arm("torch-compile-default+channels-last", 1.5),  # ties the best single: held out too
        arm("channels-last+cuda-graph", 1.2),  # slower than compile alone: shown
        arm("channels-last+cudnn-benchmark+cuda-graph", None),  # failed: shown, earns its failure
    ]
    assert held_out(arms) == {"torch-compile-default+cuda-graph", "torch-compile-default+channels-last"}
    assert held_out(arms[:3]) == set()


def test_the_tokenizer_corpus_is_cut_before_every_wrapper_block():
    program = stacked_program(TASKS["2_conv2d"].source, ["torch-compile-default", "channels-last"])
    pieces = split_blocks(format_answer(program))
    assert "".join(pieces) == format_answer(program) and len(pieces) == 3
    assert pieces[1].startswith("\n\n# --- wrapper: torch-compile-default ---")
    assert pieces[2].startswith("\n\n# --- wrapper: channels-last ---")


def test_shuffled_rewards_keep_the_batch_values_and_the_missing_verdicts():
    rewards = [0.1, None, 0.5, -1.0, 0.3, None, 0.0, 0.7]
    out = shuffle_rewards(rewards, random.Random(0))
    assert [i for i, r in enumerate(out) if r is None] == [1, 5]
    assert sorted(r for r in out if r is not None) == sorted(r for r in rewards if r is not None)
    assert out != rewards


def test_verified_shuffling_leaves_the_failures_where_they_are_and_permutes_the_rest():
    """The control's default: only the speed signal is taken away. A failure's reward (-1.0, and
    -2.0 given as a second failure value) stays with its sample, so writing no program is still
    worse than writing one; the verified samples' rewards are permuted among themselves."""
    rewards = [0.4, -1.0, 0.1, None, -2.0, 0.7, -0.3, -1.0, 0.2, 0.5]
    outs = [shuffle_rewards(rewards, random.Random(s), keep=(-1.0, -2.0)) for s in range(20)]
    for out in outs:
        assert [out[i] for i in (1, 3, 4, 7)] == [-1.0, None, -2.0, -1.0]
        moved = [out[i] for i in (0, 2, 5, 6, 8, 9)]
        assert sorted(moved) == sorted([0.4, 0.1, 0.7, -0.3, 0.2, 0.5])
    assert any(out != rewards for out in outs)
    every = [shuffle_rewards(rewards, random.Random(s)) for s in range(20)]
    assert any(out[1] != -1.0 for out in every)  # with nothing kept, failures move too


class FixedReward:
    def __init__(self, values, db=None):
        self.values, self.db, self.calls = values, db, []

    async def __call__(self, prompts, completions, task, **kwargs):
        self.calls.append((list(completions), list(task), kwargs))
        return list(self.values)


def test_the_control_wrapper_shuffles_what_the_reward_returns_and_passes_everything_through():
    inner = FixedReward([float(i) for i in range(16)])
    control = ShuffledReward(inner, seed=3)
    out = asyncio.run(control(["p"] * 16, ["c"] * 16, task=["t"] * 16, trainer_state=None))
    assert sorted(out) == [float(i) for i in range(16)] and out != inner.values
    assert inner.calls[0][2] == {"trainer_state": None} and control.__name__ == "speedup"
    kept = ShuffledReward(FixedReward([-1.0, 0.5, -1.0, 0.2, 0.9, -1.0]), seed=3, failures=(-1.0,))
    for _ in range(5):
        out = asyncio.run(kept(["p"] * 6, ["c"] * 6, task=["t"] * 6))
        assert [out[i] for i in (0, 2, 5)] == [-1.0, -1.0, -1.0]
        assert sorted(out[i] for i in (1, 3, 4)) == [0.2, 0.5, 0.9]


def test_a_sample_that_writes_an_arm_gets_its_stored_result(tmp_path):
    source = "class ModelNew:\n    ARM = 1\n"
    result = make_result(GEMM_TASK.name, source, 1.6)
    stored = Arm(GEMM_TASK.name, "torch-compile-default", source, result, 1.6, 0.47)
    with CandidateDB(tmp_path / "c.db") as db:
        inner = FixedReward([0.47, -1.0], db)
        wrapped = PremeasuredReward(inner, {GEMM_TASK.name: [stored]}, [GEMM_TASK])
        replies = [format_answer(source), "no code here"]
        asyncio.run(wrapped(["p", "p"], replies, [GEMM_TASK.name] * 2))
        asyncio.run(wrapped(["p", "p"], replies, [GEMM_TASK.name] * 2))  # the second time it is there
        row = db.find_by_hash(GEMM_TASK.name, source_hash(source))
        assert row is not None and row.speedup == pytest.approx(1.6) and row.label == "torch-compile-default"
        assert len(db.evaluated(GEMM_TASK.name)) == 1 and len(inner.calls) == 2


def test_a_stray_program_fails_unevaluated_under_strays_fail_and_reaches_the_pool_otherwise(tmp_path):
    """A program that parses but is no measured arm of its task (here a block twice, and another
    task's arm): under ``fail`` the inner reward sees a reply with no program in its place (a
    parse failure, nothing evaluated); under ``evaluate`` it goes to the pool as written. Either
    way the step's strays are counted. Arms and replies with no program pass through unchanged."""
    arm_src, stray_src = "class ModelNew:\n    ARM = 1\n", "class ModelNew:\n    ARM = 1\n    ARM = 1\n"
    other_src = "class ModelNew:\n    ARM = 2\n"  # an arm of 3_softmax only
    softmax = TASKS["3_softmax"]
    arms = {
        GEMM_TASK.name: [Arm(GEMM_TASK.name, "tc", arm_src, make_result(GEMM_TASK.name, arm_src, 1.6), 1.6, 0.47)],
        softmax.name: [Arm(softmax.name, "tc", other_src, make_result(softmax.name, other_src, 1.4), 1.4, 0.3)],
    }
    replies = [format_answer(arm_src), format_answer(stray_src), "no code here", format_answer(other_src)]

    class State:
        global_step = 4

    for mode, reaches_pool in (("fail", False), ("evaluate", True)):
        with CandidateDB(tmp_path / f"{mode}.db") as db:
            inner = FixedReward([0.47, -1.0, -1.0, -1.0], db)
            log = tmp_path / f"{mode}.jsonl"
            wrapped = PremeasuredReward(inner, arms, [GEMM_TASK, softmax], strays=mode, log=log)
            asyncio.run(wrapped(["p"] * 4, replies, [GEMM_TASK.name] * 4, trainer_state=State()))
            seen = inner.calls[0][0]
            assert seen[0] == replies[0] and seen[2] == replies[2]
            for i, src in ((1, stray_src), (3, other_src)):
                assert (seen[i] == replies[i]) is reaches_pool
                assert extract(seen[i]).code == (src if reaches_pool else None)
            assert json.loads(log.read_text()) == {"step": 4, "strays": 2, "completions": 4}
    with pytest.raises(ValueError, match="strays='skip'"):
        PremeasuredReward(inner, {}, [GEMM_TASK], strays="skip")  # type: ignore[arg-type]


def test_arms_another_lane_measured_are_taken_over_for_the_same_task_and_source_only(tmp_path):
    """Lanes that split the arms by --tasks each measure into their own --work; prepare
    --arms-from takes their results for the arms it has pending, and nothing else."""
    measured, unmeasured = "class ModelNew:\n    ARM = 1\n", "class ModelNew:\n    ARM = 2\n"
    other_task = TASKS["3_softmax"]
    with CandidateDB(tmp_path / "lane.db") as lane:
        for task in (GEMM_TASK, other_task):
            cid = lane.add_candidate(task, measured, label="torch-compile-default")
            lane.record_result(cid, make_result(task.name, measured, 1.6 if task is GEMM_TASK else 9.0))
        lane.add_candidate(GEMM_TASK, unmeasured, label="cuda-graph")  # still pending there
    with CandidateDB(tmp_path / "mine.db") as mine:
        for source in (measured, unmeasured):
            mine.add_candidate(GEMM_TASK, source)
        assert adopt_arms(mine, [GEMM_TASK], tmp_path / "lane.db") == 1
        assert adopt_arms(mine, [GEMM_TASK], tmp_path / "lane.db") == 0  # done once
        [row] = mine.evaluated(GEMM_TASK.name)
        assert row.source == measured and row.speedup == pytest.approx(1.6)
        assert [r.source for r in mine.pending()] == [unmeasured]
    with pytest.raises(SystemExit, match="no arms database"):
        adopt_arms(mine, [GEMM_TASK], tmp_path / "missing.db")


def test_the_paired_interval_sees_a_shift_the_spread_between_tasks_would_hide():
    rng = random.Random(0)
    # tasks far apart (1x and 2x), the final policy 0.1x faster on each, little noise within a task
    sft = {
        "a": [1.0 + rng.gauss(0, 0.02) for _ in range(16)],
        "b": [2.0 + rng.gauss(0, 0.02) for _ in range(16)],
    }
    final = {t: [v + 0.1 for v in vs] for t, vs in sft.items()}
    diff = paired_difference(final, sft)
    assert diff.mean == pytest.approx(0.1) and diff.low > 0.05
    same = paired_difference(sft, sft)
    assert same.contains(0.0)
    whole = mean_interval(sft)
    assert whole.low < 1.5 < whole.high


def policy(
    values: dict[str, float], n: int = 12, noise: float = 0.02, seed: int = 0
) -> dict[str, list[float]]:
    rng = random.Random(seed)
    return {t: [max(0.0, v + rng.gauss(0, noise)) for _ in range(n)] for t, v in values.items()}


def test_the_pass_rule():
    sft = policy({"a": 1.0, "b": 1.2}, seed=1)
    good = policy({"a": 1.4, "b": 1.6}, seed=2)
    flat = policy({"a": 1.0, "b": 1.2}, seed=3)
    v = judge_seed(0, {"sft": sft, "final": good, "control": flat, "ablation": flat})
    assert v.reaches_bar and v.above_sft and v.control_gained is False and v.passed
    assert v.final_vs_control is not None and 0.3 < v.final_vs_control.mean < 0.5 and v.final_vs_control.low > 0
    # a control that learned as much as the final policy: a gain, no pass
    v = judge_seed(0, {"sft": sft, "final": good, "control": good})
    assert v.control_gained and not v.passed
    # a control that fell (drifted into replies with no program under shuffled rewards) shows no
    # gain: the seed passes on its final policy
    fell = policy({"a": 0.1, "b": 0.2}, seed=6)
    v = judge_seed(0, {"sft": sft, "final": good, "control": fell})
    assert v.control_gained is False and v.passed
    # no control run: no pass
    v = judge_seed(0, {"sft": sft, "final": good})
    assert not v.passed and v.final_vs_control is None
    # above SFT but under the bar
    low = policy({"a": 1.1, "b": 1.3}, seed=4)
    v = judge_seed(0, {"sft": sft, "final": low, "control": flat})
    assert v.above_sft and not v.reaches_bar and not v.passed
    # at the bar but not beyond SFT's interval
    high_sft = policy({"a": 1.4, "b": 1.6}, noise=0.3, seed=5)
    assert not judge_seed(0, {"sft": high_sft, "final": good, "control": flat}).above_sft


def test_flat_means_no_shown_difference_or_within_five_percent_and_a_gain_is_a_shown_rise_beyond_it():
    assert is_flat(Interval(0.02, -0.01, 0.05), 1.0)
    assert is_flat(Interval(0.04, 0.03, 0.05), 1.0)
    assert not is_flat(Interval(0.2, 0.1, 0.3), 1.0)
    assert [trend(Interval(m, lo, hi), 1.0) for m, lo, hi in ((0.02, -0.01, 0.05), (0.2, 0.1, 0.3), (-0.8, -0.9, -0.7))] == [
        "flat",
        "rose",
        "fell",
    ]
    assert gained(Interval(0.2, 0.1, 0.3), 1.0)
    assert not gained(Interval(0.04, 0.03, 0.05), 1.0)  # shown, but within 5%
    assert not gained(Interval(0.2, -0.1, 0.5), 1.0)  # not shown
    assert not gained(Interval(-0.8, -0.9, -0.7), 1.0)  # fell


def test_the_evaluator_pool_spreads_over_every_eval_device_given():
    """--eval-devices reaches the arms' and the re-measurement's pools, not only GRPO's rewards:
    on a lane of several GPUs, the check's evaluations use them all."""
    from learning_settings import pool_config

    two = pool_config("cuda", ["cuda:0", "cuda:1"])
    assert two.devices == ("cuda:0", "cuda:1") and two.workers == 12
    assert pool_config("cuda").devices == () and pool_config("cuda").workers == 6
    assert pool_config("cpu", ["cpu:0"]).devices == ()


def test_lanes_of_one_machine_start_from_the_arms_and_their_samples_are_gathered(tmp_path):
    """A lane trains one policy in a --work of its own, started from the measured arms (--from);
    before remeasure, the lanes' samples are gathered into one folder the same way."""
    from learning_check import take_from

    def lane(name: str, samples: dict[str, str]) -> Path:
        root = tmp_path / name
        (root / "arms").mkdir(parents=True)
        (root / "arms" / "candidates.db").write_text("arms")
        (root / "shown.db").write_text("shown")
        for policy, text in samples.items():
            (root / "seed-0" / "samples").mkdir(parents=True, exist_ok=True)
            (root / "seed-0" / "samples" / f"{policy}.json").write_text(text)
        return root

    grpo = lane("grpo", {"sft": "A", "grpo": "G"})
    control = lane("control", {"sft": "B", "control": "C"})  # its own SFT run: other samples
    work = tmp_path / "work"
    # a training lane starts from the arms alone: samples it took along would later be gathered
    # from its folder as its own
    start = tmp_path / "lane"
    take_from(start, [grpo], samples=False)
    assert (start / "shown.db").is_file() and not list(start.glob("seed-*"))
    take_from(work, [grpo, control], samples=True)
    got = {p.stem: p.read_text() for p in (work / "seed-0" / "samples").glob("*.json")}
    assert got == {"sft": "A", "grpo": "G", "control": "C"}  # the first lane's SFT samples kept
    assert (work / "shown.db").read_text() == "shown" and (work / "arms" / "candidates.db").is_file()
    with pytest.raises(SystemExit, match="no measured arms"):
        take_from(work, [tmp_path / "empty"], samples=True)


def test_a_samples_file_says_how_its_policy_was_trained_and_the_report_prints_it(tmp_path):
    """Lanes trained in other calls, with other settings (two kinds of control, KL terms), are
    gathered into one report: each samples file keeps its policy's settings beside the replies,
    the re-measurement reads the replies alone, and the report says per policy what it compares."""
    import argparse

    from learning_remeasure import TRAINED_KEY, sampled, samples_dir, trained_settings, trained_with
    from learning_report import trained_lines

    args = argparse.Namespace(sft_steps=200, sft_lr=1e-3, policy_hidden=256, policy_layers=4, steps=30, lr=3e-4,
                              generations=8, beta=0.04, strays="fail", temperature=1.0, max_tokens=64,
                              control_shuffle="all")
    assert "beta" not in trained_with(args, "sft") and trained_with(args, "sft")["sft_steps"] == 200
    assert trained_with(args, "final")["beta"] == 0.04 and "control_shuffle" not in trained_with(args, "final")
    assert trained_with(args, "control")["control_shuffle"] == "all"

    for seed, shuffle in ((0, "all"), (1, "verified")):
        folder = samples_dir(tmp_path, seed)
        folder.mkdir(parents=True)
        seed_args = argparse.Namespace(**{**vars(args), "control_shuffle": shuffle})
        for name in ("sft", "final", "control"):
            payload = {"3_softmax": [f"{name} reply"], TRAINED_KEY: trained_with(seed_args, name)}
            (folder / f"{name}.json").write_text(json.dumps(payload))
    (samples_dir(tmp_path, 1) / "ablation.json").write_text(json.dumps({"3_softmax": ["old"]}))  # no record

    assert sampled(tmp_path, 0) == {n: {"3_softmax": [f"{n} reply"]} for n in ("control", "final", "sft")}
    trained = {seed: trained_settings(tmp_path, seed) for seed in (0, 1)}
    assert trained[1]["ablation"] is None and trained[0]["control"]["control_shuffle"] == "all"
    lines = trained_lines(trained)
    assert any(line.startswith("trained: final: ") and "beta=0.04" in line for line in lines)
    assert any(line.startswith("trained: control, seed 0: ") and "control_shuffle=all" in line for line in lines)
    assert any(line.startswith("trained: control, seed 1: ") and "control_shuffle=verified" in line for line in lines)
    assert "trained: ablation: not recorded" in lines
