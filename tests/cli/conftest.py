"""Fixtures for the command-line tests: no real LLM endpoint is ever reached; ``cudal1 optimize``
in a subprocess for the tests of signals."""

from run_fixtures import closed_port_url, no_real_endpoint, optimize_process  # noqa: F401 (fixtures)
