from __future__ import annotations

import pytest
from engram.domain.errors import InvalidInput, NotConfigured
from engram.services.chat.routing import RouteConfig, route

CFG = RouteConfig("companion", "deepseek-chat", "gemini-flash", False, True, True)


def test_alias_images_claude_and_passthrough() -> None:
    # Given the alias, an image request, a Claude name and an unknown name
    assert route("companion", has_images=False, config=CFG).model == "deepseek-chat"
    assert route("companion", has_images=True, config=CFG).model == "gemini-flash"
    claude = route(
        "anthropic/claude-sonnet-4-5", has_images=False, config=RouteConfig("companion", "", "", True, True, True)
    )
    assert (claude.provider, claude.model) == ("anthropic", "claude-sonnet-4-5")
    assert route("deepseek-chat", has_images=False, config=CFG).provider == "openai"
    # Then unknown names are refused unless passthrough is allowed
    with pytest.raises(InvalidInput):
        route("gpt-x", has_images=False, config=CFG)
    assert (
        route("gpt-x", has_images=False, config=RouteConfig("companion", "m", "", True, True, False)).model == "gpt-x"
    )


def test_claude_alias_goes_native_and_falls_back_to_openai_compat() -> None:
    cfg = RouteConfig("companion", "claude-haiku-4-5", "", False, True, True)
    assert route("companion", has_images=False, config=cfg).provider == "anthropic"
    no_native = RouteConfig("companion", "anthropic/claude-haiku-4-5", "", False, True, False)
    r = route("companion", has_images=False, config=no_native)
    assert (r.provider, r.model) == ("openai", "anthropic/claude-haiku-4-5")


def test_not_configured_names_the_setting() -> None:
    with pytest.raises(NotConfigured, match="ENGRAM_UPSTREAM_BASE_URL"):
        route("companion", has_images=False, config=RouteConfig("companion", "m", "", False, False, False))
    with pytest.raises(NotConfigured, match="ENGRAM_CHAT_MODEL"):
        route("companion", has_images=False, config=RouteConfig("companion", "", "", False, True, False))
    with pytest.raises(NotConfigured, match="ENGRAM_VISION_MODEL"):
        route(
            "companion",
            has_images=True,
            config=CFG.__class__("companion", "m", "", False, True, False),
            vision_only=True,
        )


def test_bedrock_models_go_to_bedrock_with_their_prefix_kept() -> None:
    # Given the alias mapped to a Bedrock model and Bedrock configured
    cfg = RouteConfig("companion", "bedrock/anthropic.claude-3-5-haiku", "", False, True, True, bedrock_configured=True)
    # When the alias is asked
    r = route("companion", has_images=False, config=cfg)
    # Then Bedrock serves it (the adapter strips the prefix), even though the name contains "claude"
    assert (r.provider, r.model, r.requested) == ("bedrock", "bedrock/anthropic.claude-3-5-haiku", "companion")


def test_a_bedrock_model_without_aws_configured_names_the_setting() -> None:
    cfg = RouteConfig("companion", "bedrock/amazon.nova-lite-v1:0", "", False, True, True)
    with pytest.raises(NotConfigured) as info:
        route("companion", has_images=False, config=cfg)
    assert "ENGRAM_AWS_REGION" in info.value.message
