"""The access log of a real server never shows keys sent in query strings, on any route."""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import OWNER_KEY, EngramServer
from tests.servers import access_log_lines


def test_query_string_keys_are_redacted_from_the_access_log(make_server: Callable[..., EngramServer]) -> None:
    # Given a server with uvicorn's access log at INFO
    server = make_server(embedder="none")
    # When clients put keys in the query string of REST, chat and public routes
    with access_log_lines() as lines, server.client() as client:
        client.get("/v1/stats", params={"api_key": OWNER_KEY, "limit": "5"})
        client.get("/v1/memories", params={"key": OWNER_KEY})
        client.get("/health", params={"access_token": OWNER_KEY})
        client.get("/v1/models", params={"token": OWNER_KEY})
        client.get("/no/such/route", params={"Api_Key": OWNER_KEY})
    # Then every request is logged, with the parameter names kept and no key
    assert len(lines) == 5, lines
    assert any("/v1/stats?api_key=[redacted]&limit=5" in line for line in lines), lines
    assert not any(OWNER_KEY in line for line in lines), lines
