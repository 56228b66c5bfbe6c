"""Fixtures for the command-line tests: no real LLM endpoint is ever reached."""

from run_fixtures import closed_port_url, no_real_endpoint  # noqa: F401 (fixtures)
