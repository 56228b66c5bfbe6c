"""The rules that turn a worker's observations into findings (eval/checks/global_state.py),
without workers: each finding from its reply, and the relaxed severity of ``process_state="warn"``."""

from __future__ import annotations

from cudal1.eval.checks.global_state import observation_findings
from cudal1.schema import Severity


def test_observation_rules_without_workers():
    clean = {
        "outputs": {"values": [{"__tensor__": 0, "type": "Tensor"}]},
        "observations": {
            "inputs_digest": [7],
            "aliases": [],
            "state_changes": {},
            "threads_before": 3,
            "threads_after": 3,
        },
    }
    assert observation_findings(clean, [7], "check0") == []
    dirty = {
        "outputs": {"values": [{"__tensor__": 0, "type": "Lazy"}]},
        "observations": {
            "inputs_digest": [8],
            "aliases": ["output 0 shares memory with a input"],
            "state_changes": {"id:torch.allclose": [1, 2], "cudnn.benchmark": [False, True]},
            "threads_before": 3,
            "threads_after": 5,
        },
    }
    codes = {f.code: f.severity for f in observation_findings(dirty, [7], "check0")}
    # The worker's list of threads the candidate started decides when present: a library thread
    # (torch.compile's tqdm monitor) raises the count without being the candidate's ...
    library = {
        **clean,
        "observations": {**clean["observations"], "threads_after": 4, "candidate_threads": []},
    }
    assert observation_findings(library, [7], "check0") == []
    # ... and a thread started at construction is the candidate's, though older than the call.
    spinning = {**clean, "observations": {**clean["observations"], "candidate_threads": ["Thread-1 (_spin)"]}}
    (found,) = observation_findings(spinning, [7], "check0")
    assert found.code == "threads_left_running" and found.evidence["threads"] == ["Thread-1 (_spin)"]
    assert codes == {
        "output_not_plain_tensor": Severity.REJECT,
        "input_mutated": Severity.REJECT,
        "output_aliases_owned_memory": Severity.REJECT,
        "functions_patched": Severity.REJECT,
        "global_state_changed": Severity.REJECT,
        "threads_left_running": Severity.REJECT,
    }
    relaxed = {f.code: f.severity for f in observation_findings(dirty, [7], "check0", "warn")}
    assert relaxed["global_state_changed"] is relaxed["threads_left_running"] is Severity.WARNING
