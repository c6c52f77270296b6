"""A ``/filter`` walks the rooms top to bottom: edge, codec, scheduling, state, scoring.

docs/architecture.md describes one request's path one room at a time. That is only
true while no room calls back up into a room above it (a callback from the state into
the service, the codec reaching into the scheduler): this test records every call from
one room into another while a real app answers a filter for a new pod shape, and
fails on any call that goes up. Plain data and utilities below the rooms (core, wire,
pricing, ledger, dra) may be called from anywhere.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import msgspec
import pytest

from tests.support import TOKEN, Extender, gpu_pod, running_extender

ORDER = ("http", "codec", "scheduling", "state", "scoring")


def room_of(frame: FrameType | None) -> str | None:
    """The room of the nearest frame of extender code on the stack (library frames such
    as Starlette's or NumPy's between two of ours are skipped)."""
    while frame is not None:
        parts = str(frame.f_globals.get("__name__", "")).split(".")
        if parts[0] == "extender" and len(parts) > 1:
            return parts[1]
        frame = frame.f_back
    return None


class RoomTrace:
    """Calls from one room into another, in the order they happened."""

    def __init__(self) -> None:
        self.edges: list[tuple[str, str]] = []
        self.visits: list[str] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = room_of(frame)
        if callee is None or str(frame.f_globals.get("__name__", "")).split(".")[0] != "extender":
            return
        caller = room_of(frame.f_back)
        if callee not in self.visits:
            self.visits.append(callee)
        if caller is not None and caller != callee:
            self.edges.append((caller, callee))


@pytest.fixture
def ext(tmp_path: Path) -> Iterator[Extender]:
    with running_extender(tmp_path) as e:
        for i in range(8):
            e.add_node(f"n{i}", "4xA10G:24Gi", capacity_type="spot" if i % 2 else "on-demand")
        yield e


async def _filter(app: Any, body: bytes) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://in-process") as client:
        return await client.post(
            "/filter",
            content=body,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
        )


def test_a_filter_for_a_new_shape_never_calls_up_a_room(ext: Extender) -> None:
    names = [f"n{i}" for i in range(8)]
    body = msgspec.json.encode(ext.schedule_args(gpu_pod("trace", memory="7Gi"), names))
    trace = RoomTrace()
    sys.setprofile(trace)
    try:
        reply = asyncio.run(_filter(ext.built.app, body))
    finally:
        sys.setprofile(None)
    assert reply.status_code == 200 and reply.json()["NodeNames"], reply.text

    rank = {room: i for i, room in enumerate(ORDER)}
    upward = sorted(
        {(a, b) for a, b in trace.edges if a in rank and b in rank and rank[b] < rank[a]}
    )
    assert not upward, f"calls up a room during /filter: {upward}"
    visited = [room for room in trace.visits if room in rank]
    assert visited == list(ORDER), f"rooms visited, in first-visit order: {visited}"
