"""A fake OpenAI-compatible server on loopback, so that no test ever reaches the network.

It serves ``POST /v1/chat/completions`` from a ``ThreadingHTTPServer`` on 127.0.0.1 (port 0) in a
background thread. By default each request gets canned replies (cycled over choices) and a usage
block; ``queue()`` scripts the next responses: an HTTP error status, a hang, malformed JSON, a
delay. It records every request body and the largest number of requests in flight at once.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Behaviour:
    status: int = 200
    delay_s: float = 0.0
    hang: bool = False
    malformed: bool = False
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


class FakeOpenAIServer:
    def __init__(self, replies: list[str] | None = None, usage_prompt_tokens: int = 11) -> None:
        self.replies = replies or ["hello"]
        self.usage_prompt_tokens = usage_prompt_tokens
        self.cached_tokens = 0
        self.delay_s = 0.0
        self.message_extra: dict[str, Any] = {}
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._script: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def queue(self, *behaviours: Behaviour) -> None:
        """Script the next responses; once they are used up, requests get the default reply."""
        self._script.extend(behaviours)

    def start(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._release.set()  # wake handlers that hang
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next(self, body: dict[str, Any]) -> Behaviour:
        with self._lock:
            self.requests.append(body)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return self._script.popleft() if self._script else Behaviour(delay_s=self.delay_s)

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def completion_body(self, request: dict[str, Any]) -> dict[str, Any]:
        n = int(request.get("n") or 1)
        texts = itertools.islice(itertools.cycle(self.replies), n)
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": text, **self.message_extra},
                "finish_reason": "stop",
            }
            for i, text in enumerate(texts)
        ]
        completion_tokens = sum(len(c["message"]["content"].split()) for c in choices)
        return {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", "fake"),
            "choices": choices,
            "usage": {
                "prompt_tokens": self.usage_prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": self.usage_prompt_tokens + completion_tokens,
                "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
            },
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
                behaviour = server._next(body)
                try:
                    self._respond(behaviour, body)
                finally:
                    server._done()

            def _respond(self, b: Behaviour, body: dict[str, Any]) -> None:
                if b.hang:
                    server._release.wait(30)
                    return
                if b.delay_s:
                    time.sleep(b.delay_s)
                if self.path != "/v1/chat/completions":
                    b = Behaviour(status=404, body={"error": {"message": f"no route {self.path}"}})
                if b.malformed:
                    payload = b'{"id": "chatcmpl-x", "choices": [ this is not json'
                elif b.status != 200:
                    error = {"error": {"message": f"fake error {b.status}", "type": "fake", "code": b.status}}
                    payload = json.dumps(b.body or error).encode()
                else:
                    payload = json.dumps(b.body or server.completion_body(body)).encode()
                self.send_response(b.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("x-request-id", f"req-{len(server.requests)}")
                for key, value in b.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

        return Handler
