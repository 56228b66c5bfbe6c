"""Texts and config data shared by the training tests (a uniquely named module, not conftest)."""

from __future__ import annotations

from run_fixtures import GELU, GOOD, NO_CODE, eval_data

from cudal1.search.prompts import render_contrastive_prompt, render_generation_prompt

__all__ = ["ANSWERS", "GELU", "GOOD_ANSWER", "HACK_ANSWER", "NO_CODE", "corpus", "eval_data", "grpo_config"]

GOOD_ANSWER = GOOD.replace("{i}", "0")
# Correct outputs, but written into the input tensor: the evaluator rejects it (input_mutated).
HACK_ANSWER = """## Performance analysis
Reuse the input's memory for the output: no allocation.

## Implementation
```python
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.copy_(F.gelu(x))
```
"""
ANSWERS = (GOOD_ANSWER, HACK_ANSWER, NO_CODE)


def corpus() -> list[str]:
    """What the tiny tokenizer is trained on: the prompts the tests render and the answers."""
    from cudal1.search.prompts import Exemplar

    contrastive = render_contrastive_prompt(GELU, [Exemplar(GOOD_ANSWER, 1.0, True, label="#1")])
    texts = [m["content"] for m in render_generation_prompt(GELU) + contrastive]
    return (texts + [GELU.source, *ANSWERS]) * 3


def make_result(task: str, source: str, speedup: float | None, *, correct: bool = True, reject: bool = False):
    """An EvalResult as the evaluator returns it (speedup None: not timed)."""
    from cudal1.schema import Correctness, EvalResult, Finding, Severity, Stage, Timing, source_hash

    timing = None
    if speedup is not None:
        t = (1.0 / speedup,) * 3
        timing = Timing(
            "cpu", 1, (1.0,) * 3, t, (1.0,) * 3, t, speedup, speedup * 0.99, speedup * 1.01, speedup, "budget"
        )
    findings = (
        (Finding("input_mutated", Severity.REJECT, Stage.INTEGRITY, "input changed"),) if reject else ()
    )
    return EvalResult(
        task=task,
        candidate_hash=source_hash(source),
        device="cpu",
        correctness=Correctness(3, 3 if correct else 1, 0.0, 0.0, 1.0, "float64"),
        timing=timing,
        findings=findings,
    )


def variant(i: int) -> str:
    """A correct GELU reply whose source differs from every other ``variant``'s."""
    return GOOD.replace("{i}", str(i))


def store_evaluated(
    db, task, reply: str, speedup: float | None, *, label: str, backend: str = "policy", **kw
):
    """Store ``reply`` as ``task``'s candidate with a result already recorded (as if evaluated);
    returns its id. ``kw``: ``make_result`` options (``correct``, ``reject``)."""
    from cudal1.run.rows import Provenance
    from cudal1.search.lifecycle import store_reply

    cand_id, error = store_reply(db, task, reply, Provenance(backend=backend), label=label)
    assert error is None, error
    db.record_result(cand_id, make_result(task.name, db.get(cand_id).source, speedup, **kw))
    return cand_id


class NoPool:
    """A pool for reward tests whose completions all repeat stored candidates: never asked."""

    devices: tuple[str, ...] = ()

    async def evaluate(self, *args, **kwargs):
        raise AssertionError("every completion should reuse a stored result")


def reward_over_stored(db, tmp_path, cfg=None, *, judge=None, group_size=2, **audit):
    """GRPO's reward (``PoolReward``) over ``db`` with no pool: every completion scored must
    repeat a stored candidate. ``audit``: ``AuditConfig`` fields; ``steps.jsonl`` in ``tmp_path``."""
    from cudal1.audit import open_case_db
    from cudal1.config import AuditConfig, RewardConfig
    from cudal1.train.auditing import RewardAuditor
    from cudal1.train.phases import PhaseGate
    from cudal1.train.pool_reward import PoolReward

    cfg = cfg or RewardConfig()
    auditor = RewardAuditor(AuditConfig(**audit), cfg, judge, open_case_db(), db)
    return PoolReward(
        db,
        NoPool(),
        {GELU.name: GELU},
        cfg,
        auditor,
        PhaseGate(shared=False),
        group_size=group_size,
        run_id=db.start_run(),
        steps_file=tmp_path / "steps.jsonl",
    )


def score(reward, replies, step=1):
    """``reward`` called as TRL calls it, on GELU completions ``replies`` (one prompt's group)."""
    import asyncio

    class State:
        global_step = step

    n = len(replies)
    return asyncio.run(
        reward(
            prompts=[[]] * n,
            completions=[[{"role": "assistant", "content": r}] for r in replies],
            task=[GELU.name] * n,
            prompt_hash=["h"] * n,
            parent_ids=["[]"] * n,
            trainer_state=State(),
        )
    )


def grpo_config(
    tmp_path, eval_config, *, max_steps: int = 3, report_to: str = "tensorboard", max_tokens: int = 8
):
    """A GRPO stage config file for CPU tests: 4 completions a step, LoRA rank 4, a small pool."""
    import yaml

    data = {
        "optim": {
            "report_to": report_to,
            "batch_size": 4,
            "max_steps": max_steps,
            "save_steps": 1,
            "learning_rate": 1e-3,
        },
        "lora": {"r": 4},
        "num_generations": 4,
        "sampling": {"max_tokens": max_tokens},
        "seed_baselines": False,
        "device": "cpu",
        "size": "cpu",
        "eval": eval_config,
        "pool": {"workers": 2, "spares": 1},
    }
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(data))
    return path
