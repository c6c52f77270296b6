"""The ledger schema, as numbered migrations applied on open.

One DDL text serves both dialects: ``{id}``, ``{real}``, ``{money}`` and ``{text}``
are filled per dialect (SQLite: INTEGER PRIMARY KEY AUTOINCREMENT / REAL / TEXT;
PostgreSQL: identity BIGINT / DOUBLE PRECISION / NUMERIC). Money is never a float.
Times are Unix seconds (REAL / DOUBLE PRECISION), which both dialects store exactly
as the Python float they were given.

Applied migrations are recorded in ``schema_migrations``; a migration is applied
inside the same write transaction that records it, so a crash leaves either the
old or the new schema, never half of one.
"""

from __future__ import annotations

from dataclasses import dataclass

ACTIVE_SQL = "('reserved', 'bound', 'running')"

RECEIPTS_DDL = (
    """CREATE TABLE IF NOT EXISTS receipts (
        allocation_id BIGINT PRIMARY KEY,
        pod_uid {text} NOT NULL,
        node {text} NOT NULL,
        granted_gpu {text} NOT NULL,
        gpu_uuid {text} NOT NULL,
        memory_mib BIGINT NOT NULL,
        gpu_total_mib BIGINT NOT NULL,
        price_per_hour {money},
        devices {text} NOT NULL DEFAULT '',
        at {real} NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS receipts_pod ON receipts (pod_uid)",
)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]
    by_dialect: dict[str, tuple[str, ...]] | None = None  # where the dialects differ

    def for_dialect(self, dialect: str) -> tuple[str, ...]:
        return self.statements + (self.by_dialect or {}).get(dialect, ())


_V1 = (
    """CREATE TABLE IF NOT EXISTS allocations (
        id {id},
        pod_uid {text} NOT NULL,
        namespace {text} NOT NULL,
        pod_name {text} NOT NULL,
        owner_kind {text} NOT NULL DEFAULT '',
        owner_name {text} NOT NULL DEFAULT '',
        labels {text} NOT NULL DEFAULT '{{}}',
        node {text} NOT NULL,
        instance_type {text} NOT NULL DEFAULT '',
        capacity_type {text} NOT NULL DEFAULT '',
        zone {text} NOT NULL DEFAULT '',
        nodepool {text} NOT NULL DEFAULT '',
        gpu_uuid {text} NOT NULL,
        gpu_index INTEGER NOT NULL,
        gpu_model {text} NOT NULL DEFAULT '',
        memory_mib BIGINT NOT NULL,
        gpu_total_mib BIGINT NOT NULL,
        sharing {text} NOT NULL,
        mig_profile {text} NOT NULL DEFAULT '',
        claim {text} NOT NULL DEFAULT '',
        dra_device {text} NOT NULL DEFAULT '',
        price_per_hour {money} NOT NULL,
        policy {text} NOT NULL DEFAULT '',
        status {text} NOT NULL,
        decided_at {real} NOT NULL,
        bound_at {real},
        started_at {real},
        ended_at {real},
        end_reason {text} NOT NULL DEFAULT '',
        obs_count BIGINT NOT NULL DEFAULT 0,
        obs_peak_mib BIGINT NOT NULL DEFAULT 0,
        obs_mean_mib {real} NOT NULL DEFAULT 0,
        obs_weight_s {real} NOT NULL DEFAULT 0,
        obs_mean_sm {real},
        obs_sm_weight_s {real} NOT NULL DEFAULT 0,
        obs_last_at {real},
        obs_last_mib BIGINT NOT NULL DEFAULT 0
    )""",
    "CREATE UNIQUE INDEX IF NOT EXISTS allocations_one_active ON allocations (pod_uid, gpu_uuid)"
    f" WHERE status IN {ACTIVE_SQL}",
    "CREATE INDEX IF NOT EXISTS allocations_pod ON allocations (pod_uid)",
    "CREATE INDEX IF NOT EXISTS allocations_node ON allocations (node, status)",
    "CREATE INDEX IF NOT EXISTS allocations_status ON allocations (status)",
    "CREATE INDEX IF NOT EXISTS allocations_ns ON allocations (namespace, id)",
    "CREATE INDEX IF NOT EXISTS allocations_decided ON allocations (decided_at)",
    """CREATE TABLE IF NOT EXISTS nodes (
        name {text} PRIMARY KEY,
        instance_type {text} NOT NULL DEFAULT '',
        capacity_type {text} NOT NULL DEFAULT '',
        zone {text} NOT NULL DEFAULT '',
        nodepool {text} NOT NULL DEFAULT '',
        gpu_count INTEGER NOT NULL,
        gpu_total_mib BIGINT NOT NULL,
        gpus {text} NOT NULL DEFAULT '[]',
        gpu_price_per_hour {money} NOT NULL,
        first_seen {real} NOT NULL,
        last_seen {real} NOT NULL,
        gone_at {real},
        gone_reason {text} NOT NULL DEFAULT ''
    )""",
    """CREATE TABLE IF NOT EXISTS node_periods (
        id {id},
        node {text} NOT NULL,
        instance_type {text} NOT NULL DEFAULT '',
        capacity_type {text} NOT NULL DEFAULT '',
        gpu_count INTEGER NOT NULL,
        gpu_total_mib BIGINT NOT NULL,
        gpu_price_per_hour {money} NOT NULL,
        since {real} NOT NULL,
        until {real}
    )""",
    "CREATE INDEX IF NOT EXISTS node_periods_node ON node_periods (node, until)",
    """CREATE TABLE IF NOT EXISTS events (
        seq BIGINT PRIMARY KEY,
        at {real} NOT NULL,
        kind {text} NOT NULL,
        pod_uid {text} NOT NULL DEFAULT '',
        node {text} NOT NULL DEFAULT '',
        gpu_uuid {text} NOT NULL DEFAULT '',
        payload {text} NOT NULL,
        prev_hash {text} NOT NULL,
        hash {text} NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS chain_head (
        id INTEGER PRIMARY KEY,
        seq BIGINT NOT NULL,
        hash {text} NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS discrepancies (
        id {id},
        kind {text} NOT NULL,
        node {text} NOT NULL,
        gpu_uuid {text} NOT NULL,
        pod_uid {text} NOT NULL,
        first_seen {real} NOT NULL,
        last_seen {real} NOT NULL,
        count BIGINT NOT NULL,
        max_amount_mib BIGINT NOT NULL,
        last_amount_mib BIGINT NOT NULL,
        detail {text} NOT NULL DEFAULT '',
        closed_at {real}
    )""",
    "CREATE UNIQUE INDEX IF NOT EXISTS discrepancies_open ON discrepancies"
    " (kind, node, gpu_uuid, pod_uid) WHERE closed_at IS NULL",
)


def _nullable(table: str, column: str, indexes: tuple[str, ...]) -> tuple[str, ...]:
    """SQLite cannot drop a NOT NULL: rebuild the table from v1's DDL with the column
    nullable, rows and ids (and AUTOINCREMENT's high-water mark) kept, indexes remade."""
    (ddl,) = [d for d in _V1 if d.startswith(f"CREATE TABLE IF NOT EXISTS {table} (")]
    new = f"{table}_v2"
    create = ddl.replace(f"EXISTS {table} (", f"EXISTS {new} (").replace(
        f"{column} {{money}} NOT NULL", f"{column} {{money}}"
    )
    assert create != ddl.replace(f"EXISTS {table} (", f"EXISTS {new} ("), column
    keep_seq = (
        f"UPDATE sqlite_sequence SET seq = (SELECT seq FROM sqlite_sequence WHERE name ="
        f" '{table}') WHERE name = '{new}'"
    )
    return (
        create,
        f"INSERT INTO {new} SELECT * FROM {table}",
        *((keep_seq,) if "{id}" in ddl else ()),
        f"DROP TABLE {table}",
        f"ALTER TABLE {new} RENAME TO {table}",
        *indexes,
    )


def _indexes(table: str) -> tuple[str, ...]:
    return tuple(d for d in _V1 if d.startswith("CREATE") and f" ON {table} (" in d)


# An unknown price is NULL, never 0 (docs/billing.md): a grant on an unpriced node and an
# unpriced node's periods say so, and chargeback reports them as unpriced.
_PRICED = (
    ("allocations", "price_per_hour"),
    ("nodes", "gpu_price_per_hour"),
    ("node_periods", "gpu_price_per_hour"),
)
_V2_SQLITE = tuple(s for t, c in _PRICED for s in _nullable(t, c, _indexes(t)))
_V2_POSTGRES = tuple(f"ALTER TABLE {t} ALTER COLUMN {c} DROP NOT NULL" for t, c in _PRICED)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "allocations, nodes, events, discrepancies", _V1),
    Migration(
        2,
        "prices may be unknown (NULL)",
        (),
        {"sqlite": _V2_SQLITE, "postgresql": _V2_POSTGRES},
    ),
    # node price periods join the hash chain; those already written are attested as they
    # are now by one event each (``nodes.attest_existing``, run by the ledger's migrate)
    Migration(3, "node price periods in the hash chain", ()),
    # what each grant's pod received per kubelet, and what it is billed (ledger/receipts.py)
    Migration(4, "receipts: what each allocation received", RECEIPTS_DDL),
)

MIGRATIONS_TABLE = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name {text} NOT NULL,
    applied_at {real} NOT NULL
)"""


def render(statement: str, types: dict[str, str]) -> str:
    """Fill the dialect's column types into one DDL statement."""
    return statement.format(**types)
