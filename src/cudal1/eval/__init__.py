"""One candidate, isolated: static checks, sandboxed workers, correctness, timing, integrity.

Sub-packages by concept, each importing only those below it (checked by import-linter):
``process`` (the untrusted worker and its channel), ``timing`` (paired timing, statistics, speed
of light), ``checks`` (static rules, comparison, probes, verdicts); on top ``reference_process``
(what runs in the trusted reference's worker), ``evaluator`` (one evaluation) and ``pool``
(many, over local devices). This file imports nothing, so that a worker process started as
``python -m cudal1.eval.process.worker`` loads no orchestration.

Never imports ``cudal1.llm``, ``cudal1.audit`` or ``cudal1.search``.
"""
