"""The panel's curation views in headless Chromium, each at desktop and phone width, with markup and script
in every field it renders: batch selection in Memories (merge and undo, archive, erase for good with a
confirmation naming the count, export) and Conversations (delete, erase for good, export), the Reminders
and Usage views, and the settings' model field offering the provider's model list."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from engram.domain.models import UsageRecord, new_id

from tests.conftest import EngramServer
from tests.e2e.test_admin_panel import CHROMIUM, PASSWORD, XSS, browser, expect, login, shot
from tests.fakes import upstream

pytestmark = pytest.mark.browser
__all__ = ["CHROMIUM", "browser"]  # the module's browser fixture, shared

WIDTHS = {"desktop": {"width": 1280, "height": 860}, "phone": {"width": 390, "height": 844}}


@pytest.fixture(params=list(WIDTHS))
def width(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fake_upstream() -> Iterator[upstream.FakeUpstream]:
    with upstream.FakeUpstream(models=("gpt-small", "gpt-large", XSS)) as up:
        yield up


@pytest.fixture
def server(make_server: Callable[..., EngramServer], fake_upstream: upstream.FakeUpstream) -> EngramServer:
    return make_server(
        admin_password=PASSWORD,
        default_namespace="alice",
        upstream_base_url=fake_upstream.openai_base_url,
        chat_model="gpt-small",
    )


@pytest.fixture
def api(server: EngramServer) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


@pytest.fixture
def page(browser: Any, server: EngramServer, width: str) -> Iterator[Any]:
    phone = width == "phone"
    context = browser.new_context(
        viewport=WIDTHS[width], is_mobile=phone, has_touch=phone, base_url=server.url, accept_downloads=True
    )
    page = context.new_page()
    page.console_errors = []
    page.on("pageerror", lambda exc: page.console_errors.append(str(exc)))
    page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))
    yield page
    context.close()


def _unharmed(page: Any, width: str) -> None:
    """No element was made from the payloads, no script of theirs ran, and nothing overflows a phone."""
    assert page.evaluate("window.__pwned") is None
    assert page.title() != "pwned"
    assert page.locator("main img").count() == 0
    if width == "phone":
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.console_errors == []


def _remember(api: httpx.Client, content: str, **fields: Any) -> dict[str, Any]:
    resp = api.post("/v1/memories", json={"content": content, **fields})
    assert resp.status_code == 201, resp.text
    return dict(resp.json()["memory"])


def _select(page: Any, scope: str, text: str) -> None:
    page.locator(f"{scope} .item", has_text=text).locator("input.select-row").check()


def test_memories_batch_merge_undo_archive_export_and_erase(page: Any, api: httpx.Client, width: str) -> None:
    # Given three memories, two carrying markup and script
    a = _remember(api, f"tea {XSS}", tags=["drinks"])
    b = _remember(api, "Alice drinks green tea")
    c = _remember(api, f"Lives in Lyon {XSS}")
    login(page)
    page.locator("#tabs a[data-tab=memories]").click()
    expect(page.locator("#memory-list .memory")).to_have_count(3)
    # When two are selected and merged (no model: the texts joined, edited by the person)
    _select(page, "#memory-list", "tea <img")
    _select(page, "#memory-list", "Alice drinks green tea")
    expect(page.locator("#memory-batch")).to_contain_text("2 memories selected")
    page.locator("#memory-batch").get_by_role("button", name="Merge…").click()
    dialog = page.locator("dialog[open]")
    expect(dialog.locator(".merge-sources li")).to_have_count(2)
    expect(dialog.locator(".merge-sources li").first).to_contain_text(XSS)
    dialog.get_by_role("textbox", name="Merged text").fill(f"Alice drinks green tea {XSS}")
    shot(page, f"{width}-memories-merge", full_page=False)
    dialog.get_by_role("button", name="Merge").click()
    # Then the two are superseded by one memory holding the edited text, shown as its literal characters
    expect(page.locator(".toast").last).to_contain_text("2 memories merged")
    merged = page.locator("#memory-list .memory", has_text="Alice drinks green tea <img")
    expect(merged).to_have_count(1)
    active = api.get("/v1/memories").json()["items"]
    assert sorted(m["content"] for m in active) == sorted([f"Alice drinks green tea {XSS}", c["content"]])
    # When the merge is undone from its card
    merged.get_by_role("button", name="Undo merge").click()
    page.locator("dialog[open]").get_by_role("button", name="Undo merge").click()
    # Then the sources are back as they were
    expect(page.locator(".toast").last).to_contain_text("2 memories restored")
    restored = {m["id"]: m for m in api.get("/v1/memories").json()["items"]}
    assert set(restored) == {a["id"], b["id"], c["id"]}
    assert restored[a["id"]]["tags"] == ["drinks"]
    # When two are selected and archived
    page.reload()
    expect(page.locator("#memory-list .memory")).to_have_count(3)
    _select(page, "#memory-list", "Lives in Lyon")
    _select(page, "#memory-list", "Alice drinks green tea")
    page.locator("#memory-batch").get_by_role("button", name="Archive").click()
    expect(page.locator(".toast").last).to_contain_text("2 memories archived")
    assert api.get(f"/v1/memories/{c['id']}").json()["status"] == "archived"
    # When the last one is exported, Then the download holds it
    _select(page, "#memory-list", "tea <img")
    with page.expect_download() as download:
        page.locator("#memory-batch").get_by_role("button", name="Export").click()
    exported = json.loads(Path(download.value.path()).read_text(encoding="utf-8"))
    assert [m["id"] for m in exported["memories"]] == [a["id"]]
    # When it is erased for good, Then the confirmation names the count, and it is gone
    page.locator("#memory-batch").get_by_role("button", name="Erase for good…").click()
    confirm = page.locator("dialog[open]")
    expect(confirm).to_contain_text("Erase 1 memory for good?")
    confirm.get_by_role("button", name="Erase 1").click()
    expect(page.locator(".toast").last).to_contain_text("1 memory erased for good")
    assert api.get(f"/v1/memories/{a['id']}").status_code == 404
    _unharmed(page, width)


def test_memories_core_candidates_promote(page: Any, api: httpx.Client, server: EngramServer, width: str) -> None:
    # Given a memory recalled into many chats (with markup in it)
    often = _remember(api, f"Works as a nurse {XSS}")
    for _ in range(3):
        server.container.store.record_injected("alice", [often["id"]], server.container.clock.now())
    login(page)
    page.locator("#tabs a[data-tab=memories]").click()
    # When the core candidates are opened and it is made core
    page.get_by_role("button", name="Core candidates").click()
    row = page.locator("dialog[open] .core-candidate")
    expect(row).to_have_count(1)
    expect(row.locator(".content")).to_have_text(f"Works as a nurse {XSS}")
    expect(row).to_contain_text("recalled into 3 chat turns")
    row.get_by_role("button", name="Make core").click()
    # Then it is in the core layer and leaves the list
    expect(page.locator("dialog[open]")).to_contain_text("No candidates")
    assert api.get(f"/v1/memories/{often['id']}").json()["layer"] == "core"
    _unharmed(page, width)


def _thread(api: httpx.Client, thread: str, text: str) -> None:
    messages = [{"role": "user", "content": text, "conversation_id": thread, "created_at": "2026-11-30T10:00:00Z"}]
    api.post("/v1/ingest/messages", json={"messages": messages}).raise_for_status()


def test_conversations_batch_delete_export_and_erase(page: Any, api: httpx.Client, width: str) -> None:
    # Given two threads whose messages and titles carry markup
    _thread(api, "kyoto", f"flying May 3 {XSS}")
    _thread(api, "oslo", "new plans")
    api.patch("/v1/threads/oslo", json={"title": f"Oslo {XSS}"}).raise_for_status()
    login(page)
    page.locator("#tabs a[data-tab=conversations]").click()
    expect(page.locator("#thread-list .thread")).to_have_count(2)
    expect(page.locator("#thread-list .thread", has_text="Oslo").locator(".thread-title")).to_have_text(f"Oslo {XSS}")
    # When both are selected and exported, Then the download holds both with their messages
    _select(page, "#thread-list", "kyoto")
    _select(page, "#thread-list", "Oslo")
    expect(page.locator("#thread-batch")).to_contain_text("2 conversations selected")
    with page.expect_download() as download:
        page.locator("#thread-batch").get_by_role("button", name="Export").click()
    exported = json.loads(Path(download.value.path()).read_text(encoding="utf-8"))
    assert {t["id"]: [m["content"] for m in t["messages"]] for t in exported["threads"]} == {
        "kyoto": [f"flying May 3 {XSS}"],
        "oslo": ["new plans"],
    }
    # When both are deleted, Then they are in the recycle bin
    page.locator("#thread-batch").get_by_role("button", name="Delete").click()
    expect(page.locator(".toast").last).to_contain_text("2 conversations moved to the recycle bin")
    assert api.get("/v1/threads").json()["items"] == []
    # When the bin is shown and one is erased for good
    page.get_by_label("Show the recycle bin").check()
    expect(page.locator("#thread-list .thread")).to_have_count(2)
    _select(page, "#thread-list", "kyoto")
    page.locator("#thread-batch").get_by_role("button", name="Erase for good…").click()
    expect(page.locator("dialog[open]")).to_contain_text("Erase 1 conversation for good?")
    page.locator("dialog[open]").get_by_role("button", name="Erase 1").click()
    # Then it and its messages are gone; the other stays restorable
    expect(page.locator(".toast").last).to_contain_text("1 conversation erased for good")
    assert api.get("/v1/threads/kyoto").status_code == 404
    assert [t["id"] for t in api.get("/v1/threads", params={"deleted": "true"}).json()["items"]] == ["oslo"]
    _unharmed(page, width)


def test_reminders_view_snoozes_and_cancels(page: Any, api: httpx.Client, width: str) -> None:
    # Given two upcoming reminders, one with markup in its text
    soon = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    later = (datetime.now(UTC) + timedelta(days=5)).isoformat()
    call = _remember(api, f"Call mum {XSS}", remind_at=soon)
    _remember(api, "Dentist", remind_at=later)
    login(page)
    page.goto("/admin#more/reminders")
    rows = page.locator("#reminder-list .reminder")
    expect(rows).to_have_count(2)
    expect(rows.first.locator(".content")).to_have_text(f"Call mum {XSS}")
    shot(page, f"{width}-reminders", full_page=False)
    # When the first is snoozed to a new time
    rows.first.get_by_role("button", name="Snooze…").click()
    page.locator("dialog[open]").get_by_label("Remind me at").fill("2099-03-04T09:30")
    page.locator("dialog[open]").get_by_role("button", name="Snooze").click()
    expect(page.locator(".toast").last).to_contain_text("Snoozed")
    # Then the reminder moved (in the browser's zone, with its offset)
    moved = {r["memory_id"]: r for r in api.get("/v1/reminders").json()["items"]}[call["id"]]
    assert moved["remind_at"].startswith("2099-03-04")
    # When the dentist reminder is cancelled, Then it is no longer upcoming
    page.locator("#reminder-list .reminder", has_text="Dentist").get_by_role("button", name="Cancel reminder").click()
    page.locator("dialog[open]").get_by_role("button", name="Cancel reminder").click()
    expect(page.locator("#reminder-list .reminder")).to_have_count(1)
    assert [r["content"] for r in api.get("/v1/reminders").json()["items"]] == [f"Call mum {XSS}"]
    # And the delivered and missed lists are reachable
    page.get_by_role("button", name="Missed").click()
    expect(page.locator("#reminder-list")).to_contain_text("No missed reminders.")
    _unharmed(page, width)


def test_usage_view_shows_tokens_per_model_and_day(page: Any, server: EngramServer, width: str) -> None:
    # Given usage of two models (one named with markup) on two days
    now = server.container.clock.now()
    for model, tokens, ago in (("gpt-small", 100, 0), ("gpt-small", 50, 1), (XSS, 7, 1)):
        server.container.store.append_usage(
            UsageRecord(
                id=new_id("use"),
                namespace="alice",
                model=model,
                thread=f"trip {XSS}" if ago else "groceries",
                input_tokens=tokens,
                output_tokens=1,
                created_at=now - timedelta(days=ago),
            )
        )
    login(page)
    page.goto("/admin#more/usage")
    # Then the per-model table lists both, the markup as its characters, and the days add up
    models = page.locator("#usage-models tbody tr")
    expect(models).to_have_count(2)
    expect(page.locator("#usage-models")).to_contain_text(XSS)
    expect(page.locator("#usage-days tbody tr")).to_have_count(2)
    expect(page.locator("#usage-days tbody tr").last).to_contain_text("101")
    expect(page.locator("#usage-day-models tbody tr")).to_have_count(3)
    threads = page.locator("#usage-threads tbody tr")
    expect(threads).to_have_count(2)
    expect(threads.first).to_contain_text("groceries")
    expect(threads.last.locator("td").first).to_have_text(f"trip {XSS}")
    shot(page, f"{width}-usage", full_page=False)
    _unharmed(page, width)


def test_settings_model_field_offers_the_provider_models(
    page: Any, api: httpx.Client, fake_upstream: upstream.FakeUpstream, width: str
) -> None:
    login(page)
    page.locator("#tabs a[data-tab=settings]").click()
    # Then the provider's models are offered to the model fields, the markup one as a value only
    options = page.locator("#model-list option")
    expect(options).to_have_count(3)
    assert sorted(options.evaluate_all("els => els.map(e => e.value)")) == sorted(["gpt-small", "gpt-large", XSS])
    expect(page.locator("#model-list-note")).to_contain_text("3 models offered")
    assert page.locator("#set-extract_model").get_attribute("list") == "model-list"
    # When one is picked and saved
    page.locator("#set-extract_model").fill("gpt-large")
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator(".toast").last).to_contain_text("Saved")
    # Then it is the extraction model; the searchable admin route filters, /v1/models is unchanged
    values = {i["name"]: i["value"] for i in api.get("/v1/admin/settings").json()["items"]}
    assert values["extract_model"] == "gpt-large"
    assert api.get("/v1/admin/models", params={"q": "LARGE"}).json()["items"] == ["gpt-large"]
    # (the public alias and the chat model: no passthrough, so none of the provider's other models)
    assert [m["id"] for m in api.get("/v1/models").json()["data"]] == ["companion", "gpt-small"]
    _unharmed(page, width)


def test_consolidation_draft_is_edited_and_applied_only_on_confirm(
    page: Any, api: httpx.Client, fake_upstream: upstream.FakeUpstream, width: str
) -> None:
    # Given three memories and a model that proposes merging two of them (its text carrying markup)
    rows = [_remember(api, t) for t in ("Tea at 7", "Drinks tea at seven", f"Has a cat {XSS}")]
    item = {"source_ids": [rows[0]["id"], rows[1]["id"]], "content": f"Drinks tea at 7 {XSS}", "reason": XSS}
    fake_upstream.script(upstream.Reply(text=json.dumps({"items": [item]})))
    login(page)
    page.locator("#tabs a[data-tab=memories]").click()
    expect(page.locator("#memory-list .memory")).to_have_count(3)
    for text in ("Tea at 7", "Drinks tea at seven", "Has a cat"):
        _select(page, "#memory-list", text)
    # When a consolidation of the three is drafted
    page.locator("#memory-batch").get_by_role("button", name="Consolidate…").click()
    dialog = page.locator("dialog[open]")
    expect(dialog.locator(".consolidation-item")).to_have_count(1)
    box = dialog.get_by_role("textbox", name="Text of item it1")
    expect(box).to_have_value(f"Drinks tea at 7 {XSS}")
    expect(dialog.locator(".consolidation-item .merge-sources li")).to_have_count(2)
    # Then nothing has changed yet
    assert sorted(m["version"] for m in api.get("/v1/memories").json()["items"]) == [1, 1, 1]
    # When the item is edited and applied
    box.fill("Drinks tea at 7 sharp")
    shot(page, f"{width}-consolidation", full_page=False)
    dialog.get_by_role("button", name="Apply").click()
    # Then it is one merge with the edited text
    expect(page.locator(".toast").last).to_contain_text("1 change applied")
    contents = sorted(m["content"] for m in api.get("/v1/memories").json()["items"])
    assert contents == sorted(["Drinks tea at 7 sharp", f"Has a cat {XSS}"])
    _unharmed(page, width)
