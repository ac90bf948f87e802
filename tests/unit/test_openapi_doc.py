"""The OpenAPI document says what the API does: how to authenticate, which error statuses each
operation answers (in the one error shape), and 405s name every method a path allows."""

from __future__ import annotations

from typing import Any

import pytest
from engram.bootstrap import build_container
from engram.entrypoints.http.app import create_app
from engram.settings import Settings
from starlette.testclient import TestClient

KEY = "ek_openapi_doc_key_0001"


@pytest.fixture(scope="module")
def app() -> Any:
    settings = Settings(
        store="memory", search="memory", embedder="none", api_key=KEY, scheduler_enabled=False, admin_password="p" * 16
    )
    return create_app(build_container(settings))


@pytest.fixture(scope="module")
def spec(app: Any) -> dict[str, Any]:
    return dict(app.openapi())


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(m.upper(), path, op) for path, item in spec["paths"].items() for m, op in item.items()]


def test_both_key_schemes_are_declared_and_every_private_operation_takes_them(spec: dict[str, Any]) -> None:
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearer"] == {"type": "http", "scheme": "bearer", "description": "An Engram API key."}
    assert schemes["apiKey"]["in"] == "header" and schemes["apiKey"]["name"] == "x-api-key"
    for method, path, op in _operations(spec):
        if path in ("/", "/health"):
            assert "security" not in op  # public
            continue
        assert op["security"] == [{"bearer": []}, {"apiKey": []}], f"{method} {path}"
        assert {"401", "403"} <= set(op["responses"]), f"{method} {path}"


def test_error_statuses_follow_one_rule_and_one_shape(spec: dict[str, Any]) -> None:
    assert "HTTPValidationError" not in spec["components"]["schemas"]  # FastAPI's `detail` shape is not ours
    for method, path, op in _operations(spec):
        responses = op["responses"]
        params = op.get("parameters", [])
        if "requestBody" in op:
            assert {"400", "413", "422"} <= set(responses), f"{method} {path}"
        if any(p["in"] == "path" for p in params):
            assert "404" in responses, f"{method} {path}"
        for status, response in responses.items():
            if status[0] in "45" and status not in ("4XX", "5XX"):
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/Error"}, f"{method} {path} {status}"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/memories"),
        ("PATCH", "/v1/memories/{memory_id}"),
        ("POST", "/v1/memories/{memory_id}/supersede"),
        ("POST", "/v1/candidates/{candidate_id}/{decision}"),
        ("POST", "/v1/jobs/dream"),
        ("POST", "/v1/admin/reindex"),
    ],
)
def test_conflicts_are_declared_where_they_happen(spec: dict[str, Any], method: str, path: str) -> None:
    assert "409" in spec["paths"][path][method.lower()]["responses"]


def test_chat_doors_document_their_bodies_and_both_answer_types(spec: dict[str, Any]) -> None:
    for path in ("/v1/chat/completions", "/v1/messages", "/v1/guide-dog/chat/completions"):
        op = spec["paths"][path]["post"]
        body = op["requestBody"]["content"]["application/json"]["schema"]
        assert body["required"] == ["messages"] and "messages" in body["properties"]
        assert set(op["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
        assert {"400", "502", "503", "504"} <= set(op["responses"])


@pytest.mark.parametrize(
    ("method", "url", "allowed"),
    [
        ("PUT", "/v1/memories/mem_x", {"GET", "PATCH", "DELETE"}),
        ("OPTIONS", "/v1/glossary/g1", {"GET", "PATCH", "DELETE"}),
        ("DELETE", "/v1/digest", {"GET", "PUT"}),
        ("PUT", "/v1/admin/reindex", {"GET", "POST"}),
        ("POST", "/health", {"GET"}),
    ],
)
def test_405_names_every_method_the_path_allows(app: Any, method: str, url: str, allowed: set[str]) -> None:
    # Given a path served by several routes; When it is called with a method none of them has
    resp = TestClient(app).request(method, url, headers={"authorization": f"Bearer {KEY}"})
    # Then 405 in the error shape, and Allow lists the methods of all of them
    assert resp.status_code == 405 and resp.json()["error"]["code"] == "method_not_allowed"
    assert {m.strip() for m in resp.headers["allow"].split(",")} == allowed


def test_docs_behind_a_stage_prefix_load_the_document_under_that_prefix() -> None:
    # Given the app behind API Gateway's /prod stage, which the Web Adapter strips from the path it passes
    settings = Settings(
        store="memory", search="memory", embedder="none", api_key=KEY, scheduler_enabled=False, root_path="/prod"
    )
    with TestClient(create_app(build_container(settings))) as client:
        # When a browser opens /prod/docs (the app sees /docs) / Then the page loads /prod/openapi.json
        for page in ("/docs", "/redoc"):
            html = client.get(page).text
            assert "/prod/openapi.json" in html, page
        # And the document is served where the app sees it, naming the stage as its server
        doc = client.get("/openapi.json").json()
        assert doc["servers"] == [{"url": "/prod"}]
        # And the API itself still answers at the paths the adapter passes on
        assert client.get("/health").status_code == 200


def test_every_operation_that_takes_a_key_declares_its_rate_limit(spec: dict[str, Any]) -> None:
    # Every request with a key counts against the key's per-minute limit (auth.authenticate), so each
    # such operation may answer 429 in the Error shape, saying when to retry
    for method, path, op in _operations(spec):
        if "security" not in op:
            continue
        limited = op["responses"].get("429")
        assert limited is not None, f"{method} {path}"
        assert limited["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
        assert "Retry-After" in limited["headers"], f"{method} {path}"


def test_an_idempotent_replay_of_a_memory_write_is_documented_as_200(spec: dict[str, Any]) -> None:
    responses = spec["paths"]["/v1/memories"]["post"]["responses"]
    assert {"200", "201", "409", "429"} <= set(responses)
    assert "external_id" in responses["200"]["description"]


def test_a_replayed_memory_write_answers_200_as_documented(app: Any) -> None:
    client = TestClient(app)
    auth = {"authorization": f"Bearer {KEY}"}
    body = {"content": "Alice keeps bees", "external_id": "openapi-doc-replay-1"}
    first = client.post("/v1/memories", json=body, headers=auth)
    again = client.post("/v1/memories", json=body, headers=auth)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["action"] == "existing" and again.json()["memory"]["id"] == first.json()["memory"]["id"]


def test_skill_names_agent_ids_and_fact_keys_state_the_pattern_their_rule_checks(spec: dict[str, Any]) -> None:
    from engram.domain.policies import OPTIONAL_FACT_KEY_PATTERN
    from engram.domain.skills import AGENT_ID_PATTERN, OPTIONAL_AGENT_ID_PATTERN, SKILL_NAME_PATTERN

    # Given every place a skill name, an agent id or a fact key enters the API
    stated: dict[str, set[str]] = {}
    for _method, path, op in _operations(spec):
        for param in op.get("parameters", []):
            if param["name"] in ("name", "agent", "fact_key", "x-engram-agent"):
                stated.setdefault(f"{path} {param['name']}", set()).add(param["schema"].get("pattern", "-"))
    schemas = spec["components"]["schemas"]
    for model, field in [
        ("SkillImportRequest", "name"),
        ("AllocateRequest", "agent_id"),
        ("MemoryCreateRequest", "fact_key"),
        ("SupersedeRequest", "fact_key"),
        ("MemoryPatchRequest", "fact_key"),
        ("MergeRequest", "fact_key"),
    ]:
        prop = schemas[model]["properties"][field]
        branches = [prop, *prop.get("anyOf", [])]
        stated[f"{model}.{field}"] = {b["pattern"] for b in branches if "pattern" in b} or {"-"}
    # Then each states the pattern the domain's rule accepts exactly (checked there: tests/unit/test_policies.py)
    expected = {
        "name": SKILL_NAME_PATTERN,
        "agent": AGENT_ID_PATTERN,
        "agent_id": AGENT_ID_PATTERN,
        "x-engram-agent": OPTIONAL_AGENT_ID_PATTERN,  # the header: empty is as if not sent
    }
    for where, patterns in stated.items():
        last = where.split(" ")[-1].split(".")[-1]
        want = expected.get(last, OPTIONAL_FACT_KEY_PATTERN)
        assert patterns == {want}, where
    assert "/v1/skills/{name} name" in stated and "/agents/{agent}/v1/models agent" in stated
    # And the chat doors declare the `x-engram-agent` header they check
    doors = ("/v1/chat/completions", "/v1/messages", "/v1/responses", "/agents/{agent}/v1/messages")
    assert all(f"{door} x-engram-agent" in stated for door in doors)
    assert "/v1/memories fact_key" in stated
