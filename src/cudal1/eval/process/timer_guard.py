"""Whether what a worker times with is still what it started with.

A candidate shares its process with the worker that times it, so it can swap the worker's timer
objects: a forged timer object behind long leads was verified at ~2.2x (issue 21), and a wrapped
``time`` command at 2.6x (``audit/cases/worker_tamper_forged_time.py``). The worker takes a
``snapshot`` when it starts serving, before any command, so before any candidate code; each TIME
reply carries ``tampered()``, the names of what differs now, and the trusted side rejects a
non-empty list (``timer_tampered``).

What is covered, replaced, wrapped, subclassed or given new code in the candidate's process:
- the CUDA events (the class ``torch.cuda.Event``: a subclass assigned there is named, and its
  ``__new__``, ``record``, ``elapsed_time``, ``query``, ``synchronize``), ``torch.cuda``'s
  ``synchronize``, ``current_stream`` and ``_sleep``, ``time.perf_counter``, ``gc.disable`` and
  ``gc.enable``, and the socket's ``Connection`` methods the replies leave by (on its class and
  on the worker's own socket object);
- the lead (its module, below: ``lead.spin`` and the spin kernel; and its settings once
  prepared, ``lead.altered``);
- the server's command table as ``serve`` holds it (each entry, the function behind it, its code
  object, and the method its name resolves to on the server now);
- the modules the server's classes come from (the worker's, and ``lead``'s): every module-level
  name (a rebound ``torch``, ``encode`` or ``time``), the code of every function, and every
  method of the classes defined there (a rewritten ``WorkerServer.time``).

What is not covered: a candidate that rewrites this guard itself (its snapshot, ``tampered``) or
works below Python (ctypes writes into objects, a patched CUDA library, its own thread writing on
the socket): all of it runs in the candidate's process. The trusted clock is the backstop: a
worker time shorter than the evaluator's own wall is ``clock_disagreement``, and the trusted
figure counts.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from types import FunctionType, MethodType, ModuleType
from typing import Any

import torch

from cudal1.eval.process import lead

_PACKAGE = lead.__name__.rpartition(".")[0]  # cudal1.eval.process

_MISSING = object()  # what a getter returns for a name deleted since the snapshot


@dataclass(frozen=True)
class _Seen:
    get: Callable[[], Any]  # reads the thing now, by the path the worker's code reads it
    value: Any  # what it was at the snapshot (compared by identity; a name set by equality)
    code: Any  # a function's code object: a rewrite can keep the function and swap its code


_SNAPSHOT: dict[str, _Seen] = {}


def _timers() -> dict[str, Callable[[], Any]]:
    return {
        "torch.cuda.Event": lambda: torch.cuda.Event,
        **{
            f"torch.cuda.Event.{name}": _attribute(lambda: torch.cuda.Event, name)
            for name in ("__new__", "record", "elapsed_time", "query", "synchronize")
        },
        "torch.cuda.synchronize": lambda: torch.cuda.synchronize,
        "torch.cuda.current_stream": lambda: torch.cuda.current_stream,
        "torch.cuda._sleep": lambda: torch.cuda._sleep,
        "time.perf_counter": lambda: time.perf_counter,
        "gc.disable": lambda: gc.disable,
        "gc.enable": lambda: gc.enable,
        # The reply's way out: work queued on the GPU just before it leaves (after the timed
        # request's own synchronise) would run while the reference is timed.
        **{
            f"Connection.{name}": _attribute(lambda: Connection, name)
            for name in ("send_bytes", "_send_bytes", "recv_bytes", "_recv_bytes")
        },
    }


def _handlers(server: Any, table: dict[Any, Callable[..., Any]]) -> dict[str, Callable[[], Any]]:
    """Each entry of the table ``serve`` dispatches from, and for a bound method, what the same
    name resolves to on the server now (an instance or class attribute put over it)."""
    getters: dict[str, Callable[[], Any]] = {"handlers": lambda: frozenset(table)}
    for cmd, handler in table.items():
        label = f"handler {getattr(cmd, 'value', cmd)}"
        getters[label] = _item(table, cmd)
        function = getattr(handler, "__func__", None)
        if function is not None and getattr(handler, "__self__", None) is server:
            bound = _attribute(lambda: server, function.__name__)
            getters[f"{label}: server.{function.__name__}"] = _attribute(bound, "__func__")
    return getters


def _methods(server: Any, covered: set[str]) -> dict[str, Callable[[], Any]]:
    """What each method name of the server's classes resolves to on the server now: an instance
    attribute or a class attribute put over an inner step (``server._timed_calls = ...``, a
    subclass's new ``_timed_calls``) changes what the handlers call without touching them, or any
    method the snapshot saw (the classes' own dicts are watched by ``_module``)."""
    names = {
        attr
        for cls in type(server).__mro__[:-1]
        for attr, value in vars(cls).items()
        if isinstance(value, FunctionType) and not attr.startswith("__")
    }
    return {
        f"server.{name}": _attribute(_attribute(lambda: server, name), "__func__")
        for name in sorted(names - covered)
    }


def _module(namespace: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """Every module-level name of a module (and the set of them: a new global can shadow a
    builtin), and every method of the classes it defines."""
    name = namespace.get("__name__", "?")
    getters: dict[str, Callable[[], Any]] = {
        f"{name} globals": lambda: frozenset(k for k in namespace if not k.startswith("__"))
    }
    for key, value in list(namespace.items()):
        if key.startswith("__"):
            continue
        getters[f"{name}.{key}"] = _item(namespace, key)
        if isinstance(value, type) and value.__module__ == name:
            for attr in list(vars(value)):
                getters[f"{name}.{value.__qualname__}.{attr}"] = _item(vars(value), attr)
    return getters


def _item(mapping: Mapping[Any, Any], key: Any) -> Callable[[], Any]:
    return lambda: mapping.get(key, _MISSING)


def _attribute(owner: Callable[[], Any], name: str) -> Callable[[], Any]:
    """Reads ``name`` of what ``owner`` reads now (the path the worker's code takes)."""
    return lambda: getattr(owner(), name, _MISSING)


def _namespaces(server: Any) -> list[dict[str, Any]]:
    """The globals of the modules the server's classes are defined in, the lead's, and those of
    every module of this package they reach by name (a class or function imported from it, or the
    module itself), and so on: the timed request calls into them. ``wire.DigestBatch`` was outside
    the watch, and a candidate that put faster digests over it (the larger part of a CPU sample's
    overhead) shortened the trusted wall that checks its clock (red team, digest_overhead_shaved)."""
    found = {id(vars(lead)): vars(lead)}
    for cls in type(server).__mro__[:-1]:
        for value in vars(cls).values():
            if isinstance(value, FunctionType):
                found.setdefault(id(value.__globals__), value.__globals__)
    todo = list(found.values())
    while todo:
        for value in list(todo.pop().values()):
            module = _package_module(value)
            if module is not None and id(vars(module)) not in found:
                found[id(vars(module))] = vars(module)
                todo.append(vars(module))
    return list(found.values())


def _package_module(value: Any) -> ModuleType | None:
    """The module of this package that ``value`` is, or that defines it; None for anything else."""
    if isinstance(value, ModuleType):
        name = value.__name__
    elif isinstance(value, type | FunctionType):
        name = getattr(value, "__module__", None) or ""
    else:
        return None
    return sys.modules.get(name) if name.startswith(_PACKAGE + ".") else None


def snapshot(server: Any, table: dict[Any, Callable[..., Any]], conn: Any = None) -> None:
    """What ``tampered`` compares against: taken where the worker starts serving ``table`` over
    ``conn`` (its socket: an attribute set on the object itself, ``conn.send_bytes = ...``,
    would rewrite or read every reply without touching the class; red team 2026-11-26)."""
    handlers = _handlers(server, table)
    covered = {label.rpartition("server.")[2] for label in handlers if ": server." in label}
    getters = _timers() | handlers | _methods(server, covered)
    if conn is not None:
        getters["socket"] = lambda: type(conn)
        getters["socket attributes"] = lambda: frozenset(vars(conn))
    for namespace in _namespaces(server):
        getters |= _module(namespace)
    _SNAPSHOT.clear()
    for label, get in getters.items():
        value = _read(get)
        _SNAPSHOT[label] = _Seen(get, value, _code(value))


def tampered() -> list[str]:
    """The names of what differs from the snapshot (none taken: nothing to compare, [])."""
    found = [label for label, seen in _SNAPSHOT.items() if _changed(seen)]
    if lead.altered():
        found.append("lead settings")
    return found


def watched() -> list[str]:
    """The names the snapshot holds."""
    return list(_SNAPSHOT)


def _changed(seen: _Seen) -> bool:
    now = _read(seen.get)
    if isinstance(seen.value, frozenset):
        return now != seen.value
    return now is not seen.value or _code(now) is not seen.code


def _read(get: Callable[[], Any]) -> Any:
    try:
        return get()
    except Exception:  # a getter whose path a candidate broke (a deleted attribute, a raising property)
        return _MISSING


def _code(value: Any) -> Any:
    """The code object behind a function, method, static or class method, or property getter."""
    if isinstance(value, MethodType | staticmethod | classmethod):
        value = value.__func__
    elif isinstance(value, property):
        value = value.fget
    return value.__code__ if isinstance(value, FunctionType) else None
