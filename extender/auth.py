"""Bearer-token checks for write endpoints (agent reports, lifecycle).

The token lives in a file (a mounted Secret); it is re-read when the file changes so a
rotated Secret takes effect without a restart. Tokens are compared in constant time
and never logged or echoed.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import threading


class TokenFile:
    def __init__(self, path: str) -> None:
        self._path = path
        self._mtime: float | None = None
        self._token = b""
        self._lock = threading.Lock()
        self._load()

    def _load(self) -> None:
        mtime = os.stat(self._path).st_mtime
        if mtime != self._mtime:
            with open(self._path, "rb") as f:
                token = f.read().strip()
            if not token:
                raise ValueError(f"token file {self._path} is empty")
            self._token, self._mtime = token, mtime

    def matches(self, presented: str) -> bool:
        with self._lock:
            with contextlib.suppress(OSError, ValueError):
                self._load()  # on failure keep the last good token
            return hmac.compare_digest(presented.encode(), self._token)


def bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()
