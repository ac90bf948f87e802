"""Server-kept history (services/chat/history.py) through the real gateway: both doors, streaming, rotation by
a queued job with the scripted fake model, byte-stable prefixes, cache markers, the summary over REST/MCP."""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import httpx
import pytest
from engram.domain.ports import ChatModel
from engram.domain.wire.cache_markers import count_cache_control
from engram.services.sync_bridge import run_sync

from tests.fakes.upstream import Reply
from tests.integration.chat_support import OWNER_KEY, Gateway, MakeGateway, make_gateway, upstream
from tests.integration.test_chat_openai import RecordingQueue

__all__ = ["make_gateway", "upstream"]

THREAD = "my-thread"


def chat(gw: Gateway, text: str, *, thread: str = THREAD, history: str | None = "on", **extra: Any) -> httpx.Response:
    """One OpenAI-door request that carries only the newest message (as a Pawwake client sends it)."""
    headers = {"authorization": f"Bearer {OWNER_KEY}", "x-engram-thread": thread}
    if history is not None:
        headers["x-engram-history"] = history
    body = {"model": "companion", "messages": [{"role": "user", "content": text}], **extra}
    reply = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=headers, timeout=10)
    assert reply.status_code == 200, reply.text
    return reply


def sent_messages(gw: Gateway) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = gw.upstream.last("/v1/chat/completions").json["messages"]
    return messages


def conversation(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(role, text) of the user/assistant messages sent upstream (the injected memory patch aside)."""
    out = []
    for m in messages:
        if m["role"] in ("user", "assistant"):
            text = m["content"] if isinstance(m["content"], str) else " ".join(p.get("text", "") for p in m["content"])
            out.append((m["role"], text.split("\n\n<engram")[0].strip()))
    return out


def test_a_client_sending_only_its_newest_message_gets_the_threads_recent_turns(make_gateway: MakeGateway) -> None:
    # Given a gateway that keeps history when asked (rotation every 3 turns)
    gw = make_gateway(history_rotate_turns=3, queue=RecordingQueue())
    for n in range(1, 4):
        gw.upstream.script(Reply(text=f"answer {n}"))
        reply = chat(gw, f"question {n}")
    # Then the third request carried the first two turns verbatim before the new message
    assert reply.headers["x-engram-history"] == "2"
    assert conversation(sent_messages(gw))[-5:] == [
        ("user", "question 1"),
        ("assistant", "answer 1"),
        ("user", "question 2"),
        ("assistant", "answer 2"),
        ("user", "question 3"),
    ]
    # And a request that does not opt in gets no history, nor does another thread
    chat(gw, "plain", history=None)
    assert conversation(sent_messages(gw)) == [("user", "plain")]
    chat(gw, "elsewhere", thread="other")
    assert conversation(sent_messages(gw)) == [("user", "elsewhere")]


def test_between_rotations_every_request_extends_the_previous_ones_prefix(make_gateway: MakeGateway) -> None:
    # Given five turns in a thread whose window rotates at 2 x 5 turns
    gw = make_gateway(history_rotate_turns=5, queue=RecordingQueue())
    prefixes = []
    for n in range(1, 6):
        gw.upstream.script(Reply(text=f"answer {n}"))
        chat(gw, f"question {n}")
        sent = sent_messages(gw)
        prefixes.append(json.dumps(sent[:-1], ensure_ascii=False))  # all but the new turn (it carries the patch)
    # Then each request's history is the previous request's history plus one turn, byte for byte
    for before, after in pairwise(prefixes):
        assert after.startswith(before[:-1]), "the kept history changed between rotations"


def test_rotation_is_a_queued_job_and_the_summary_comes_before_the_window(make_gateway: MakeGateway) -> None:
    # Given a thread rotating every 2 turns and a queue that holds jobs (as SQS would)
    queue = RecordingQueue()
    gw = make_gateway(history_rotate_turns=2, queue=queue)
    for n in range(1, 5):
        gw.upstream.script(Reply(text=f"answer {n}"))
        chat(gw, f"question {n}")
    assert queue.jobs == [] or all(job != "history" for job, _ in queue.jobs)
    # When a fifth request finds 4 turns (2 x 2) in the window
    gw.upstream.script(Reply(text="answer 5"))
    chat(gw, "question 5")
    # Then the chat path queued the rotation and wrote no summary itself
    assert ("history", {"namespace": "default", "thread": THREAD}) in queue.jobs
    assert gw.container.history.state("default", THREAD).summary == ""

    # When the job runs with the extraction model (the scripted fake upstream)
    gw.upstream.script(Reply(text="The user asked questions 1 and 2; the assistant answered them."))
    report = run_sync(gw.container.history.rotate("default", THREAD))
    assert report["folded"] == 2
    summary_call = gw.upstream.last("/v1/chat/completions").json
    assert (
        "question 1" in summary_call["messages"][-1]["content"]
        and "answer 2" in summary_call["messages"][-1]["content"]
    )
    # And a second delivery of the same job finds nothing to fold
    assert run_sync(gw.container.history.rotate("default", THREAD))["folded"] == 0

    # Then the next request has the summary as a system message, then the turns after it verbatim
    gw.upstream.script(Reply(text="answer 6"))
    reply = chat(gw, "question 6")
    sent = sent_messages(gw)
    summary = [m for m in sent if m["role"] == "system" and "earlier conversation" in str(m["content"])]
    assert summary and "questions 1 and 2" in summary[0]["content"]
    assert sent.index(summary[0]) < min(i for i, m in enumerate(sent) if m["role"] != "system")
    assert [t for _, t in conversation(sent)] == [
        "question 3", "answer 3", "question 4", "answer 4", "question 5", "answer 5", "question 6",
    ]  # fmt: skip
    assert reply.headers["x-engram-history"] == "3"


def test_a_failed_summary_call_keeps_the_window_for_a_later_job(make_gateway: MakeGateway) -> None:
    gw = make_gateway(history_rotate_turns=1, queue=RecordingQueue())
    for n in (1, 2):
        gw.upstream.script(Reply(text=f"answer {n}"))
        chat(gw, f"question {n}")
    # When the summary model fails
    gw.upstream.script(Reply(status=500, error_body={"error": {"message": "down"}}))
    with pytest.raises(Exception):  # noqa: B017 - the job fails; its queue retries it
        run_sync(gw.container.history.rotate("default", THREAD))
    # Then nothing was folded: the two turns are still placed verbatim
    state = gw.container.history.state("default", THREAD)
    assert (state.summary, state.rotations) == ("", 0)
    gw.upstream.script(Reply(text="answer 3"))
    assert chat(gw, "question 3").headers["x-engram-history"] == "2"


def test_a_summary_edited_while_a_rotation_runs_is_kept(make_gateway: MakeGateway) -> None:
    gw = make_gateway(history_rotate_turns=1, queue=RecordingQueue())
    for n in (1, 2):
        gw.upstream.script(Reply(text=f"answer {n}"))
        chat(gw, f"question {n}")
    history = gw.container.history
    current = history._model  # the summary model: the scripted fake upstream
    assert current is not None
    summary_model: ChatModel = current

    class EditsWhileWriting(ChatModel):
        """The summary model, during whose call the person edits the summary in the panel."""

        @property
        def model_id(self) -> str:
            return summary_model.model_id

        async def complete(
            self,
            messages: Sequence[dict[str, Any]],
            *,
            json_mode: bool = False,
            max_tokens: int | None = None,
            temperature: float | None = None,
        ) -> str:
            history.set_summary("default", THREAD, "Written by hand: the user is planning a trip.")
            return await summary_model.complete(
                messages, json_mode=json_mode, max_tokens=max_tokens, temperature=temperature
            )

    history._model = EditsWhileWriting()
    gw.upstream.script(Reply(text="A summary from before the edit."))
    # When the rotation's model answers after the edit landed
    report = run_sync(history.rotate("default", THREAD))
    # Then the person's edit stays, nothing is folded, and the rotation says why
    assert report == {"job": "history", "thread": THREAD, "folded": 0, "errors": 0, "conflict": True}
    state = history.state("default", THREAD)
    assert (state.summary, state.rotations) == ("Written by hand: the user is planning a trip.", 0)
    # And the next rotation folds from the edited summary
    history._model = summary_model
    gw.upstream.script(Reply(text="Trip planning; questions 1 and 2."))
    assert run_sync(history.rotate("default", THREAD))["folded"] >= 1
    assert "Written by hand" in gw.upstream.last("/v1/chat/completions").json["messages"][-1]["content"]


def test_the_anthropic_door_streaming_with_claude_cache_markers(make_gateway: MakeGateway) -> None:
    # Given a thread with a summary and two stored turns, through the Anthropic door to Claude
    gw = make_gateway(history_rotate_turns=5, queue=RecordingQueue(), chat_model="claude-sonnet-4-5")
    gw.container.history.set_summary("default", THREAD, "Lin moved to Oslo in May.")
    headers = {"x-api-key": OWNER_KEY, "x-engram-thread": THREAD, "x-engram-history": "on"}
    for n in (1, 2, 3):
        gw.upstream.script(Reply(text=f"answer {n}", chunks=3))
        body = {
            "model": "companion",
            "max_tokens": 100,
            "stream": True,
            "system": [{"type": "text", "text": "You are kind."}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": f"question {n}"}]}],
        }
        with httpx.stream("POST", gw.url + "/v1/messages", json=body, headers=headers, timeout=10) as reply:
            assert reply.status_code == 200 and reply.headers["x-engram-history"] == str(n - 1)
            events = reply.read().decode()
        # The stream carries the answer as it arrived
        assert "text_delta" in events and f"answer {n}"[:3] in events
    sent = gw.upstream.last("/v1/messages").json
    # Then the summary is a system block after the client's, before Engram's boot block (the anchor)
    texts = [b["text"] for b in sent["system"]]
    assert texts[0] == "You are kind." and texts[1].endswith("Lin moved to Oslo in May.")
    # And the turns come verbatim, the tail marker on the last stored turn, none in the current turn, <= 4
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert sent["messages"][3]["content"][-1]["cache_control"]["type"] == "ephemeral"
    assert all("cache_control" not in b for b in sent["messages"][-1]["content"])
    assert 1 <= count_cache_control(sent) <= 4


def test_the_summary_is_read_edited_cleared_and_copied_over_rest_and_mcp(make_gateway: MakeGateway) -> None:
    gw = make_gateway(queue=RecordingQueue())
    auth = {"authorization": f"Bearer {OWNER_KEY}"}
    with httpx.Client(base_url=gw.url, headers=auth, timeout=10) as api:
        assert api.get(f"/v1/threads/{THREAD}/summary").json()["summary"] == ""
        edited = api.put(f"/v1/threads/{THREAD}/summary", json={"summary": "We planned a trip to Kyoto."})
        assert edited.status_code == 200 and edited.json()["summary"] == "We planned a trip to Kyoto."
        # A new thread starts from another's summary (it need not exist yet)
        copied = api.put("/v1/threads/new-thread/summary", json={"from_thread": THREAD})
        assert copied.json()["summary"] == "We planned a trip to Kyoto."
        assert api.put("/v1/threads/x/summary", json={"from_thread": "nothing-here"}).status_code == 404
        assert api.put("/v1/threads/x/summary", json={}).status_code == 400
        too_long = api.put(f"/v1/threads/{THREAD}/summary", json={"summary": "x" * 4001})
        assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "summary_too_long"
        assert api.delete(f"/v1/threads/{THREAD}/summary").json()["summary"] == ""
    # And the new thread's first request starts from the copied summary
    gw.upstream.script(Reply(text="hi"))
    chat(gw, "where were we?", thread="new-thread")
    assert any("Kyoto" in str(m["content"]) for m in sent_messages(gw) if m["role"] == "system")
