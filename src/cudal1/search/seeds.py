"""Round 0 of a task: the candidates a run starts from before any model has written one.

``seed_candidates`` gives the built-in proposer's baselines (``proposer.py``) and the reference
anchor: the task's own program as a candidate labelled ``reference``, an A-vs-A measurement whose
speedup should be 1.0, so that every other number of the task can be read against the
evaluator's own noise. ``lifecycle.store_proposals`` puts them in a run's database (the
search's round 0, GRPO's first prompts).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from cudal1.run.selection import REFERENCE_LABEL
from cudal1.schema import Task
from cudal1.search.lifecycle import Proposal
from cudal1.search.proposer import baseline_candidates


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        if node.name == self.old:
            node.name = self.new
        self.generic_visit(node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == self.old:
            node.id = self.new
        return node


def reference_anchor(task: Task) -> str:
    """The task's own program as a candidate: ``class Model`` renamed ``ModelNew`` (by ``ast``)."""
    return ast.unparse(_Rename("Model", "ModelNew").visit(ast.parse(task.source))) + "\n"


def seed_candidates(task: Task, labels: Sequence[str] | None, *, cuda: bool = True) -> list[Proposal]:
    """Round 0's proposals: the chosen built-in baselines that apply on a CUDA device (``cuda``)
    or a CPU, then the reference anchor."""
    seeds = [
        Proposal(lbl, src, origin=lbl)
        for lbl, src in baseline_candidates(task, cuda=cuda)
        if labels is None or lbl in labels
    ]
    return [*seeds, Proposal(REFERENCE_LABEL, reference_anchor(task), origin=REFERENCE_LABEL)]
