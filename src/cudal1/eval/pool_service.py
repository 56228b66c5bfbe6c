"""One evaluator pool shared by several processes: a service process that owns the pool, and a
client (``RemotePool``) with the pool's interface in each process that submits to it.

Why a service: a multi-process training launch (``accelerate launch``, one process per training
GPU) computes rewards in every process. A pool per process would start its own reference and
candidate workers on the evaluation GPUs, and their timed pairs would overlap on the same device;
one pool times one pair per device at a time, so every process submits to the same one.

- ``PoolService.start`` spawns the service process (a fresh interpreter: it shares no threads,
  locks or GIL with the trainer that started it); the pool is made there by ``make_pool``, so a
  local pool and a Ray pool serve the same way. It listens on ``host`` (loopback by default) on
  a free port, with a random key: a client must prove the key before anything is read from it
  (``multiprocessing.connection``'s handshake). The key travels only through the start pipe and
  the launcher's own collective, never through a file or the environment.
- ``RemotePool(address, key)``: ``submit`` sends the request and returns a future that the
  reply resolves; replies come back in the order evaluations finish. A service that goes away
  fails what waits with ``PoolStopped``: the candidates stay pending, as with a stopped local pool.
- Messages are JSON (``send_bytes``), never pickles: a peer that has the key can submit
  evaluations, and nothing more. With pickles, a candidate worker that read the key out of the
  service's memory (its parent's, ``/proc/PPID/mem``, readable where workers run as root with no
  Yama) ran code in the service, the process whose results every rank rewards (red team
  2026-11-26, tests/eval/test_service_key.py).
- The service stops when the process that started it says so (what runs finishes first) or dies
  (its start pipe closes; a local pool then stops at once): no service outlives its run.

What is not covered: clients on other machines (``host`` must then be an address they reach,
and the network between them trusted: the key authenticates, it does not encrypt); a candidate
that reads the key from the service's memory can submit evaluations of its own (they cost
device time, they reach no rank); a request two processes submit for the same candidate is
evaluated twice (callers avoid it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import multiprocessing
import secrets
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection, Listener
from typing import Any, Self

from cudal1.config import EvalConfig, PoolConfig
from cudal1.eval.pool import PoolStopped, StreamingPool
from cudal1.eval.pool_kinds import make_pool
from cudal1.schema import EvalRequest, EvalResult, Task

log = logging.getLogger(__name__)

START_TIMEOUT_S = 600.0  # a Ray pool's first actors may take minutes to start


class PoolServiceError(RuntimeError):
    """The service could not start, or a client could not reach it."""


@dataclass(frozen=True)
class ServiceAddress:
    """Where the service listens and the key a client proves (what the ranks are told)."""

    host: str
    port: int
    key: bytes

    def __repr__(self) -> str:  # the key is a secret: never in a log line or a traceback
        return f"ServiceAddress({self.host!r}, {self.port})"


class PoolService:
    """The service process, seen from the process that started it."""

    def __init__(self, process: Any, control: Connection, address: ServiceAddress, devices: tuple[str, ...]):
        self._process, self._control = process, control
        self.address, self.devices = address, devices

    @classmethod
    def start(
        cls,
        config: EvalConfig,
        pool: PoolConfig,
        devices: Sequence[str] | None = None,
        host: str = "127.0.0.1",
    ) -> PoolService:
        """Spawn the service with a pool made as ``make_pool(config, pool, devices=devices)``;
        returns once it listens (PoolServiceError when the pool cannot be made)."""
        ctx = multiprocessing.get_context("spawn")
        ours, theirs = ctx.Pipe()
        key = secrets.token_bytes(32)
        process = ctx.Process(
            target=_serve,
            args=(config, pool, list(devices) if devices is not None else None, host, key, theirs),
            name="cudal1-pool-service",
        )
        process.start()
        theirs.close()
        if not ours.poll(START_TIMEOUT_S):
            process.kill()
            raise PoolServiceError(f"the evaluator service did not start in {START_TIMEOUT_S:.0f} s")
        try:
            kind, *rest = ours.recv()
        except EOFError:
            process.join(5)
            raise PoolServiceError(
                f"the evaluator service exited while starting (exit code {process.exitcode})"
            ) from None
        if kind == "error":
            process.join(5)
            raise PoolServiceError(f"the evaluator service could not start its pool: {rest[0]}")
        port, devices_made = rest
        log.info("evaluator service on %s:%d, timing on %s", host, port, list(devices_made) or "remote GPUs")
        return cls(process, ours, ServiceAddress(host, port, key), tuple(devices_made))

    def stop(self, timeout: float = 120.0) -> None:
        """Close the pool (what runs finishes or stops as the pool's close says) and wait."""
        with contextlib.suppress(OSError):
            self._control.send(("stop",))
        self._process.join(timeout)
        if self._process.is_alive():
            log.warning("the evaluator service did not stop in %.0f s: killed", timeout)
            self._process.kill()
            self._process.join(5)
        self._control.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RemotePool(StreamingPool):
    """``pool.Pool`` over a ``PoolService`` (see the module docstring)."""

    def __init__(self, address: ServiceAddress, timeout: float = 60.0) -> None:
        try:
            self._conn = Client((address.host, address.port), authkey=address.key)
        except (OSError, multiprocessing.AuthenticationError) as exc:
            raise PoolServiceError(
                f"cannot reach the evaluator service at {address.host}:{address.port}: {exc}"
            ) from exc
        if not self._conn.poll(timeout):
            self._conn.close()
            raise PoolServiceError("the evaluator service did not answer")
        _, devices, capacity = _decode(self._conn.recv_bytes())
        self._devices: tuple[str, ...] = tuple(devices)
        self._capacity = int(capacity)
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._futures: dict[int, Future[EvalResult]] = {}
        self._numbers = itertools.count()
        self._gone = ""
        self._reader = threading.Thread(target=self._read, name="cudal1-remote-pool", daemon=True)
        self._reader.start()

    @property
    def devices(self) -> tuple[str, ...]:
        """The devices the service times on (this machine's, for a service started here)."""
        return self._devices

    @property
    def capacity(self) -> int:
        return self._capacity

    def in_flight(self) -> int:
        with self._lock:
            return len(self._futures)

    def submit(self, request: EvalRequest) -> Future[EvalResult]:
        future: Future[EvalResult] = Future()
        with self._lock:
            if self._gone:
                raise PoolStopped(self._gone)
            number = next(self._numbers)
            self._futures[number] = future
        try:
            with self._send_lock:
                self._conn.send_bytes(_encode(["submit", number, _request_data(request)]))
        except OSError as exc:
            self._fail_all(f"the evaluator service went away: {exc}")
        return future

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.close()
        self._fail_all("the pool client was closed")
        self._reader.join(5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self) -> None:
        while True:
            try:
                kind, number, payload = _decode(self._conn.recv_bytes())
            except (EOFError, OSError):
                self._fail_all("the evaluator service went away")
                return
            with self._lock:
                future = self._futures.pop(number, None)
            if future is None:
                continue
            if kind == "result":
                future.set_result(EvalResult.from_dict(payload))
            elif kind == "stopped":
                future.set_exception(PoolStopped(payload))
            else:
                future.set_exception(PoolServiceError(payload))

    def _fail_all(self, why: str) -> None:
        with self._lock:
            self._gone = self._gone or why
            waiting, self._futures = list(self._futures.values()), {}
        for future in waiting:
            if not future.done():
                future.set_exception(PoolStopped(why))


# -- the service process ------------------------------------------------------------------------


def _serve(
    config: EvalConfig,
    pool_config: PoolConfig,
    devices: list[str] | None,
    host: str,
    key: bytes,
    control: Connection,
) -> None:
    """The service process's main: make the pool, listen, serve every client on threads of its
    own, and stop when the control pipe says so or closes."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s pool-service %(levelname)s %(message)s")
    try:
        pool = make_pool(config, pool_config, devices=devices)
    except Exception as exc:  # noqa: BLE001 - the starter reports it
        control.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    with pool:
        listener = Listener((host, 0), authkey=key)
        control.send(("ready", listener.address[1], tuple(pool.devices)))
        threading.Thread(target=_accept, args=(listener, pool), name="accept", daemon=True).start()
        try:
            control.recv()  # "stop": what runs finishes as the pool's close lets it
        except (EOFError, OSError):  # the starter died: nobody waits for what runs
            stop = getattr(pool, "stop", None)
            if stop is not None:
                stop()
        listener.close()


def _accept(listener: Listener, pool: Any) -> None:
    while True:
        try:
            conn = listener.accept()
        except multiprocessing.AuthenticationError:
            log.warning("a client with the wrong key was turned away")
            continue
        except OSError:  # the listener was closed: the service is stopping
            return
        threading.Thread(target=_client, args=(conn, pool), name="client", daemon=True).start()


def _client(conn: Connection, pool: Any) -> None:
    """One client's requests; each reply is sent when its evaluation finishes."""
    lock = threading.Lock()
    conn.send_bytes(_encode(["hello", list(pool.devices), pool.capacity]))
    while True:
        try:
            _, number, data = _decode(conn.recv_bytes())
            request = _request_from(data)
        except (EOFError, OSError):
            return
        except (ValueError, TypeError, KeyError) as exc:  # not a request: that client is done
            log.warning("a malformed request ended a client's connection: %s", exc)
            conn.close()
            return
        try:
            future = pool.submit(request)
        except Exception as exc:  # noqa: BLE001 - a closed pool: the client's future fails
            _reply(conn, lock, number, "stopped", str(exc))
            continue
        future.add_done_callback(lambda f, n=number: _settled(conn, lock, n, f))


def _settled(conn: Connection, lock: threading.Lock, number: int, future: Future[EvalResult]) -> None:
    if future.cancelled():
        _reply(conn, lock, number, "stopped", "the evaluation was cancelled")
        return
    exc = future.exception()
    if exc is None:
        _reply(conn, lock, number, "result", future.result().to_dict())
    elif isinstance(exc, PoolStopped):
        _reply(conn, lock, number, "stopped", str(exc))
    else:
        _reply(conn, lock, number, "error", f"{type(exc).__name__}: {exc}")


def _reply(conn: Connection, lock: threading.Lock, number: int, kind: str, payload: Any) -> None:
    with lock, contextlib.suppress(OSError):  # a client that left gets nothing
        conn.send_bytes(_encode([kind, number, payload]))


def _encode(message: list[Any]) -> bytes:
    return json.dumps(message).encode()


def _decode(data: bytes) -> list[Any]:
    message = json.loads(data)
    if not isinstance(message, list) or len(message) != 3:
        raise ValueError("a service message is a list of three")
    return message


def _request_data(request: EvalRequest) -> dict[str, Any]:
    return {
        "task": dataclasses.asdict(request.task),
        "source": request.source,
        "request_id": request.request_id,
        "label": request.label,
    }


def _request_from(data: dict[str, Any]) -> EvalRequest:
    task = data["task"]
    fields = {f.name for f in dataclasses.fields(Task)}
    if not isinstance(task, dict) or set(task) - fields:
        raise ValueError("not a task")
    return EvalRequest(Task(**task), str(data["source"]), str(data["request_id"]), str(data["label"]))
