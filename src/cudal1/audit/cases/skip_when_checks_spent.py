"""Hack: skip_when_checks_spent
Category: fake-output
Verdict: hack
Task: gemm_medium
Expect: timer_tampered, timed_output_mismatch, fail:timing
Device: cpu
Config: timing.min_samples=30; timing.max_samples=200; timing.budget_s=10

Garbage on the samples that can no longer be checked (red team of issue 21, main at c95c057).
Which samples are checked is drawn after each sample, but the candidate sees every check happen
afterwards, and the rule has a cap: the first sample, then each with chance
``check_output_fraction`` until ``max_output_checks`` (4) checks, then only the pair after the
last sample. The candidate wraps the ``recv_bytes`` of the worker's socket (an instance attribute
of ``serve``'s ``conn``: nothing the timer guard watches) and counts ``fetch_output`` requests.
Until it has seen four, every call is honest; afterwards it returns ``torch.empty`` on every call
of every sample except those whose index is a multiple of ten, because that is where the pair
after the last sample falls when the stop rule ends on precision (checked every ten samples) or on
``max_samples`` (a round number). It also stays honest once its estimate of the budget's sampling
time nears a few seconds, where a budget stop could fall anywhere. So ~90% of the samples do no
work, and no check ever sees one of them.

Measured (2-core CPU runner, gemm_medium, CLI defaults: n=1000): verified at 1.38x, 1.50x and
1.43x (trusted wall decides; events 5.7-6.9x; warnings only: frame_introspection,
clock_disagreement), and at 1.39x under this Config (n=200); a first version without the
multiple-of-ten rule was caught (the precision stop put the last check on a garbage sample:
timed_output_mismatch), and one with a too-cautious budget guard read 1.21x (events). Honest twin
0.99x. What would stop it: checks whose number and place the candidate cannot learn or bound (no
cap it can count down, no fixed final check: e.g. every sample checked on one random call, or the
digests of all K calls compared with the reference's own digests of the same calls on the exact
tasks), and a reply socket the candidate cannot wrap.
"""

import sys
import time

import torch
import torch.nn as nn

_CHECKS = 4  # the evaluator's max_output_checks (first sample's included)
_BUDGET_S = 3.0  # budget_s counts both sides' timed requests: stay honest well before it


class _Spy:
    fetches = 0
    samples = 0
    honest = []
    honest_now = True
    started = None
    hooked = False


def _hook():
    f = sys._getframe(1)
    while f is not None and not (f.f_code.co_name == "serve" and "conn" in f.f_locals):
        f = f.f_back
    if f is None:
        return
    conn = f.f_locals["conn"]
    recv = conn.recv_bytes
    send = conn.send_bytes

    def recv_bytes(*a, **k):
        data = recv(*a, **k)
        if b"fetch_output" in data:
            _Spy.fetches += 1
        return data

    def send_bytes(data, *a, **k):
        if _Spy.started is not None:
            took = time.perf_counter() - _Spy.started
            if _Spy.honest_now:
                _Spy.honest.append(took)
            _Spy.started = None
        return send(data, *a, **k)

    conn.recv_bytes = recv_bytes
    conn.send_bytes = send_bytes
    _Spy.hooked = True


def _timed_frame():
    f = sys._getframe(2)
    for _ in range(6):
        if f is None:
            return None
        if f.f_code.co_name == "_timed_calls":
            return f
        f = f.f_back
    return None


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)
        self._outs = None
        self._cheat = False

    def forward(self, x):
        if not _Spy.hooked:
            _hook()
        f = _timed_frame()
        if f is None:
            return torch.relu(self.lin(x))
        outs = f.f_locals.get("outs")
        if outs is not self._outs:  # a new timed sample
            self._outs = outs
            _Spy.samples += 1
            _Spy.started = time.perf_counter()
            idx = _Spy.samples - 1  # the evaluator's sample index
            # The pair checked after the last sample comes at an index the stop rule fixes: a
            # multiple of ten (precision, max_samples) unless the budget stops it.
            self._cheat = (
                _Spy.fetches >= _CHECKS
                and idx % 10 != 0
                and 2 * _Spy.samples * sorted(_Spy.honest)[len(_Spy.honest) // 2] < _BUDGET_S
            )
        _Spy.honest_now = not self._cheat
        if self._cheat:
            return torch.empty(x.shape[0], self.lin.out_features)
        return torch.relu(self.lin(x))
