"""``GET /v1/nodes``: the cluster as the extender sees it, for ``headroom top``.

Read-only, behind the audit API's token like the rest of ``/v1``. Sizes are MiB, the
price a decimal string per GPU-hour, or null when the node has no price (never "0").
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from extender.scheduling.service import SchedulingService
from extender.state.snapshot import NodeRow


class GpuOut(BaseModel):
    uuid: str
    index: int
    model: str
    mig_profile: str
    total_mib: int
    used_mib: int
    granted_mib: int
    committed_mib: int
    headroom_mib: int


class NodeOut(BaseModel):
    name: str
    instance_type: str
    capacity_type: str
    price_per_gpu_hour: str | None
    report_age_s: float
    headroom_mib: int
    gpus: list[GpuOut]


class NodesOut(BaseModel):
    items: list[NodeOut]


def node_out(n: NodeRow) -> NodeOut:
    return NodeOut(
        name=n.name,
        instance_type=n.instance_type,
        capacity_type=n.capacity_type,
        price_per_gpu_hour=None if n.price_per_gpu_hour is None else str(n.price_per_gpu_hour),
        report_age_s=round(n.report_age_s, 3),
        headroom_mib=n.headroom_mib,
        gpus=[
            GpuOut(
                uuid=g.uuid,
                index=g.index,
                model=g.model,
                mig_profile=g.mig_profile,
                total_mib=g.total_mib,
                used_mib=g.used_mib,
                granted_mib=g.granted_mib,
                committed_mib=g.committed_mib,
                headroom_mib=g.headroom_mib,
            )
            for g in n.gpus
        ],
    )


def nodes_router(service: SchedulingService) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["audit"])

    @router.get("/nodes", response_model=NodesOut)
    def nodes() -> NodesOut:
        """Every reported node: per GPU measured, granted, committed and headroom MiB."""
        return NodesOut(items=[node_out(n) for n in service.nodes()])

    return router
