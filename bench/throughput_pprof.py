"""Go CPU profiles of kube-apiserver and kube-scheduler during a timed run of
bench/throughput.py (``--pprof DIR``): where the control plane's CPU per pod goes, with
and without the extender, read with ``go tool pprof``.

Both serve ``/debug/pprof/profile`` on their secure port (kube-apiserver only with
``--profiling=true``: ``ControlPlane.profiling``), to the bench's admin token. A profile
starts ``delay_s`` after the scheduler does (its start-up and first binds left out) and
lasts ``seconds``; it runs in a thread, so the run is timed as usual.
"""

from __future__ import annotations

import ssl
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.e2e.cluster import ControlPlane, Proc


def secure_port(proc: Proc) -> int:
    """The ``--secure-port`` a control-plane process was started with."""
    for arg in proc.argv:
        if arg.startswith("--secure-port="):
            return int(arg.split("=", 1)[1])
    raise ValueError(f"{proc.name} has no --secure-port")


@dataclass
class Profiles:
    """CPU profiles of the API server and the scheduler of one run, taken in threads."""

    plane: ControlPlane
    out: Path
    seconds: int = 10
    delay_s: float = 5.0
    threads: list[threading.Thread] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def start(self, run: str, scheduler: Proc) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        apiserver = next(p for p in self.plane.procs if p.name == "kube-apiserver")
        for proc in (apiserver, scheduler):
            url = (
                f"https://127.0.0.1:{secure_port(proc)}/debug/pprof/profile?seconds={self.seconds}"
            )
            path = self.out / f"{run}-{proc.name.split('-')[1]}.pprof"  # apiserver, scheduler
            t = threading.Thread(target=self._fetch, args=(url, path), daemon=True)
            t.start()
            self.threads.append(t)

    def wait(self) -> None:
        for t in self.threads:
            t.join(self.delay_s + self.seconds + 30)
        self.threads.clear()

    def _fetch(self, url: str, path: Path) -> None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # the scheduler's self-signed serving certificate
        threading.Event().wait(self.delay_s)
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.plane.token}"})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=self.seconds + 30) as r:
                path.write_bytes(r.read())
        except OSError as e:
            self.errors.append(f"{path.name}: {e}")
