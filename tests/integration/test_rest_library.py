"""REST over real HTTP: search, precious, glossary, digest/boot, review queue, ingest, stats,
export/import and cache. Real SQLite store and index, real local embedder; nothing faked."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import OTHER_KEY, EngramServer


def _remember(client: httpx.Client, content: str, **fields: Any) -> dict[str, Any]:
    resp = client.post("/v1/memories", json={"content": content, **fields})
    assert resp.status_code in (200, 201), resp.text
    return dict(resp.json()["memory"])


def test_search_finds_by_keyword_and_meaning_and_returns_prompt(owner: httpx.Client) -> None:
    # Given memories in English and Chinese
    allergy = _remember(owner, "我对花生过敏", type="boundary")
    _remember(owner, "My favourite colour is teal", type="preference")
    code = _remember(owner, "My test code is apple-star-0428", type="fact")
    # When searching by keyword and by paraphrase
    by_keyword = owner.post("/v1/search/memories", json={"query": "apple-star-0428"}).json()
    by_meaning = owner.post(
        "/v1/search/memories", json={"query": "Do I have any food allergies?", "top_k": 1, "include_prompt": True}
    ).json()
    # Then the right memory comes first, with a score and the injectable text
    assert by_keyword["items"][0]["memory"]["id"] == code["id"]
    assert by_meaning["items"][0]["memory"]["id"] == allergy["id"]
    assert len(by_meaning["items"]) == 1 and by_meaning["items"][0]["score"] > 0
    assert "花生" in by_meaning["prompt"]


def test_search_sees_a_write_at_once_and_never_superseded_rows(owner: httpx.Client) -> None:
    _remember(owner, "The wifi password is hunter2", fact_key="home:wifi")
    first = owner.post("/v1/search/memories", json={"query": "wifi password"}).json()["items"]
    assert first and "hunter2" in first[0]["memory"]["content"]
    # When the fact is superseded
    _remember(owner, "The wifi password is now correct-horse", fact_key="home:wifi")
    items = owner.post("/v1/search/memories", json={"query": "wifi password hunter2"}).json()["items"]
    # Then only the active version is ever returned
    assert [i["memory"]["content"] for i in items] == ["The wifi password is now correct-horse"]


def test_search_filters_types_and_rejects_bad_input(owner: httpx.Client) -> None:
    _remember(owner, "Coffee at 8am every day", type="preference")
    _remember(owner, "Buy coffee beans", type="task")
    items = owner.post("/v1/search/memories", json={"query": "coffee", "types": ["task"]}).json()["items"]
    assert [i["memory"]["type"] for i in items] == ["task"]
    assert owner.post("/v1/search/memories", json={"query": ""}).status_code == 422
    assert owner.post("/v1/search/memories", json={"query": "x", "top_k": 500}).status_code == 422
    assert owner.post("/v1/search/memories", json={"query": "x", "types": ["bogus"]}).status_code == 422


def test_search_is_scoped_to_the_namespace(server: EngramServer, owner: httpx.Client) -> None:
    _remember(owner, "Alice's bank is Nordbank")
    with server.client(OTHER_KEY) as bob:
        assert bob.post("/v1/search/memories", json={"query": "Nordbank bank"}).json()["items"] == []


def test_precious_is_append_only_and_deletable(owner: httpx.Client) -> None:
    note = owner.post("/v1/precious", json={"content": "Grandma: 'be brave, little one'", "reason": "family"})
    assert note.status_code == 201
    listed = owner.get("/v1/precious").json()["items"]
    assert [p["content"] for p in listed] == ["Grandma: 'be brave, little one'"]
    assert owner.patch(f"/v1/precious/{note.json()['id']}", json={"content": "x"}).status_code == 405
    assert owner.delete(f"/v1/precious/{note.json()['id']}").status_code == 200
    assert owner.delete(f"/v1/precious/{note.json()['id']}").status_code == 404
    assert owner.get("/v1/precious").json()["items"] == []


def test_glossary_crud_and_same_term_replaces(owner: httpx.Client) -> None:
    term = owner.post("/v1/glossary", json={"term": "ZK", "aliases": ["zhike"], "definition": "Our cat"}).json()
    again = owner.post("/v1/glossary", json={"term": "zk", "aliases": [], "definition": "Our orange cat"}).json()
    assert again["id"] == term["id"] and again["definition"] == "Our orange cat"
    patched = owner.patch(f"/v1/glossary/{term['id']}", json={"aliases": ["知客"]}).json()
    assert patched["aliases"] == ["知客"] and patched["definition"] == "Our orange cat"
    assert len(owner.get("/v1/glossary").json()["items"]) == 1
    assert owner.delete(f"/v1/glossary/{term['id']}").status_code == 200
    assert owner.get(f"/v1/glossary/{term['id']}").status_code == 404
    assert owner.post("/v1/glossary", json={"term": "", "definition": "x"}).status_code == 422


def test_digest_is_capped_and_boot_package_has_every_part(owner: httpx.Client) -> None:
    # Given a pinned memory, an identity, a precious note and a long digest
    _remember(owner, "Call me Ali", type="identity")
    _remember(owner, "Always answer in British English", type="instruction", pinned=True)
    _remember(owner, "Random passing fact", type="fact")
    owner.post("/v1/precious", json={"content": "First words of the novel"})
    patched = owner.patch("/v1/memory_boot", json={"digest": "d" * 900})
    # When the boot package is read
    boot = owner.get("/v1/memory_boot").json()
    # Then the digest is cut to 500 characters and the stable memories are the pinned + identity ones
    assert patched.status_code == 200
    assert len(boot["digest"]["content"]) == 500
    assert sorted(m["content"] for m in boot["stable_memories"]) == [
        "Always answer in British English",
        "Call me Ali",
    ]
    assert [p["content"] for p in boot["precious"]] == ["First words of the novel"]
    assert boot["stats"]["memories"]["status"]["active"] == 3
    assert owner.put("/v1/digest", json={"content": "Short summary"}).json()["content"] == "Short summary"
    assert owner.get("/v1/digest").json()["content"] == "Short summary"


def _candidate(server: EngramServer, content: str, **fields: Any) -> str:
    cand = server.container.candidates.propose("alice", content, confidence=0.5, **fields)
    return str(cand.id)


def test_review_queue_approve_discard_merge_supersede(server: EngramServer, owner: httpx.Client) -> None:
    # Given four pending candidates and a target memory
    target = _remember(owner, "Works at Globex", fact_key="work:employer")
    c1 = _candidate(server, "Has a sister called Lena", type="relationship")
    c2 = _candidate(server, "Maybe likes jazz")
    c3 = _candidate(server, "Works at Globex Corp as a designer")
    c4 = _candidate(server, "Now works at Initech")
    assert len(owner.get("/v1/candidates").json()["items"]) == 4

    # When each is decided
    approved = owner.post(f"/v1/candidates/{c1}/approve").json()
    discarded = owner.post(f"/v1/candidates/{c2}/discard", json={"note": "too vague"}).json()
    merged = owner.post(f"/v1/candidates/{c3}/merge", json={"target_id": target["id"]}).json()
    no_target = owner.post(f"/v1/candidates/{c4}/supersede", json={})
    superseded = owner.post(f"/v1/candidates/{c4}/supersede", json={"target_id": target["id"]}).json()

    # Then memories and statuses follow, and nothing is pending
    assert approved["candidate"]["status"] == "approved"
    assert approved["memory"]["content"] == "Has a sister called Lena"
    assert discarded["candidate"]["status"] == "discarded" and discarded["candidate"]["decision_note"] == "too vague"
    assert merged["candidate"]["status"] == "merged" and merged["memory"]["seen_count"] == 2
    assert no_target.status_code == 400 and no_target.json()["error"]["code"] == "missing_target"
    assert superseded["memory"]["content"] == "Now works at Initech"
    assert superseded["memory"]["fact_key"] == "work:employer"
    assert owner.get(f"/v1/memories/{target['id']}").json()["status"] == "superseded"
    assert owner.get("/v1/candidates").json()["items"] == []
    assert len(owner.get("/v1/candidates", params={"status": "all"}).json()["items"]) == 4
    # A decided candidate cannot be decided again; unknown ids are 404
    assert owner.post(f"/v1/candidates/{c1}/discard").status_code == 409
    assert owner.post("/v1/candidates/cand_nope/approve").status_code == 404
    assert owner.post(f"/v1/candidates/{c1}/explode").status_code == 422


def test_ingest_is_idempotent_per_message(owner: httpx.Client) -> None:
    batch = {
        "messages": [
            {"role": "user", "content": "hi, I'm planning a trip to Kyoto", "conversation_id": "c1", "id": "m1"},
            {"role": "assistant", "content": "Sounds lovely!", "conversation_id": "c1", "id": "m2"},
            {"role": "user", "content": "ok", "conversation_id": "c1"},
        ]
    }
    first = owner.post("/v1/ingest/messages", json=batch).json()
    retry = owner.post("/v1/ingest/messages", json=batch).json()
    assert first["created"] == 3 and first["duplicates"] == 0
    assert retry["created"] == 0 and retry["duplicates"] == 3
    assert [m["id"] for m in retry["messages"]] == [m["id"] for m in first["messages"]]
    assert owner.get("/v1/stats").json()["messages_total"] == 3
    bad = owner.post("/v1/ingest/messages", json={"messages": [{"role": "robot", "content": "x"}]})
    assert bad.status_code == 422
    assert owner.post("/v1/ingest/messages", json={"messages": []}).status_code == 422


def test_export_import_round_trip_into_an_empty_namespace(server: EngramServer, owner: httpx.Client) -> None:
    # Given a namespace with every row kind, including a version chain
    _remember(owner, "Lives in Berlin", fact_key="home:city", type="identity")
    _remember(owner, "Lives in Lisbon", fact_key="home:city", type="identity")
    _remember(owner, "Prefers tea", type="preference", tags=["drinks"], pinned=True)
    owner.post("/v1/precious", json={"content": "A quote to keep"})
    owner.post("/v1/glossary", json={"term": "LX", "aliases": ["Lisboa"], "definition": "Lisbon"})
    owner.put("/v1/digest", json={"content": "Moved to Lisbon; likes tea."})
    owner.post("/v1/ingest/messages", json={"messages": [{"role": "user", "content": "hello", "id": "x1"}]})
    _candidate(server, "Might take up surfing")
    exported = owner.get("/v1/export").json()

    # When it is imported into bob's empty namespace and exported again
    with server.client(OTHER_KEY) as bob:
        result = bob.post("/v1/import", json=exported)
        assert result.status_code == 200, result.text
        assert result.json()["imported"]["memories"] == 3
        again = bob.get("/v1/export").json()
        # Then the content is the same (ids are new; references between rows are remapped)
        assert _content(again) == _content(exported)
        chain_new = [m for m in again["memories"] if m["fact_key"] == "home:city"]
        by_id = {m["id"]: m for m in chain_new}
        newest = next(m for m in chain_new if m["status"] == "active")
        assert by_id[newest["supersedes_id"]]["content"] == "Lives in Berlin"
        # And the imported memories are searchable
        hits = bob.post("/v1/search/memories", json={"query": "tea"}).json()["items"]
        assert hits and hits[0]["memory"]["content"] == "Prefers tea"
        # Importing the same file again stores the messages once
        assert bob.post("/v1/import", json=exported).json()["skipped"]["messages"] == 1


def _content(doc: dict[str, Any]) -> dict[str, Any]:
    drop = {
        "id",
        "supersedes_id",
        "superseded_by_id",
        "index_ref",
        "source_message_ids",
        "target_memory_id",
        "result_memory_id",
        "external_id",
    }

    def strip(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(({k: v for k, v in r.items() if k not in drop} for r in rows), key=repr)

    return {
        kind: strip(doc[kind]) for kind in ("memories", "candidates", "messages", "precious", "glossary", "daily_logs")
    } | {"digest": doc["digest"]["content"]}


def test_import_rejects_invalid_rows_and_writes_nothing(server: EngramServer) -> None:
    with server.client(OTHER_KEY) as bob:
        bad = {
            "memories": [
                {"content": "ok", "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"},
                {"content": "bad", "importance": 9},
            ]
        }
        resp = bob.post("/v1/import", json=bad)
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_import"
        assert bob.get("/v1/export").json()["memories"] == []
        assert bob.post("/v1/import", json={"unknown_kind": []}).status_code == 422


def test_cache_entries_with_ttl(owner: httpx.Client) -> None:
    assert owner.put("/v1/cache/theme", json={"value": {"dark": True}}).status_code == 200
    assert owner.get("/v1/cache/theme").json()["value"] == {"dark": True}
    assert owner.delete("/v1/cache/theme").status_code == 200
    assert owner.get("/v1/cache/theme").status_code == 404
    assert owner.put("/v1/cache/x", json={"value": 1, "ttl_seconds": 0}).status_code == 422
