"""Checks and findings: static rules, output comparison, behavioural probes, integrity verdicts,
and the reference-drift baselines."""
