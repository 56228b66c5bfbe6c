"""A candidate's own errors read as one clear message at the stage where they happen: no
traceback through the evaluator's worker code, the message once, the candidate's frames only."""

from __future__ import annotations

import pytest

from cudal1.eval.pool import evaluate
from cudal1.schema import Stage


@pytest.fixture
def config(fast_config):
    """Room for a worker's start on a loaded machine: these tests are about messages, not time."""
    return fast_config.model_copy(
        update={
            "sandbox": fast_config.sandbox.model_copy(
                update={"call_timeout_s": 60, "first_calls_timeout_s": 60}
            )
        }
    )


def _no_project_frames(error: str) -> None:
    assert "worker.py" not in error and "cudal1" not in error and "<frozen" not in error


@pytest.mark.parametrize(
    "source, message",
    [
        ("", "the candidate is empty: it defines no class ModelNew"),
        ("\n# nothing here\n", "the candidate defines no class ModelNew"),
        (
            "import torch\n\n\nclass Model(torch.nn.Module):\n    pass\n",
            "the candidate defines no class ModelNew",
        ),
        ("ModelNew = 3\n", "the candidate's ModelNew is a int, not a class"),
    ],
)
def test_a_candidate_without_model_new_says_so_in_one_line(task, config, source, message):
    result = evaluate(task, source, config)
    assert result.failed_stage is Stage.COMPILE
    assert result.error == message


def test_an_init_error_shows_the_candidates_frames_and_its_message_once(task, config, candidate):
    source = candidate("        return x", init_extra="        raise ValueError('bad init here')\n")
    result = evaluate(task, source, config)
    assert result.failed_stage is Stage.LOAD
    assert result.error.count("bad init here") == 2  # the source line and the error line
    assert result.error.count("ValueError: bad init here") == 1
    assert result.error.startswith('Traceback (most recent call last):\n  File "candidate.py"')
    assert "in __init__" in result.error
    _no_project_frames(result.error)


def test_an_error_in_forward_starts_at_the_candidates_frame(task, config, candidate):
    """torch's Module.__call__ frames that lead into forward are not the candidate's either."""
    result = evaluate(
        task,
        candidate("        return helper(x)", imports="def helper(x):\n    return x @ x[:3]"),
        config,
    )
    assert result.failed_stage is Stage.LOAD  # forward first runs in the first calls, at load
    lines = result.error.splitlines()
    assert lines[1].startswith('  File "candidate.py"') and "in forward" in lines[1]
    assert any("in helper" in line for line in lines)
    assert "torch/nn/modules" not in result.error
    assert lines[-1].startswith("RuntimeError: ")
    _no_project_frames(result.error)
