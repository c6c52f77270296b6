"""POSTing reports to the extender, with bounded retries.

One keep-alive ``httpx.Client``; one report in flight at a time (the caller is a single
loop); retries with exponential backoff and jitter that stop before the time budget
(normally: until the next sample is due) runs out. A report that cannot be delivered
in its budget is dropped, because the next sample supersedes it: a dead extender
never piles up work on the node.

The bearer token is read from its file on every attempt, so projected service-account
tokens that the kubelet rotates are picked up, and it is never logged.

Several extenders (HA: two replicas, each keeping agent reports in memory): the URL may
be a comma-separated list, and each URL whose host is a DNS name is resolved on every
send to all its IPv4 (A) records, so a headless Service name reaches every replica and
a replica that comes or goes is picked up on the next round. A ClusterIP Service name
resolves to one address, so that case is unchanged. The report goes to every address
in parallel, each with the full budget; it counts as sent when at least one took it.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import msgspec
from tenacity import RetryCallState

from drivers.agent.metrics import AgentMetrics
from extender.wire.report import NodeReport, ReportResponse
from extender.wire.retry import retrying

log = logging.getLogger("headroom.agent.sender")

REPORTS_PATH = "/v1/reports"
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ReportResponse)
MAX_TARGETS = 16  # more replicas than this is a misconfiguration, not HA

Resolver = Callable[[str], list[str]]


def resolve_ipv4(host: str) -> list[str]:
    """Every A record of ``host``, in the resolver's order, without duplicates."""
    infos = socket.getaddrinfo(host, None, family=socket.AF_INET, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def split_urls(extender: str) -> list[str]:
    return [u.strip().rstrip("/") for u in extender.split(",") if u.strip()]


def expand(base_url: str, resolve: Resolver) -> list[tuple[str, str | None]]:
    """``(url, Host header)`` per address of ``base_url``'s host (http with a DNS name);
    the URL unchanged otherwise (https keeps the name, which its certificate is for)."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if parts.scheme != "http" or not host or _is_ip(host):
        return [(base_url, None)]
    try:
        addresses = resolve(host)[:MAX_TARGETS]
    except OSError:
        return [(base_url, None)]  # the attempt fails and is retried like any transport error
    if not addresses:
        return [(base_url, None)]
    netloc_host = parts.netloc.rsplit("@", 1)[-1]
    out: list[tuple[str, str | None]] = []
    for addr in addresses:
        netloc = addr + (f":{parts.port}" if parts.port else "")
        out.append((urlunsplit((parts.scheme, netloc, parts.path, parts.query, "")), netloc_host))
    return out


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class SendError(Exception):
    """One failed attempt; ``reason`` is a short metric label, ``retryable`` says
    whether trying again can help (5xx/429/transport yes, 4xx/bad reply no)."""

    def __init__(self, reason: str, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.reason = reason
        self.retryable = retryable


class ReportSender:
    """Deliver one report at a time to ``{extender}/v1/reports`` of every extender."""

    def __init__(
        self,
        extender_url: str,
        token_file: str | Path | None = None,
        *,
        metrics: AgentMetrics | None = None,
        timeout_s: float = 5.0,
        max_attempts: int = 5,
        backoff_initial_s: float = 0.2,
        backoff_max_s: float = 5.0,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
        resolve: Resolver = resolve_ipv4,
    ) -> None:
        self.bases = split_urls(extender_url)
        if not self.bases:
            raise ValueError("no extender URL given")
        self.url = self.bases[0] + REPORTS_PATH
        self.resolve = resolve
        self.token_file = Path(token_file) if token_file else None
        self.metrics = metrics or AgentMetrics()
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self._client = client or httpx.Client(
            headers={"Content-Type": "application/json", "User-Agent": "headroom-agent"},
            limits=httpx.Limits(max_connections=MAX_TARGETS, max_keepalive_connections=MAX_TARGETS),
        )
        self._sleep = sleep
        self._pool: ThreadPoolExecutor | None = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    def targets(self) -> list[tuple[str, str | None]]:
        """This round's ``(reports URL, Host header)`` list, one per extender address."""
        seen: dict[str, str | None] = {}
        for base in self.bases:
            for url, host in expand(base, self.resolve):
                seen.setdefault(url + REPORTS_PATH, host)
        return list(seen.items())[:MAX_TARGETS]

    def send(self, report: NodeReport, budget_s: float) -> ReportResponse | None:
        """Deliver ``report`` within ``budget_s`` seconds to every extender; None if no
        extender took it (it is dropped: the next sample supersedes it)."""
        body = _encoder.encode(report)
        targets = self.targets()
        if len(targets) == 1:
            return self._send_to(targets[0], report, body, budget_s)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(MAX_TARGETS, thread_name_prefix="report-send")
        futures = [
            self._pool.submit(self._send_to, t, report, body, budget_s, False) for t in targets
        ]
        replies = [f.result() for f in futures]
        delivered = [r for r in replies if r is not None]
        if not delivered:
            self.metrics.reports_dropped.inc()
            return None
        self.metrics.reports_sent.inc()
        return delivered[0]

    def _send_to(
        self,
        target: tuple[str, str | None],
        report: NodeReport,
        body: bytes,
        budget_s: float,
        count: bool = True,
    ) -> ReportResponse | None:
        url, host = target
        deadline = time.monotonic() + max(budget_s, 0.0)
        policy = retrying(
            lambda e: isinstance(e, SendError) and e.retryable,
            deadline_s=budget_s,
            attempts=self.max_attempts,
            base_s=self.backoff_initial_s,
            cap_s=self.backoff_max_s,
            sleep=self._sleep,
            before_sleep=self._log_retry,
        )
        try:
            response = policy(self._attempt, body, deadline, url, host)
        except SendError as e:
            if count:
                self.metrics.reports_dropped.inc()
            log.warning(
                "report dropped",
                extra={
                    "fields": {
                        "reason": e.reason,
                        "error": str(e),
                        "node": report.node,
                        "target": url,
                    }
                },
            )
            return None
        if count:
            self.metrics.reports_sent.inc()
        return response

    def _attempt(
        self, body: bytes, deadline: float, url: str | None = None, host: str | None = None
    ) -> ReportResponse:
        timeout = max(0.05, min(self.timeout_s, deadline - time.monotonic()))
        headers = self._auth_headers()
        if host:
            headers["Host"] = host
        started = time.perf_counter()
        try:
            resp = self._client.post(
                url or self.url, content=body, headers=headers, timeout=timeout
            )
        except httpx.TimeoutException as e:
            raise self._failed("timeout", f"timed out after {timeout:.2f}s", True) from e
        except httpx.TransportError as e:
            raise self._failed("transport", f"{type(e).__name__}: {e}", True) from e
        finally:
            self.metrics.send_seconds.observe(time.perf_counter() - started)
        return self._reply(resp)

    def _reply(self, resp: httpx.Response) -> ReportResponse:
        status = resp.status_code
        if status == 429 or status >= 500:
            raise self._failed(f"http_{status}", f"extender answered {status}", True)
        if status != 200:
            raise self._failed(
                f"http_{status}", f"extender refused: {status} {_snippet(resp)}", False
            )
        try:
            return _decoder.decode(resp.content)
        except msgspec.DecodeError as e:
            raise self._failed("bad_reply", f"undecodable reply: {e}", False) from e

    def _auth_headers(self) -> dict[str, str]:
        if self.token_file is None:
            return {}
        try:
            token = self.token_file.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise self._failed(
                "token", f"cannot read token file {self.token_file}: {e.strerror}", True
            ) from e
        if not token:
            raise self._failed("token", f"token file {self.token_file} is empty", True)
        return {"Authorization": f"Bearer {token}"}

    def _failed(self, reason: str, message: str, retryable: bool) -> SendError:
        self.metrics.send_failures.labels(reason=reason).inc()
        return SendError(reason, message, retryable=retryable)

    @staticmethod
    def _log_retry(state: RetryCallState) -> None:
        err = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.info(
            "report send failed, retrying",
            extra={
                "fields": {
                    "attempt": state.attempt_number,
                    "retry_in_s": round(wait, 3),
                    "reason": getattr(err, "reason", type(err).__name__),
                }
            },
        )


def _snippet(resp: httpx.Response) -> str:
    return resp.text[:200].replace("\n", " ")
