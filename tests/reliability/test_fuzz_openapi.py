"""Property-based fuzzing of every endpoint from the app's own OpenAPI (schemathesis,
in process over ASGI): the scheduler verbs and reports are documented with their wire
types' JSON Schema, so their bodies are generated too, valid and invalid. No 5xx, and a
refused (4xx) request leaves reports, reservations and the ledger as they were."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error

from extender.wiring import Built

from .fuzzutil import AUTH, fuzz_extender, state


@pytest.fixture(scope="module")
def fuzz_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Built, TestClient]]:
    built, client = fuzz_extender(tmp_path_factory.mktemp("openapi-fuzz"))
    yield built, client
    built.service.ledger.close()


@pytest.fixture(scope="module")
def api_schema(fuzz_app: tuple[Built, TestClient]) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", fuzz_app[0].app)


def operations(api_schema: Any) -> list[Any]:
    """Every operation, /metrics included (its ledger gauges follow the newest app)."""
    return [result.ok() for result in api_schema.get_all_operations()]


def test_every_route_is_in_the_schema(api_schema: Any) -> None:
    paths = set(api_schema.raw_schema["paths"])
    for route in (
        "/filter",
        "/prioritize",
        "/bind",
        "/preempt",
        "/v1/reports",
        "/v1/pods/{uid}/release",
        "/admit/pods",
        "/v1/allocations",
    ):
        assert route in paths
    for route in ("/filter", "/bind", "/v1/reports"):  # raw-body routes document the body
        body = api_schema.raw_schema["paths"][route]["post"]["requestBody"]
        assert body["content"]["application/json"]["schema"]
    assert len(operations(api_schema)) >= 14


# schemathesis' pytest plugin (from_fixture/parametrize) does not run under pytest 9, so
# each operation gets a hypothesis run here through schemathesis' Python API instead.
@pytest.mark.parametrize("mode", list(schemathesis.GenerationMode))
def test_openapi_fuzz(
    api_schema: Any, fuzz_app: tuple[Built, TestClient], mode: schemathesis.GenerationMode
) -> None:
    built, _ = fuzz_app
    cases = 0

    for op in operations(api_schema):

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(
            max_examples=80, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        def run(case: Any) -> None:
            nonlocal cases
            cases += 1
            before = state(built)
            response = case.call(headers=dict(AUTH))
            case.validate_response(response, checks=[not_a_server_error])
            if 400 <= response.status_code < 500:
                assert state(built) == before, (case.method, case.path, response.status_code)

        try:
            run()
        except Unsatisfiable:
            # nothing to make invalid (e.g. GET /healthz has no parameters or body)
            assert mode == schemathesis.GenerationMode.NEGATIVE
    assert cases >= 500  # thousands over both modes; a schema that lost its routes fails
