"""Contrastive search: candidate database, prompts, reply parsing, exemplar selection, the
built-in proposer (``proposer``) and its transforms (``transforms``, ``embedding``, ``repair``),
the per-task contrastive loop (``contrastive``), one optimisation run in its directory
(``optimize``) and re-measurement of released records (``verify``)."""
