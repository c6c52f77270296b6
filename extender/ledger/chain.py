"""The event hash chain: canonical content, hashing and verification (pure).

Each event's hash is SHA-256 over the previous event's hash and the event's own
canonical content, so editing or deleting any row breaks every later link, and the
``chain_head`` row (last seq + hash, updated in the same transaction) exposes a
truncated tail. This is tamper-*evidence*: someone who can rewrite the whole table
and the head can forge a consistent chain; export the head hash elsewhere to anchor it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from extender.ledger.records import ChainReport, EventRecord

GENESIS = "0" * 64


def canonical_payload(payload: dict[str, Any]) -> str:
    """Deterministic JSON: sorted keys, no spaces, Decimals as strings."""
    return json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default
    )


def _default(v: object) -> str:
    if isinstance(v, Decimal):
        return str(v)
    raise TypeError(f"not canonical-JSON serialisable: {type(v).__name__}")


def event_hash(
    prev_hash: str,
    seq: int,
    at: float,
    kind: str,
    pod_uid: str,
    node: str,
    gpu_uuid: str,
    payload: str,
) -> str:
    """SHA-256 (hex) of the previous hash and this event's content, field by field."""
    content = json.dumps(
        [prev_hash, seq, repr(float(at)), kind, pod_uid, node, gpu_uuid, payload],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def verify(events: Iterable[EventRecord], head_seq: int, head_hash: str) -> ChainReport:
    """Walk events in seq order; report the first missing, edited or relinked row."""
    prev_hash, expected, count = GENESIS, 1, 0
    for e in events:
        if e.seq != expected:
            return ChainReport(False, count, expected, f"event {expected} is missing")
        if e.prev_hash != prev_hash:
            return ChainReport(
                False, count, e.seq, f"event {e.seq}: prev_hash does not match event {e.seq - 1}"
            )
        recomputed = event_hash(
            e.prev_hash, e.seq, e.at, e.kind, e.pod_uid, e.node, e.gpu_uuid, e.payload
        )
        if recomputed != e.hash:
            return ChainReport(False, count, e.seq, f"event {e.seq}: content was edited")
        prev_hash, expected, count = e.hash, expected + 1, count + 1
    if head_seq != count:
        return ChainReport(
            False, count, count + 1, f"events after {count} are missing (head says {head_seq})"
        )
    if head_hash != prev_hash:
        return ChainReport(False, count, count, f"event {count}: hash differs from chain head")
    return ChainReport(True, count)
