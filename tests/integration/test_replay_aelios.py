"""Aelios' documented MCP calls and REST scripts, replayed against Engram (README, "Coming from Aelios").

The calls are written as Aelios' README documents them (its MCP tools table: `memory_search(query,
min_score)`, `memory_list(type, status, limit, cursor)`, `memory_supersede(old_id + content)`, the
retired `memory_create`, ...; its REST endpoints table: `/v1/memory`, `/v1/messages/ingest`,
`/memory-mcp`, `/memory-admin`, `/api/memories/export`, `/v1/search/memories` with `filter` and
`min_score`), over real HTTP on loopback with a real SQLite store and the local embedder.
"""

from __future__ import annotations

import httpx2

from tests.conftest import OWNER_KEY, READONLY_KEY, EngramServer
from tests.integration.test_mcp import call, call_error, mcp_client


async def test_mcp_tools_as_aelios_documents_them(server: EngramServer) -> None:
    async with mcp_client(server) as mcp:
        # memory_upsert (v2's main write, needs fact_key)
        city = await call(mcp, "memory_upsert", fact_key="home:city", content="The user lives in Singapore",
                          type="identity")  # fmt: skip
        tea = await call(mcp, "memory_upsert", fact_key="pref:drink", content="The user drinks oolong tea",
                         type="preference")  # fmt: skip

        # memory_create was deprecated: the error names the tool to use
        message = await call_error(mcp, "memory_create", content="The user likes rain")
        assert "memory_upsert" in message

        # memory_search(query, min_score 0-1): min_score is Engram's min_relevance
        found = await call(mcp, "memory_search", query="where does the user live", min_score=0.0)
        assert found["items"][0]["memory"]["id"] == city["memory"]["id"] and len(found["items"]) == 2
        floor = found["items"][0]["relevance"]
        assert found["items"][1]["relevance"] < floor  # so the floor below must drop it
        strict = await call(mcp, "memory_search", query="where does the user live", min_score=floor)
        assert [i["memory"]["id"] for i in strict["items"]] == [city["memory"]["id"]]

        # memory_list(type, status, limit, cursor): one type, status as a string
        prefs = await call(mcp, "memory_list", type="preference", status="active", limit=1)
        assert [m["id"] for m in prefs["items"]] == [tea["memory"]["id"]] and prefs["next_cursor"] is None

        # memory_get(id); memory_supersede(old_id + new content)
        assert (await call(mcp, "memory_get", id=tea["memory"]["id"]))["memory"]["content"].endswith("oolong tea")
        newer = await call(mcp, "memory_supersede", old_id=tea["memory"]["id"], content="The user drinks jasmine tea",
                           type="preference")  # fmt: skip
        assert newer["superseded"]["id"] == tea["memory"]["id"] and newer["memory"]["fact_key"] == "pref:drink"

        # memory_archive(id); memory_delete(id) (soft)
        assert (await call(mcp, "memory_archive", id=newer["memory"]["id"]))["memory"]["status"] == "archived"
        assert (await call(mcp, "memory_delete", id=city["memory"]["id"]))["memory"]["status"] == "deleted"

        # memory_pin, glossary_set(term / aliases / definition), digest_set / digest_get, memory_boot
        await call(mcp, "memory_pin", content="You said: I will always remember the rain in Kyoto.")
        await call(mcp, "glossary_set", term="Mochi", aliases=["mochi-chan"], definition="The user's cat")
        await call(mcp, "digest_set", content="Lives in Singapore. Drinks tea.")
        assert (await call(mcp, "digest_get"))["content"] == "Lives in Singapore. Drinks tea."
        boot = await call(mcp, "memory_boot")
        assert boot["digest"]["content"] == "Lives in Singapore. Drinks tea."
        assert [g["term"] for g in boot["glossary"]] == ["Mochi"]
        # And REST's /v1/memory_boot holds the same parts as MCP's (digest + log + precious + glossary +
        # long tail + today's messages + statistics, as Aelios' boot package)
        with server.client() as api:
            rest = api.get("/v1/memory_boot").json()
        assert set(rest) == set(boot) >= {"longtail", "today_messages", "today_count", "precious", "stats"}
        assert [m["id"] for m in rest["longtail"]] == [m["id"] for m in boot["longtail"]]

        # memory_ingest (raw messages only), memory_recall (injectable text), memory_export
        await call(mcp, "memory_ingest", messages=[{"role": "user", "content": "Mochi knocked over my tea again"}])
        boot = await call(mcp, "memory_boot")
        assert [m["content"] for m in boot["today_messages"]] == ["Mochi knocked over my tea again"]
        assert boot["today_count"] == 1
        recalled = await call(mcp, "memory_recall", query="who is Mochi")
        assert "Mochi" in recalled["text"]
        exported = await call(mcp, "memory_export")
        assert len(exported["memories"]) >= 3

        # An argument Aelios never had either is refused, naming what is accepted
        message = await call_error(mcp, "memory_list", type="fact", sort="newest")
        assert "'sort'" in message and "types" in message


def test_rest_scripts_on_aelios_paths(server: EngramServer) -> None:
    with server.client() as api:
        # POST /v1/memory (v2: with fact_key -> upsert), GET/PATCH/DELETE /v1/memory/:id
        created = api.post("/v1/memory", json={"fact_key": "work:employer", "content": "The user works at Acme"})
        assert created.status_code == 201, created.text
        mid = created.json()["memory"]["id"]
        assert api.get("/v1/memory").json()["items"][0]["id"] == mid
        assert api.patch(f"/v1/memory/{mid}", json={"importance": 0.9}).json()["importance"] == 0.9
        assert api.get(f"/v1/memory/{mid}").json()["importance"] == 0.9

        # POST /v1/search/memories with filter:false (no reranker), include_prompt and min_score
        hits = api.post(
            "/v1/search/memories",
            json={"query": "where does the user work", "filter": False, "include_prompt": True, "min_score": 0.0},
        )
        assert hits.status_code == 200, hits.text
        body = hits.json()
        assert body["items"][0]["memory"]["id"] == mid and "Acme" in body["prompt"]
        assert "rerank" in body["meta"]["skipped"]
        both = api.post("/v1/search/memories", json={"query": "x", "min_score": 0.1, "min_relevance": 0.2})
        assert both.status_code == 400

        # POST /v1/messages/ingest (raw chat), GET /v1/memory_boot, GET /api/memories/export
        ingested = api.post("/v1/messages/ingest", json={"messages": [{"role": "user", "content": "hello there"}]})
        assert ingested.status_code == 200, ingested.text
        assert api.get("/v1/memory_boot").json()["stats"]["messages_total"] == 1
        exported = api.get("/api/memories/export")
        assert exported.status_code == 200 and [m["id"] for m in exported.json()["memories"]] == [mid]

        assert api.delete(f"/v1/memory/{mid}").json()["status"] == "deleted"

        # The panel at /memory-admin (Aelios' second path)
        panel = api.get("/memory-admin", follow_redirects=True)
        assert panel.status_code == 200 and "text/html" in panel.headers["content-type"]

    # Same auth on the aliases: no key -> 401, a read-only key cannot write
    with server.client(None) as anonymous:
        assert anonymous.get("/v1/memory").status_code == 401
        assert anonymous.get("/api/memories/export").status_code == 401
    with server.client(READONLY_KEY) as reader:
        refused = reader.post("/v1/memory", json={"content": "nope"})
        assert refused.status_code == 403
    # /v1/memory_boot stays Engram's own route, not an alias of /v1/memory
    with server.client() as api:
        assert api.get("/v1/memory_boot").status_code == 200


async def test_memory_mcp_path_serves_the_same_server(server: EngramServer) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"authorization": f"Bearer {OWNER_KEY}"}, timeout=30) as http,
        Client(streamable_http_client(server.url + "/memory-mcp", http_client=http)) as client,
    ):
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"memory_upsert", "memory_search", "memory_boot"} <= tools
    async with httpx2.AsyncClient(timeout=30) as http:
        anonymous = await http.post(server.url + "/memory-mcp", json={})
        assert anonymous.status_code == 401
