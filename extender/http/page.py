"""``GET /ui``: a page to look at the bill, served by the extender itself.

Three hand-written files (``static/``: HTML, JS, CSS), no build step, no CDN, shipped
as package data. The page holds no data: its script reads the audit API (``/v1/...``)
with the audit token, so it sees exactly what the token's holder may read. The token
comes from the address's fragment (``/ui#token=...``, never sent to a server or kept in
logs) or is pasted into the page, and is kept for the tab only (sessionStorage). A
strict Content-Security-Policy allows nothing but this origin's own files.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, HTTPException
from fastapi.responses import Response

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
    " connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _asset(name: str) -> bytes:
    return resources.files("extender.http").joinpath("static", name).read_bytes()


def page_router() -> APIRouter:
    router = APIRouter(include_in_schema=False)
    assets = {name: _asset(name) for name in FILES}  # read once, at start

    @router.get("/ui")
    def index() -> Response:
        return Response(assets["index.html"], media_type=FILES["index.html"], headers=HEADERS)

    @router.get("/ui/{name}")
    def asset(name: str) -> Response:
        if name not in FILES or name == "index.html":
            raise HTTPException(404, f"no such file: /ui/{name}")
        return Response(assets[name], media_type=FILES[name], headers=HEADERS)

    return router
