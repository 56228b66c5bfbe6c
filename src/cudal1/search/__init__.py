"""Contrastive search: candidate database, prompts, reply parsing, exemplar selection, baselines."""
