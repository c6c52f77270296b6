"""A GPU's memory is granted at most once: the ledger's own check, inside the decision's write.

Each replica's inventory refuses an over-grant among the binds it makes itself, but two
replicas over one PostgreSQL ledger each see only their own reservations (the other's
arrive later, through the pod watch), so both could hand out the same last 50 GiB. The
rule that holds across replicas runs where they meet: in ``record_decision``'s
transaction, after the ledger's single write lock (SQLite ``BEGIN IMMEDIATE``,
PostgreSQL ``chain_head … FOR UPDATE``). Every write takes that lock first, so the sum
read here cannot change before the commit, on either backend, with no lock of its own.

The rule, per GPU the decision touches: Σ ``memory_mib`` of its active (reserved,
bound, running) rows + what the decision asks ≤ the GPU's memory: the ``gpu_total_mib``
the grant carries, or less if the ledger's ``nodes`` row records less for that GPU.
Exclusive and MIG grants carry the whole GPU's (instance's) memory, so they take it
all. DRA grants are not checked: kube-scheduler's DRA allocator already placed them,
and the ledger's part is to record (and bill) them, not to refuse a fact.

``shortfall`` is the rule over plain data; ``check`` reads that data inside the
transaction and raises ``CapacityExceeded`` (the transaction then rolls back: no row,
no event).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from extender.core.allocation import CapacityExceeded, Decision, GpuGrant
from extender.ledger.nodes import gpus_from_json
from extender.ledger.schema import ACTIVE_SQL
from extender.ledger.trail import Tx

# scoped by node so the (node, status) index serves it: a grant's GPU is on its node
COMMITTED_ON_NODE = (
    "SELECT gpu_uuid, SUM(memory_mib) FROM allocations"
    f" WHERE node = ? AND status IN {ACTIVE_SQL} GROUP BY gpu_uuid"
)
NODE_GPUS = "SELECT gpus FROM nodes WHERE name = ? AND gone_at IS NULL"


@dataclass(frozen=True)
class Shortfall:
    """The first GPU a decision would overfill, with the figures the refusal names."""

    gpu_uuid: str
    asked_mib: int  # what the decision asks of this GPU (all its grants on it)
    free_mib: int  # total - committed, never below 0
    total_mib: int


def shortfall(
    grants: Sequence[GpuGrant],
    committed: Mapping[str, int],
    recorded_total: Mapping[str, int],
) -> Shortfall | None:
    """The first GPU (in grant order) where ``committed`` + the grants exceed its memory.

    ``committed``: Σ memory_mib of the active rows per GPU uuid. ``recorded_total``: the
    memory the ledger's node record gives each GPU, where it has one (the smaller of it
    and the grant's own ``gpu_total_mib`` is the limit: a grant cannot enlarge a GPU).
    """
    asked: dict[str, int] = {}
    total: dict[str, int] = {}
    for g in grants:
        if g.claim:  # DRA: placed by kube-scheduler's allocator, recorded as it is
            continue
        asked[g.gpu_uuid] = asked.get(g.gpu_uuid, 0) + g.memory_mib
        limit = min(g.gpu_total_mib, recorded_total.get(g.gpu_uuid, g.gpu_total_mib))
        total[g.gpu_uuid] = min(limit, total.get(g.gpu_uuid, limit))
    for uuid, mib in asked.items():
        free = total[uuid] - committed.get(uuid, 0)
        if mib > free:
            return Shortfall(uuid, mib, max(free, 0), total[uuid])
    return None


def check(tx: Tx, decision: Decision) -> None:
    """Raise ``CapacityExceeded`` if the decision would overfill a GPU (run under the
    write lock, before the decision's rows are inserted)."""
    node = decision.node.name
    committed = {str(u): int(s) for u, s in tx.execute(COMMITTED_ON_NODE, (node,)).fetchall()}
    row = tx.execute(NODE_GPUS, (node,)).fetchone()
    recorded = {u: t for u, _, t in gpus_from_json(row[0])} if row is not None else {}
    short = shortfall(decision.grants, committed, recorded)
    if short is not None:
        raise CapacityExceeded(
            short.gpu_uuid, node, short.asked_mib, short.free_mib, short.total_mib
        )
