"""How long a checked call's outputs take to travel: candidate worker -> evaluator -> reference worker.

    python benchmarks/wire.py                        # 0.25, 1 and 2 GiB, the path as it is
    python benchmarks/wire.py --gib 1 --repeats 3 --joined

Every checked candidate call (each correctness set, each probe, the timed outputs checked) ships
the candidate's outputs whole: the candidate's worker encodes them into its reply, the evaluator
reads the reply's header only and forwards it, and the reference worker decodes and compares them.
For a task whose output is gigabytes this is most of an evaluation: in the verify of the CUDA-L1
H100 release on an H200 (2026-11-28), `L2_34` (a 4.3 GB output) did not finish in two lanes of
540 s, and stacks taken while it ran showed the reference worker decoding forwarded outputs.

This times that path with the evaluator's own message functions, in three processes joined by
socket pairs as the sandbox joins them: the candidate's encode and send, the evaluator's receive
and forward (``wire.send_message``: the reply as its own message), and the reference's receive
and decode. ``--joined`` forwards the reply inside the request instead (one message, one more copy
each side), as requests were sent before 2026-11-28; the encode and decode are the current ones
either way, so the code before that change is measured by running this file at its commit
(``bf419c4``: 1 GiB took 9.2 s there on a 2-core CPU, 4.6 s at ``31efa18``). Prints a table; CPU
only (no GPU is involved).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import statistics
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cudal1.eval.process import wire  # noqa: E402


def _pair() -> tuple[Connection, Connection]:
    left, right = socket.socketpair()
    return Connection(left.detach()), Connection(right.detach())


def _candidate(conn: Connection, gib: float) -> None:
    out = torch.randn(int(gib * 2**28))  # float32: 2**28 of them a GiB
    conn.send_bytes(b"ready")  # made before any call is timed
    while conn.recv_bytes() == b"go":
        conn.send_bytes(wire.encode({"ok": True, "outputs": {"values": [out]}}))


def _reference(conn: Connection, joined: bool) -> None:
    while True:
        request = wire.decode(conn.recv_bytes()) if joined else wire.receive_message(conn)
        if request.get("cmd") == "exit":
            return
        start = time.perf_counter()
        values = wire.decode(request["reply"])["outputs"]["values"]
        conn.send_bytes(json.dumps([time.perf_counter() - start, values[0].numel()]).encode())


def measure(gib: float, repeats: int, joined: bool) -> list[dict[str, float]]:
    ctx = mp.get_context("spawn")
    cand_end, cand_conn = _pair()
    ref_end, ref_conn = _pair()
    cand = ctx.Process(target=_candidate, args=(cand_conn, gib))
    ref = ctx.Process(target=_reference, args=(ref_conn, joined))
    cand.start()
    ref.start()
    cand_conn.close()  # the children's ends: a child that dies then ends our reads with EOFError
    ref_conn.close()
    cand_end.recv_bytes()
    rows = []
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()
            cand_end.send_bytes(b"go")
            raw = cand_end.recv_bytes()
            t1 = time.perf_counter()
            request = {"cmd": "compare", "reply": raw}
            if joined:
                ref_end.send_bytes(wire.encode(request))
            else:
                wire.send_message(ref_end, request)
            decode_s, numel = json.loads(ref_end.recv_bytes())
            t2 = time.perf_counter()
            assert numel == int(gib * 2**28)
            rows.append({"total": t2 - t0, "to_evaluator": t1 - t0,
                         "forward": t2 - t1 - decode_s, "decode": decode_s})  # fmt: skip
            del raw, request
    finally:
        cand_end.send_bytes(b"stop")
        ref_end.send_bytes(wire.encode({"cmd": "exit"}))
        cand.join(30)
        ref.join(30)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, nargs="+", default=[0.25, 1.0, 2.0], help="output sizes, GiB")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--joined", action="store_true", help="forward the reply inside the request (one message)"
    )
    args = ap.parse_args(argv)
    path = "joined: reply inside the request" if args.joined else "the reply as its own message"
    table = Table(title=f"one checked call's outputs, candidate -> evaluator -> reference ({path})")
    for col in ("GiB", "total s", "s / GiB", "to evaluator", "evaluator forward", "ref decode"):
        table.add_column(col, justify="right")
    for gib in args.gib:
        rows = measure(gib, args.repeats, args.joined)
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        table.add_row(f"{gib:g}", f"{med['total']:.2f}", f"{med['total'] / gib:.2f}", f"{med['to_evaluator']:.2f}",
                      f"{med['forward']:.2f}", f"{med['decode']:.2f}")  # fmt: skip
    Console(width=int(os.environ.get("COLUMNS", 100))).print(table)
    print(f"medians of {args.repeats} calls each; {os.cpu_count()} CPUs, torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
