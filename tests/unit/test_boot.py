"""One boot package for every surface (services/boot.py): the chat block stays small, REST/MCP get more."""

from __future__ import annotations

from datetime import timedelta

from engram.adapters.storage.inmemory import InMemoryMemoryStore
from engram.domain.models import GlossaryTerm, Precious
from engram.services.boot import CHAT_BLOCK, PACKAGE, BootLimits, BootService
from engram.services.local_day import LocalDay
from engram.services.stats import NamespaceStats

from tests.fakes.clock import ManualClock

NS = "u1"


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
    return BootService(store, day, NamespaceStats(store, day)), store


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
    assert (PACKAGE.precious, PACKAGE.glossary) == (20, None)
    # And a caller may ask for other limits
    bigger = boot.package(NS, BootLimits(precious=25, glossary=5))
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
