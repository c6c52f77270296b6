"""Bounds on a decoded scheduler request, checked before the service sees it, so a
refused request changes nothing (moved out of extender/http/app.py to keep it small)."""

from __future__ import annotations

from typing import Any, Protocol

from extender.wire.protocol import ExtenderArgs, ExtenderBindingArgs, ExtenderPreemptionArgs

MAX_NAME = 253  # a Kubernetes object name (DNS subdomain) is at most 253 characters
MAX_UID = 128


class Invalid(Exception):
    """A decoded request that breaks a bound; answered with ``status`` and the message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Decoder(Protocol):
    """A msgspec decoder, or one that wraps it (``ArgsDecoder``)."""

    def decode(self, body: bytes, /) -> Any: ...


def safe_decode(decoder: Decoder, body: bytes) -> Any:
    """``decoder.decode`` that answers 400 for nesting deep enough to exhaust the stack
    (msgspec raises RecursionError while skipping deeply nested unknown fields)."""
    try:
        return decoder.decode(body)
    except RecursionError:
        raise Invalid(400, "malformed request: JSON nested too deeply") from None


def check_args(args: ExtenderArgs, max_nodes: int) -> None:
    """Bounds on a filter/prioritize body before the service sees it."""
    if args.Nodes is not None and args.NodeNames is not None:
        # kube-scheduler sends one (NodeNames when nodeCacheCapable): with both, which
        # list a filter reply would echo is a guess, and a reply echoing the wrong one
        # indexed an empty Nodes list (found by tests/reliability/test_fuzz_bodies.py)
        raise Invalid(
            400,
            "request has both Nodes and NodeNames; send one (NodeNames "
            "when the extender is nodeCacheCapable, else Nodes)",
        )
    names = args.NodeNames or []  # each 1..253 characters: checked by the decoder
    count = len(names) + (len(args.Nodes.items) if args.Nodes is not None else 0)
    if count > max_nodes:
        raise Invalid(413, f"{count} nodes in one request is more than the limit of {max_nodes}")
    if args.Pod is not None:
        meta = args.Pod.metadata
        if len(meta.name) > MAX_NAME or len(meta.namespace) > MAX_NAME or len(meta.uid) > MAX_UID:
            raise Invalid(
                400,
                f"Pod.metadata: name/namespace at most {MAX_NAME} characters, "
                f"uid at most {MAX_UID}",
            )


def check_binding(args: ExtenderBindingArgs) -> None:
    fields = ("PodName", "PodNamespace", "PodUID", "Node")
    missing = [f for f in fields if not getattr(args, f)]
    if missing:
        raise Invalid(400, f"malformed bind request: missing {', '.join(missing)}")
    if (
        max(len(args.PodName), len(args.PodNamespace), len(args.Node)) > MAX_NAME
        or len(args.PodUID) > MAX_UID
    ):
        raise Invalid(
            400,
            f"malformed bind request: names at most {MAX_NAME} characters, "
            f"PodUID at most {MAX_UID}",
        )


def check_preemption(args: ExtenderPreemptionArgs, max_nodes: int) -> None:
    count = len(args.NodeNameToVictims or {}) + len(args.NodeNameToMetaVictims or {})
    if count > max_nodes:
        raise Invalid(413, f"{count} candidate nodes is more than the limit of {max_nodes}")
