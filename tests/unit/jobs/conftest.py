"""A container on real stores (in-memory and SQLite) with the scripted model, a hand-moved clock and
a bag-of-words embedder, plus helpers to add messages and memories."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from engram.bootstrap import Container, Overrides, build_container
from engram.domain.models import Message, MessageRole, new_id
from engram.services.library.memories import MemoryWrite
from engram.settings import Settings

from tests.fakes.chat_model import ScriptedChatModel
from tests.fakes.clock import ManualClock
from tests.fakes.embedder import HashEmbedder

NS = "alice"


@dataclass
class Env:
    container: Container
    model: ScriptedChatModel
    clock: ManualClock

    def message(self, content: str, *, at: datetime | None = None, role: MessageRole = "user", ns: str = NS) -> Message:
        row, _ = self.container.store.insert_message(
            Message(
                id=new_id("msg"),
                namespace=ns,
                role=role,
                content=content,
                created_at=at or self.clock.now(),
            )
        )
        return row

    def remember(self, content: str, ns: str = NS, **fields: Any) -> Any:
        return self.container.memories.write(ns, MemoryWrite(content=content, **fields)).memory

    def active(self, ns: str = NS) -> list[Any]:
        return list(self.container.store.iter_memories(ns, ("active",)))


MakeEnv = Callable[..., Env]  # the make_env fixture: Settings overrides in, a fresh Env out


@pytest.fixture(params=["memory", "sqlite"])
def make_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeEnv]:
    built: list[Container] = []

    def make(**settings: Any) -> Env:
        model = ScriptedChatModel()
        clock = ManualClock()
        config = Settings(
            store=request.param,
            search="memory" if request.param == "memory" else "local",
            embedder="none",
            data_dir=tmp_path / f"env{len(built)}",
            scheduler_enabled=False,
            **settings,
        )
        container = build_container(
            config, Overrides(embedder=HashEmbedder(), clock=clock, extract_model=model, dream_model=model)
        )
        built.append(container)
        return Env(container, model, clock)

    yield make
    for container in built:
        container.close()


@pytest.fixture
def env(make_env: MakeEnv) -> Env:
    return make_env()


def ago(env: Env, **delta: float) -> datetime:
    return env.clock.now() - timedelta(**delta)
