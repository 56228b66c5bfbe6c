"""One candidate, isolated: static checks, sandboxed workers, correctness, timing, integrity.

Never imports ``cudal1.llm`` or ``cudal1.search``.
"""

from cudal1.eval.evaluator import evaluate, resolve_device
from cudal1.eval.pool import EvalPool

__all__ = ["EvalPool", "evaluate", "resolve_device"]
