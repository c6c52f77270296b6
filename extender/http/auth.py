"""Bearer-token checks for write endpoints (agent reports, lifecycle) and the audit API.

A shared token lives in a file (a mounted Secret); it is re-read when the file changes so a
rotated Secret takes effect without a restart. Tokens are compared in constant time
and never logged or echoed.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import threading

from extender.http.tokenreview import Identity, Refused, TokenReviewer


class TokenFile:
    """``optional``: the file may be missing (an optional Secret not created yet); until
    it appears no token matches, so what it guards stays closed, not open."""

    def __init__(self, path: str, optional: bool = False) -> None:
        self._path = path
        self._mtime: float | None = None
        self._token = b""
        self._lock = threading.Lock()
        try:
            self._load()
        except FileNotFoundError:
            if not optional:
                raise

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
            return bool(self._token) and hmac.compare_digest(presented.encode(), self._token)


def bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


class Authenticator:
    """Who may write: the shared token (an admin, any node) or an agent by TokenReview.

    ``identify`` answers an ``Identity`` or raises ``Refused`` (401/403) or
    ``ReviewUnavailable`` (503); the messages say why and never contain the token.
    """

    def __init__(
        self,
        shared: TokenFile | None = None,
        reviewer: TokenReviewer | None = None,
        allow_unauthenticated: bool = False,
    ) -> None:
        self.shared, self.reviewer = shared, reviewer
        self.allow_unauthenticated = allow_unauthenticated

    def quick(self, header: str | None) -> Identity | None:
        """The answer when no TokenReview is needed (cheap, safe on the event loop)."""
        token = bearer(header)
        if token is None:
            if self.allow_unauthenticated:
                return Identity("anonymous", None, admin=True)
            raise Refused(401, "missing bearer token")
        if self.shared is not None and self.shared.matches(token):
            return Identity("shared-token", None, admin=True)
        if self.reviewer is None:
            if self.allow_unauthenticated:  # development mode: a credential is optional
                return Identity("anonymous", None, admin=True)
            raise Refused(401, "missing or wrong bearer token")
        return self.reviewer.cached(token)

    def identify(self, header: str | None) -> Identity:
        """Blocking (may send a TokenReview): call it off the event loop."""
        found = self.quick(header)
        if found is not None:
            return found
        assert self.reviewer is not None
        token = bearer(header)
        assert token is not None
        return self.reviewer.identify(token)
