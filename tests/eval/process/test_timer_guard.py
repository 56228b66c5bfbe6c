"""The timer guard (``eval/process/timer_guard.py``): what a candidate in the worker's process
does to the objects the timing relies on, each named by ``tampered()``; an untouched process
names nothing. In-process, as a candidate's import would do it, and undone after each test."""

from __future__ import annotations

import gc
import runpy
import time
import warnings
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from pathlib import Path

import pytest
import torch

from cudal1.eval.process import lead, timed_sample, timer_guard, wire, worker
from cudal1.eval.process.protocol import Command
from cudal1.eval.process.wire import decode, encode

FORGED_TIME = Path(worker.__file__).resolve().parents[2] / "audit" / "cases" / "worker_tamper_forged_time.py"


@pytest.fixture
def server():
    server = worker.CandidateServer()
    handlers = server.handlers()
    timer_guard.snapshot(server, handlers)
    yield server, handlers


def _wrapped(fn):
    def forged(*args, **kwargs):
        return fn(*args, **kwargs) * 0.25

    return forged


def test_an_untouched_worker_names_nothing(server):
    assert timer_guard.tampered() == []
    watched = set(timer_guard.watched())
    assert {
        "torch.cuda.Event.elapsed_time",
        "time.perf_counter",
        "handler time",
        "cudal1.eval.process.lead.spin",
    } <= watched


@pytest.mark.parametrize(
    ("owner", "name", "label"),
    [
        (torch.cuda.Event, "elapsed_time", "torch.cuda.Event.elapsed_time"),
        (torch.cuda.Event, "record", "torch.cuda.Event.record"),
        (time, "perf_counter", "time.perf_counter"),
        (torch.cuda, "synchronize", "torch.cuda.synchronize"),
        (torch.cuda, "_sleep", "torch.cuda._sleep"),
        (gc, "disable", "gc.disable"),
        (lead, "spin", "cudal1.eval.process.lead.spin"),
        # work queued just before a reply leaves would run while the reference is timed
        (Connection, "send_bytes", "Connection.send_bytes"),
    ],
)
def test_a_wrapped_timer_is_named(server, monkeypatch, owner, name, label):
    monkeypatch.setattr(owner, name, _wrapped(getattr(owner, name)))
    assert timer_guard.tampered() == [label]


def test_an_event_subclass_put_in_place_of_the_class_is_named(server, monkeypatch):
    class ForgedEvent(torch.cuda.Event):
        def elapsed_time(self, end_event):
            return super().elapsed_time(end_event) * 0.25

    class BareEvent(torch.cuda.Event):  # a fresh class, every method inherited
        pass

    monkeypatch.setattr(torch.cuda, "Event", ForgedEvent)
    assert timer_guard.tampered() == ["torch.cuda.Event", "torch.cuda.Event.elapsed_time"]
    monkeypatch.setattr(torch.cuda, "Event", BareEvent)
    assert timer_guard.tampered() == ["torch.cuda.Event"]


def test_the_forged_time_fixture_wrapping_the_command_table_is_named(server, monkeypatch):
    _, handlers = server
    # The hack wraps every dict holding "time" and "warmup": the table, and the class's own dict.
    monkeypatch.setattr(timed_sample.TimedSampler, "time", timed_sample.TimedSampler.time)  # restored after
    with warnings.catch_warnings():  # its walk over every object touches deprecated torch names
        warnings.simplefilter("ignore")
        runpy.run_path(str(FORGED_TIME))
    assert handlers[Command.TIME].__name__ == "forged"  # it did reach the table serve holds
    assert timer_guard.tampered() == [
        "handler time",
        "handler time: server.time",
        "cudal1.eval.process.timed_sample.TimedSampler.time",
    ]


def test_new_code_in_the_time_method_is_named(server, monkeypatch):
    monkeypatch.setattr(timed_sample.TimedSampler.time, "__code__", worker.WorkerServer.forget.__code__)
    found = timer_guard.tampered()
    assert "cudal1.eval.process.timed_sample.TimedSampler.time" in found and "handler time" in found


def test_a_method_put_over_the_handlers_name_is_named(server, monkeypatch):
    srv, _ = server
    monkeypatch.setattr(srv, "time", lambda *a, **k: {"ms": 0.0})
    assert timer_guard.tampered() == ["handler time: server.time"]


@pytest.mark.parametrize("where", ["instance", "subclass"])
def test_an_inner_step_put_over_on_the_server_is_named(server, monkeypatch, where):
    """``time`` calls ``self._timed_calls``: a forged one on the instance, or on the candidate's
    class, takes the handler's place without touching the handler table."""
    srv, _ = server
    target = srv if where == "instance" else worker.CandidateServer
    monkeypatch.setattr(target, "_timed_calls", lambda *a, **k: (0.0, True, 0.0), raising=False)
    assert timer_guard.tampered() == ["server._timed_calls"]


def test_a_rebound_timed_sample_global_is_named(server, monkeypatch):
    monkeypatch.setattr(timed_sample, "sync", _wrapped(timed_sample.sync))
    assert timer_guard.tampered() == ["cudal1.eval.process.timed_sample.sync"]


def test_the_digests_a_timed_request_calls_into_are_watched_too(server, monkeypatch):
    """Red team (digest_overhead_shaved): ``wire.DigestBatch`` was outside the watch, and faster
    digests put over it shortened the overhead the trusted wall counts. Every module of the
    worker's package that the server reaches by name is watched now."""
    assert "cudal1.eval.process.wire.DigestBatch.queue" in timer_guard.watched()
    monkeypatch.setattr(wire.DigestBatch, "queue", _wrapped(wire.DigestBatch.queue))
    assert timer_guard.tampered() == ["cudal1.eval.process.wire.DigestBatch.queue"]


def test_a_rebound_worker_global_is_named(server, monkeypatch):
    monkeypatch.setattr(worker, "encode", _wrapped(worker.encode))
    assert timer_guard.tampered() == ["cudal1.eval.process.worker.encode"]


def test_serve_takes_the_snapshot_before_the_first_command():
    timer_guard.snapshot(worker.CandidateServer(), {})  # a stale snapshot that serve must replace
    ours, theirs = Pipe()
    ours.send_bytes(encode({"cmd": "ping"}))
    ours.send_bytes(encode({"cmd": "exit"}))
    worker.serve(theirs, worker.CandidateServer())
    assert decode(ours.recv_bytes())["ok"]
    assert "handler time" in timer_guard.watched()
    assert timer_guard.tampered() == []


def test_an_attribute_set_on_the_workers_own_socket_is_named():
    """red team 2026-11-26 (memo_forged_warmup_count, skip_when_checks_spent): ``conn.send_bytes``
    set on the socket object itself rewrote replies and counted the evaluator's fetches."""
    a, b = Pipe()
    try:
        timer_guard.snapshot(worker.CandidateServer(), {}, a)
        assert timer_guard.tampered() == []
        a.send_bytes = lambda *args, **kwargs: None  # type: ignore[method-assign]
        assert "socket attributes" in timer_guard.tampered()
    finally:
        a.close()
        b.close()
