"""Schemathesis over /openapi.json: generated requests, valid and invalid, never get a 5xx.

Every operation runs a bounded, deterministic Hypothesis search (`max_examples` valid and as many invalid
requests) against the ASGI app in process; responses are also checked against the documented schemas and
content types.
"""

from __future__ import annotations

from collections.abc import Iterator

import hypothesis
import pytest

from conftest import import_or_missing

schemathesis = import_or_missing("schemathesis", "schemathesis is not installed (the dev extra)")
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
)
from schemathesis.generation import GenerationMode  # noqa: E402

from test_web_support import BALLAST_REL, build_archive, make_app  # noqa: E402

MAX_EXAMPLES = 25
OPERATIONS = [
    ("GET", "/api/search"),
    ("GET", "/api/ask"),
    ("POST", "/api/ask"),
    ("GET", "/api/notebooks/{nb_id}"),
    ("GET", "/api/notebooks/{nb_id}/cells/{index}"),
    ("GET", "/api/status"),
    ("GET", "/api/progress"),
]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, dict[str, str]]]:
    settings, shas = build_archive(tmp_path_factory.mktemp("schema"))
    app = make_app(settings, allowed_hosts=["127.0.0.1", "testserver"])  # schemathesis sends Host: testserver
    yield app, shas
    app.state.web.close()  # its render processes


@pytest.fixture(scope="module")
def schema(indexed) -> Iterator[object]:  # type: ignore[no-untyped-def]
    yield schemathesis.openapi.from_asgi("/openapi.json", indexed[0])


def test_schema_lists_every_api_operation(schema) -> None:  # type: ignore[no-untyped-def]
    found = {(op.ok().method.upper(), op.ok().path) for op in schema.get_all_operations()}
    assert found == set(OPERATIONS)


CASES = [
    pytest.param(method, path, mode, False, id=f"{method} {path} {mode.value}")
    for method, path in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if not (path in ("/api/status", "/api/progress") and mode is GenerationMode.NEGATIVE)  # no input to make invalid
] + [
    # random ids are (almost) never in the index: also fuzz the rest of the request with a real notebook's id
    pytest.param("GET", path, GenerationMode.POSITIVE, True, id=f"GET {path} known notebook")
    for path in ("/api/notebooks/{nb_id}", "/api/notebooks/{nb_id}/cells/{index}")
]


@pytest.mark.parametrize(("method", "path", "mode", "known"), CASES)
def test_generated_requests_get_no_server_error(  # type: ignore[no-untyped-def]
    schema, indexed, method: str, path: str, mode: GenerationMode, known: bool
) -> None:
    operation = schema[path][method]
    fixed = {"nb_id": indexed[1][BALLAST_REL]} if known else None
    statuses: list[int] = []

    @hypothesis.settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
    )
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode, path_parameters=fixed))
    def run(case) -> None:  # type: ignore[no-untyped-def]
        response = case.call()
        statuses.append(response.status_code)
        assert response.status_code < 500, (case.path, case.query, case.path_parameters, response.text[:500])
        assert response.headers.get("content-security-policy"), "every response carries the CSP"
        checks = [not_a_server_error]
        if mode is GenerationMode.POSITIVE:
            checks += [response_schema_conformance, content_type_conformance]
        case.validate_response(response, checks=checks)

    run()
    assert statuses, "no request was generated"
    if known:
        assert 200 in statuses
    if mode is GenerationMode.NEGATIVE and path in ("/api/search", "/api/ask"):
        assert any(400 <= s < 500 for s in statuses)  # invalid input was generated and rejected
