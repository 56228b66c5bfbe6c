"""How a stage of an evaluation says it failed, and whose failure it was.

Raised by the evaluator's stages, the reference worker's handle and the behavioural probes;
``record.EvaluationRecord.stage`` turns it into the failed stage's record (or, when the task's
reference failed for lack of a resource, into an evaluator error that is never the candidate's).
"""

from __future__ import annotations

from cudal1.schema import Stage


class StageFailed(Exception):
    """A stage of an evaluation failed; ``reference``: the task's reference, not the candidate."""

    def __init__(self, stage: Stage, message: str, reference: bool = False) -> None:
        super().__init__(message)
        self.stage = stage
        self.reference = reference
