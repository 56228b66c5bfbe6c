"""The learning check's arms: stacked programs of the built-in transforms, measured once.

An arm is a task's reference as ``transforms.stacked_program`` writes it: a base block, then
wrapper blocks appended innermost first. The stacking order is fixed (at most one torch.compile
mode, then channels_last, then scoped cuDNN flags, then a CUDA graph outermost), so a stack is a
subset and a policy composes by appending blocks. On a GPU torch.compile has the headroom
(1.2-2.1x on the bundled quick-start tasks, H100: README); channels_last and cuDNN flags only
touch 2-D convolutions; a CUDA graph over reduce-overhead (which already captures graphs) is left
out. On a CPU the CUDA-only blocks run the program unchanged, so they are left out too.

``held_out``: the stacks of two or more blocks that are at least as fast as the task's best single
block never reach the SFT data (nor GRPO's first prompts): the best arm the policy can find is then a
combination it never saw, written from blocks it saw apart or in other stacks.

Two reward wrappers for ``train.grpo.run_grpo(wrap_reward=...)``:
``PremeasuredReward`` copies an arm's measured result into the run's database the first time a
completion writes that arm (the pool then reuses it: GRPO's rewards cost no torch.compile builds);
``ShuffledReward`` permutes each batch's rewards (the control: the same run with no speed signal;
failures keep theirs unless every reward is shuffled).
A program that is no measured arm (a stray) is evaluated, or with ``strays="fail"`` (the check's
default) scored as a reply with no program: see ``PremeasuredReward``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from cudal1.config import EvalConfig, PoolConfig, RewardConfig, Transform
from cudal1.eval.pool_kinds import make_pool
from cudal1.run.database import CandidateDB
from cudal1.run.directory import RunDirectory, start_session
from cudal1.run.rows import CandidateStatus, Provenance
from cudal1.schema import EvalResult, Task, source_hash
from cudal1.search.lifecycle import Proposal, evaluate_rows, store_proposals
from cudal1.search.parsing import extract
from cudal1.search.transforms import stacked_program, uses_conv2d
from cudal1.train.datasets import format_answer
from cudal1.train.pool_reward import completion_text, sol_ms
from cudal1.train.reward import reward_from_result

REFERENCE_ARM = "reference"
ARM_BACKEND = "arm"
_WRAPPERS: tuple[Transform, ...] = ("channels-last", "cudnn-benchmark", "cuda-graph")
_CONV_ONLY = frozenset({"channels-last", "cudnn-benchmark"})
_CUDA_ONLY = frozenset({"cudnn-benchmark", "cuda-graph", "torch-compile-reduce-overhead"})
# What GRPO gives a program that is no measured arm (``PremeasuredReward``).
Strays = Literal["fail", "evaluate"]


def arm_stacks(task: Task, *, cuda: bool, depth: int = 4) -> list[tuple[Transform, ...]]:
    """Every stack of the task, innermost first, the reference (no block) included. Depth 4 holds
    every wrapper over a compile mode: at depth 3 the GRPO policies on four H200s wrote that stack
    (not an arm) and paid a fresh evaluation with its build for it in a step (2026-11-28)."""
    compiles: list[Transform | None] = [None, "torch-compile-default", "torch-compile-reduce-overhead"]
    wrappers = [w for w in _WRAPPERS if uses_conv2d(task) or w not in _CONV_ONLY]
    stacks = []
    for mode in compiles:
        for n in range(len(wrappers) + 1):
            for combo in itertools.combinations(wrappers, n):
                stack = ((mode,) if mode else ()) + combo
                ok = len(stack) <= depth and (cuda or not set(stack) & _CUDA_ONLY)
                if ok and not (mode == "torch-compile-reduce-overhead" and "cuda-graph" in stack):
                    stacks.append(stack)
    return stacks


def arm_label(stack: Sequence[str]) -> str:
    return "+".join(stack) if stack else REFERENCE_ARM


def blocks(label: str) -> int:
    return 0 if label == REFERENCE_ARM else label.count("+") + 1


def arm_source(task: Task, stack: Sequence[Transform]) -> str:
    """The arm's program as a policy's reply yields it back (``extract`` of ``format_answer``),
    so that a completion that writes the arm finds it by its source."""
    code = extract(format_answer(stacked_program(task.source, stack))).code
    assert code is not None
    return code


@dataclass(frozen=True)
class Arm:
    task: str
    label: str
    source: str
    result: EvalResult | None
    speedup: float | None  # verified speedup over eager; None when it did not verify
    reward: float


def measure_arms(
    out: Path,
    tasks: Sequence[Task],
    eval_cfg: EvalConfig,
    pool_cfg: PoolConfig,
    *,
    cuda: bool,
    known: Sequence[Path] = (),
) -> None:
    """Store every arm of every task in the run directory ``out`` and evaluate what is pending:
    a killed call resumes where it stopped, a finished one evaluates nothing. ``known``: other
    arms databases (lanes of one GPU machine that each measured some tasks, ``--tasks``, into a
    ``--work`` of their own) whose results are taken over instead of measured again."""
    run = RunDirectory(out)
    by_name = {t.name: t for t in tasks}
    with run.session() as db:
        run_id = start_session(db, run, tasks, eval_cfg, note="learning-check arms")
        for task in tasks:
            proposals = [Proposal(arm_label(s), arm_source(task, s)) for s in arm_stacks(task, cuda=cuda)]
            store_proposals(db, task, proposals, Provenance(backend=ARM_BACKEND, run_id=run_id))
        for path in known:
            adopt_arms(db, tasks, path)
        pending = [r for r in db.pending() if r.task in by_name]
        if pending:
            with make_pool(eval_cfg, pool_cfg) as pool:
                asyncio.run(evaluate_rows(db, pool, by_name, pending))


def adopt_arms(db: CandidateDB, tasks: Sequence[Task], path: Path) -> int:
    """Record the results ``path`` (an arms database) holds for arms ``db`` has pending; returns
    how many. Only a result for the same task and the very same source is taken."""
    if not path.is_file():
        raise SystemExit(f"--arms-from: no arms database at {path}")
    taken = 0
    with CandidateDB(path) as other:
        for t in tasks:
            for row in other.evaluated(t.name):
                mine = db.find_by_hash(t.name, source_hash(row.source))
                if row.result is not None and mine is not None and mine.status is CandidateStatus.PENDING:
                    db.record_result(mine.id, row.result)
                    taken += 1
    return taken


def read_arms(db: CandidateDB, tasks: Sequence[Task], reward: RewardConfig) -> dict[str, list[Arm]]:
    """Each task's evaluated arms, with what a sample that writes one earns (over eager)."""
    out: dict[str, list[Arm]] = {}
    for t in tasks:
        arms = []
        for r in db.evaluated(t.name):
            res = r.result
            verified = res is not None and res.correct and not res.rejected and r.speedup is not None
            value = (
                reward_from_result(res, reward, sol_ms=sol_ms(res)) if res is not None else reward.incorrect
            )
            arms.append(Arm(t.name, r.label, r.source, res, r.speedup if verified else None, value))
        out[t.name] = arms
    return out


def held_out(arms: Sequence[Arm]) -> set[str]:
    """The stacks of two or more blocks at least as fast as the task's best single block (the
    reference counts as one): the combinations SFT never shows."""
    singles = [a.speedup for a in arms if blocks(a.label) <= 1 and a.speedup is not None]
    best_single = max(singles, default=0.0)
    return {
        a.label for a in arms if blocks(a.label) >= 2 and a.speedup is not None and a.speedup >= best_single
    }


def write_shown(path: Path, arms: dict[str, list[Arm]], tasks: Sequence[Task]) -> None:
    """A database of the arms SFT shows, with their measured results: what SFT's and GRPO's
    first prompts are built from (a held-out arm enters a GRPO run only once a sample writes it)."""
    by_name = {t.name: t for t in tasks}
    with CandidateDB(path) as db:
        for name, task_arms in arms.items():
            hidden = held_out(task_arms)
            for a in task_arms:
                if a.label not in hidden and a.result is not None:
                    copy_arm(db, by_name[name], a)


def copy_arm(db: CandidateDB, task: Task, arm: Arm) -> int:
    cid = db.add_candidate(task, arm.source, Provenance(backend=ARM_BACKEND), label=arm.label)
    assert arm.result is not None
    db.record_result(cid, arm.result)
    return cid


# What a stray (a program that parses but is no measured arm of its task) is given in place of
# its reply under ``strays="fail"``: a text with no program, so the reward scores it as a parse
# failure (``reward.incorrect``; ``steps.jsonl``'s parse failures count strays too) and the run's
# database holds this text for it, not its program (``strays.jsonl`` counts them a step).
STRAY_REPLY = "(a program that is no measured arm of this task: not evaluated in training, strays=fail)"


class PremeasuredReward:
    """Wraps GRPO's ``PoolReward``: a completion that writes an arm not yet in the run's
    database gets the arm's stored result copied in first, so the pool reuses it.

    ``strays``: what a completion earns that parses to a program no measured arm of its task is
    (a block twice, blocks out of the stacking order, an unmeasured stack, another task's arm).
    ``"evaluate"``: the pool evaluates it, a torch.compile build and all (on four H200s that made
    a GRPO step wait up to 71 s, and a seed's run did not fit a call). ``"fail"``: it is scored as
    a reply with no program, so the check's action space is its arms and training times nothing;
    the re-measurement still evaluates every program a policy writes, strays included. ``log`` (a
    JSON-lines file) gets each call's step and how many of its completions were strays."""

    __name__ = "speedup"

    def __init__(
        self,
        inner: Any,
        arms: dict[str, list[Arm]],
        tasks: Sequence[Task],
        *,
        strays: Strays = "evaluate",
        log: Path | None = None,
    ) -> None:
        if strays not in get_args(Strays):
            raise ValueError(f"strays={strays!r}: one of {', '.join(get_args(Strays))}")
        self.inner, self.strays, self.log = inner, strays, log
        self.tasks = {t.name: t for t in tasks}
        self.by_source = {(a.task, a.source): a for task_arms in arms.values() for a in task_arms}

    async def __call__(
        self, prompts: Any, completions: Sequence[Any], task: Sequence[str], **kwargs: Any
    ) -> Any:
        db: CandidateDB = self.inner.db
        passed: list[Any] = []
        n_strays = 0
        for completion, name in zip(completions, task, strict=True):
            code = extract(completion_text(completion)).code
            arm = self.by_source.get((name, code or ""))
            if (
                arm is not None
                and arm.result is not None
                and db.find_by_hash(name, source_hash(arm.source)) is None
            ):
                copy_arm(db, self.tasks[name], arm)
            stray = code is not None and arm is None
            n_strays += stray
            passed.append(STRAY_REPLY if stray and self.strays == "fail" else completion)
        if self.log is not None:
            state = kwargs.get("trainer_state")
            step = int(getattr(state, "global_step", 0) or 0)
            with self.log.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"step": step, "strays": n_strays, "completions": len(passed)}) + "\n")
        return await self.inner(prompts, passed, task, **kwargs)


def shuffle_rewards(
    rewards: Sequence[float | None], rng: random.Random, keep: Sequence[float] = ()
) -> list[float | None]:
    """The batch's rewards permuted over the samples that have one (None, no verdict, stays put),
    except those whose reward is one of ``keep`` (the failure rewards), which stay put too."""
    slots = [i for i, r in enumerate(rewards) if r is not None and r not in keep]
    values = [rewards[i] for i in slots]
    rng.shuffle(values)
    out = list(rewards)
    for i, v in zip(slots, values, strict=True):
        out[i] = v
    return out


ControlShuffle = Literal["verified", "all"]


class ShuffledReward:
    """The control: the wrapped reward's values shuffled within each batch, so that what a
    sample wrote says nothing about the reward it gets. It must not gain.

    ``failures``: rewards that stay with their samples (``verified`` shuffling: a reply with no
    program, a stray, an incorrect or rejected candidate keeps the failure reward; a verified
    arm slow enough to reach the reward's lower clip earns the same and stays too). Then only the
    speed signal is taken away: the control still learns to write a program that verifies, as
    the final policy does, and any gain the final policy has beyond it is the speedups'. With
    every reward shuffled (``all``, ``failures=()``, the check's default) the noise also takes the
    difference between a program and none. On four H200s (2026-11-28) such controls drifted into
    replies with no program and fell far below their SFT policy on two seeds of three at beta 0
    and on one at beta 0.04; with ``verified`` at beta 0.04, one of three rose (the programs
    it wrote that verified were faster, with no speed signal), the others stayed flat."""

    __name__ = "speedup"

    def __init__(self, inner: Any, seed: int, failures: Sequence[float] = ()) -> None:
        self.inner = inner
        self.rng = random.Random(f"control:{seed}")
        self.failures = tuple(failures)

    async def __call__(self, *args: Any, **kwargs: Any) -> list[float | None]:
        return shuffle_rewards(await self.inner(*args, **kwargs), self.rng, self.failures)
