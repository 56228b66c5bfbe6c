"""What runs in the trusted reference's worker process: ``python -m cudal1.eval.reference_process FD``.

The reference worker imports only task code, never a candidate, and serves every evaluation of
its task. Beyond the commands both roles answer (``process.worker.WorkerServer``) it does what
only the trusted side may: hands out init inputs, keeps the reference's outputs (and a float64
twin's) to compare a candidate's forwarded outputs against, counts the reference's FLOPs and
bytes, and measures the device's peaks. It imports no pool and no pydantic config: tolerances
arrive as a plain mapping.

Timed samples: the reference times the same K calls on the same fresh inputs (made inside its
own ``time`` request from the sample's seed) and keeps every call's output and the sample's
input sets until the next sample, so that the one candidate output the trusted side fetches
(call j, drawn after both replies) is compared with the reference's output of call j, and with a
float64 twin run on call j's inputs.

A stateful task (its forward changes a tensor attribute: ``process.model_state``) is found here, at
the first build, and never by the candidate's worker; the trusted side then tells the candidate's.
Every call of this worker's (the model's, its float64 and low-precision twins', the calibration's)
starts from the state as built, and a timed call j's float64 twin replays the sample's calls
before it.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import secrets
from types import SimpleNamespace
from typing import Any

import torch

from cudal1.eval.checks.allowance import OPERATIONS, Allowance, calibrate, within_allowance
from cudal1.eval.checks.compare import Comparison, compare_outputs, precision_ratio
from cudal1.eval.process import drain
from cudal1.eval.process.model_state import stateful_attributes
from cudal1.eval.process.protocol import Command, Role
from cudal1.eval.process.timed_sample import release, sync, to_device
from cudal1.eval.process.wire import WireError, decode, digest, flatten_outputs
from cudal1.eval.process.worker import Handler, WorkerServer, describe, digests, main
from cudal1.eval.timing.speed_of_light import count_work, load_or_measure_peaks

ENTRY = "cudal1.eval.reference_process"


def candidate_outputs(reply: bytes) -> dict[str, Any]:
    """A candidate's forwarded reply's outputs (``worker.describe``'s form), checked for the parts
    ``compare_outputs`` reads: a list of values with a type and a device each."""
    outputs = decode(reply)["outputs"]
    values, types, devices = outputs["values"], outputs["types"], outputs["devices"]
    if not (isinstance(values, list) and isinstance(types, list) and isinstance(devices, list)):
        raise TypeError("values, types and devices must be lists")
    if not len(values) == len(types) == len(devices) or not all(isinstance(x, str) for x in types + devices):
        raise ValueError("a type and a device for every value")
    return dict(outputs)


class ReferenceServer(WorkerServer):
    role = Role.REFERENCE

    def __init__(self) -> None:
        super().__init__()
        self.expected: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {}
        self.model64: Any = None
        self.slots64: dict[str, Any] = {}
        self.twins: dict[str, Any] = {}  # low-precision copies of the main model, by dtype name
        self.work_by_signature: dict[str, dict[str, Any]] = {}
        self.allowances: dict[str, Allowance | None] = {}  # by input set, where calibrated
        # The task's state attributes whose change moves its output (``model_state``), found at
        # its first build; None until then.
        self.stateful: list[str] | None = None

    def handlers(self) -> dict[Command, Handler]:
        return {
            **super().handlers(),
            Command.DEVICE_INFO: self.device_info,
            Command.INIT_INPUTS: self.init_inputs,
            Command.RUN: self.run,
            Command.COMPARE: self.compare,
            Command.WORK: self.work,
            Command.PREWARM: self.prewarm,
            Command.PEAKS: self.peaks,
            Command.QUIET: self.quiet,
        }

    def device_info(self, device: str) -> dict[str, Any]:
        dev = torch.device(device)
        if dev.type != "cuda":
            return {"name": "cpu", "arch": None, "l2_bytes": 0}
        props = torch.cuda.get_device_properties(dev)
        return {
            "name": props.name,
            "arch": f"{props.major}.{props.minor}",
            "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
            "memory_bytes": int(props.total_memory),
            "sms": props.multi_processor_count,
            "uuid": str(getattr(props, "uuid", "") or "") or None,  # as nvidia-smi names it, less "GPU-"
        }

    def load_task(
        self, source: str, name: str, path: str | None = None, device: str | None = None
    ) -> dict[str, Any]:
        self.stateful = None
        return super().load_task(source, name, path, device)

    def init_inputs(self, seed: int) -> dict[str, Any]:
        torch.manual_seed(seed)
        return {"args": list(self.module.get_init_inputs())}

    def model_class(self) -> Any:
        return self.module.Model

    def build(
        self,
        args: list[Any],
        seed: int,
        device: str,
        slot: str = "main",
        reinit: int | None = None,
        keep_state: bool = False,
        float64: bool = False,
    ) -> dict[str, Any]:
        """The reference model, and with ``float64`` a float64 copy of it (re-drawn weights
        included) beside it. Whether the task is stateful is this worker's to find, at its
        first build (``keep_state`` is ignored): the reply's ``stateful`` names the state
        attributes that move the output, and such a model's state as built, and its twins', is
        kept to start every call from (``model_state``)."""
        reply = super().build(args, seed, device, slot, reinit)
        model = self.model_in(slot)
        if self.stateful is None:
            self.stateful = stateful_attributes(model, lambda: self._detection_inputs(seed))
        if self.stateful:
            self.built_states.keep(model)
        twin = self._twin(model, torch.float64) if float64 else None
        reply["stateful"] = self.stateful
        if slot == "main":
            self.model64, self.twins = twin, {}
            _set_tf32(False)  # PyTorch's defaults, whatever the last evaluation's policy timed with
        else:
            self.slots64[slot] = twin
        return reply

    def promote(self, slot: str) -> dict[str, Any]:
        """As for both roles, and the slot's float64 twin becomes the main one's; the
        low-precision twins of the old main model go."""
        reply = super().promote(slot)
        self.model64, self.twins = self.slots64.pop(slot, None), {}
        return reply

    def run(
        self,
        key: str,
        slot: str = "main",
        levels: bool = False,
        allowed: str | None = None,
        after: int = 0,
    ) -> dict[str, Any]:
        """Run on stored inputs and keep the outputs (and the float64 twin's) to compare against.
        With ``levels``, also run the model in each floating dtype below the task's and report
        each one's precision ratio: what reduced precision looks like on this task and input
        (not with ``after``: the call after that many from the state as built, on a stateful task);
        with ``allowed`` (an ``allowance.OPERATIONS`` key), also what those operations at TF32 explain
        (``checks.allowance``), kept for the comparison, its level reported as ``allowed``."""
        model = self.model_in(slot)
        model64 = self.model64 if slot == "main" else self.slots64.get(slot)
        inputs = self.inputs[key]
        out = self._call(model, inputs, after)
        out64, err64 = None, None
        if model64 is not None:
            try:
                out64 = self._call(model64, [_cast(x, torch.float64) for x in inputs], after)
            except Exception as exc:
                err64 = f"{type(exc).__name__}: {exc}"
        self.expected[key] = (describe(out), describe(out64) if out64 is not None else None)
        out_bytes = [x.nbytes if isinstance(x, torch.Tensor) else 0 for x in flatten_outputs(out)]
        reply: dict[str, Any] = {
            "float64_error": err64,
            "out_bytes": out_bytes,
            "digest": digests(out),
            "finite": all(bool(torch.isfinite(x).all()) for x in _floats(out)),
        }
        if levels and out64 is not None:
            reply["precision_levels"] = self._precision_levels(inputs, out, out64)
            if allowed is not None:
                if allowed not in OPERATIONS:
                    raise ValueError(f"no allowance for {allowed!r}")
                caller = self.built_states.calling(model)
                found = calibrate(caller, inputs, out, out64, OPERATIONS[allowed], secrets.randbits(62))
                self.allowances[key] = found
                reply["precision_levels"]["allowed"] = found.level if found else None
        return reply

    def _precision_levels(self, inputs: list[Any], out: Any, out64: Any) -> dict[str, float | None]:
        """Precision ratio of the model run in float16 and in bfloat16 (where below the task's
        dtype); None where the twin cannot run (an op without that dtype on this device)."""
        task_dtype = next((p.dtype for p in _floats(out)), None)
        found: dict[str, float | None] = {}
        for name, dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
            if task_dtype is None or torch.finfo(dtype).eps <= torch.finfo(task_dtype).eps:
                continue
            try:
                if name not in self.twins:
                    self.twins[name] = self._twin(self.model, dtype)
                low = self._call(self.twins[name], [_cast(x, dtype) for x in inputs])
                cast = [v.to(task_dtype) if isinstance(v, torch.Tensor) else v for v in flatten_outputs(low)]
                found[name] = precision_ratio(cast, flatten_outputs(out), flatten_outputs(out64))
            except Exception:  # an op with no kernel for this dtype here: that level is unknown
                found[name] = None
        return found

    def compare(
        self,
        key: str | None,
        reply: bytes,
        tolerance: dict[str, Any],
        device: str,
        min_scale: float = 1.0,
        index: int = 0,
        near_miss: bool = False,
    ) -> dict[str, Any]:
        """Compare a candidate's forwarded reply with the kept reference outputs of set ``key``,
        or (``key`` None) with this worker's output of call ``index`` of the last timed sample: a
        timed sample's inputs are made fresh for it, and the reference timed the same calls on
        the same ones in the same sample. Then a float64 twin, made for this check and dropped
        after it (the timing memory picture stays), runs on that call's inputs, so a timed
        output's precision is judged as the correctness sets' were; without one the allowed room
        doubles, for the fp32 reference's own error. ``near_miss`` (a probe's set, which looks for
        a wrong answer outside the task's inputs or weights, not at its precision): a miss of at
        most ``allowance.ROOM`` times the tolerance passes where the candidate is within the
        tolerance, at every element, of the reference run with all its allowed operations at
        TF32 (``Comparison.by_allowance``)."""
        try:
            cand = candidate_outputs(reply)
        except (WireError, KeyError, TypeError, ValueError, IndexError) as exc:
            # The candidate's own bytes: its wrong answer, never this worker's failure (which
            # the evaluator would read as its own, and a message naming a resource as a lack of
            # one). Nothing of the reply's text is repeated.
            failed = Comparison(
                False,
                math.nan,
                math.nan,
                1.0,
                "reference",
                f"its outputs do not decode ({type(exc).__name__})",
            )
            return {"comparison": dataclasses.asdict(failed), "digests": []}
        cand["values"] = [to_device(v, self.device) for v in cand["values"]]
        cand_digests = [digest(v) if isinstance(v, torch.Tensor) else None for v in cand["values"]]
        ref: dict[str, Any] | None
        ref64: dict[str, Any] | None
        if key is None:
            ref, ref64 = describe(self.timed_outputs[index]), self._timed_float64(index)
            min_scale = min_scale if ref64 is not None else 2 * min_scale
        else:
            ref, ref64 = (_on(d, self.device) for d in self.expected[key])
        assert ref is not None
        tol = SimpleNamespace(**tolerance)
        cmp = compare_outputs(cand, ref, ref64, tol, device, min_scale)
        allowance = self.allowances.get(key) if key is not None else None
        if near_miss and not cmp.ok:

            def matches(twin: Any) -> bool:  # at every element, at the tolerance, against the twin
                return compare_outputs(cand, describe(twin), None, tol, device).ok

            if within_allowance(allowance, cmp.max_rel_err, cmp.scale, matches) is not None:
                cmp = dataclasses.replace(cmp, ok=True, message="", by_allowance=True)
        answer: dict[str, Any] = {"comparison": dataclasses.asdict(cmp), "digests": cand_digests}
        if cmp.ok and allowance is not None and not cmp.by_allowance:
            isolated = allowance.isolated(cand["values"])
            answer["isolated"] = dataclasses.asdict(isolated) if isolated else None
        return answer

    def set_timing_inputs(
        self, keys: list[str], flush_bytes: int, lead_us: float = 0.0, allow_tf32: bool = False
    ) -> dict[str, Any]:
        """As for both roles; ``allow_tf32``: the precision policy lets the candidate compute at
        TF32, so the reference is timed with TF32 allowed too, and the speedup stays fair."""
        _set_tf32(allow_tf32)
        return super().set_timing_inputs(keys, flush_bytes, lead_us)

    def _timed_float64(self, index: int) -> dict[str, Any] | None:
        """The float64 twin's output on the inputs of call ``index`` of the last timed sample; on
        a stateful task, after the sample's calls before it, from the state as built."""
        twin = self._twin(self.model, torch.float64)
        if twin is None:
            return None
        calls = range(index + 1) if self.built_states.kept(twin) else [index]
        try:
            with torch.no_grad():
                for call in calls:
                    out64 = twin(*[_cast(x, torch.float64) for x in self.timed_inputs(call)])
                sync(self.device)
            return describe(out64)
        except Exception:  # a model with no float64 path: judged against fp32 alone
            return None
        finally:
            del twin

    def _detection_inputs(self, seed: int) -> list[Any]:
        """An input set from the task's get_inputs under the build's seed, on the device: trusted,
        used for nothing but finding whether the task is stateful."""
        torch.manual_seed(seed)
        with self._on_device():
            return [to_device(x, self.device) for x in self.module.get_inputs()]

    def _call(self, model: Any, inputs: list[Any], after: int = 0) -> Any:
        """One call from the state as built (a stateful task's; for others, the model as it is),
        after ``after`` calls on the same inputs."""
        self.from_built(model, inputs, after)
        with torch.no_grad():
            out = model(*inputs)
            sync(self.device)
        return out

    def _twin(self, model: Any, dtype: torch.dtype) -> Any:
        """A copy of ``model`` in ``dtype``, made from its state as built, and keeping that state
        where the model keeps its own."""
        self.built_states.restore(model)
        twin = _twin(model, dtype)
        if twin is not None and self.built_states.kept(model):
            self.built_states.keep(twin)
        return twin

    def before_timing(self, keys: list[str]) -> None:
        """The float64 model, the low-precision twins and the kept outputs leave the device (the
        candidate has none of them)."""
        self.model64, self.twins = None, {}
        for key in keys:
            if key in self.expected:
                ref, ref64 = self.expected[key]
                self.expected[key] = (_on(ref, torch.device("cpu")), _on(ref64, torch.device("cpu")))

    def forget(
        self, keys: list[str], slots: list[str] | None = None, everything: bool = False
    ) -> dict[str, Any]:
        """Drop input sets and probe models; ``everything`` at the end of an evaluation: all of
        it, the model included, so that an idle reference worker holds little more than its
        CUDA context; the reply carries the evaluation's peak device memory for admission."""
        if everything:
            keys, slots = list(self.inputs), list(self.slots)
            self.model = self.model64 = None
            self.twins, self.expected, self.warm_sets, self.timed_sets, self.timed_outputs = (
                {},
                {},
                [],
                [],
                [],
            )
            self.allowances = {}
        for key in keys:
            self.expected.pop(key, None)
            self.allowances.pop(key, None)
        for slot in slots or []:
            self.slots64.pop(slot, None)
        reply = super().forget(keys, slots)
        if everything:
            release(self.device)
            if self.device.type == "cuda":
                reply["peak_bytes"] = int(torch.cuda.max_memory_allocated(self.device))
                torch.cuda.reset_peak_memory_stats(self.device)
        return reply

    def work(self, key: str) -> dict[str, Any]:
        """FLOPs and compulsory bytes of one reference call (on meta tensors where possible),
        remembered per input and parameter signature: the task's later candidates reuse it."""
        inputs = self.inputs[key]
        signature = repr(
            [(tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else x for x in inputs]
            + [(tuple(p.shape), p.dtype) for p in self.model.parameters()]
        )
        if signature not in self.work_by_signature:
            dtypes = [x.dtype for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
            dtypes += [p.dtype for p in self.model.parameters() if p.is_floating_point()][:1]
            precision = str(dtypes[0]).removeprefix("torch.") if dtypes else "float32"
            self.work_by_signature[signature] = {
                "work": dataclasses.asdict(count_work(self.model, inputs)),
                "precision": precision,
            }
        return self.work_by_signature[signature]

    def prewarm(self) -> dict[str, Any]:
        """Pay the flop counter's first-use cost (seconds on an H200) when the reference worker
        loads, outside the device lock, instead of inside a timed evaluation's stage."""
        count_work(torch.nn.Linear(2, 2), [torch.zeros(1, 2)])
        return {}

    def quiet(self, max_s: float, quiet_us: float) -> dict[str, Any]:
        """Wait until the device runs no other process's work (``drain``); a CPU has no queue."""
        if self.device.type != "cuda":
            return {"quiet": True, "waited_ms": 0.0, "probes": 0, "slowest_us": 0.0}
        return drain.wait_until_quiet(drain.gpu_round_trip(self.device), max_s=max_s, quiet_us=quiet_us)

    def peaks(self, cache_dir: str) -> dict[str, Any]:
        """This device's bandwidth and FLOP peaks, measured once and cached on disk."""
        return {"peaks": dataclasses.asdict(load_or_measure_peaks(self.device, cache_dir))}


def _on(desc: dict[str, Any] | None, device: torch.device) -> dict[str, Any] | None:
    if desc is None:
        return None
    return {**desc, "values": [to_device(v, device) for v in desc["values"]]}


def _twin(model: Any, dtype: torch.dtype) -> Any:
    if not isinstance(model, torch.nn.Module):
        return None
    try:
        return copy.deepcopy(model).to(dtype)
    except Exception:  # a model that cannot be copied or cast simply has no such twin
        return None


def _cast(x: Any, dtype: torch.dtype) -> Any:
    return x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def _floats(out: Any) -> list[torch.Tensor]:
    return [x for x in flatten_outputs(out) if isinstance(x, torch.Tensor) and x.is_floating_point()]


def _set_tf32(allowed: bool) -> None:
    """Matmul TF32 as asked; cuDNN's TF32 stays at PyTorch's default (on) unless asked for."""
    torch.backends.cuda.matmul.allow_tf32 = allowed
    torch.backends.cudnn.allow_tf32 = True


if __name__ == "__main__":
    main(ReferenceServer())
