"""The coding clients people run, for real: Claude Code (`claude -p`) and Codex (`codex exec`), the pinned
versions in tests/clients/package.json (installed by `make setup-test`: `npm ci` here), against `engram
serve` in a subprocess and a scripted upstream, all on 127.0.0.1 (README, "Coding clients").

Each client: the turn is stored in a thread, "remember: ..." becomes a memory, a stored (unpinned)
memory is injected for a question that needs it, the client exits 0 and prints the upstream's answer;
Claude Code's own tools and cache markers reach the Claude upstream intact. The clients run offline:
telemetry, auto-update and other non-essential traffic off, and a dead proxy for anything that is not
loopback, so a call out fails here instead of leaving the machine.

A client whose binary is not installed is skipped with the reason; with ``ENGRAM_REQUIRE_CLIENTS=1``
(CI, ``.ci/run``) it fails instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream, RecordedRequest, Reply, ToolCall
from tests.servers import child_process, free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BIN = HERE / "node_modules" / ".bin"
KEY = "ek_clients_owner_key_0001"
README = ROOT / "README.md"
CLIENT_TIMEOUT = 180  # seconds for one non-interactive run (a cold start of a client binary is a few)

# What every client run gets: no telemetry, no auto-update, no non-essential traffic, and a proxy that
# refuses every connection for anything but loopback.
OFFLINE = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "ALL_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


def pinned_versions() -> dict[str, str]:
    """The client packages and versions tests/clients/package.json pins."""
    return dict(json.loads((HERE / "package.json").read_text())["devDependencies"])


def client_binary(name: str) -> Path:
    """The installed client's executable, or a skip (a failure when ``ENGRAM_REQUIRE_CLIENTS=1``)."""
    path = BIN / name
    if not path.exists():
        reason = f"{name} is not installed in {BIN}: run `make setup-test` (npm ci in tests/clients)"
        if os.environ.get("ENGRAM_REQUIRE_CLIENTS") == "1":
            pytest.fail(reason)
        pytest.skip("REAL CLIENT NOT RUN: " + reason)
    return path


@contextmanager
def engram_serve(upstream: FakeUpstream, data_dir: Path, **settings: str) -> Iterator[str]:
    """`engram serve` in a subprocess, its models on the scripted ``upstream``; yields its base URL."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'functions'}{os.pathsep}{ROOT}",
        "ENGRAM_API_KEY": KEY,
        "ENGRAM_DATA_DIR": str(data_dir),
        "ENGRAM_PORT": str(port),
        "ENGRAM_EMBEDDER": "none",  # keyword recall: enough for these questions, and a fast start
        "ENGRAM_UPSTREAM_BASE_URL": upstream.openai_base_url,
        "ENGRAM_UPSTREAM_API_KEY": "sk-upstream-clients",
        "ENGRAM_ANTHROPIC_BASE_URL": upstream.base_url,
        "ENGRAM_ANTHROPIC_API_KEY": "sk-ant-clients",
        "ENGRAM_CHAT_MODEL": "fake-chat",
        "ENGRAM_CHAT_ALLOW_MODEL_PASSTHROUGH": "true",  # Claude Code sends its own claude-* names
        "ENGRAM_SCHEDULER_ENABLED": "false",
        "ENGRAM_LOG_LEVEL": "WARNING",
        **{f"ENGRAM_{k.upper()}": v for k, v in settings.items()},
    }
    url = f"http://127.0.0.1:{port}"
    with child_process([sys.executable, "-m", "engram.entrypoints.cli", "serve"], env, f"{url}/health"):
        yield url


def run_client(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args,
        env={"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", **OFFLINE, **env},
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{args[0]} exited {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def api(url: str, method: str, path: str, **kwargs: Any) -> Any:
    reply = httpx.request(method, url + path, headers={"authorization": f"Bearer {KEY}"}, timeout=10, **kwargs)
    assert reply.status_code < 300, reply.text
    return reply.json()


def memories(url: str) -> list[str]:
    return [m["content"] for m in api(url, "GET", "/v1/memories", params={"limit": 100})["items"]]


def thread(url: str, thread_id: str) -> list[tuple[str, str]]:
    items = api(url, "GET", f"/v1/threads/{thread_id}/messages")["items"]
    return [(m["role"], m["content"]) for m in items]


def requests_to(upstream: FakeUpstream, path: str) -> list[RecordedRequest]:
    return [r for r in upstream.requests if r.path == path]


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream(default=Reply(text="(unscripted reply)")) as up:
        yield up


def _markers(value: Any) -> list[str]:
    """The JSON paths of every ``cache_control`` in a request."""
    found: list[str] = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for key, child in node.items():
                if key == "cache_control":
                    found.append(where)
                else:
                    walk(child, f"{where}.{key}")
        elif isinstance(node, list):
            for i, child in enumerate(node):
                walk(child, f"{where}[{i}]")

    walk(value, "")
    return found


def _current_user_turn(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The last user message of a Messages request (Claude Code sends system messages after it)."""
    for index in range(len(body["messages"]) - 1, -1, -1):
        if body["messages"][index]["role"] == "user":
            return index, body["messages"][index]
    raise AssertionError("no user message")


# -- Claude Code ----------------------------------------------------------------------------------
def _claude(tmp_path: Path, url: str, prompt: str, thread_id: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "claude-home"
    home.mkdir(exist_ok=True)
    env = {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": KEY,
        "ANTHROPIC_CUSTOM_HEADERS": f"x-engram-thread: {thread_id}",
    }
    return run_client([str(client_binary("claude")), "-p", prompt], env, tmp_path)


def test_claude_code_remembers_stores_and_recalls(tmp_path: Path, upstream: FakeUpstream) -> None:
    client_binary("claude")
    with engram_serve(upstream, tmp_path / "data") as url:
        # Given Claude Code pointed at Engram, When the user asks it to remember something
        upstream.script(Reply(text="Noted: locker 4471."))
        first = _claude(tmp_path, url, "remember: my locker code is 4471", "claude-code")
        # Then the client prints the upstream's answer, the fact is a memory, the turn is in the thread
        assert "Noted: locker 4471." in first.stdout
        assert "my locker code is 4471" in memories(url)
        assert thread(url, "claude-code") == [
            ("user", "remember: my locker code is 4471"),
            ("assistant", "Noted: locker 4471."),
        ]
        sent_first = requests_to(upstream, "/v1/messages")[-1].json
        # When a question needs a memory stored before (unpinned)
        api(url, "POST", "/v1/memories", json={"content": "The user's bicycle is a green Brompton folding bike."})
        upstream.script(Reply(text="It is green."))
        second = _claude(tmp_path, url, "What colour is my Brompton bicycle?", "claude-code")
        assert "It is green." in second.stdout
        # Then the memory rides at the end of the user's own turn, after the client's words
        body = requests_to(upstream, "/v1/messages")[-1].json
        index, user = _current_user_turn(body)
        assert "green Brompton" in user["content"][-1]["text"]
        assert user["content"][-1]["text"].startswith("<engram-context>")
        assert any(b.get("text") == "What colour is my Brompton bicycle?" for b in user["content"])
        # And Claude Code's own tools reach Claude whole, the same in both turns (cache markers aside)
        tools = [{k: v for k, v in t.items() if k != "cache_control"} for t in body["tools"]]
        assert tools == [{k: v for k, v in t.items() if k != "cache_control"} for t in sent_first["tools"]]
        assert {"Bash", "Read", "Edit"} <= {t["name"] for t in tools} and all("input_schema" in t for t in tools)
        # And Engram's markers: at most four, none on the user's turn or after it
        marks = _markers(body)
        assert 0 < len(marks) <= 4 and not any(m.startswith(f".messages[{index}]") for m in marks)
        assert thread(url, "claude-code")[-2:] == [
            ("user", "What colour is my Brompton bicycle?"),
            ("assistant", "It is green."),
        ]


def test_claude_code_tools_and_cache_markers_reach_claude_intact(tmp_path: Path, upstream: FakeUpstream) -> None:
    client_binary("claude")
    # Given what Claude Code sends Claude directly (no Engram in between)
    upstream.script(Reply(text="Building C."))
    _claude(tmp_path, upstream.base_url, "Where is my locker?", "direct")
    direct = requests_to(upstream, "/v1/messages")[-1].json
    # When the same question goes through Engram with its own Claude cache markers off
    with engram_serve(upstream, tmp_path / "data", anthropic_cache_enabled="false") as url:
        api(url, "POST", "/v1/memories", json={"content": "The user's locker is in building C, floor 3."})
        upstream.script(Reply(text="Building C."))
        done = _claude(tmp_path, url, "Where is my locker?", "claude-code-markers")
    assert "Building C." in done.stdout
    body = requests_to(upstream, "/v1/messages")[-1].json
    # Then the tools and the system prompt arrive exactly as the client sent them, markers included
    assert body["tools"] == direct["tools"] and body["system"] == direct["system"]
    assert {k: body[k] for k in ("thinking", "output_config", "max_tokens") if k in direct} == {
        k: direct[k] for k in ("thinking", "output_config", "max_tokens") if k in direct
    }
    assert len(_markers(body)) == len(_markers(direct)) > 0
    # And the memory patch is the last block of the user's turn, after every breakpoint: a client marker
    # that sat on the message after the user's turn now sits on the user's words, just before the patch
    index, user = _current_user_turn(body)
    patch = user["content"][-1]
    assert "building C" in patch["text"] and "cache_control" not in patch
    assert not any(
        m.startswith(f".messages[{i}]") for m in _markers(body) for i in range(index + 1, len(body["messages"]))
    )
    direct_index, direct_user = _current_user_turn(direct)
    assert _unmarked(user["content"][:-1]) == _unmarked(direct_user["content"])
    after = [m for m in _markers(direct) if not m.startswith((".system", ".tools", f".messages[{direct_index}]"))]
    in_turn = [m for m in _markers(direct) if m.startswith(f".messages[{direct_index}]")]
    assert len([m for m in _markers(body) if m.startswith(f".messages[{index}]")]) == len(in_turn) + min(len(after), 1)


def _unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


# -- Codex ----------------------------------------------------------------------------------------
def codex_config(url: str, thread_id: str) -> str:
    """The `~/.codex/config.toml` the README gives: Engram as a custom provider on the Responses wire,
    analytics and update checks off."""
    return f"""model = "companion"
model_provider = "engram"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false

[model_providers.engram]
name = "Engram"
base_url = "{url}/v1"
env_key = "ENGRAM_API_KEY"
wire_api = "responses"
http_headers = {{ "x-engram-thread" = "{thread_id}" }}
"""


def _codex(tmp_path: Path, url: str, prompt: str, thread_id: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "codex-home"
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(codex_config(url, thread_id))
    env = {"HOME": str(home), "CODEX_HOME": str(home / ".codex"), "ENGRAM_API_KEY": KEY}
    args = [str(client_binary("codex")), "exec", "--skip-git-repo-check", prompt]
    return run_client(args, env, tmp_path)


def test_codex_remembers_stores_and_recalls_through_the_responses_door(tmp_path: Path, upstream: FakeUpstream) -> None:
    client_binary("codex")
    with engram_serve(upstream, tmp_path / "data") as url:
        # Given Codex with Engram as its provider (wire_api = "responses"), When it is asked to remember
        upstream.script(Reply(text="Noted: the staging host is kestrel-7."))
        first = _codex(tmp_path, url, "remember: our staging host is kestrel-7", "codex")
        # Then it prints the answer, the fact is a memory and the turn is in the thread
        assert "Noted: the staging host is kestrel-7." in first.stdout
        assert "our staging host is kestrel-7" in memories(url)
        assert thread(url, "codex") == [
            ("user", "remember: our staging host is kestrel-7"),
            ("assistant", "Noted: the staging host is kestrel-7."),
        ]
        # When a question needs a memory stored before (unpinned)
        api(url, "POST", "/v1/memories", json={"content": "The user's deploy window is Thursday after 18:00."})
        upstream.script(Reply(text="Thursday evening."))
        second = _codex(tmp_path, url, "When is my deploy window?", "codex")
        assert "Thursday evening." in second.stdout
        # Then the upstream (chat completions) got the memory in the user's turn, Codex's tools as functions
        body = requests_to(upstream, "/v1/chat/completions")[-1].json
        user = [m for m in body["messages"] if m["role"] == "user"][-1]
        assert user["content"].startswith("When is my deploy window?\n\n<engram-context>")
        assert "Thursday after 18:00" in user["content"]
        assert body["messages"][0]["role"] in ("system", "developer")
        assert any(t["function"]["name"] == "exec_command" for t in body["tools"])
        assert thread(url, "codex")[-1] == ("assistant", "Thursday evening.")


def test_codex_runs_a_tool_the_model_calls_and_sends_its_output_back(tmp_path: Path, upstream: FakeUpstream) -> None:
    client_binary("codex")
    with engram_serve(upstream, tmp_path / "data") as url:
        # Given a model that first calls Codex's shell tool, then answers
        call = ToolCall(name="exec_command", arguments=json.dumps({"cmd": "echo engram-tool-ok"}), id="call_1")
        upstream.script(Reply(text="", tool_calls=(call,)), Reply(text="The command printed engram-tool-ok."))
        # When Codex runs the turn through the Responses door
        done = _codex(tmp_path, url, "run echo engram-tool-ok", "codex-tools")
        assert "The command printed engram-tool-ok." in done.stdout
        # Then the call went to Codex as a function_call item, it ran it, and its output came back as a tool
        # message after the assistant's call (the whole conversation resent: store = false)
        sent = requests_to(upstream, "/v1/chat/completions")
        assert len(sent) == 2
        *_, asked, result = sent[-1].json["messages"]
        assert asked["tool_calls"][0]["id"] == "call_1" and asked["tool_calls"][0]["function"]["name"] == "exec_command"
        assert result["role"] == "tool" and result["tool_call_id"] == "call_1" and "engram-tool-ok" in result["content"]
        # And the user's turn is in the thread
        assert thread(url, "codex-tools")[0] == ("user", "run echo engram-tool-ok")


# -- the README table -----------------------------------------------------------------------------
def test_readme_table_names_the_pinned_versions() -> None:
    # The table of tested clients says the versions this suite runs (a new version: one line in
    # package.json, a rerun, and the table).
    text = README.read_text()
    versions = pinned_versions()
    assert versions.keys() == {"@anthropic-ai/claude-code", "@openai/codex"}
    for package, version in versions.items():
        assert f"(`{package}`) | {version} |" in text, f"README's client table does not name {package} {version}"
