"""The chat gateway's FastAPI routes: the doors (OpenAI chat completions, Anthropic Messages, OpenAI
Responses, guide-dog, under `/v1` and under an agent's base URL), models and usage.

A lazy route group (entrypoints/http/routes.py): a POST to a door is answered by ``ChatDoors``
(``chat.py``) ahead of the routes, with the same handler (``_chat``), so these routes give the doors their
OpenAPI entries and the answer to any other method, and serve a door's POST only while OpenTelemetry
traces FastAPI (``EngramApp``, app.py).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Path, Query, Request, Response

from engram.bootstrap import Container
from engram.domain.skills import AGENT_ID_PATTERN, OPTIONAL_AGENT_ID_PATTERN, agent_id
from engram.domain.wire.shapes import ANTHROPIC_REQUEST, OPENAI_REQUEST, RESPONSES_REQUEST
from engram.entrypoints.http.auth import authenticate
from engram.entrypoints.http.chat import _chat, _service
from engram.entrypoints.http.openapi import error_response, stated
from engram.entrypoints.http.state import container_of
from engram.services.chat.turn import Wire

router = APIRouter()


# One server-sent event as OpenAPI 3.2 describes `text/event-stream` items: its fields, data as text.
_SSE_EVENT = {
    "type": "object",
    "properties": {"event": {"type": "string"}, "data": {"type": "string"}, "id": {"type": "string"}},
}


# Stated, not enforced by FastAPI: _chat checks it with agent_id (400 invalid_agent_id, openapi.stated).
_AGENT_HEADER = {
    "name": "x-engram-agent",
    "in": "header",
    "required": False,
    "description": "An agent id: the skills allocated to it are listed in the boot block (wins over an agent in "
    "the base URL and the key's own). Empty: as if not sent.",
    "schema": {"type": "string", **stated(OPTIONAL_AGENT_ID_PATTERN)},
}


def _chat_doc(wire: Wire) -> dict[str, Any]:
    """The OpenAPI body and answers of a chat door (the handler reads the raw body itself)."""
    shape = {"openai": OPENAI_REQUEST, "anthropic": ANTHROPIC_REQUEST, "responses": RESPONSES_REQUEST}[wire]
    answer = {"type": "object"}
    upstream = "The upstream's own error status and body, passed through unchanged."
    return {
        "parameters": [_AGENT_HEADER],
        "requestBody": {"required": True, "content": {"application/json": {"schema": shape}}},
        "responses": {
            "200": {
                "description": "The model's answer: JSON, or server-sent events when `stream` is true "
                "(a failure after the stream began ends it with one error event).",
                "content": {
                    "application/json": {"schema": answer},
                    "text/event-stream": {"schema": _SSE_EVENT},
                },
            },
            "502": error_response(
                "502", "The upstream could not be reached, dropped the answer or sent a malformed one."
            ),
            "503": error_response("503", "No upstream is configured for this model (the message names the setting)."),
            "504": error_response("504", "The upstream did not answer in time."),
            "4XX": error_response("4XX", upstream),
            "5XX": error_response("5XX", upstream),
        },
    }


@router.post(
    "/v1/chat/completions",
    tags=["chat"],
    summary="OpenAI-compatible chat with memory",
    openapi_extra=_chat_doc("openai"),
)
async def chat_completions(request: Request) -> Response:
    return await _chat(request, "openai")


@router.post(
    "/v1/messages",
    tags=["chat"],
    summary="Anthropic Messages API with memory",
    openapi_extra=_chat_doc("anthropic"),
)
async def messages(request: Request) -> Response:
    return await _chat(request, "anthropic")


@router.post(
    "/v1/responses",
    tags=["chat"],
    summary="OpenAI Responses API with memory (Codex CLI, the OpenAI Agents SDK)",
    openapi_extra=_chat_doc("responses"),
)
async def responses(request: Request) -> Response:
    return await _chat(request, "responses")


# The same doors under a base URL that names the agent, for clients that cannot send headers
# (`http://host/agents/codex/v1`, `ANTHROPIC_BASE_URL=http://host/agents/claude-code`).
_AGENT_DOC = "An agent id: the skills allocated to it are listed in the boot block (an `x-engram-agent` header wins)."
# The pattern is stated in the document and checked by agent_id (400 invalid_agent_id: openapi.stated).
AgentPath = Annotated[str, Path(description=_AGENT_DOC, json_schema_extra=stated(AGENT_ID_PATTERN))]


@router.post(
    "/agents/{agent}/v1/chat/completions",
    tags=["chat"],
    summary="OpenAI-compatible chat with memory, as the agent named in the path",
    openapi_extra=_chat_doc("openai"),
)
async def agent_chat_completions(request: Request, agent: AgentPath) -> Response:
    return await _chat(request, "openai", path_agent=agent)


@router.post(
    "/agents/{agent}/v1/messages",
    tags=["chat"],
    summary="Anthropic Messages API with memory, as the agent named in the path",
    openapi_extra=_chat_doc("anthropic"),
)
async def agent_messages(request: Request, agent: AgentPath) -> Response:
    return await _chat(request, "anthropic", path_agent=agent)


@router.post(
    "/agents/{agent}/v1/responses",
    tags=["chat"],
    summary="OpenAI Responses API with memory, as the agent named in the path",
    openapi_extra=_chat_doc("responses"),
)
async def agent_responses(request: Request, agent: AgentPath) -> Response:
    return await _chat(request, "responses", path_agent=agent)


@router.post(
    "/v1/guide-dog/chat/completions",
    tags=["chat"],
    summary="Forward to the vision model: no memory read or written, nothing stored",
    openapi_extra=_chat_doc("openai"),
)
async def guide_dog(request: Request) -> Response:
    return await _chat(request, "openai", guide_dog=True)


@router.get("/v1/models", tags=["chat"], summary="Models a chat client can pick")
async def models(request: Request) -> Any:
    principal = authenticate(request)
    principal.require("chat:proxy")
    return await _service(request).models()


@router.get("/agents/{agent}/v1/models", tags=["chat"], summary="Models a chat client can pick (agent base URL)")
async def agent_models(request: Request, agent: AgentPath) -> Any:
    principal = authenticate(request)
    principal.require("chat:proxy")
    agent_id(agent)  # refused like the chat doors' (400 invalid_agent_id)
    return await _service(request).models()


@router.get("/v1/usage", tags=["chat"], summary="Token usage per model (input, output, cache read/write)")
async def usage(request: Request, days: int = Query(30, ge=1, le=365)) -> Any:
    principal = authenticate(request)
    principal.require("memory:read")
    return container_of(request).usage.report(principal.namespace, days=days)


def mount(app: FastAPI, container: Container) -> None:
    app.include_router(router)
