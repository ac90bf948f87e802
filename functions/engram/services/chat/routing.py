"""Which upstream and model a chat request goes to (pure).

- the public alias (``companion``) -> the configured chat model;
- a request with images that asked for the alias -> the vision model (when one is configured);
- ``bedrock/<model-id>`` -> Amazon Bedrock Converse (OpenAI wire to the adapter, which converts);
- ``claude*`` / ``anthropic/claude*`` -> the Anthropic Messages API (when configured; else the
  OpenAI-compatible upstream, which is how OpenRouter serves Claude);
- everything else -> the OpenAI-compatible upstream.
Other client model names pass through only when ``allow_passthrough`` is set; the configured chat and
vision models are always accepted by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from engram.domain.errors import InvalidInput, NotConfigured
from engram.domain.wire.converse import BEDROCK_PREFIX

Provider = Literal["openai", "anthropic", "bedrock"]


@dataclass(frozen=True)
class RouteConfig:
    public_model: str
    chat_model: str
    vision_model: str
    allow_passthrough: bool
    openai_configured: bool
    anthropic_configured: bool
    bedrock_configured: bool = False


@dataclass(frozen=True)
class Route:
    provider: Provider
    model: str  # the name sent upstream (``bedrock/<id>`` keeps its prefix; the Bedrock adapter strips it)
    requested: str  # the name the client asked for (echoed back in responses)
    vision: bool = False


def is_claude(model: str) -> bool:
    name = model.lower()
    return name.startswith("claude") or name.startswith("anthropic/claude")


def route(requested: str, *, has_images: bool, config: RouteConfig, vision_only: bool = False) -> Route:
    """Pick the upstream. Raises ``NotConfigured`` (names the setting) or ``InvalidInput``."""
    name = (requested or "").strip()
    vision = False
    if vision_only:
        if not config.vision_model:
            raise NotConfigured("guide-dog needs a vision model: set ENGRAM_VISION_MODEL")
        model, vision = config.vision_model, True
    elif not name or name == config.public_model:
        if has_images and config.vision_model:
            model, vision = config.vision_model, True
        elif config.chat_model:
            model = config.chat_model
        else:
            raise NotConfigured(
                f"model '{config.public_model}' needs ENGRAM_CHAT_MODEL (the upstream model it maps to)"
            )
    elif name in (config.chat_model, config.vision_model) or config.allow_passthrough:
        model = name
    else:
        raise InvalidInput(
            f"unknown model '{name}': use '{config.public_model}' (or set ENGRAM_CHAT_ALLOW_MODEL_PASSTHROUGH=true)",
            code="model_not_found",
        )
    if model.startswith(BEDROCK_PREFIX) and len(model) > len(BEDROCK_PREFIX):
        if not config.bedrock_configured:
            raise NotConfigured(
                f"model '{model}' runs on Amazon Bedrock: set ENGRAM_AWS_REGION (or AWS_REGION) "
                "and give the process AWS credentials (an IAM role, AWS_PROFILE or AWS_ACCESS_KEY_ID)"
            )
        return Route("bedrock", model, requested or model, vision)
    if is_claude(model) and config.anthropic_configured:
        return Route("anthropic", model.split("/", 1)[1] if "/" in model else model, requested or model, vision)
    if config.openai_configured:
        return Route("openai", model, requested or model, vision)
    if is_claude(model):
        raise NotConfigured(
            "no upstream for Claude models: set ENGRAM_ANTHROPIC_BASE_URL (or ENGRAM_UPSTREAM_BASE_URL)"
        )
    raise NotConfigured("no chat upstream configured: set ENGRAM_UPSTREAM_BASE_URL (and ENGRAM_UPSTREAM_API_KEY)")


def openai_has_images(body: dict[str, Any]) -> bool:
    for msg in body.get("messages") or ():
        content = msg.get("content")
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "image_url" for p in content):
            return True
    return False


def anthropic_has_images(body: dict[str, Any]) -> bool:
    for msg in body.get("messages") or ():
        content = msg.get("content")
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "image" for b in content):
            return True
    return False
