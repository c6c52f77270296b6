"""Request bodies read within a limit, and the OpenAPI entries of routes that decode
their raw body themselves (msgspec wire types, documented by their JSON Schema)."""

from __future__ import annotations

from typing import Any

import msgspec
from fastapi import Request

JSON = "application/json"


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds {limit} bytes")


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than ``limit`` bytes without reading them all first."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


class Schemas:
    """The wire types the raw-body routes reference, gathered for the OpenAPI."""

    def __init__(self) -> None:
        self.components: dict[str, Any] = {}

    def _schema(self, t: Any) -> dict[str, Any]:
        (schema,), defs = msgspec.json.schema_components(
            [t], ref_template="#/components/schemas/{name}"
        )
        self.components.update(defs)
        return schema

    def body(self, t: Any) -> dict[str, Any]:
        """``openapi_extra`` documenting a raw-body route's JSON body."""
        return {"requestBody": {"required": True, "content": {JSON: {"schema": self._schema(t)}}}}

    def reply(self, t: Any) -> dict[int | str, dict[str, Any]]:
        return {200: {"content": {JSON: {"schema": self._schema(t)}}}}
