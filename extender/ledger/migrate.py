"""Bringing a database's schema up to date: every migration not applied yet, in order.

Each runs in the dialect's migration transaction with its own bookkeeping row in
``schema_migrations``; two need data as well as tables: the first seeds the hash
chain's head (``GENESIS``), the third attests the nodes already known (``nodes``).
"""

from __future__ import annotations

import logging
import time

from extender.ledger import nodes, trail
from extender.ledger.chain import GENESIS
from extender.ledger.dialect import Dialect
from extender.ledger.schema import MIGRATIONS, MIGRATIONS_TABLE, render
from extender.ledger.trail import Tx

log = logging.getLogger("headroom.ledger")


def migrate(dialect: Dialect) -> None:
    types = dialect.types
    with dialect.migrate() as conn:
        tx = Tx(conn, dialect)
        tx.execute(render(MIGRATIONS_TABLE, types))
        applied = tx.execute("SELECT version FROM schema_migrations").fetchall()
        done = {int(v) for (v,) in applied}
        for m in MIGRATIONS:
            if m.version in done:
                continue
            for statement in m.for_dialect(dialect.name):
                tx.execute(render(statement, types))
            if m.version == 1:
                tx.execute(trail.INSERT_HEAD, (GENESIS,))
            if m.version == 3:
                nodes.attest_existing(tx, time.time())
            tx.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (m.version, m.name, time.time()),
            )
            tx.flush_head()
            log.info(
                "ledger schema migrated",
                extra={"event": "ledger.migrated", "version": m.version, "dialect": dialect.name},
            )
