"""The writers' routes: node agents' reports, and releasing a pod (standalone mode).

Writes need an identity (``extender.http.auth.Authenticator``): the shared token, or an
agent's TokenReview-checked ServiceAccount token, which may only report for the node
its pod runs on. Errors have one mapping here: an ``HTTPException``, answered as
``{"detail": ...}`` with its status.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import msgspec
from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from starlette.background import BackgroundTask

from extender.core.runtime import collect_due
from extender.http.auth import Authenticator
from extender.http.bodies import JSON, Schemas, read_body
from extender.http.bounds import MAX_UID, safe_decode
from extender.http.tokenreview import Identity, Refused, ReviewUnavailable
from extender.scheduling.service import SchedulingService
from extender.state.host import allocatable_of
from extender.state.inventory import ReportRefused
from extender.wire.protocol import encoder
from extender.wire.report import (
    MAX_REPORT_BYTES,
    NodeReport,
    ReportResponse,
    report_decoder,
    validate_report,
)

log = logging.getLogger("headroom.server")


def agents_router(
    service: SchedulingService,
    writers: Authenticator,
    refresh: Callable[[], Awaitable[None]],
    schemas: Schemas,
    learn: Callable[[str], None],
) -> APIRouter:
    """The writers' routes; ``learn`` hears of each node an accepted report names (the
    codec reads its name ahead of the scheduler's lists)."""
    router = APIRouter()

    async def writer(request: Request) -> Identity:
        """The caller's identity, or an HTTPException (401/403/503) saying why not."""
        header = request.headers.get("authorization")
        try:
            found = writers.quick(header)
            if found is None:  # an unknown token: ask the API server, off the event loop
                found = await run_in_threadpool(writers.identify, header)
        except Refused as e:
            log.info(
                "write refused", extra={"path": request.url.path, "status": e.status, "why": str(e)}
            )
            raise HTTPException(e.status, str(e)) from None
        except ReviewUnavailable as e:
            raise HTTPException(503, str(e)) from None
        return found

    @router.post(
        "/v1/reports",
        summary="node agent report (schema headroom.dev/report/v1)",
        openapi_extra=schemas.body(NodeReport),
        responses={
            **schemas.reply(ReportResponse),
            401: {"description": "no or wrong credential"},
            403: {"description": "the credential may not report for this node"},
            409: {"description": "the report names a GPU that another node reports"},
        },
    )
    async def reports(request: Request, who: Identity = Depends(writer)) -> Response:  # noqa: B008
        report = _report(await read_body(request, MAX_REPORT_BYTES))
        if who.node is not None and who.node != report.node:
            log.warning(
                "report for another node refused",
                extra={"identity": who.name, "bound_node": who.node, "claimed": report.node},
            )
            raise HTTPException(
                403,
                f"forbidden: this agent's token is bound to node {who.node!r}; it may not "
                f"report for node {report.node!r}",
            )
        try:
            response = service.report(report)
        except ReportRefused as e:  # another node's GPU: refused, nothing applied
            log.warning("report refused", extra={"node": report.node, "reason": str(e)})
            raise HTTPException(409, f"conflict: {e}") from None
        learn(report.node)
        collect_due()  # reports leave most of what stays alive: collected here
        # once the agent has its answer: the plans of the shapes scheduled lately
        return Response(
            encoder.encode(response), media_type=JSON, background=BackgroundTask(refresh)
        )

    @router.post(
        "/v1/pods/{uid}/release",
        summary="end a pod's allocations (standalone mode)",
        responses={
            401: {"description": "no or wrong credential"},
            403: {"description": "agents may not release pods"},
        },
    )
    def release(uid: str, reason: str = "completed", who: Identity = Depends(writer)) -> Response:  # noqa: B008
        if not who.admin:
            raise HTTPException(
                403,
                "forbidden: an agent token may only post reports; "
                "releasing a pod needs the shared token",
            )
        if len(uid) > MAX_UID:
            raise HTTPException(400, f"uid: at most {MAX_UID} characters")
        ended = service.release(uid, reason[:200])
        return JSONResponse({"pod_uid": uid, "ended": ended})

    return router


def _report(body: bytes) -> NodeReport:
    """The report, or a 422 saying what is wrong with it."""
    try:
        report: NodeReport = safe_decode(report_decoder, body)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise HTTPException(422, f"invalid report: {e}") from None
    problem = validate_report(report)
    try:
        allocatable_of(report.allocatable, "allocatable")  # quantities: read state-side
    except ValueError as e:
        problem = problem or str(e)
    if problem:
        raise HTTPException(422, f"invalid report: {problem}")
    return report
