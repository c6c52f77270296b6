"""Server TLS from a certificate and key on disk, reloaded when the files change.

cert-manager (or a person) rotates the Secret behind the mounted files; the kubelet
swaps them in place. Restarting the extender for that would drop in-flight binds, so
the live ``SSLContext`` gets the new chain with ``load_cert_chain`` instead: OpenSSL
copies the certificate into each connection when it is created, so connections after
the reload present the new one and open connections keep theirs.

The files are checked on new TLS handshakes (through the SNI callback, which OpenSSL
calls for every ClientHello) at most once per ``min_check_s``, and by ``watch`` on a
timer as a backstop. A half-written pair (cert and key from different rotations) fails
to load; the last good chain stays in use and the next check tries again.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from pathlib import Path

log = logging.getLogger("headroom.tls")


class CertReloader:
    def __init__(self, cert_file: str, key_file: str, min_check_s: float = 1.0) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self.min_check_s = min_check_s
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.sni_callback = self._on_hello
        self._lock = threading.Lock()
        self._stamp: tuple[float, float, int, int] | None = None
        self._checked = 0.0
        self.reloads = 0
        self.context.load_cert_chain(cert_file, key_file)  # fail fast on a bad first pair
        self._stamp = self._files_stamp()

    def _files_stamp(self) -> tuple[float, float, int, int]:
        c, k = os.stat(self.cert_file), os.stat(self.key_file)
        return (c.st_mtime, k.st_mtime, c.st_ino, k.st_ino)

    def maybe_reload(self, force: bool = False) -> bool:
        """Load the pair again if either file changed; True when a new chain is live."""
        now = time.monotonic()
        with self._lock:
            if not force and now - self._checked < self.min_check_s:
                return False
            self._checked = now
            try:
                stamp = self._files_stamp()
                if stamp == self._stamp:
                    return False
                self.context.load_cert_chain(self.cert_file, self.key_file)
            except (OSError, ssl.SSLError) as e:
                log.warning(
                    "TLS certificate reload failed; keeping the last good one",
                    extra={"cert_file": self.cert_file, "error": str(e)[:200]},
                )
                return False
            self._stamp = stamp
            self.reloads += 1
        log.info("TLS certificate reloaded", extra={"cert_file": self.cert_file})
        return True

    def _on_hello(
        self, sock: ssl.SSLObject | ssl.SSLSocket, _name: str | None, ctx: ssl.SSLContext
    ) -> None:
        if self.maybe_reload():
            # this connection was created before the reload: hand it the new chain too
            sock.context = ctx

    def watch(self, stop: threading.Event, every_s: float) -> threading.Thread:
        """A daemon thread that checks the files every ``every_s`` seconds."""

        def run() -> None:
            while not stop.wait(every_s):
                self.maybe_reload(force=True)

        t = threading.Thread(target=run, name="tls-reload", daemon=True)
        t.start()
        return t


def files_present(cert_file: str | None, key_file: str | None) -> bool:
    return bool(cert_file and key_file and Path(cert_file).is_file() and Path(key_file).is_file())
