"""Agent identity from its projected ServiceAccount token, checked with a TokenReview.

The agent holds one credential: a kubelet-rotated token for audience ``headroom``,
bound to its Pod (and so to its Node). The API server is the only party that can say
whether such a token is valid, for which ServiceAccount, and on which node the pod
runs (``authentication.kubernetes.io/node-name`` in ``user.extra``, set for pod-bound
tokens since Kubernetes 1.30). That node is what stops one compromised agent from
reporting free memory for every other node.

Successful reviews are cached for ``ttl_s`` (bounded, least recently used out first),
keyed by a SHA-256 of the token, so 5,000 agents reporting every few seconds cost one
TokenReview per agent per minute, and the raw token is never kept as a key. Failures
are not cached: a just-created pod's token may become valid a moment later.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from extender.kube.client import is_transient
from extender.wire.retry import call_with_retry

log = logging.getLogger("headroom.tokenreview")
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
REVIEW_DEADLINE_S = 2.0


@dataclass(frozen=True, slots=True)
class Identity:
    """Who wrote a request. ``node`` None: not bound to a node (the shared admin token)."""

    name: str
    node: str | None
    admin: bool = False


class Refused(Exception):
    """The credential is not accepted; ``status`` is 401 (who are you) or 403 (not you)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ReviewUnavailable(Exception):
    """The API server could not be asked; the agent retries (HTTP 503)."""


class TokenReviewer:
    def __init__(
        self,
        review: Callable[[str, str], Any],
        audience: str,
        service_account: str,
        ttl_s: float = 60.0,
        max_entries: int = 20_000,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        namespace, _, name = service_account.partition(":")
        if not namespace or not name:
            raise ValueError(
                f"agent service account must be namespace:name, got {service_account!r}"
            )
        self._review = review
        self.audience = audience
        self.username = f"system:serviceaccount:{namespace}:{name}"
        self.ttl_s, self.max_entries = ttl_s, max_entries
        self._now = now
        self._cache: OrderedDict[bytes, tuple[float, Identity]] = OrderedDict()
        self._lock = threading.Lock()
        self.reviews = 0  # TokenReviews sent (tests and metrics)

    @classmethod
    def for_api(
        cls, api: client.ApiClient, audience: str, service_account: str, **kw: Any
    ) -> TokenReviewer:
        auth = client.AuthenticationV1Api(api)

        def review(token: str, aud: str) -> Any:
            body = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=[aud]))
            return call_with_retry(
                lambda: auth.create_token_review(body), is_transient, deadline_s=REVIEW_DEADLINE_S
            )

        return cls(review, audience, service_account, **kw)

    def cached(self, token: str) -> Identity | None:
        key = hashlib.sha256(token.encode()).digest()
        with self._lock:
            hit = self._cache.get(key)
            if hit is None:
                return None
            if hit[0] < self._now():
                del self._cache[key]
                return None
            self._cache.move_to_end(key)
            return hit[1]

    def identify(self, token: str) -> Identity:
        """The agent behind ``token``; raises Refused or ReviewUnavailable. Blocking."""
        hit = self.cached(token)
        if hit is not None:
            return hit
        try:
            self.reviews += 1
            status = self._review(token, self.audience).status
        except Exception as e:
            # never str(e): an API error can carry the request, and the request the token.
            # The status says enough (403: the extender lacks RBAC for tokenreviews).
            log.warning(
                "TokenReview failed",
                extra={"error_type": type(e).__name__, "status": getattr(e, "status", None)},
            )
            raise ReviewUnavailable(f"TokenReview failed ({type(e).__name__}); try again") from None
        identity = self._check(status)
        key = hashlib.sha256(token.encode()).digest()
        with self._lock:
            self._cache[key] = (self._now() + self.ttl_s, identity)
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return identity

    def _check(self, status: Any) -> Identity:
        if status is None or not status.authenticated:
            return _refuse(
                401, f"token not accepted by the API server for audience {self.audience!r}"
            )
        if status.audiences is not None and self.audience not in status.audiences:
            return _refuse(401, f"token is not for audience {self.audience!r}")
        user = status.user
        username = getattr(user, "username", "") or ""
        if username != self.username:
            return _refuse(
                403,
                f"{username or 'this identity'} is not the headroom agent "
                f"({self.username}); only the agent may write reports",
            )
        extra = getattr(user, "extra", None) or {}
        nodes = extra.get(NODE_NAME_EXTRA) or []
        if len(nodes) != 1 or not nodes[0]:
            return _refuse(
                403,
                "token is not bound to a pod on a node (no "
                f"{NODE_NAME_EXTRA}); use the projected token of the agent pod",
            )
        return Identity(username, nodes[0])


def _refuse(status: int, message: str) -> Identity:
    raise Refused(status, message)
