"""Schemathesis over /openapi.json: generated requests, valid and invalid, never get a 5xx.

Every operation runs a bounded, deterministic Hypothesis search (`max_examples` valid and as many invalid
requests) against the ASGI app in process; responses are also checked against the documented schemas and
content types.
"""

from __future__ import annotations

from collections.abc import Iterator

import hypothesis
import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed (the dev extra)")
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
)
from schemathesis.generation import GenerationMode  # noqa: E402

from test_web_support import build_archive, make_app  # noqa: E402

MAX_EXAMPLES = 25
OPERATIONS = [
    ("GET", "/api/search"),
    ("GET", "/api/ask"),
    ("POST", "/api/ask"),
    ("GET", "/api/notebooks/{nb_id}"),
    ("GET", "/api/notebooks/{nb_id}/cells/{index}"),
    ("GET", "/api/status"),
]


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    settings, _shas = build_archive(tmp_path_factory.mktemp("schema"))
    app = make_app(settings)
    yield schemathesis.openapi.from_asgi("/openapi.json", app)


def test_schema_lists_every_api_operation(schema) -> None:  # type: ignore[no-untyped-def]
    found = {(op.ok().method.upper(), op.ok().path) for op in schema.get_all_operations()}
    assert found == set(OPERATIONS)


CASES = [
    pytest.param(method, path, mode, id=f"{method} {path} {mode.value}")
    for method, path in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if not (path == "/api/status" and mode is GenerationMode.NEGATIVE)  # no input to make invalid
]


@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_generated_requests_get_no_server_error(schema, method: str, path: str, mode: GenerationMode) -> None:  # type: ignore[no-untyped-def]
    operation = schema[path][method]
    statuses: list[int] = []

    @hypothesis.settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
    )
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
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
    print(method, path, mode.value, len(statuses), sorted(set(statuses)))
    assert statuses, "no request was generated"
    if mode is GenerationMode.NEGATIVE and path in ("/api/search", "/api/ask"):
        assert any(400 <= s < 500 for s in statuses)  # invalid input was generated and rejected
