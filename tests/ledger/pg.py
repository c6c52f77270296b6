"""A real, throwaway PostgreSQL server for the ledger tests.

``PgServer.start()`` runs ``initdb`` + ``pg_ctl start`` from ``HEADROOM_PG_BIN``
(default ``/usr/lib/postgresql/15/bin``) in a fresh temp folder, listening on
127.0.0.1 at a free port with its unix socket in that folder. PostgreSQL refuses to
run as root, so as root every server command runs as the ``postgres`` user
(``runuser -u postgres --``) and the folder is handed to that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import psycopg

PG_BIN = Path(os.environ.get("HEADROOM_PG_BIN", "/usr/lib/postgresql/15/bin"))


def binaries_missing() -> str | None:
    """Why the server cannot be started here, or None."""
    for tool in ("initdb", "pg_ctl", "postgres"):
        if not (PG_BIN / tool).exists():
            return f"PostgreSQL server binaries not found ({PG_BIN / tool}); set HEADROOM_PG_BIN"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server as"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="headroom-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            pw = pwd.getpwnam("postgres")
            os.chmod(self.root, 0o755)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(PG_BIN / args[0]), *args[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=120)

    def start(self) -> PgServer:
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        self._pg_ctl("start")
        return self

    def _pg_ctl(self, action: str, *extra: str) -> None:
        opts = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
            " -c max_connections=300 -c fsync=on -c synchronous_commit=on"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-w",
            "-t",
            "60",
            "-o",
            opts,
            action,
            *extra,
        )

    def restart_immediate(self) -> None:
        """Crash-stop (no checkpoint, like a kill) and start again; WAL recovery runs."""
        self._pg_ctl("restart", "-m", "immediate")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "stop", "-m", "fast", check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def dsn(self, db: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def create_db(self) -> str:
        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.dsn(name)

    def drop_db(self, dsn: str) -> None:
        name = dsn.rsplit("/", 1)[1]
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
