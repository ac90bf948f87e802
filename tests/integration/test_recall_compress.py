"""ENGRAM_RECALL_COMPRESS_MODEL: bootstrap builds the compressor on the configured upstream (the fake one)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from engram.bootstrap import build_container
from engram.services.library.memories import MemoryWrite
from engram.settings import Settings

from tests.fakes.upstream import FakeUpstream, Reply


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


def settings(upstream: FakeUpstream, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "store": "memory",
        "search": "memory",
        "embedder": "none",
        "api_key": "ek-test-owner-key",
        "upstream_base_url": upstream.openai_base_url,
        "upstream_api_key": "sk-upstream-secret-0001",
        "scheduler_enabled": False,
    }
    values.update(overrides)
    return Settings(**values)


def test_the_compress_model_setting_compresses_recalled_memories(upstream: FakeUpstream) -> None:
    # Given a container with a compression model on the (fake) upstream and one memory
    upstream.reset()
    container = build_container(settings(upstream, recall_compress_model="fake-small"))
    container.memories.write("u", MemoryWrite(content="The user is allergic to peanuts since childhood, badly."))
    upstream.script(Reply(text=json.dumps({"lines": ["Allergic to peanuts."]})))
    # When recalling
    result = container.recall.recall("u", "peanuts allergy")
    # Then the compressed line is attached, the upstream saw the small model, and meta says so
    assert [h.text for h in result.hits] == ["Allergic to peanuts."]
    assert upstream.last().json["model"] == "fake-small"
    assert "compress" in result.meta["stages"]
    container.close()


def test_compression_is_off_by_default_and_an_upstream_failure_degrades(upstream: FakeUpstream) -> None:
    # Given a container without the setting
    upstream.reset()
    plain = build_container(settings(upstream))
    plain.memories.write("u", MemoryWrite(content="The user is allergic to peanuts."))
    # When recalling, then nothing is sent upstream and content is injected as is
    result = plain.recall.recall("u", "peanuts")
    assert result.hits[0].text is None and "compress" in result.meta["skipped"]
    assert upstream.requests == []
    plain.close()
    # Given the setting on but the upstream failing
    on = build_container(settings(upstream, recall_compress_model="fake-small"))
    on.memories.write("u", MemoryWrite(content="The user is allergic to peanuts."))
    upstream.script(Reply(status=500, text="boom"))
    # When recalling, then the memory still comes back, uncompressed, and meta reports the degradation
    degraded = on.recall.recall("u", "peanuts")
    assert degraded.hits[0].text is None
    assert "compress" in degraded.meta["degraded"]
    on.close()
