"""Runtime settings: allowlist, validation against Settings fields, sharing through the store."""

from __future__ import annotations

import sys
import threading

import pytest
from engram.adapters.storage.inmemory import InMemoryMemoryStore
from engram.domain.errors import InvalidInput
from engram.services.runtime_settings import SETTINGS_KEY, SYSTEM_NAMESPACE, Live, RuntimeSettings
from engram.settings import Settings

from tests.fakes.clock import ManualClock


class Tick:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_only_allowlisted_names_and_valid_values_are_accepted() -> None:
    runtime = RuntimeSettings(InMemoryMemoryStore(clock=ManualClock()), Settings(store="memory"))
    # Secrets, adapters and unknown names are refused
    for name, value in (("admin_password", "x"), ("store", "memory"), ("api_key", "k"), ("nope", 1)):
        with pytest.raises(InvalidInput):
            runtime.update({name: value})
    # Values outside the Settings field constraints are refused, all or nothing
    with pytest.raises(InvalidInput, match="recall_top_k"):
        runtime.update({"dedup_cosine": 0.5, "recall_top_k": 51})
    with pytest.raises(InvalidInput, match="unknown time zone"):
        runtime.update({"timezone": "Atlantis/Capital"})
    assert runtime.overrides() == {}
    # Valid values are coerced like the environment would be
    runtime.update({"recall_top_k": "7", "chat_model": "  gpt-x  "})
    assert runtime.effective().recall_top_k == 7
    assert runtime.effective().chat_model == "gpt-x"


def test_other_processes_see_a_change_within_the_ttl() -> None:
    # Given two processes sharing a store
    store = InMemoryMemoryStore(clock=ManualClock())
    tick = Tick()
    writer = RuntimeSettings(store, Settings(store="memory"), ttl_seconds=5, monotonic=tick)
    reader = RuntimeSettings(store, Settings(store="memory"), ttl_seconds=5, monotonic=tick)
    top_k = reader.provider(lambda s: s.recall_top_k)
    assert top_k() == 5
    # When one process changes a setting
    writer.update({"recall_top_k": 3})
    # Then the other keeps its cached value until the TTL, then applies it
    assert top_k() == 5
    tick.t = 5.0
    assert top_k() == 3
    # And removing the override restores the environment's value
    writer.update({"recall_top_k": None})
    tick.t = 10.0
    assert top_k() == 5


def test_bad_stored_values_are_ignored_not_fatal() -> None:
    # Given a row edited by hand with one bad and one good value
    store = InMemoryMemoryStore(clock=ManualClock())
    store.put_cache(SYSTEM_NAMESPACE, SETTINGS_KEY, {"recall_top_k": -4, "timezone": "Europe/Paris", "store": "x"})
    runtime = RuntimeSettings(store, Settings(store="memory"))
    # Then the good value applies and the rest is ignored
    assert runtime.effective().timezone == "Europe/Paris"
    assert runtime.effective().recall_top_k == 5
    assert runtime.effective().store == "memory"


def test_describe_lists_groups_bounds_and_defaults() -> None:
    runtime = RuntimeSettings(InMemoryMemoryStore(clock=ManualClock()), Settings(store="memory", recall_top_k=6))
    runtime.update({"recall_top_k": 2})
    items = {i["name"]: i for i in runtime.describe()}
    assert items["recall_top_k"] | {"description": ""} == {
        "name": "recall_top_k",
        "group": "Recall",
        "label": "Memories injected per turn",
        "description": "",
        "kind": "integer",
        "minimum": 1.0,
        "maximum": 50.0,
        "value": 2,
        "default": 6,
        "overridden": True,
    }
    assert items["timezone"]["kind"] == "timezone"
    assert "admin_password" not in items and "upstream_api_key" not in items


def test_the_composed_services_follow_runtime_changes_without_a_restart() -> None:
    # Given a container whose jobs and gateway use an upstream model named in the environment
    from engram.bootstrap import build_container

    settings = Settings(
        store="memory",
        search="memory",
        embedder="none",
        upstream_base_url="http://127.0.0.1:9/v1",
        chat_model="env-model",
        timezone="UTC",
    )
    container = build_container(settings)
    try:
        assert container.extraction._model is not None and container.dreaming._model is not None
        assert container.extraction._model.model_id == "env-model"
        assert container.chat._config().routing.chat_model == "env-model"
        # When the owner changes models, thresholds and the time zone at runtime
        container.runtime.update(
            {
                "extract_model": "small-model",
                "chat_model": "big-model",
                "review_confidence": 0.5,
                "timezone": "Asia/Tokyo",
                "recall_top_k": 9,
                "dedup_cosine": 0.8,
            }
        )
        # Then every service reads the new values on its next use
        assert container.extraction._model.model_id == "small-model"
        assert container.dreaming._model.model_id == "big-model"
        assert container.chat._config().routing.chat_model == "big-model"
        assert container.extraction._config().review_confidence == 0.5
        assert container.dreaming._config().timezone == "Asia/Tokyo"
        assert container.local_day.zone.key == "Asia/Tokyo"
        assert container.recall.config.top_k == 9
        assert container.memories._rules().dedup_cosine == 0.8
    finally:
        container.close()


def test_a_provider_shared_by_threads_never_fails_nor_keeps_an_old_config() -> None:
    # Given a provider read by four threads while a fifth keeps changing the setting behind it,
    # with thread switches forced as often as the interpreter allows
    runtime = RuntimeSettings(InMemoryMemoryStore(clock=ManualClock()), Settings(store="memory"), ttl_seconds=0)
    top_k = runtime.provider(lambda s: ("config", s.recall_top_k))
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        try:
            while not stop.is_set():
                name, value = top_k()
                assert name == "config" and 1 <= value <= 20
        except BaseException as exc:  # any failure in a reader fails the test below
            errors.append(exc)
            stop.set()

    def change() -> None:
        try:
            for n in range(1000):
                runtime.update({"recall_top_k": 1 + n % 20})
        except BaseException as exc:
            errors.append(exc)
        finally:
            stop.set()

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=read) for _ in range(4)] + [threading.Thread(target=change)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        sys.setswitchinterval(switch)
    # Then no reader failed, and the provider gives the last value set, not one memoized from before
    assert errors == []
    runtime.update({"recall_top_k": 7})
    assert top_k() == ("config", 7)
    assert runtime.get("recall_top_k") == 7


def test_a_live_config_is_fixed_or_follows_the_runtime_settings() -> None:
    # Given a plain config, a Live of it, and a provider over the runtime settings
    store = InMemoryMemoryStore(clock=ManualClock())
    runtime = RuntimeSettings(store, Settings.model_construct(), ttl_seconds=0)
    top_k = runtime.provider(lambda s: s.recall_top_k)
    fixed = Live.of(7)
    # Then a plain config never changes, a Live is taken as it is, and a provider follows a change
    same, followed = Live[int].of(fixed), Live[int].of(top_k)
    assert fixed() == 7 and same is fixed and followed is top_k
    before = top_k()
    runtime.update({"recall_top_k": before + 1})
    assert (fixed(), top_k()) == (7, before + 1)
