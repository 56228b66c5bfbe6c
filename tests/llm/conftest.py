"""Fixtures for tests/llm: the fake OpenAI-compatible server, a dead port, a clean environment."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from fake_openai_server import FakeOpenAIServer


@pytest.fixture
def fake_server() -> Iterator[FakeOpenAIServer]:
    server = FakeOpenAIServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def closed_port_url() -> str:
    """The URL of a loopback port that nothing listens on (connection refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture(autouse=True)
def _no_real_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test inherits a real endpoint, key or proxy from the developer's environment."""
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(var, "127.0.0.1,localhost")
