"""One candidate, isolated: static checks, sandboxed workers, correctness, timing, integrity.

Sub-packages by concept, each importing only those below it (checked by import-linter):
``process`` (the untrusted worker and its channel), ``timing`` (paired timing, statistics, speed
of light), ``checks`` (static rules, comparison, probes, and one module per verdict: stage
failures, precision, the clock comparison, global state); on top ``reference_process`` (what runs
in the trusted reference's worker), ``workers`` (the trusted side's handles on them) and
``devices`` (device names, CPU placement), ``record`` (what an evaluation found, and its result),
``worker_pair`` (the checked conversation with an evaluation's two workers),
``correctness_stage`` and ``timing_stage``, ``evaluator`` (one evaluation, phase by phase),
``pool`` (many, over local devices), ``ray_pool`` (many, over a Ray cluster's GPUs, each actor a
local pool) and ``pool_kinds`` (which of the two a config asks for). This file imports nothing,
so that a worker process started as ``python -m cudal1.eval.process.worker`` loads no
orchestration.

Never imports ``cudal1.llm``, ``cudal1.audit`` or ``cudal1.search``.
"""
