"""Whether the objects the timing relies on are still the trusted side's own: a stub.

This is a placeholder in the timing branch: helper L (issue 21, plan section L) writes the real
module, which snapshots the timing's identities when the worker starts (the CUDA event class and
its methods, the synchronisations, the spin, the clocks, the worker's handler table) and names
what a candidate changed since. The lead resolves the merge by taking L's file. Until then
nothing is ever reported, and the timing's ``timer_tampered`` finding never fires.
"""

from __future__ import annotations


def tampered() -> list[str]:
    """The names of the timing's objects that differ from the snapshot: none in this stub."""
    return []
