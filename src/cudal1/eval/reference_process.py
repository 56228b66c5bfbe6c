"""What runs in the trusted reference's worker process: ``python -m cudal1.eval.reference_process FD``.

The reference worker imports only task code, never a candidate, and serves every evaluation of
its task. Beyond the commands both roles answer (``process.worker.WorkerServer``) it does what
only the trusted side may: hands out init inputs, keeps the reference's outputs (and a float64
twin's) to compare a candidate's forwarded outputs against, counts the reference's FLOPs and
bytes, and measures the device's peaks. It imports no pool and no pydantic config: tolerances
arrive as a plain mapping.
"""

from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace
from typing import Any

import torch

from cudal1.eval.checks.compare import compare_outputs
from cudal1.eval.process.protocol import Command, Role
from cudal1.eval.process.wire import decode, digest, flatten_outputs
from cudal1.eval.process.worker import (
    Handler,
    WorkerServer,
    describe,
    digests,
    main,
    sync,
    to_device,
)
from cudal1.eval.timing.speed_of_light import count_work, load_or_measure_peaks

ENTRY = "cudal1.eval.reference_process"


class ReferenceServer(WorkerServer):
    role = Role.REFERENCE

    def __init__(self) -> None:
        super().__init__()
        self.expected: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {}
        self.model64: Any = None
        self.slots64: dict[str, Any] = {}
        self.work_by_signature: dict[str, dict[str, Any]] = {}

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
        }

    def init_inputs(self, seed: int) -> dict[str, Any]:
        torch.manual_seed(seed)
        return {"args": list(self.module.get_init_inputs())}

    def model_class(self) -> Any:
        return self.module.Model

    def build(
        self, args: list[Any], seed: int, device: str, slot: str = "main", float64: bool = False
    ) -> dict[str, Any]:
        """The reference model, and with ``float64`` a float64 copy of it beside it."""
        reply = super().build(args, seed, device, slot)
        twin = _float64_twin(self.model_in(slot)) if float64 else None
        if slot == "main":
            self.model64 = twin
        else:
            self.slots64[slot] = twin
        return reply

    def run(self, key: str, slot: str = "main") -> dict[str, Any]:
        """Run on stored inputs and keep the outputs (and the float64 twin's) to compare against."""
        model = self.model_in(slot)
        model64 = self.model64 if slot == "main" else self.slots64.get(slot)
        inputs = self.inputs[key]
        with torch.no_grad():
            out = model(*inputs)
            sync(self.device)
        out64, err64 = None, None
        if model64 is not None:
            try:
                with torch.no_grad():
                    out64 = model64(*[_to_float64(x) for x in inputs])
                    sync(self.device)
            except Exception as exc:
                err64 = f"{type(exc).__name__}: {exc}"
        self.expected[key] = (describe(out), describe(out64) if out64 is not None else None)
        out_bytes = [x.nbytes if isinstance(x, torch.Tensor) else 0 for x in flatten_outputs(out)]
        return {"float64_error": err64, "out_bytes": out_bytes, "digest": digests(out)}

    def compare(self, key: str, reply: bytes, tolerance: dict[str, Any], device_type: str) -> dict[str, Any]:
        """Compare a candidate's forwarded reply with the kept reference outputs."""
        cand = decode(reply)["outputs"]
        cand["values"] = [to_device(v, self.device) for v in cand["values"]]
        cand_digests = [digest(v) if isinstance(v, torch.Tensor) else None for v in cand["values"]]
        ref, ref64 = (_on(d, self.device) for d in self.expected[key])
        assert ref is not None
        cmp = compare_outputs(cand, ref, ref64, SimpleNamespace(**tolerance), device_type)
        return {"comparison": dataclasses.asdict(cmp), "digests": cand_digests}

    def before_timing(self, keys: list[str]) -> None:
        """The float64 model and the kept outputs leave the device (the candidate has neither)."""
        self.model64 = None
        for key in keys:
            if key in self.expected:
                ref, ref64 = self.expected[key]
                self.expected[key] = (_on(ref, torch.device("cpu")), _on(ref64, torch.device("cpu")))

    def forget(self, keys: list[str], slots: list[str] | None = None) -> dict[str, Any]:
        for key in keys:
            self.expected.pop(key, None)
        for slot in slots or []:
            self.slots64.pop(slot, None)
        return super().forget(keys, slots)

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

    def peaks(self, cache_dir: str) -> dict[str, Any]:
        """This device's bandwidth and FLOP peaks, measured once and cached on disk."""
        return {"peaks": dataclasses.asdict(load_or_measure_peaks(self.device, cache_dir))}


def _on(desc: dict[str, Any] | None, device: torch.device) -> dict[str, Any] | None:
    if desc is None:
        return None
    return {**desc, "values": [to_device(v, device) for v in desc["values"]]}


def _float64_twin(model: Any) -> Any:
    if not isinstance(model, torch.nn.Module):
        return None
    try:
        return copy.deepcopy(model).double()
    except Exception:  # a model that cannot be copied or cast simply has no fp64 reference
        return None


def _to_float64(x: Any) -> Any:
    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


if __name__ == "__main__":
    main(ReferenceServer())
