"""The namespace/scope matrix, over every route of the app and every MCP tool.

One row per route (method, path) and per tool says which scope it needs. The rows are checked against
the app's own route list and the server's tool list, so a route or tool added without a row fails here.
Then, with one key per scope (and one with none):
- a key without the row's scope gets 403 `missing_scope` (a tool error naming the scope, on MCP);
  a key with it never gets 401/403;
- a key of another namespace (full scopes) never reaches this namespace's rows: every path id of
  theirs is a 404, every listing and tool answer is free of their ids and texts, and writes to their
  ids change nothing.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engram.bootstrap import build_container
from engram.domain.models import Candidate, MemoryFilter
from engram.entrypoints.http.app import create_app
from engram.services.library.memories import MemoryWrite
from engram.services.library.messages import MessageIn
from engram.services.library.notes import GlossaryIn
from engram.settings import Settings
from starlette.testclient import TestClient

from tests.servers import app_routes

PUBLIC = "public"
SCOPES = ("memory:read", "memory:write", "export:read", "chat:proxy", "cache:read", "cache:write", "admin")
R, W, X, C, A = "memory:read", "memory:write", "export:read", "chat:proxy", "admin"

ROUTES: dict[tuple[str, str], str] = {
    # public on purpose: health, API docs, the admin panel's page, assets and its own password login
    ("GET", "/"): PUBLIC,
    ("GET", "/health"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
    ("GET", "/docs"): PUBLIC,
    ("GET", "/docs/oauth2-redirect"): PUBLIC,
    ("GET", "/redoc"): PUBLIC,
    ("GET", "/admin"): PUBLIC,
    ("GET", "/admin/"): PUBLIC,
    ("GET", "/admin/assets"): PUBLIC,
    ("POST", "/admin/assets"): PUBLIC,
    ("GET", "/admin/session"): PUBLIC,
    ("POST", "/admin/login"): PUBLIC,
    ("POST", "/admin/logout"): PUBLIC,
    # MCP: a key of any scope gets in; each tool checks its own scope (TOOLS below)
    ("GET", "/mcp"): "mcp",
    ("POST", "/mcp"): "mcp",
    ("GET", "/mcp/"): "mcp",
    ("POST", "/mcp/"): "mcp",
    ("GET", "/v1/memories"): R,
    ("POST", "/v1/memories"): W,
    ("GET", "/v1/memories/{memory_id}"): R,
    ("PATCH", "/v1/memories/{memory_id}"): W,
    ("DELETE", "/v1/memories/{memory_id}"): W,
    ("POST", "/v1/memories/{memory_id}/archive"): W,
    ("POST", "/v1/memories/{memory_id}/restore"): W,
    ("POST", "/v1/memories/{memory_id}/supersede"): W,
    ("GET", "/v1/memories/{memory_id}/versions"): R,
    ("GET", "/v1/memories/{memory_id}/events"): R,
    ("POST", "/v1/memories/check"): R,
    ("POST", "/v1/memories/{memory_id}/erase"): W,
    ("POST", "/v1/threads/{thread_id}/erase"): W,
    ("GET", "/v1/admin/models"): A,
    ("POST", "/v1/memories/merge/draft"): W,
    ("POST", "/v1/memories/merge"): W,
    ("POST", "/v1/memories/{memory_id}/unmerge"): W,
    ("GET", "/v1/memories/core_candidates"): R,
    ("POST", "/v1/consolidations"): W,
    ("GET", "/v1/consolidations"): R,
    ("GET", "/v1/consolidations/{draft_id}"): R,
    ("POST", "/v1/consolidations/{draft_id}/apply"): W,
    ("POST", "/v1/consolidations/{draft_id}/discard"): W,
    ("POST", "/v1/search/memories"): R,
    ("POST", "/v1/search/conversations"): R,
    ("GET", "/v1/precious"): R,
    ("POST", "/v1/precious"): W,
    ("DELETE", "/v1/precious/{precious_id}"): W,
    ("GET", "/v1/glossary"): R,
    ("POST", "/v1/glossary"): W,
    ("GET", "/v1/glossary/{term_id}"): R,
    ("PATCH", "/v1/glossary/{term_id}"): W,
    ("DELETE", "/v1/glossary/{term_id}"): W,
    ("GET", "/v1/digest"): R,
    ("PUT", "/v1/digest"): W,
    ("GET", "/v1/memory_boot"): R,
    ("PATCH", "/v1/memory_boot"): W,
    ("GET", "/v1/candidates"): R,
    ("POST", "/v1/candidates/{candidate_id}/{decision}"): W,
    ("POST", "/v1/ingest/messages"): W,
    ("GET", "/v1/threads"): R,
    ("GET", "/v1/threads/{thread_id}"): R,
    ("GET", "/v1/threads/{thread_id}/messages"): R,
    ("PATCH", "/v1/threads/{thread_id}"): W,
    ("DELETE", "/v1/threads/{thread_id}"): W,
    ("POST", "/v1/threads/{thread_id}/restore"): W,
    ("POST", "/v1/threads/{thread_id}/merge"): W,
    ("GET", "/v1/threads/{thread_id}/summary"): R,
    ("PUT", "/v1/threads/{thread_id}/summary"): W,
    ("DELETE", "/v1/threads/{thread_id}/summary"): W,
    ("GET", "/v1/reminders"): R,
    ("POST", "/v1/reminders/{memory_id}/snooze"): W,
    ("POST", "/v1/reminders/{memory_id}/cancel"): W,
    ("GET", "/v1/runs"): R,
    ("GET", "/v1/runs/{run_id}"): R,
    ("GET", "/v1/runs/{run_id}/changes"): R,
    ("POST", "/v1/runs/{run_id}/undo"): W,
    ("GET", "/v1/stats"): R,
    ("GET", "/v1/export"): X,
    ("POST", "/v1/import"): W,
    ("GET", "/v1/cache/{key}"): "cache:read",
    ("PUT", "/v1/cache/{key}"): "cache:write",
    ("DELETE", "/v1/cache/{key}"): "cache:write",
    ("POST", "/v1/chat/completions"): C,
    ("POST", "/v1/messages"): C,
    ("POST", "/v1/responses"): C,
    ("POST", "/v1/guide-dog/chat/completions"): C,
    ("GET", "/v1/models"): C,
    ("POST", "/agents/{agent}/v1/chat/completions"): C,
    ("POST", "/agents/{agent}/v1/messages"): C,
    ("POST", "/agents/{agent}/v1/responses"): C,
    ("GET", "/agents/{agent}/v1/models"): C,
    ("GET", "/v1/usage"): R,
    ("GET", "/v1/jobs"): A,
    ("POST", "/v1/jobs/extract"): A,
    ("POST", "/v1/jobs/dream"): A,
    ("POST", "/v1/jobs/cleanup"): A,
    ("GET", "/v1/admin/settings"): A,
    ("PUT", "/v1/admin/settings"): A,
    ("GET", "/v1/admin/reindex"): A,
    ("POST", "/v1/admin/reindex"): A,
    ("GET", "/v1/admin/health"): A,
    ("POST", "/v1/skills"): W,
    ("GET", "/v1/skills"): R,
    ("GET", "/v1/skills/{name}"): R,
    ("GET", "/v1/skills/{name}/versions"): R,
    ("POST", "/v1/skills/{name}/allocate"): W,
    ("POST", "/v1/skills/{name}/restore"): W,
    ("DELETE", "/v1/skills/{name}"): W,
    ("PUT", "/v1/skills/{name}/files/{path:path}"): W,
    ("GET", "/v1/skills/{name}/files/{path:path}"): R,
}

# tool -> (scope, arguments that pass its schema; "@MEM" is replaced by a memory id of the namespace)
TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "memory_search": (R, {"query": "secret garden"}),
    "conversation_search": (R, {"query": "alice secret garden said"}),
    "memory_recall": (R, {"query": "secret garden"}),
    "memory_list": (R, {"status": ["all"]}),
    "memory_get": (R, {"id": "@MEM", "include_versions": True}),
    "memory_stats": (R, {}),
    "memory_boot": (R, {}),
    "digest_get": (R, {}),
    "memory_export": (X, {}),
    "memory_upsert": (W, {"fact_key": "pref:matrix", "content": "matrix upsert"}),
    "memory_remember": (W, {"content": "matrix remember"}),
    "memory_update": (W, {"id": "@MEM", "pinned": True}),
    "memory_supersede": (W, {"id": "@MEM", "content": "matrix supersede"}),
    "memory_archive": (W, {"id": "@MEM"}),
    "memory_restore": (W, {"id": "@MEM"}),
    "memory_delete": (W, {"id": "@MEM"}),
    "memory_check": (R, {"content": "matrix check"}),
    "memory_merge": (W, {"ids": ["@MEM", "@MEM"], "content": "matrix merge"}),
    "memory_unmerge": (W, {"id": "@MEM"}),
    "memory_pin": (W, {"content": "matrix pin"}),
    "glossary_set": (W, {"term": "matrix", "definition": "a grid"}),
    "digest_set": (W, {"content": "matrix digest"}),
    "reminder_list": (R, {"status": "missed"}),
    "thread_list": (R, {}),
    "thread_messages": (R, {"thread_id": "matrix-thread"}),
    "thread_summary": (R, {"thread_id": "matrix-thread"}),
    "thread_summary_set": (W, {"thread_id": "matrix-thread", "summary": "a summary"}),
    "reminder_snooze": (W, {"memory_id": "@MEM", "until": "2099-01-01T09:00:00+00:00"}),
    "reminder_cancel": (W, {"memory_id": "@MEM"}),
    "run_list": (R, {}),
    "run_undo": (W, {"run_id": "run_unknown"}),
    "memory_ingest": (W, {"messages": [{"role": "user", "content": "matrix message"}]}),
    "skill_import": (W, {"content": "# matrix skill", "name": "matrix-skill"}),
    "skill_list": (R, {}),
    "skill_get": (R, {"name": "secret-skill"}),
    "skill_search": (R, {"query": "garden"}),
    "skill_allocate": (W, {"name": "secret-skill", "agent_id": "codex"}),
    "skill_delete": (W, {"name": "matrix-skill"}),
    "skill_files": (R, {"name": "secret-skill", "path": "notes/secret.txt"}),
}

# Bodies for the namespace test where an empty one would only be refused (a search must really search).
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/v1/search/memories"): {"query": "alice secret garden"},
    ("POST", "/v1/search/conversations"): {"query": "alice secret garden said"},
}

SECRET = "alice-secret-garden-0451"  # in every text of the victim namespace: must never show up for bob
KEYS = {scope: f"ek_matrix_{re.sub(r'[^a-z]', '_', scope)}_key_0001" for scope in SCOPES}
NO_SCOPE_KEY = "ek_matrix_no_scope_key_0001"
OTHER_KEY = "ek_matrix_other_namespace_0001"
_ids = itertools.count(1)


def _keys_file(path: Path) -> Path:
    rows = [{"name": f"only-{s}", "key": k, "namespace": "default", "scopes": [s]} for s, k in KEYS.items()]
    rows.append({"name": "none", "key": NO_SCOPE_KEY, "namespace": "default", "scopes": []})
    rows.append({"name": "bob", "key": OTHER_KEY, "namespace": "bob", "scopes": ["*"]})
    path.write_text(json.dumps(rows))
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A server on SQLite whose `default` namespace holds one row of every kind, all carrying SECRET."""
    data_dir = tmp_path_factory.mktemp("matrix")
    settings = Settings(
        store="sqlite",
        search="local",
        embedder="none",
        data_dir=data_dir,
        keys_file=_keys_file(data_dir / "keys.json"),
        scheduler_enabled=False,
        admin_password="matrix-admin-password-77",
    )
    container = build_container(settings)
    ns = "default"
    memory = container.memories.write(ns, MemoryWrite(content=f"{SECRET} memory", fact_key="pref:garden")).memory
    precious = container.notes.add_precious(ns, f"{SECRET} note")
    term = container.notes.set_term(ns, GlossaryIn(term=f"{SECRET}", definition=f"{SECRET} term"))
    with container.journal.run("edit", source="test") as run:  # a journal run whose change holds SECRET
        container.notes.set_digest(ns, f"{SECRET} digest")
    container.store.put_cache(ns, "matrix-key", {"v": SECRET})
    candidate = container.store.insert_candidate(
        Candidate(id="cand_matrix_1", namespace=ns, content=f"{SECRET} candidate", created_at=container.clock.now())
    )
    container.messages.ingest(ns, [MessageIn(role="user", content=f"{SECRET} said", conversation_id="matrix-thread")])
    container.conversations.index_new(ns)  # so conversation search has the victim's message to (not) leak
    container.skills.import_(
        ns, f"# {SECRET} skill", name="secret-skill", files={"notes/secret.txt": f"{SECRET} file".encode()}
    )
    params = {
        "thread_id": "matrix-thread",
        "name": "secret-skill",
        "path:path": "notes/secret.txt",
        "memory_id": memory.id,
        "precious_id": precious.id,
        "term_id": term.id,
        "candidate_id": candidate.id,
        "draft_id": "cons_matrix_1",
        "decision": "approve",
        "key": "matrix-key",
        "agent": "codex",
        "run_id": run.id,
    }
    with TestClient(create_app(container), base_url="http://localhost") as client:
        yield {"client": client, "container": container, "params": params, "memory": memory}
    container.close()


def _routes(app: Any) -> set[tuple[str, str]]:
    return {(m, p) for p, methods in app_routes(app) for m in methods if m != "HEAD"}


def _url(path: str, params: dict[str, str]) -> str:
    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        assert name in params, f"no value for path parameter {name!r}: add one to the fixture"
        return params[name]

    return re.sub(r"\{([^}]+)\}", fill, path)


def _call(client: TestClient, method: str, url: str, key: str, body: Any = None) -> Any:
    headers = {"authorization": f"Bearer {key}"}
    if url.startswith("/mcp"):
        headers["accept"] = "application/json, text/event-stream"
        body = {"jsonrpc": "2.0", "id": next(_ids), "method": "ping"}
    return client.request(method, url, json=body if body is not None else {}, headers=headers)


def _tool(client: TestClient, key: str, name: str, args: dict[str, Any], memory_id: str) -> dict[str, Any]:
    arguments = json.loads(json.dumps(args).replace("@MEM", memory_id))
    body = {
        "jsonrpc": "2.0",
        "id": next(_ids),
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    headers = {"authorization": f"Bearer {key}", "accept": "application/json, text/event-stream"}
    resp = client.post("/mcp", json=body, headers=headers)
    assert resp.status_code == 200, resp.text
    return dict(resp.json()["result"])


def test_every_route_and_tool_has_a_row(world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    routes = _routes(client.app)
    assert routes - set(ROUTES) == set(), "routes without a row in ROUTES (which scope do they need?)"
    assert set(ROUTES) - routes == set(), "rows in ROUTES for routes that no longer exist"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"authorization": f"Bearer {OTHER_KEY}", "accept": "application/json, text/event-stream"}
    tools = {t["name"] for t in client.post("/mcp", json=body, headers=headers).json()["result"]["tools"]}
    assert tools == set(TOOLS), "tools and TOOLS rows differ"


@pytest.mark.parametrize("holder", [*SCOPES, "none"])
def test_each_route_needs_exactly_its_scope(world: dict[str, Any], holder: str) -> None:
    client: TestClient = world["client"]
    key = KEYS.get(holder, NO_SCOPE_KEY)
    for (method, path), needed in sorted(ROUTES.items()):
        if needed == PUBLIC:
            continue
        # Given a key holding only `holder`; When it calls the route
        resp = _call(client, method, _url(path, world["params"]), key)
        if needed == "mcp" or needed == holder:
            # Then a key with the scope is let in (whatever the route then says about the body)
            assert resp.status_code not in (401, 403), f"{holder} on {method} {path}: {resp.status_code} {resp.text}"
        else:
            # Then a key without it is refused, naming the scope it lacks
            assert resp.status_code == 403, f"{holder} on {method} {path}: {resp.status_code} {resp.text}"
            error = resp.json()["error"]
            assert error["code"] == "missing_scope" and needed in error["message"], f"{method} {path}: {error}"


@pytest.mark.parametrize("holder", [*SCOPES, "none"])
def test_each_tool_needs_exactly_its_scope(world: dict[str, Any], holder: str) -> None:
    client: TestClient = world["client"]
    key = KEYS.get(holder, NO_SCOPE_KEY)
    for name, (needed, args) in sorted(TOOLS.items()):
        result = _tool(client, key, name, args, world["memory"].id)
        text = " ".join(c.get("text", "") for c in result.get("content", []))
        lacks = f"lacks the '{needed}' scope" in text
        if needed == holder:
            assert not lacks, f"{holder} on {name}: {text}"
        else:
            assert result.get("isError") and lacks, f"{holder} on {name}: {result}"


def test_another_namespace_never_reaches_these_rows(world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    container = world["container"]

    def snapshot() -> Any:
        store = container.store
        memories = store.list_memories("default", MemoryFilter(statuses=()), limit=200).items
        return (
            [(m.id, m.status, m.content, m.pinned) for m in memories],
            store.get_digest("default"),
            store.get_cache("default", "matrix-key"),
            store.get_candidate("default", "cand_matrix_1").status,
            [p.id for p in store.list_precious("default", limit=100)],
            [(g.id, g.definition) for g in store.list_glossary("default")],
            [(s.name, s.version, s.agents, s.deleted_at) for s in container.skills.list_skills("default")],
            [(v.version, v.digest) for v in container.skills.versions("default", "secret-skill")],
        )

    before = snapshot()
    for (method, path), needed in sorted(ROUTES.items()):
        if needed in (PUBLIC, "mcp") or path.startswith("/v1/admin") or path in ("/v1/import",):
            continue
        # Given bob (every scope, namespace `bob`); When he calls the route on the victim's ids
        resp = _call(client, method, _url(path, world["params"]), OTHER_KEY, BODIES.get((method, path)))
        # Then a path id of theirs does not exist for him, and nothing of theirs is in any answer
        if "{key}" in path or "{agent}" in path or path.endswith("/summary"):
            # a cache key is a name in the caller's own key space: bob reads and writes his own; an agent
            # id names which of his own skills his chats list; a thread's summary is kept per namespace (a
            # thread id he names is his own thread, existing or not)
            assert resp.status_code < 500, f"{method} {path}: {resp.status_code} {resp.text}"
        elif "{" in path:
            assert resp.status_code in (404, 422), f"{method} {path}: {resp.status_code} {resp.text}"
        assert SECRET not in resp.text, f"{method} {path} leaked: {resp.text[:300]}"
        for value in world["params"].values():
            # (a 404 may echo the id bob sent; an answer that succeeded must not contain one of theirs)
            if resp.status_code < 400 and value.startswith(("mem_", "pre_", "glo_", "cand_")):
                assert value not in resp.text, f"{method} {path} leaked an id: {resp.text[:300]}"
    for name, (_, args) in sorted(TOOLS.items()):
        result = _tool(client, OTHER_KEY, name, args, world["memory"].id)
        assert SECRET not in json.dumps(result), f"{name} leaked: {result}"
        if "@MEM" in json.dumps(args):
            assert result.get("isError"), f"{name} reached another namespace's memory: {result}"
    # And nothing of the victim's changed
    assert snapshot() == before


def test_the_search_bodies_find_the_rows_for_their_owner(world: dict[str, Any]) -> None:
    # The control for the namespace test: the same searches do reach the victim's rows with her key.
    for (method, path), body in BODIES.items():
        resp = _call(world["client"], method, path, KEYS[R], body)
        assert resp.status_code == 200 and SECRET in resp.text, f"{method} {path}: {resp.text[:300]}"
