"""The OpenAI Responses API <-> chat completions (pure, no I/O): requests one way, whole and streamed
answers the other way, as far as clients use it (Codex CLI, the OpenAI Agents SDK; README, "The
Responses door").

Engram serves ``POST /v1/responses`` by translating, unless the OpenAI-compatible upstream speaks the
Responses API itself (``ENGRAM_UPSTREAM_RESPONSES_API``; then the request goes as it is, with
``services/chat/injection.inject_responses``): the request becomes a chat-completions request
(``responses_to_chat``) that goes through the gateway like any other (recall, injection, routing to an
OpenAI-compatible, Anthropic or Bedrock upstream), and the answer comes back as a Response object
(``chat_to_response``) or as Responses stream events (``ChatToResponsesStream``).

What is translated: ``instructions`` and system/developer items -> system messages; ``input`` as a
string or items (messages with text and image parts; ``function_call`` / ``function_call_output``;
``custom_tool_call`` / ``custom_tool_call_output``, whose free-form input rides as ``{"input": ...}``);
function and custom tools; ``tool_choice``, ``max_output_tokens``, ``temperature``, ``top_p``,
``parallel_tool_calls``, ``user``, ``text.format`` (JSON schema). Left out, because a chat upstream
has no place for them: reasoning items (their encrypted content belongs to the provider that made
them), hosted tools (web search, file search, namespaces of tools), ``include``, ``store`` (Engram keeps
no response objects: a client sends the whole conversation each turn, as Codex does with
``store: false``).

Over 450 lines on purpose: the request, the whole answer and the stream events are the two directions of
one translation, kept together so a field handled one way is handled the other.
"""

from __future__ import annotations

import json
import time
from typing import Any

from engram.domain.errors import InvalidInput
from engram.domain.wire.content import text_of
from engram.domain.wire.sse import sse_bytes
from engram.domain.wire.usage import TokenUsage, usage_from_openai

_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "refusal"})
# A custom (free-form) tool's input travels through a chat upstream as this one string argument.
CUSTOM_INPUT = "input"
_CUSTOM_PARAMETERS = {
    "type": "object",
    "properties": {CUSTOM_INPUT: {"type": "string", "description": "The tool's free-form input."}},
    "required": [CUSTOM_INPUT],
}


# -- requests -------------------------------------------------------------------------------------------
def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and part.get("type") in _TEXT_PARTS:
        return str(part.get("text") or part.get("refusal") or "")
    return ""


def _content_parts(content: Any) -> str | list[dict[str, Any]]:
    """A Responses message content as chat content: text alone as a string, else text and image parts."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content or []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "input_image" and isinstance(part.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        elif _part_text(part):
            parts.append({"type": "text", "text": _part_text(part)})
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _output_text(output: Any) -> str:
    """A tool output (a string, or a list of text parts) as text."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(_part_text(p) for p in output if _part_text(p))
    return "" if output is None else json.dumps(output, ensure_ascii=False)


def _assistant(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message a tool call joins: the last message when it is the assistant's, else a new one."""
    if messages and messages[-1].get("role") == "assistant":
        return messages[-1]
    messages.append({"role": "assistant", "content": None})
    return messages[-1]


def _item_to_messages(item: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    kind = item.get("type") or ("message" if "role" in item else None)
    if kind == "message":
        role = str(item.get("role") or "user")
        content = _content_parts(item.get("content"))
        if role == "assistant":
            text = content if isinstance(content, str) else text_of(content)
            last = messages[-1] if messages else None
            if last is not None and last.get("role") == "assistant" and not last.get("tool_calls"):
                last["content"] = "\n".join(x for x in (last.get("content"), text) if x)
            else:
                messages.append({"role": "assistant", "content": text or None})
        else:
            messages.append({"role": role if role in ("system", "developer") else "user", "content": content})
    elif kind in ("function_call", "custom_tool_call"):
        custom = kind == "custom_tool_call"
        arguments = json.dumps({CUSTOM_INPUT: item.get("input") or ""}) if custom else item.get("arguments") or "{}"
        call = {
            "id": str(item.get("call_id") or item.get("id") or ""),
            "type": "function",
            "function": {"name": str(item.get("name") or ""), "arguments": arguments},
        }
        target = _assistant(messages)
        target["tool_calls"] = [*(target.get("tool_calls") or []), call]
    elif kind in ("function_call_output", "custom_tool_call_output"):
        messages.append(
            {
                "role": "tool",
                "tool_call_id": str(item.get("call_id") or ""),
                "content": _output_text(item.get("output")),
            }
        )
    # reasoning items, hosted-tool calls and anything newer: no place in a chat request (module docstring)


def _tools_to_chat(tools: Any) -> tuple[list[dict[str, Any]], frozenset[str]]:
    """Function and custom tools as chat tools; the names of the custom ones."""
    out: list[dict[str, Any]] = []
    custom: set[str] = set()
    for tool in tools or []:
        if not isinstance(tool, dict) or not tool.get("name"):
            continue
        if tool.get("type") == "function":
            fn: dict[str, Any] = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object"}}
            if tool.get("description"):
                fn["description"] = tool["description"]
            if isinstance(tool.get("strict"), bool):
                fn["strict"] = tool["strict"]
            out.append({"type": "function", "function": fn})
        elif tool.get("type") == "custom":
            custom.add(str(tool["name"]))
            description = str(tool.get("description") or "")
            out.append(
                {
                    "type": "function",
                    "function": {"name": tool["name"], "description": description, "parameters": _CUSTOM_PARAMETERS},
                }
            )
    return out, frozenset(custom)


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") in ("function", "custom") and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice if choice in ("auto", "none", "required") else None


def responses_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses request as a chat-completions request (the fields in the module docstring).

    Raises ``InvalidInput`` for ``previous_response_id``: Engram keeps no responses to continue from."""
    if body.get("previous_response_id"):
        raise InvalidInput(
            "previous_response_id is not supported: Engram keeps no responses; send the whole conversation "
            "in `input` (as with `store: false`)",
            code="unsupported_parameter",
        )
    messages: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
    else:
        for item in items or []:
            if isinstance(item, dict):
                _item_to_messages(item, messages)
    out: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    _tool_options(body, out)
    if body.get("max_output_tokens"):
        out["max_tokens"] = body["max_output_tokens"]
    for key in ("temperature", "top_p", "user", "stream"):
        if body.get(key) is not None:
            out[key] = body[key]
    fmt = body["text"].get("format") if isinstance(body.get("text"), dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif isinstance(fmt, dict) and fmt.get("type") == "json_object":
        out["response_format"] = {"type": "json_object"}
    return out


def _tool_options(body: dict[str, Any], out: dict[str, Any]) -> None:
    tools, _ = _tools_to_chat(body.get("tools"))
    if not tools:
        return
    out["tools"] = tools
    choice = _tool_choice(body.get("tool_choice"))
    if choice is not None:
        out["tool_choice"] = choice
    if isinstance(body.get("parallel_tool_calls"), bool):
        out["parallel_tool_calls"] = body["parallel_tool_calls"]


def custom_tools(body: dict[str, Any]) -> frozenset[str]:
    """The names of a Responses request's custom (free-form) tools: their calls go back as
    ``custom_tool_call`` items."""
    return _tools_to_chat(body.get("tools"))[1]


# -- answers --------------------------------------------------------------------------------------------
def responses_usage(usage: TokenUsage) -> dict[str, Any]:
    """The Responses ``usage`` object (``input_tokens`` counts every prompt token, cached included)."""
    return {
        "input_tokens": usage.input,
        "input_tokens_details": {"cached_tokens": usage.cache_read},
        "output_tokens": usage.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.input + usage.output,
    }


def response_id(chat_id: Any) -> str:
    """A Response id made from the upstream answer's id (so one answer keeps one id on every path)."""
    raw = str(chat_id or "engram")
    for prefix in ("chatcmpl-", "msg_", "resp_"):
        raw = raw.removeprefix(prefix)
    return "resp_" + raw


def _message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def _reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    summary = [{"type": "summary_text", "text": text}] if text else []
    return {"id": item_id, "type": "reasoning", "summary": summary}


def _call_item(item_id: str, call_id: str, name: str, arguments: str, custom: frozenset[str]) -> dict[str, Any]:
    if name in custom:
        try:
            value = json.loads(arguments or "{}")
        except ValueError:
            value = arguments
        text = value.get(CUSTOM_INPUT, "") if isinstance(value, dict) else value
        return {
            "id": item_id,
            "type": "custom_tool_call",
            "status": "completed",
            "call_id": call_id,
            "name": name,
            "input": text if isinstance(text, str) else json.dumps(text, ensure_ascii=False),
        }
    return {
        "id": item_id,
        "type": "function_call",
        "status": "completed",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def _response(
    rid: str, model: str, created: int, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": rid,
        "object": "response",
        "created_at": created,
        "status": status,
        "model": model,
        "output": output,
        "usage": usage,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
    }
    return body


def chat_to_response(resp: dict[str, Any], model: str, custom: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A whole chat-completions answer as a Response object."""
    rid = response_id(resp.get("id"))
    choice = (resp.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        output.append(_reasoning_item(f"rs_{rid[5:]}", str(message["reasoning_content"])))
    text = text_of(message.get("content"))
    if text:
        output.append(_message_item(f"msg_{rid[5:]}", text))
    for n, call in enumerate(message.get("tool_calls") or []):
        fn = call.get("function") or {}
        arguments = fn.get("arguments")
        arguments = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        output.append(
            _call_item(f"fc_{rid[5:]}_{n}", str(call.get("id") or ""), fn.get("name") or "", arguments, custom)
        )
    status = "incomplete" if choice.get("finish_reason") == "length" else "completed"
    usage = responses_usage(usage_from_openai(resp.get("usage")))
    return _response(rid, model, int(resp.get("created") or time.time()), status, output, usage)


class ChatToResponsesStream:
    """Feed chat-completions chunks (parsed), then ``finish()`` at ``[DONE]``; get Responses stream
    events back: ``response.created``, ``response.in_progress``, per output item
    ``response.output_item.added`` ... ``response.output_item.done`` (text: ``content_part.added``,
    ``output_text.delta``/``.done``, ``content_part.done``; reasoning: ``reasoning_summary_part.added``,
    ``reasoning_summary_text.delta``/``.done``, ``reasoning_summary_part.done``; a tool call:
    ``function_call_arguments.delta``/``.done``), then ``response.completed`` (``response.incomplete``
    when the answer hit its token limit) with every item and the usage."""

    def __init__(self, model: str, custom: frozenset[str] = frozenset()) -> None:
        self.model = model
        self.custom = custom
        self._rid = ""
        self._created = int(time.time())
        self._seq = 0
        self._output: list[dict[str, Any]] = []  # finished items, in output order
        self._open: str = ""  # "text" | "reasoning" | "call" | ""
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}  # chat tool-call index -> {id, call_id, name, arguments, at}
        self._finish = "stop"
        self._usage = TokenUsage()
        self.done = False

    # -- events -----------------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> bytes:
        self._seq += 1
        return sse_bytes({"type": kind, "sequence_number": self._seq, **fields}, kind)

    def _snapshot(self, status: str) -> dict[str, Any]:
        usage = responses_usage(self._usage) if status != "in_progress" else None
        return _response(self._rid, self.model, self._created, status, list(self._output), usage)

    def _start(self, chunk: dict[str, Any]) -> list[bytes]:
        self._rid = response_id(chunk.get("id"))
        snapshot = self._snapshot("in_progress")
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    @property
    def _at(self) -> int:
        return len(self._output)

    def _item_id(self, prefix: str) -> str:
        return f"{prefix}_{self._rid[5:]}_{self._at}"

    # -- feeding ----------------------------------------------------------------------------
    def feed(self, chunk: dict[str, Any]) -> list[bytes]:
        out = self._start(chunk) if not self._rid else []
        if chunk.get("usage"):
            self._usage = usage_from_openai(chunk["usage"])
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._delta("reasoning", str(delta["reasoning_content"]))
            if delta.get("content"):
                out += self._delta("text", str(delta["content"]))
            for call in delta.get("tool_calls") or []:
                out += self._call_delta(call)
            if choice.get("finish_reason"):
                self._finish = str(choice["finish_reason"])
        return out

    def _open_item(self, kind: str) -> list[bytes]:
        """Close the open item unless it is of ``kind`` (then: nothing to open)."""
        if self._open == kind:
            return []
        closing = self._close()
        self._open = kind
        return closing + (self._text_opening() if kind == "text" else self._reasoning_opening())

    def _text_opening(self) -> list[bytes]:
        item_id = self._item_id("msg")
        part = {"type": "output_text", "text": "", "annotations": []}
        return [
            self._event(
                "response.output_item.added", output_index=self._at, item=_message_item(item_id, "", "in_progress")
            ),
            self._event(
                "response.content_part.added", item_id=item_id, output_index=self._at, content_index=0, part=part
            ),
        ]

    def _reasoning_opening(self) -> list[bytes]:
        item_id = self._item_id("rs")
        part = {"type": "summary_text", "text": ""}
        return [
            self._event("response.output_item.added", output_index=self._at, item=_reasoning_item(item_id, "")),
            self._event(
                "response.reasoning_summary_part.added",
                item_id=item_id,
                output_index=self._at,
                summary_index=0,
                part=part,
            ),
        ]

    def _delta(self, kind: str, piece: str) -> list[bytes]:
        """A piece of text (``kind`` "text") or reasoning summary ("reasoning"), opening its item if needed."""
        out = self._open_item(kind)
        self._text.append(piece)
        if kind == "text":
            where = {"item_id": self._item_id("msg"), "output_index": self._at, "content_index": 0}
            return [*out, self._event("response.output_text.delta", **where, delta=piece)]
        where = {"item_id": self._item_id("rs"), "output_index": self._at, "summary_index": 0}
        return [*out, self._event("response.reasoning_summary_text.delta", **where, delta=piece)]

    def _call_delta(self, call: dict[str, Any]) -> list[bytes]:
        index = int(call.get("index") or 0)
        fn = call.get("function") or {}
        out: list[bytes] = []
        if index not in self._calls:
            if self._open != "call":  # a call closes text/reasoning; each call is its own item
                out = self._close()
                self._open = "call"
            at = self._at + len(self._calls)
            entry: dict[str, Any] = {
                "id": f"fc_{self._rid[5:]}_{at}",
                "call_id": str(call.get("id") or f"call_{index}"),
                "name": str(fn.get("name") or ""),
                "arguments": "",
                "at": at,
            }
            self._calls[index] = entry
            if entry["name"] not in self.custom:
                added = {
                    **_call_item(entry["id"], entry["call_id"], entry["name"], "", self.custom),
                    "status": "in_progress",
                }
                out.append(self._event("response.output_item.added", output_index=entry["at"], item=added))
        entry = self._calls[index]
        piece = fn.get("arguments") or ""
        if piece:
            entry["arguments"] += piece
            if entry["name"] not in self.custom:
                out.append(
                    self._event(
                        "response.function_call_arguments.delta",
                        item_id=entry["id"],
                        output_index=entry["at"],
                        delta=piece,
                    )
                )
        return out

    def _close(self) -> list[bytes]:
        """The done events of the open item(s), which join the output."""
        kind, self._open = self._open, ""
        text, self._text = "".join(self._text), []
        if kind == "text":
            item_id, at = self._item_id("msg"), self._at
            part = {"type": "output_text", "text": text, "annotations": []}
            item = _message_item(item_id, text)
            self._output.append(item)
            return [
                self._event("response.output_text.done", item_id=item_id, output_index=at, content_index=0, text=text),
                self._event("response.content_part.done", item_id=item_id, output_index=at, content_index=0, part=part),
                self._event("response.output_item.done", output_index=at, item=item),
            ]
        if kind == "reasoning":
            item_id, at = self._item_id("rs"), self._at
            item = _reasoning_item(item_id, text)
            self._output.append(item)
            part = {"type": "summary_text", "text": text}
            return [
                self._event(
                    "response.reasoning_summary_text.done", item_id=item_id, output_index=at, summary_index=0, text=text
                ),
                self._event(
                    "response.reasoning_summary_part.done", item_id=item_id, output_index=at, summary_index=0, part=part
                ),
                self._event("response.output_item.done", output_index=at, item=item),
            ]
        if kind == "call":
            return self._close_calls()
        return []

    def _close_calls(self) -> list[bytes]:
        out: list[bytes] = []
        for entry in self._calls.values():
            item = _call_item(entry["id"], entry["call_id"], entry["name"], entry["arguments"], self.custom)
            self._output.append(item)
            if entry["name"] not in self.custom:
                out.append(
                    self._event(
                        "response.function_call_arguments.done",
                        item_id=entry["id"],
                        output_index=entry["at"],
                        arguments=entry["arguments"],
                    )
                )
            out.append(self._event("response.output_item.done", output_index=entry["at"], item=item))
        self._calls = {}
        return out

    def finish(self) -> list[bytes]:
        """The closing events, at the upstream's end of stream."""
        out = self._start({}) if not self._rid else []
        out += self._close()
        self.done = True
        status = "incomplete" if self._finish == "length" else "completed"
        return [*out, self._event(f"response.{status}", response=self._snapshot(status))]


def response_text(response: dict[str, Any]) -> str:
    """The answer text of a Response object: its message items' ``output_text`` parts."""
    return "".join(
        str(part.get("text") or "")
        for item in response.get("output") or []
        if isinstance(item, dict) and item.get("type") == "message"
        for part in item.get("content") or []
        if isinstance(part, dict) and part.get("type") == "output_text"
    )


def failed_event(code: str, message: str, sequence_number: int = 0) -> bytes:
    """A ``response.failed`` event: how a Responses stream that already began reports a failure."""
    response = {
        "id": "resp_failed",
        "object": "response",
        "status": "failed",
        "output": [],
        "error": {"code": code, "message": message},
    }
    return sse_bytes(
        {"type": "response.failed", "sequence_number": sequence_number, "response": response}, "response.failed"
    )
