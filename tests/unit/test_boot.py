"""One boot package for every surface (services/recall/boot.py): the chat block stays small, REST/MCP get more."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.adapters.storage.inmemory import InMemoryMemoryStore
from engram.bootstrap import configs
from engram.domain.models import GlossaryTerm, Message, Precious, new_id
from engram.services.library.memories import MemoryService, MemoryWrite
from engram.services.library.stats import NamespaceStats
from engram.services.local_day import LocalDay
from engram.services.recall.boot import CHAT_BLOCK, BootLimits, BootService
from engram.settings import Settings

from tests.fakes.clock import ManualClock

NS = "u1"
PACKAGE = configs.boot_package(Settings.model_construct())


def _boot(precious: int, terms: int) -> tuple[BootService, InMemoryMemoryStore]:
    clock = ManualClock()
    store = InMemoryMemoryStore(clock=clock)
    start = clock.now()
    for i in range(precious):
        store.insert_precious(
            Precious(id=f"p{i:02d}", namespace=NS, content=f"note {i:02d}", created_at=start + timedelta(minutes=i))
        )
    for i in range(terms):
        store.put_glossary_term(
            GlossaryTerm(
                id=f"g{i:03d}", namespace=NS, term=f"T{i:03d}", definition="d", created_at=start, updated_at=start
            )
        )
    day = LocalDay(clock)
    return BootService(store, day, NamespaceStats(store, day), package_limits=PACKAGE), store


def test_the_chat_block_takes_the_ten_newest_notes_oldest_first_and_fifty_terms() -> None:
    # Given 25 precious notes and 70 glossary terms
    boot, _ = _boot(25, 70)
    # When the chat boot block is rendered
    text = boot.block(NS, max_chars=100_000).text
    # Then it holds the 10 newest notes, oldest first, and the first 50 terms alphabetically
    notes = [line[2:] for line in text.splitlines() if line.startswith("- note ")]
    assert notes == [f"note {i:02d}" for i in range(15, 25)]
    terms = [line[2:6] for line in text.splitlines() if line.startswith("- T")]
    assert terms == [f"T{i:03d}" for i in range(50)]
    assert (CHAT_BLOCK.precious, CHAT_BLOCK.glossary) == (10, 50)


def test_the_package_takes_twenty_notes_and_every_term_and_may_ask_for_more() -> None:
    # Given 25 precious notes and 70 glossary terms
    boot, _ = _boot(25, 70)
    # When REST/MCP read the package
    package = boot.package(NS)
    # Then it has the 20 newest notes (newest first, as listed) and all 70 terms
    assert [p.id for p in package["precious"]] == [f"p{i:02d}" for i in range(24, 4, -1)]
    assert len(package["glossary"]) == 70
    assert (PACKAGE.precious, PACKAGE.glossary, PACKAGE.longtail, PACKAGE.today) == (20, None, 20, 20)
    # And a caller may ask for other limits
    bigger = boot.package(NS, BootLimits(precious=25, glossary=5, longtail=0, today=0))
    assert (len(bigger["precious"]), len(bigger["glossary"])) == (25, 5)


def test_a_rendered_block_is_kept_per_namespace_and_agent_for_max_age() -> None:
    # Given a rendered block
    boot, store = _boot(1, 0)
    first = boot.block(NS, max_chars=8000)
    # When a note is added, Then the kept block is served until it is older than max_age
    store.insert_precious(Precious(id="new", namespace=NS, content="fresh note", created_at=ManualClock().now()))
    assert boot.cached_block(NS, None, max_age=60) == first
    assert boot.cached_block(NS, "agent-a", max_age=60) is None
    assert boot.cached_block(NS, None, max_age=0) is None
    assert "fresh note" in boot.block(NS, max_chars=8000).text


def test_the_long_tail_is_the_next_memories_by_importance_beyond_the_stable_ones() -> None:
    # Given a pinned memory, an identity one, and ordinary ones of several importances
    boot, store = _boot(0, 0)
    memories = MemoryService(
        store, InMemorySearchIndex(), None, ManualClock(), configs.memory_rules(Settings.model_construct())
    )
    writes: list[tuple[str, dict[str, Any]]] = [
        ("The user's birthday is May 2", {"pinned": True, "importance": 0.9}),
        ("The user is called Lin", {"type": "identity", "importance": 0.9}),
        ("The user is allergic to peanuts", {"importance": 0.8}),
        ("The user likes jazz", {"importance": 0.5}),
        ("The user once visited Oslo", {"importance": 0.2}),
        ("The user prefers tea to coffee", {"importance": 0.6}),
    ]
    for content, fields in writes:
        memories.write(NS, MemoryWrite(content=content, **fields))
    # When the package is read with a long tail of three
    package = boot.package(NS, BootLimits(precious=1, glossary=0, longtail=3, today=0))
    # Then the stable ones are not repeated, and the tail is the three most important of the rest
    stable = {m.content for m in package["stable_memories"]}
    assert stable == {"The user's birthday is May 2", "The user is called Lin"}
    assert [m.content for m in package["longtail"]] == [
        "The user is allergic to peanuts",
        "The user prefers tea to coffee",
        "The user likes jazz",
    ]
    # And the chat block holds no long tail
    assert "jazz" not in boot.block(NS, max_chars=100_000).text


def test_todays_messages_are_the_last_n_of_today_with_the_count() -> None:
    # Given 250 messages today (more than one page) and one yesterday
    boot, store = _boot(0, 0)
    now = ManualClock().now()
    start = LocalDay(ManualClock()).start_of_today()
    store.insert_message(Message(id=new_id("msg"), namespace=NS, role="user", content="yesterday",
                                 created_at=start - timedelta(minutes=5)))  # fmt: skip
    for i in range(250):
        at = start + (now - start) * (i + 1) / 251
        store.insert_message(Message(id=f"msg_{i:03d}", namespace=NS, role="user", content=f"m{i}", created_at=at))
    # When the package is read with the last five of today
    package = boot.package(NS, BootLimits(precious=1, glossary=0, longtail=0, today=5))
    # Then it holds the five newest of today, oldest first, and today's count (yesterday's left out)
    assert [m["content"] for m in package["today_messages"]] == ["m245", "m246", "m247", "m248", "m249"]
    assert package["today_count"] == 250
