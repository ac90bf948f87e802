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


def test_export_import_round_trip_keeps_ids_and_a_second_import_adds_nothing(
    server: EngramServer, owner: httpx.Client
) -> None:
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
    rows = {kind: len(exported[kind]) for kind in ("memories", "candidates", "messages", "precious", "glossary")}

    # When it is imported into bob's empty namespace and exported again
    with server.client(OTHER_KEY) as bob:
        result = bob.post("/v1/import", json=exported)
        assert result.status_code == 200, result.text
        report = result.json()
        assert {k: report["created"][k] for k in rows} == rows and report["created"]["digest"] == 1
        assert sum(report["refused"].values()) == 0 and report["indexed"] == 2
        again = bob.get("/v1/export").json()
        # Then every row is the same, ids and references included
        assert _rows(again) == _rows(exported)
        # And the imported memories are searchable
        hits = bob.post("/v1/search/memories", json={"query": "tea"}).json()["items"]
        assert hits and hits[0]["memory"]["content"] == "Prefers tea"

        # When the same file is imported again, into bob's and into alice's own namespace
        for client in (bob, owner):
            second = client.post("/v1/import", json=exported).json()
            # Then nothing is added: every row is skipped as present
            assert sum(second["created"].values()) == 0 and sum(second["refused"].values()) == 0, second
            assert {k: second["skipped"][k] for k in rows} == rows and second["skipped"]["digest"] == 1
        assert _rows(bob.get("/v1/export").json()) == _rows(exported)
    assert _rows(owner.get("/v1/export").json()) == _rows(exported)


def _rows(doc: dict[str, Any]) -> dict[str, Any]:
    def strip(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # stored_at: an imported message is stored now (extraction reads it once), whenever it was said.
        dropped = ("index_ref", "external_id", "stored_at")
        return sorted(({k: v for k, v in r.items() if k not in dropped} for r in rows), key=repr)

    kinds = ("memories", "candidates", "messages", "precious", "glossary", "daily_logs")
    return {kind: strip(doc[kind]) for kind in kinds} | {"digest": doc["digest"]["content"]}


def test_import_refuses_invalid_rows_reports_them_and_keeps_the_rest(server: EngramServer) -> None:
    # Given an export with valid rows and rows the API would refuse
    t = "2026-01-01T00:00:00Z"
    ok = {"id": "mem_ok", "content": "A valid memory", "created_at": t, "updated_at": t}
    bad_memories = [
        {"content": "x" * 300_000, "created_at": t, "updated_at": t},
        {"content": "   ", "created_at": t, "updated_at": t},
        {"content": "keyed", "fact_key": "no colon here", "created_at": t, "updated_at": t},
        {"content": "counted", "seen_count": -5, "created_at": t, "updated_at": t},
        {"content": "tagged", "tags": [f"t{i}" for i in range(500)], "created_at": t, "updated_at": t},
        {"content": "bad", "importance": 9},
    ]
    document = {
        "memories": [ok, *bad_memories],
        "precious": [{"content": "", "created_at": t}, {"content": "kept note", "created_at": t}],
        "glossary": [{"term": "", "definition": "x"}, {"term": "LX", "definition": "Lisbon"}],
        "candidates": [{"content": "y" * 5000, "created_at": t}],
        "digest": {"content": "d" * 200_000, "updated_at": t},
    }
    with server.client(OTHER_KEY) as bob:
        # When it is imported
        resp = bob.post("/v1/import", json=document)
        # Then the valid rows are stored, each bad row is refused with its reason, none of them stored
        assert resp.status_code == 200, resp.text
        report = resp.json()
        assert report["created"] | {"messages": 0} == {
            "memories": 1, "candidates": 0, "messages": 0, "precious": 1, "glossary": 1, "daily_logs": 0, "digest": 0,
            "skills": 0, "threads": 0, "usage": 0,
        }  # fmt: skip
        assert report["refused"]["memories"] == 6 and report["refused"]["digest"] == 1
        codes = [(p["kind"], p["row"], p["code"]) for p in report["problems"]]
        assert codes == [
            ("memories", 1, "content_too_long"),
            ("memories", 2, "empty_content"),
            ("memories", 3, "invalid_fact_key"),
            ("memories", 4, "invalid_row"),
            ("memories", 5, "too_many_tags"),
            ("memories", 6, "invalid_row"),
            ("candidates", 0, "content_too_long"),
            ("precious", 0, "empty_content"),
            ("glossary", 0, "invalid_row"),
            ("digest", 0, "digest_too_long"),
        ]
        assert all(p["outcome"] == "refused" and p["reason"] for p in report["problems"])
        assert "seen_count" in report["problems"][3]["reason"]
        stored = bob.get("/v1/export").json()
        assert [m["id"] for m in stored["memories"]] == ["mem_ok"]
        assert stored["digest"] is None and stored["candidates"] == []
        # A document of the wrong shape is still refused as a whole
        assert bob.post("/v1/import", json={"unknown_kind": []}).status_code == 400
        assert bob.post("/v1/import", json={"memories": ["not a row"]}).status_code == 400


def test_import_skips_rows_present_by_external_id_or_identical_content(server: EngramServer) -> None:
    with server.client(OTHER_KEY) as bob:
        # Given memories that are already there
        bob.post("/v1/memories", json={"content": "Has a cat", "external_id": "ext-1"})
        bob.post("/v1/memories", json={"content": "Plays the cello"})
        bob.post("/v1/precious", json={"content": "A quote"})
        t = "2026-01-01T00:00:00Z"
        # When rows with other ids but the same external id or the same text are imported
        document = {
            "memories": [
                {"id": "mem_a", "content": "Has two cats", "external_id": "ext-1", "created_at": t, "updated_at": t},
                {"id": "mem_b", "content": "Plays the cello", "created_at": t, "updated_at": t},
                {"id": "mem_c", "content": "Speaks Greek", "created_at": t, "updated_at": t},
            ],
            "precious": [{"id": "prc_a", "content": "A quote", "created_at": t}],
        }
        report = bob.post("/v1/import", json=document).json()
        # Then only the new one is created; the others are skipped with the reason
        assert report["created"]["memories"] == 1 and report["skipped"]["memories"] == 2
        assert report["skipped"]["precious"] == 1
        reasons = {p["row"]: p["reason"] for p in report["problems"] if p["kind"] == "memories"}
        assert "external_id" in reasons[0] and "identical content" in reasons[1]
        contents = sorted(m["content"] for m in bob.get("/v1/memories").json()["items"])
        assert contents == ["Has a cat", "Plays the cello", "Speaks Greek"]


def test_cache_entries_with_ttl(owner: httpx.Client) -> None:
    assert owner.put("/v1/cache/theme", json={"value": {"dark": True}}).status_code == 200
    assert owner.get("/v1/cache/theme").json()["value"] == {"dark": True}
    assert owner.delete("/v1/cache/theme").status_code == 200
    assert owner.get("/v1/cache/theme").status_code == 404
    assert owner.put("/v1/cache/x", json={"value": 1, "ttl_seconds": 0}).status_code == 422


def test_an_import_over_the_row_limit_is_refused_whole_naming_the_cli(make_server: Any) -> None:
    # Given a server that takes at most 3 rows per import request
    server = make_server(import_max_rows=3, embedder="none")
    with server.client(OTHER_KEY) as bob:
        doc = {"memories": [{"content": f"imported fact number {i}", "type": "fact"} for i in range(3)]}
        doc["precious"] = [{"content": "a fourth row"}]
        # When an Engram export and a text file of 4 rows each are posted
        refused = bob.post("/v1/import", json=doc)
        text = bob.post("/v1/import?from=text", content="one\ntwo\nthree\nfour", headers={"content-type": "text/plain"})
        # Then both are refused whole with a code and a message naming the limit and the CLI; nothing is written
        for response in (refused, text):
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["code"] == "too_many_rows" and "ENGRAM_IMPORT_MAX_ROWS" in error["message"]
            assert "engram import" in error["message"] and "4 rows" in error["message"]
        assert bob.get("/v1/memories").json()["items"] == []
        # And at the limit the same file goes in
        doc.pop("precious")
        assert bob.post("/v1/import", json=doc).json()["created"]["memories"] == 3
