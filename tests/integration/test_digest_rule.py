"""One digest rule on both doors (domain/policies.DIGEST_RULE): REST PUT /v1/digest and MCP digest_set
keep at most 500 characters, cut a longer digest after the last whole sentence that fits, and refuse
one over 2,000 characters with the same message."""

from __future__ import annotations

import httpx

from tests.conftest import EngramServer
from tests.integration.test_mcp import call, call_error, mcp_client

SENTENCE = "Lives in Lisbon and works on a novel. "  # 38 characters
CASES = {
    "short": "Drinks tea; cat called Mochi.",
    "exactly 500": "x" * 500,
    "cut at a sentence": SENTENCE * 20,  # 760 characters: 13 whole sentences fit in 500
    "cut, no sentence end": "y" * 1999,
}
TOO_LONG = "z" * 2001


async def test_rest_and_mcp_store_the_same_digest_and_refuse_the_same_one(
    server: EngramServer, owner: httpx.Client
) -> None:
    async with mcp_client(server) as mcp:
        for name, text in CASES.items():
            # Given the same digest written through each door
            over_rest = owner.put("/v1/digest", json={"content": text})
            stored_rest = owner.get("/v1/digest").json()["content"]
            over_mcp = await call(mcp, "digest_set", content=text)
            stored_mcp = owner.get("/v1/digest").json()["content"]
            # Then both store (and answer with) the same text, at most 500 characters
            assert over_rest.status_code == 200, name
            assert over_rest.json()["content"] == stored_rest == over_mcp["content"] == stored_mcp, name
            assert len(stored_rest) <= 500, name
        # And a cut keeps whole sentences when there are some
        owner.put("/v1/digest", json={"content": CASES["cut at a sentence"]})
        assert owner.get("/v1/digest").json()["content"] == (SENTENCE * 13).strip()
        # When a digest far over the limit is sent, Then both doors refuse it with the same message
        refused = owner.put("/v1/digest", json={"content": TOO_LONG})
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "digest_too_long"
        message = await call_error(mcp, "digest_set", content=TOO_LONG)
        assert message.endswith(refused.json()["error"]["message"])  # after "Error executing tool digest_set: "
        # And the stored digest is untouched
        assert owner.get("/v1/digest").json()["content"] == (SENTENCE * 13).strip()
        assert owner.patch("/v1/memory_boot", json={"digest": TOO_LONG}).status_code == 400
