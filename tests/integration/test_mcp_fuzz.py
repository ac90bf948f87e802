"""Every MCP tool fuzzed from its own input schema (hypothesis, fixed seed): arguments that fit the
schema and arguments that do not (wrong types, unknown keys, lone surrogates, arbitrary JSON values), over
real HTTP against SQLite. Every answer is a JSON-RPC result; a failure is a tool error (`isError`)
whose text says what was wrong, never the SDK's bare "Error executing tool X" (an unhandled
exception), a JSON-RPC error or an HTTP error."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from engram.bootstrap import build_container
from engram.entrypoints.http.app import create_app
from engram.settings import Settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import OWNER_KEY, write_keys
from tests.servers import serve_app
from tests.strategies import from_schema

EXAMPLES = 8  # per tool and mode: 19 tools x 2 modes x 8 = ~300 calls
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
_ids = itertools.count(100)


class Mcp:
    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params}
        # Lone surrogates go out as JSON escapes, as a client's JSON encoder would send them.
        resp = self.http.post("/mcp", content=json.dumps(body).encode(), headers=ACCEPT)
        assert resp.status_code == 200, f"{method} {params}: HTTP {resp.status_code} {resp.text[:300]}"
        answer = resp.json()
        assert "error" not in answer, f"{method} {params}: JSON-RPC error {answer['error']}"
        return dict(answer["result"])


@pytest.fixture(scope="module")
def mcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mcp, dict[str, Any], list[str]]]:
    data_dir: Path = tmp_path_factory.mktemp("mcp-fuzz")
    with ExitStack() as stack:
        config = Settings(
            store="sqlite",
            search="local",
            embedder="none",
            data_dir=data_dir,
            keys_file=write_keys(data_dir / "keys.json"),
            scheduler_enabled=False,
        )
        container = build_container(config)
        stack.callback(container.close)
        url = stack.enter_context(serve_app(create_app(container)))
        http = stack.enter_context(
            httpx.Client(base_url=url, headers={"authorization": f"Bearer {OWNER_KEY}"}, timeout=30)
        )
        client = Mcp(http)
        tools = {t["name"]: t["inputSchema"] for t in client.rpc("tools/list", {})["tools"]}
        # Real ids, so id arguments sometimes reach an existing memory (update, supersede, delete...).
        made = [
            client.rpc("tools/call", {"name": "memory_remember", "arguments": {"content": f"seed memory {i}"}})
            for i in range(4)
        ]
        ids = [m["structuredContent"]["memory"]["id"] for m in made]
        yield client, tools, ids


def _arguments(schema: dict[str, Any], hostile: bool, ids: list[str]) -> st.SearchStrategy[Any]:
    # `arguments` itself is an object by the protocol (anything else is a JSON-RPC invalid-params
    # error, rightly); everything inside it is fair game.
    base = from_schema(schema, hostile=hostile).filter(lambda args: isinstance(args, dict))
    if "id" not in schema.get("properties", {}):
        return base

    def with_real_id(args: Any, real: str | None) -> Any:
        return {**args, "id": real} if isinstance(args, dict) and real is not None else args

    return st.builds(with_real_id, base, st.none() | st.sampled_from(ids))


def _fuzz_tool(client: Mcp, name: str, arguments: st.SearchStrategy[Any]) -> None:
    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    @given(args=arguments)
    def call(args: Any) -> None:
        # Given arguments drawn from the tool's input schema (or made up); When the tool is called
        result = client.rpc("tools/call", {"name": name, "arguments": args})
        # Then a result, or a tool error with its reason
        text = " ".join(c.get("text", "") for c in result.get("content", []))
        if result.get("isError"):
            assert text.strip() and text.strip() != f"Error executing tool {name}", f"{name}({args}) crashed"
        else:
            assert isinstance(result.get("structuredContent"), dict), f"{name}({args}): {result}"

    call()


@pytest.mark.parametrize("hostile", [False, True], ids=["schema-shaped", "hostile"])
def test_every_tool_answers_a_result_or_a_tool_error_that_explains(
    mcp: tuple[Mcp, dict[str, Any], list[str]], hostile: bool
) -> None:
    client, tools, ids = mcp
    assert len(tools) >= 19
    answered: dict[str, int] = {}
    for name, schema in sorted(tools.items()):
        _fuzz_tool(client, name, _arguments(schema, hostile, ids))
        answered[name] = 1
    assert set(answered) == set(tools)
