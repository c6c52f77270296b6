"""The device plugin's acknowledgement of a grant, in the event trail.

The plugin writes ``headroom.dev/allocated`` on a pod when kubelet's Allocate gave it
exactly its grant; the extender sees that through its pod watch and records it here,
once per pod, so the audit trail shows for each grant not only that it was decided and
bound but that the node handed the container those GPUs. The event is not a state
change of the allocation row (``replay`` ignores it): a grant never acknowledged stays
billed as bound, and is a finding of its own (``unacknowledged``, a discrepancy).
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.core.allocation import EventKind
from extender.ledger.trail import Tx


def record_ack(
    tx: Tx,
    pod_uid: str,
    pod: str,
    node: str,
    slots: Sequence[str],
    gpu_uuids: Sequence[str],
    waited_s: float,
    at: float,
) -> int:
    """One ``acknowledged`` event: the slots kubelet allocated and the GPUs they sit on,
    and how long after the bind the acknowledgement was seen. Returns its sequence."""
    payload = {
        "pod": pod,
        "slots": sorted(slots),
        "gpu_uuids": list(gpu_uuids),
        "waited_s": round(max(waited_s, 0.0), 3),
    }
    return tx.append_event(at, EventKind.ACKNOWLEDGED, payload, pod_uid, node)
