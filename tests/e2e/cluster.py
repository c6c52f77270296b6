"""Process management for the e2e control plane: real etcd, kube-apiserver, kube-scheduler.

Everything listens on 127.0.0.1 with random ports; state, certificates and logs live in
one temporary directory. Each process runs in its own process group so teardown can kill
it with every child. Binaries come from ``tests/e2e/build.sh`` (see docs/e2e.md).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SH = REPO_ROOT / "tests" / "e2e" / "build.sh"
SCHEDULER_CONFIG = REPO_ROOT / "manifests" / "scheduler" / "kube-scheduler-config.yaml"

# DRA is GA (locked on) since 1.35, and so are DRAExtendedResource (KEP-5004) and
# DRAResourceClaimDeviceStatus in 1.37; these two are beta and default-on in 1.36 and 1.37,
# but are named explicitly so the harness fails loudly if a future build drops or relocks them.
# Passing a GA-and-locked gate with its locked value only logs a warning; setting it to
# the other value is a startup error (see docs/e2e.md).
FEATURE_GATES = "DRAConsumableCapacity=true,DRAPartitionableDevices=true"

ADMIN_USER = "e2e-admin"


class ClusterError(RuntimeError):
    """A control-plane process failed to build, start or become ready."""


def build_binaries(log: Path) -> Path:
    """Run build.sh (fast when cached) and return the bin directory it prints last."""
    with log.open("ab") as out:
        proc = subprocess.run(
            ["bash", str(BUILD_SH)], stdout=subprocess.PIPE, stderr=out, check=False
        )
    lines = proc.stdout.decode().strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise ClusterError(f"{BUILD_SH} failed (rc={proc.returncode}):\n{tail(log)}")
    return Path(lines[-1])


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1 (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Proc:
    """One child process in its own process group, logging to ``log``."""

    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"$ {' '.join(self.argv)}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: killpg gets every child
            )

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise ClusterError(
                f"{self.name} exited with {self.popen.returncode}; log {self.log}:\n"
                f"{tail(self.log)}"
            )

    def stop(self, grace: float = 10.0) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=grace)
        # Children that outlived the leader (none expected) go too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)


def wait_until(
    what: str, probe: Callable[[], bool], timeout: float, procs: list[Proc], interval: float = 0.3
) -> None:
    """Poll ``probe`` until true; fail early if a process died, late with its log tail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            p.check_alive()
        with contextlib.suppress(Exception):
            if probe():
                return
        time.sleep(interval)
    logs = "\n".join(f"--- {p.name} ({p.log}) ---\n{tail(p.log)}" for p in procs)
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}\n{logs}")


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, check=False)
    if proc.returncode != 0:
        raise ClusterError(f"openssl {' '.join(args)} failed: {proc.stderr.decode()}")


def make_pki(pki: Path) -> None:
    """CA, apiserver serving cert (127.0.0.1/localhost) and the service-account RSA key."""
    pki.mkdir(parents=True, exist_ok=True)
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=pki)
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-sha256", "-days", "2",
        "-subj", "/CN=headroom-e2e-ca", "-out", "ca.crt", cwd=pki,
    )  # fmt: skip
    _openssl("genrsa", "-out", "apiserver.key", "2048", cwd=pki)
    (pki / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "req", "-new", "-key", "apiserver.key", "-subj", "/CN=kube-apiserver",
        "-out", "apiserver.csr", cwd=pki,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-sha256", "-extfile", "san.ext",
        "-out", "apiserver.crt", cwd=pki,
    )  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def write_kubeconfig(path: Path, server: str, ca: Path, token: str) -> None:
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": ADMIN_USER, "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": ADMIN_USER}}],
        "current-context": "e2e",
    }
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


def https_get(url: str, ctx: ssl.SSLContext, token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")


@dataclass
class ControlPlane:
    """etcd + kube-apiserver on loopback. ``start()`` returns when /readyz is ok."""

    workdir: Path
    bin_dir: Path
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    procs: list[Proc] = field(default_factory=list)
    server: str = ""
    etcd_url: str = ""

    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.pki / "ca.crt"))

    def start(self) -> None:
        make_pki(self.pki)
        self._start_etcd()
        self._start_apiserver()
        write_kubeconfig(self.kubeconfig, self.server, self.pki / "ca.crt", self.token)

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        etcd = Proc(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                f"--data-dir={self.workdir / 'etcd-data'}",
                f"--listen-client-url={self.etcd_url}",
                f"--listen-peer-url=http://127.0.0.1:{peer}",
            ],
            self.logs / "etcd.log",
        )
        etcd.start()
        self.procs.append(etcd)

        def healthy() -> bool:
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as resp:
                return b'"health":"true"' in resp.read()

        wait_until("etcd /health", healthy, 60, [etcd])

    def _start_apiserver(self) -> None:
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f'{self.token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
        pki = self.pki
        apiserver = Proc(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                "--anonymous-auth=false",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                # The "kubernetes" Service Endpoints may not point at loopback; nothing
                # in-cluster needs it here, so do not reconcile it (avoids error spam).
                "--endpoint-reconciler-type=none",
                f"--feature-gates={FEATURE_GATES}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                "--profiling=false",
                "--v=1",
            ],
            self.logs / "kube-apiserver.log",
        )
        apiserver.start()
        self.procs.append(apiserver)
        ctx = self.ssl_context()

        def ready() -> bool:
            code, _ = https_get(f"{self.server}/readyz", ctx, self.token)
            return code == 200

        wait_until("kube-apiserver /readyz", ready, 180, self.procs)

    def check_alive(self) -> None:
        for p in self.procs:
            p.check_alive()

    def log_tails(self, lines: int = 60) -> str:
        files = sorted(self.logs.glob("*.log")) if self.logs.exists() else []
        return "\n".join(f"--- {f.name} ---\n{tail(f, lines)}" for f in files)

    def stop(self) -> None:
        # Reverse order: apiserver before etcd.
        for p in reversed(self.procs):
            p.stop()


def render_scheduler_config(
    kubeconfig: Path, extender_url: str | None, leader_elect: bool = False
) -> str:
    """The deployable manifests/scheduler config, rendered for loopback: this harness's
    kubeconfig, no leader election, the profile as ``default-scheduler`` (test pods use
    the default name), the extender at ``extender_url``; None drops all extenders.
    Every other extender field (verbs, weight, nodeCacheCapable, timeout, ignorable, no
    managedResources) is exactly what a cluster gets."""
    doc: dict[str, Any] = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    doc["clientConnection"] = {**doc.get("clientConnection", {}), "kubeconfig": str(kubeconfig)}
    doc["leaderElection"] = {"leaderElect": leader_elect}
    for profile in doc["profiles"]:
        profile["schedulerName"] = "default-scheduler"
    if extender_url is None:
        doc["extenders"] = []
    else:
        for ext in doc["extenders"]:
            ext["urlPrefix"] = extender_url
    return yaml.safe_dump(doc, sort_keys=False)


@dataclass
class Scheduler:
    """A real kube-scheduler against a ControlPlane. ``start()`` returns when /readyz is ok."""

    plane: ControlPlane
    extender_url: str | None
    name: str = "kube-scheduler"
    proc: Proc | None = None
    config_path: Path | None = None
    port: int = 0

    def start(self) -> None:
        plane = self.plane
        self.port = free_port()
        self.config_path = plane.workdir / f"{self.name}-config.yaml"
        self.config_path.write_text(render_scheduler_config(plane.kubeconfig, self.extender_url))
        self.proc = Proc(
            self.name,
            [
                str(plane.bin_dir / "kube-scheduler"),
                f"--config={self.config_path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={plane.workdir / (self.name + '-certs')}",
                # No kube-controller-manager/kubeadm here: do not look up the
                # extension-apiserver-authentication ConfigMap for client CAs.
                f"--authentication-kubeconfig={plane.kubeconfig}",
                f"--authorization-kubeconfig={plane.kubeconfig}",
                "--authentication-skip-lookup=true",
                f"--feature-gates={FEATURE_GATES}",
                "--v=2",
            ],
            plane.logs / f"{self.name}.log",
        )
        self.proc.start()
        # /readyz includes sched-handler-sync: informers synced and handlers registered.
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # the scheduler's own self-signed serving cert

        def ready() -> bool:
            code, _ = https_get(f"https://127.0.0.1:{self.port}/readyz", ctx, plane.token)
            return code == 200

        wait_until(f"{self.name} /readyz", ready, 120, [*plane.procs, self.proc])

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


def ready_node_body(
    name: str,
    *,
    gpus: int = 1,
    capacity_type: str = "spot",
    instance_type: str = "g5.xlarge",
    extra_labels: dict[str, str] | None = None,
    cpu: str = "4",
    memory: str = "16Gi",
) -> dict[str, Any]:
    """A Ready Node object for a control plane without kubelets (its status is patched
    in after create: nothing else would set it)."""
    resources = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "karpenter.sh/capacity-type": capacity_type,
                "node.kubernetes.io/instance-type": instance_type,
                **(extra_labels or {}),
            },
        },
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "e2e node object (no kubelet)",
                }
            ],
        },
    }
