"""The /mcp gate's pure helpers: host rules and query-token stripping."""

from __future__ import annotations

from typing import cast

import pytest
from engram.entrypoints.http.mcp.gate import host_allowed, security_settings, strip_query_token
from engram.settings import Settings


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8787", True),
        ("localhost", True),
        ("localhost:1", True),
        ("[::1]:8787", True),
        ("localhost.evil.example", False),
        ("127.0.0.1.nip.io:8787", False),
        ("evil.example", False),
        ("", False),
        (None, False),
    ],
)
def test_default_hosts_are_loopback_only(host: str | None, allowed: bool) -> None:
    assert host_allowed(host, Settings(_env_file=None).mcp_allowed_hosts) is allowed


def test_suffix_and_any_rules() -> None:
    rules = ["*.lambda-url.eu-west-1.on.aws", "memory.example.com"]
    assert host_allowed("abc.lambda-url.eu-west-1.on.aws", rules)
    assert host_allowed("abc.lambda-url.eu-west-1.on.aws:443", rules)
    assert not host_allowed("lambda-url.eu-west-1.on.aws.evil.example", rules)
    assert host_allowed("MEMORY.example.com", rules)
    assert not host_allowed("memory.example.com:8443", rules)
    assert host_allowed("anything:1", ["*"])


def test_sdk_security_mirrors_plain_rules_and_defers_wildcards_to_the_gate() -> None:
    plain = security_settings(["localhost:*"])
    assert plain.enable_dns_rebinding_protection and plain.allowed_hosts == ["localhost:*"]
    assert "http://localhost:*" in plain.allowed_origins
    assert not security_settings(["*.on.aws"]).enable_dns_rebinding_protection


def test_query_token_is_removed_from_the_scope() -> None:
    # Given a query string with the token between other parameters
    scope = {"query_string": b"a=1&token=ek_secret_value&b=2"}
    # When the gate strips it
    token = strip_query_token(scope)
    # Then it is returned and gone from the scope (which the access log reads)
    assert token == "ek_secret_value"
    assert scope["query_string"] == b"a=1&b=2"
    assert strip_query_token({"query_string": b"a=1"}) is None


def test_building_the_server_leaves_root_logging_alone() -> None:
    import logging

    from engram.bootstrap import Container
    from engram.entrypoints.http.mcp import build_server

    # Given a root logger without handlers (as under uvicorn --factory; pytest's own are set aside)
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    root.handlers.clear()
    try:
        # When the MCP server is built (the SDK calls logging.basicConfig)
        build_server(cast("Container", object()))  # building the server never touches the container
        after = (list(root.handlers), root.level)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    # Then root logging is unchanged
    assert after == ([], saved[1])
