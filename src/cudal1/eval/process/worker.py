"""The worker process: runs one side of an evaluation.

Started by ``sandbox.WorkerProcess`` with a scrubbed environment, resource limits and a private
working directory; it talks over a socket with ``wire`` messages and answers the ``protocol``
commands its role accepts. ``CandidateServer`` (this module's ``main``) imports exactly one
candidate and is killed afterwards; the trusted reference's server (``eval.reference_process``)
extends ``WorkerServer`` with the commands only the trusted side may run. The timing commands
are ``timed_sample.TimedSampler``'s, ``WorkerServer``'s base.

Nothing a candidate worker says is trusted by the evaluator: the candidate can rewrite any of
this module once its code is imported. The evaluator compares the outputs in the reference's
process, keeps its own clock around each timed request, and checks the digests reported in it
against fetched outputs: one ``time`` request makes the sample's timed inputs, runs the K timed
calls and digests every call's outputs before it replies, so the inputs of timed calls exist only
inside the trusted clock, and whatever work an output still needs (a lazy value, a side stream)
is done before the clock stops. Which call's output is fetched (``fetch_output``) is drawn only
after the reply.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import sysconfig
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from cudal1.eval.process import lead, probe_values, state, timer_guard
from cudal1.eval.process.protocol import Command, Role
from cudal1.eval.process.threadwatch import ThreadWatch
from cudal1.eval.process.timed_sample import TimedSampler, sync, to_device
from cudal1.eval.process.wire import digest, encode, flatten_outputs, receive_message
from cudal1.schema import Task
from cudal1.tasks.source import import_task_module

CANDIDATE_FILE = Path("candidate.py")
# The project's own source files: a failure's traceback leaves their frames out (the worker's
# command loop is not the candidate's code). Bundled tasks live inside it but are user code.
_PROJECT = Path(__file__).resolve().parents[2]
_BUNDLED_TASKS = _PROJECT / "tasks" / "bundled"
_LIBRARIES = tuple(
    {Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")}
)

Handler = Callable[..., dict[str, Any]]


class CandidateError(Exception):
    """A candidate's fault that its message states in full: reported without a traceback."""


class WorkerServer(TimedSampler):
    """The commands both roles answer: task code, inputs, models, checked calls and timing."""

    role: Role

    def __init__(self) -> None:
        self.module: Any = None  # the task's module (both workers: inputs come from it)
        self.model: Any = None
        self.inputs: dict[str, list[Any]] = {}
        self.state0: dict[str, Any] = {}
        self.device = torch.device("cpu")
        TimedSampler.__init__(self)
        self.slots: dict[str, Any] = {}  # probe models beside the main one

    def handlers(self) -> dict[Command, Handler]:
        return {
            Command.HELLO: self.hello,
            Command.LOAD_TASK: self.load_task,
            Command.MAKE_INPUTS: self.make_inputs,
            Command.BUILD: self.build,
            Command.PERTURB: self.perturb,
            Command.SHIFT_INPUTS: self.shift_inputs,
            Command.SET_TIMING_INPUTS: self.set_timing_inputs,
            Command.WARMUP: self.warmup,
            Command.PREPARE: self.prepare,
            Command.TIME: self.time,
            Command.FORGET: self.forget,
            Command.PROMOTE: self.promote,
            Command.PING: lambda: {},
        }

    # -- both roles ----------------------------------------------------------------------
    def hello(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cuda_available": torch.cuda.is_available(),
        }

    def load_task(
        self, source: str, name: str, path: str | None = None, device: str | None = None
    ) -> dict[str, Any]:
        self.module = import_task_module(Task(name, source, path=path))
        if device is not None and device.startswith("cuda") and torch.cuda.is_available():
            # The device's context exists before the snapshot, so the snapshot holds its settings
            # as created: a fresh H100 context reports a nonzero persisting-L2 limit, which a
            # snapshot taken before CUDA started would report as the candidate's doing.
            torch.cuda.set_device(device)
            torch.cuda.synchronize(device)
            lead.prepare(torch.device(device))  # before the candidate: see lead.prepare
        # Before any candidate code runs here: the state a candidate must leave as it found it.
        self.state0 = state.global_state()
        return {}

    def make_inputs(self, seed: int, key: str, sizes: dict[str, int] | None = None) -> dict[str, Any]:
        """Inputs from the task's own get_inputs under ``seed``, kept on the device under ``key``.
        Both workers make them, so that large inputs never travel between processes, and on the
        device, as the timed sets are (``time``): on the H100 a CPU-made set of 500 MB
        (CUDA-L1 L1_43) took 3 s a side, 15 s of an evaluation's checks. ``sizes`` rebinds the
        task's module-level size constants for this one call (alternative shapes)."""
        torch.manual_seed(seed)
        with _module_constants(self.module, sizes or {}), self._on_device():
            inputs = [to_device(x, self.device) for x in self.module.get_inputs()]
        self.inputs[key] = inputs
        return {"digest": [digest(x) if isinstance(x, torch.Tensor) else None for x in inputs]}

    def from_built(self, model: Any, inputs: list[Any], after: int = 0) -> None:
        """A stateful task's model back to its state as built, then ``after`` calls on ``inputs``:
        where the checked call that follows starts (``model_state``). Other tasks' models are
        left as they are."""
        self.built_states.restore(model)
        with torch.no_grad():
            for _ in range(after):
                model(*inputs)

    def build(
        self,
        args: list[Any],
        seed: int,
        device: str,
        slot: str = "main",
        reinit: int | None = None,
        keep_state: bool = False,
    ) -> dict[str, Any]:
        """Build the model (``slot`` "main"), or a probe's second model beside it (another slot);
        ``reinit``: with its weights re-drawn from that seed (``probe_values.reinitialised``),
        and the reply names them (``redrawn``); ``keep_state`` (the trusted side's word: the
        task is stateful): its state as built is kept, and put back before every checked call
        and timed sample (``model_state``)."""
        self.device = torch.device(device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        else:
            torch.set_num_threads(1)  # CPU timing: one core per side, so the pair does not contend
        torch.manual_seed(seed)
        redrawn = None
        if reinit is None:
            model = self.model_class()(*args)
        else:
            with probe_values.reinitialised(reinit) as redraws:
                model = self.model_class()(*args)
                redraws.model_done(model)
            redrawn = redraws.keys
        model = model.to(self.device) if isinstance(model, torch.nn.Module) else model
        if keep_state:
            self.built_states.keep(model)
        self.keep_model(slot, model)
        return {**self.built(model), "redrawn": redrawn}

    def model_class(self) -> Any:
        raise NotImplementedError

    def keep_model(self, slot: str, model: Any) -> None:
        if slot == "main":
            self.model = model
        else:
            self.slots[slot] = model

    def built(self, model: Any) -> dict[str, Any]:
        return {}

    def model_in(self, slot: str) -> Any:
        return self.model if slot == "main" else self.slots[slot]

    def perturb(
        self, key: str, new_key: str, seed: int, count: int, in_place: bool = False
    ) -> dict[str, Any]:
        """A copy of input set ``key`` with ``count`` elements of its first floating tensor moved
        far (by 1 + 3 standard deviations), at positions drawn from ``seed``. Both workers make it;
        the candidate's ``in_place``: same tensors, same addresses, new values, so a result cache
        keyed on the address (primed by a call on ``key``) returns a stale output."""
        inputs = [x if in_place or not isinstance(x, torch.Tensor) else x.clone() for x in self.inputs[key]]
        target = next((x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()), None)
        if target is None or target.numel() == 0:
            return {"digest": None, "positions": []}
        gen = torch.Generator().manual_seed(seed)
        positions = torch.randint(0, target.numel(), (count,), generator=gen)
        flat = target.view(-1) if target.is_contiguous() else target.reshape(-1)
        step = 1.0 + 3.0 * float(target.float().std()) if target.numel() > 1 else 1.0
        flat[positions.to(target.device)] += step
        if not target.is_contiguous():
            target.copy_(flat.view(target.shape))
        self.inputs[new_key] = inputs
        return {
            "digest": [digest(x) if isinstance(x, torch.Tensor) else None for x in inputs],
            "positions": [int(p) for p in positions],
        }

    def shift_inputs(self, key: str, new_key: str) -> dict[str, Any]:
        """A copy of input set ``key`` moved out of the generator's range (``probe_values.shifted``)."""
        self.inputs[new_key] = [probe_values.shifted(x) for x in self.inputs[key]]
        return {"digest": [digest(x) if isinstance(x, torch.Tensor) else None for x in self.inputs[new_key]]}

    def forget(self, keys: list[str], slots: list[str] | None = None) -> dict[str, Any]:
        for key in keys:
            self.inputs.pop(key, None)
        for slot in slots or []:
            self.slots.pop(slot, None)
        return {}

    def promote(self, slot: str) -> dict[str, Any]:
        """The model in probe slot ``slot`` becomes the main model, the one timed and run by later
        checks; the main one is dropped, so a side holds no more models than before the probe.
        A candidate's worker that keeps timing another model is caught by the timed outputs'
        checks: the reference's timed outputs come from the promoted model."""
        self.model = self.slots.pop(slot)
        return {}


class CandidateServer(WorkerServer):
    """An untrusted candidate's side: imports its source and reports what each call left behind."""

    role = Role.CANDIDATE

    def __init__(self) -> None:
        super().__init__()
        self.candidate: Any = None
        self.threads: ThreadWatch | None = None

    def handlers(self) -> dict[Command, Handler]:
        return {
            **super().handlers(),
            Command.LOAD_CANDIDATE: self.load_candidate,
            Command.FIRST_CALLS: self.first_calls,
            Command.RUN: self.run,
            Command.FETCH_OUTPUT: self.fetch_output,
        }

    def load_candidate(self, source: str, env: dict[str, str] | None = None) -> dict[str, Any]:
        # Per-candidate settings (its build-cache directory) arrive here because spare workers
        # are started before anyone knows which candidate they will get.
        os.environ.update(env or {})
        if not source.strip():
            raise CandidateError("the candidate is empty: it defines no class ModelNew")
        rng = state.rng_digest()
        self.threads = ThreadWatch(str(Path.cwd() / CANDIDATE_FILE))
        self.threads.install()
        self.candidate = _import_source(source, "cudal1_candidate", CANDIDATE_FILE)
        model_new = getattr(self.candidate, "ModelNew", None)
        if model_new is None:
            raise CandidateError("the candidate defines no class ModelNew")
        if not isinstance(model_new, type):
            raise CandidateError(f"the candidate's ModelNew is a {type(model_new).__name__}, not a class")
        return {"rng_changed": state.rng_digest() != rng}

    def model_class(self) -> Any:
        return self.candidate.ModelNew

    def built(self, model: Any) -> dict[str, Any]:
        return {"side_streams": state.side_streams(self.candidate, model)}

    def first_calls(self, seed: int, calls: int) -> dict[str, Any]:
        """``calls`` forward calls on inputs of its own from ``seed`` (a seed no checked or timed
        set uses), outputs dropped: what a first call builds lazily (torch.compile, Triton
        autotuning, CUDA-graph capture) is built here, before the evaluator takes the device.
        Nothing of these calls is compared or timed; each is synchronised, so that no work of
        theirs is still queued when the checked calls begin."""
        torch.manual_seed(seed)
        inputs = [to_device(x, self.device) for x in self.module.get_inputs()]
        with torch.no_grad():
            for _ in range(calls):
                self.model(*inputs)
                sync(self.device)
        return {}

    def fetch_output(self, index: int) -> dict[str, Any]:
        """The outputs of call ``index`` of the last timed sample, which the trusted side digests
        and compares; it draws ``index`` only after the sample's reply gave every call's digests."""
        return {"outputs": describe(self.timed_outputs[index])}

    def run(
        self,
        key: str,
        slot: str = "main",
        poison: list[int] | None = None,
        fresh: bool = True,
        after: int = 0,
    ) -> dict[str, Any]:
        """A checked call whose outputs go back to the evaluator, which forwards them to the
        reference for comparison. The call gets its inputs at a new address (the stored ones
        stay alive, so id()/data_ptr() caches miss) unless ``fresh`` is off (the in-place
        perturbation probe), with free memory ``poison``ed (see ``state.poisoned``). A stateful
        task's model starts from its state as built, and with ``after`` the checked call is the
        one after that many calls on the same inputs (``model_state``)."""
        model = self.model_in(slot)
        inputs = self.inputs[key]
        if fresh:
            inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        self.from_built(model, inputs, after)
        threads, rng = threading.active_count(), state.rng_digest()
        with state.poisoned(self.device, poison) if poison else contextlib.nullcontext(), torch.no_grad():
            out = model(*inputs)
            sync(self.device)
        observations = self._observe(out, inputs, threads, model)
        observations["aliases"] += self.earlier_outputs.shared(out)
        observations["rng_changed"] = state.rng_digest() != rng
        return {"outputs": describe(out), "observations": observations}

    def _observe(self, out: Any, inputs: list[Any], threads_before: int, model: Any) -> dict[str, Any]:
        """What a candidate's call left behind, for the evaluator's integrity findings. A
        candidate can forge this, so it only ever adds findings; verdicts come from outputs."""
        return {
            "threads_before": threads_before,
            "threads_after": threading.active_count(),
            "inputs_digest": [digest(x) if isinstance(x, torch.Tensor) else None for x in inputs],
            "aliases": state.aliases(out, inputs, model),
            "state_changes": state.state_changes(self.state0, state.global_state()),
            "candidate_threads": self.threads.alive() if self.threads else None,
        }


def _import_source(source: str, module_name: str, filename: Path) -> Any:
    # A real file, so that inspect.getsource works (Triton's @jit reads the source).
    path = Path.cwd() / filename
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def _module_constants(module: Any, values: dict[str, int]) -> Iterator[None]:
    """Rebind a task module's top-level constants for the duration of one call."""
    saved = {name: getattr(module, name) for name in values}
    try:
        for name, value in values.items():
            setattr(module, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def describe(out: Any) -> dict[str, Any]:
    leaves = flatten_outputs(out)
    return {
        "values": leaves,
        "types": [type(x).__module__ + "." + type(x).__qualname__ for x in leaves],
        "devices": [str(x.device) if isinstance(x, torch.Tensor) else "" for x in leaves],
        "structure": type(out).__name__,
    }


def digests(out: Any) -> list[int | None]:
    return [digest(x) if isinstance(x, torch.Tensor) else None for x in flatten_outputs(out)]


def serve(conn: Connection, server: WorkerServer) -> None:
    """Answer commands until ``exit`` or a closed socket. A command this role does not take, or
    an unknown one, is answered with an error like any other failure."""
    handlers = server.handlers()
    timer_guard.snapshot(server, handlers, conn)  # before any command: before any candidate code
    while True:
        try:
            request = receive_message(conn)
        except EOFError:
            return
        name = request.pop("cmd")
        if name == Command.EXIT:
            return
        try:
            cmd = Command(name)
            if not cmd.accepts(server.role) or cmd not in handlers:
                raise PermissionError(f"a {server.role} worker does not take {cmd.value!r}")
            reply = handlers[cmd](**request)
            reply["ok"] = True
            # Encoded here, so that outputs the wire cannot carry (a quantized or sparse tensor)
            # are this command's failure, not the end of the worker.
            message = encode(reply)
        except BaseException as exc:  # report everything; the evaluator decides what it means
            message = encode(failure_reply(exc))
        conn.send_bytes(message)


def failure_reply(exc: BaseException) -> dict[str, Any]:
    """A command's failure: its message, and the traceback of the code that raised it without the
    worker's own frames (a ``CandidateError`` says everything in its message: no traceback)."""
    if isinstance(exc, CandidateError):
        return {"ok": False, "error": str(exc)[:4000], "traceback": ""}
    return {
        "ok": False,
        "error": f"{type(exc).__name__}: {exc}"[:4000],
        "traceback": user_traceback(exc)[-4000:],
    }


def user_traceback(exc: BaseException) -> str:
    """``exc`` formatted as Python does (its causes included), with the frames of the project's
    own files, of the import machinery and of the libraries that called into the user's code
    left out: what is left is the user's code (the candidate's, the task's) and what it called,
    ending in the exception's line."""
    report = traceback.TracebackException.from_exception(exc)
    seen: set[int] = set()
    part: traceback.TracebackException | None = report
    while part is not None and id(part) not in seen:  # the chain of causes; a cycle ends it
        seen.add(id(part))
        frames = [f for f in part.stack if not _internal(f.filename)]
        # Library frames that lead into the user's code (torch's Module.__call__) go too; those
        # below it (what the user's code called) stay.
        frames = frames[next((i for i, f in enumerate(frames) if _users(f.filename)), 0) :]
        for frame in frames:  # the candidate's file by its name, not the sandbox's path
            if Path(frame.filename).parent == Path.cwd():
                frame.filename = Path(frame.filename).name
        part.stack = traceback.StackSummary.from_list(frames)
        part = part.__cause__ or part.__context__
    return "".join(report.format())


def _users(filename: str) -> bool:
    """A file of the user's (a candidate, a task): neither the standard library nor a package."""
    path = Path(filename).resolve()
    return path.is_relative_to(_BUNDLED_TASKS) or not any(path.is_relative_to(lib) for lib in _LIBRARIES)


def _internal(filename: str) -> bool:
    if filename.startswith("<frozen "):
        return True
    path = Path(filename).resolve()
    return path.is_relative_to(_PROJECT) and not path.is_relative_to(_BUNDLED_TASKS)


def main(server: WorkerServer | None = None) -> None:
    conn = Connection(int(sys.argv[1]))
    # The candidate's prints must not reach the evaluator's terminal; stdout goes to a log file.
    sys.stdout = sys.stderr
    conn.send_bytes(encode({"ok": True, "ready": True}))
    serve(conn, server or CandidateServer())


if __name__ == "__main__":
    main()
