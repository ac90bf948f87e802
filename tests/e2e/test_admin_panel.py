"""The admin panel in headless Chromium (Debian's browser, driven by Playwright's Python package).

Real parts: uvicorn on loopback, SQLite store and index, the local embedder, the panel's own static
files. Screenshots of every tab (desktop and phone) land in test-artifacts/admin/.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import OTHER_KEY, EngramServer

pytestmark = pytest.mark.browser

# The system browser scripts/install-browser.sh installs (ENGRAM_CHROMIUM: another Chromium or Chrome).
CHROMIUM = Path(os.environ.get("ENGRAM_CHROMIUM", "/usr/bin/chromium"))
PASSWORD = "a long admin password 42"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "admin"
BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
XSS = "<img src=x onerror=\"window.__pwned=1;document.title='pwned'\">"

if not CHROMIUM.exists():
    pytest.skip(f"needs {CHROMIUM}: run scripts/install-browser.sh (or set ENGRAM_CHROMIUM)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="needs the `browser` extra (pip install playwright)")
expect = sync_api.expect


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=BROWSER_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def panel_server(make_server: Callable[..., EngramServer]) -> EngramServer:
    return make_server(admin_password=PASSWORD, default_namespace="alice")


@pytest.fixture
def owner_api(panel_server: EngramServer) -> Iterator[httpx.Client]:
    with panel_server.client() as client:
        yield client


@pytest.fixture
def page(browser: Any, panel_server: EngramServer) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 860}, base_url=panel_server.url)
    page = context.new_page()
    page.dialogs_seen = []
    page.on("dialog", lambda d: (page.dialogs_seen.append(d.message), d.dismiss()))
    page.console_errors = []
    page.on("pageerror", lambda exc: page.console_errors.append(str(exc)))
    yield page
    context.close()


def login(page: Any, password: str = PASSWORD) -> None:
    page.goto("/admin")
    page.get_by_label("Admin password").fill(password)
    page.get_by_role("button", name="Log in").click()
    if password == PASSWORD:
        # Wait for the panel: a `page.goto` right after the click would otherwise navigate away while
        # POST /admin/login is in flight, the browser drops its Set-Cookie, and the next page shows the
        # login form (the CI failure of 2026-12-02 in test_reminders_view_snoozes_and_cancels).
        expect(page.locator("#app")).to_be_visible()


def shot(page: Any, name: str, *, full_page: bool = True) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.wait_for_timeout(150)  # let toasts and transitions settle
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full_page)


def seed(owner: httpx.Client, server: EngramServer) -> dict[str, Any]:
    tea = owner.post(
        "/v1/memories",
        json={
            "content": "Alice likes green tea in the morning",
            "type": "preference",
            "tags": ["drinks"],
            "importance": 0.7,
        },
    ).json()["memory"]
    owner.post(
        "/v1/memories",
        json={
            "content": "Alice lives in Berlin",
            "type": "identity",
            "fact_key": "home:city",
            "layer": "core",
            "pinned": True,
        },
    )
    owner.post(
        "/v1/memories",
        json={"content": "Alice moved to Lisbon in 2026", "type": "identity", "fact_key": "home:city", "layer": "core"},
    )
    owner.post(
        "/v1/memories",
        json={
            "content": "Project Engram ships the admin panel this week",
            "type": "project",
            "layer": "event",
            "tags": ["work"],
        },
    )
    owner.put("/v1/digest", json={"content": "Alice: tea lover, moved from Berlin to Lisbon, builds Engram."})
    owner.post(
        "/v1/ingest/messages",
        json={
            "messages": [
                {"role": "user", "content": "Good morning!"},
                {"role": "assistant", "content": "Morning, Alice."},
            ]
        },
    )
    owner.post(
        "/v1/precious",
        json={"content": "You are the kind of tired that sleep does not fix.", "reason": "said on a hard night"},
    )
    owner.post("/v1/glossary", json={"term": "Mochi", "aliases": ["the cat"], "definition": "Alice's grey cat"})
    candidates = server.container.candidates
    cand = candidates.propose(
        "alice",
        "Alice prefers oolong tea over green tea",
        type="preference",
        confidence=0.55,
        source_message_ids=["m1", "m2"],
    )
    candidates.propose("alice", "Alice might be learning Portuguese", confidence=0.35)
    return {"tea": tea, "candidate": cand}


# -- login and auth ----------------------------------------------------------------------------------
def test_wrong_password_is_refused_and_nothing_loads(page: Any, panel_server: EngramServer) -> None:
    # Given the login screen
    # When a wrong password is submitted
    login(page, "not the password")
    # Then the error shows, the panel stays hidden and no session cookie exists
    expect(page.get_by_role("alert")).to_have_text("Wrong password.")
    expect(page.locator("#app")).to_be_hidden()
    assert not [c for c in page.context.cookies() if c["name"] == "engram_admin"]
    shot(page, "login-wrong-password")


def test_missing_cookie_is_refused_by_the_api(page: Any, panel_server: EngramServer) -> None:
    # Given a browser that never logged in
    page.goto("/admin")
    # When it calls the API directly
    status = page.evaluate("fetch('/v1/stats').then(r => r.status)")
    # Then it is refused and the login form is shown
    assert status == 401
    expect(page.get_by_label("Admin password")).to_be_visible()


def test_login_shows_today_then_logout(page: Any, panel_server: EngramServer, owner_api: httpx.Client) -> None:
    # Given some memory, a digest, messages and candidates
    seed(owner_api, panel_server)
    # When the owner logs in
    login(page)
    # Then Today shows the counts, the digest and the review badge
    today = page.locator("[data-view=today]")
    expect(today.get_by_text("Alice: tea lover, moved from Berlin to Lisbon, builds Engram.")).to_be_visible()
    expect(today.locator(".stat", has_text="messages today").locator(".stat-value")).to_have_text("2")
    expect(today.locator(".stat", has_text="to review").locator(".stat-value")).to_have_text("2")
    expect(today.locator(".stat", has_text="active memories").locator(".stat-value")).to_have_text("3")
    expect(page.locator("#review-badge")).to_have_text("2")
    expect(today.locator(".bars li", has_text="identity")).to_contain_text("1")
    cookie = next(c for c in page.context.cookies() if c["name"] == "engram_admin")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert page.evaluate("document.cookie") == ""  # not readable by scripts
    shot(page, "today")

    # When the owner logs out
    page.get_by_role("button", name="Log out").click()
    # Then the login form is back and the API refuses the browser
    expect(page.get_by_label("Admin password")).to_be_visible()
    assert page.evaluate("fetch('/v1/stats').then(r => r.status)") == 401


def test_unconfigured_panel_says_how_to_set_a_password(browser: Any, make_server: Callable[..., EngramServer]) -> None:
    # Given a server without ENGRAM_ADMIN_PASSWORD
    server = make_server()
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    # When the panel opens
    page.goto("/admin")
    # Then it explains how to set the password and offers no login form
    expect(page.get_by_text("Set an admin password first")).to_be_visible()
    expect(page.get_by_text("ENGRAM_ADMIN_PASSWORD", exact=False)).to_be_visible()
    expect(page.get_by_text("admin_password", exact=True)).to_be_visible()
    expect(page.locator("#login-form")).to_be_hidden()
    shot(page, "login-unconfigured")
    context.close()


# -- memories --------------------------------------------------------------------------------------
def test_search_and_edit_a_memory(page: Any, panel_server: EngramServer, owner_api: httpx.Client) -> None:
    # Given memories
    ids = seed(owner_api, panel_server)
    login(page)
    page.locator("#tabs a[data-tab=memories]").click()
    view = page.locator("[data-view=memories]")
    expect(view.locator(".memory")).to_have_count(3)
    shot(page, "memories")

    # When the owner searches with the real recall
    view.get_by_label("Search memories").fill("green tea")
    view.get_by_role("button", name="Search").click()
    # Then the tea memory comes first, with a score
    first = view.locator(".memory").first
    expect(first.locator(".content")).to_have_text("Alice likes green tea in the morning")
    expect(first.locator(".chip.score")).to_be_visible()

    # When it is edited
    first.get_by_role("button", name="Edit").click()
    dialog = page.locator("dialog[open]")
    dialog.locator("textarea[name=content]").fill("Alice likes jasmine green tea in the morning")
    dialog.locator("input[name=tags]").fill("drinks, morning")
    shot(page, "memories-edit-dialog")
    dialog.get_by_role("button", name="Save").click()
    # Then the list and the store show the new text and tags
    expect(view.locator(".memory").first.locator(".content")).to_have_text(
        "Alice likes jasmine green tea in the morning"
    )
    stored = owner_api.get(f"/v1/memories/{ids['tea']['id']}").json()
    assert stored["content"] == "Alice likes jasmine green tea in the morning"
    assert stored["tags"] == ["drinks", "morning"]


def test_pin_archive_restore_and_versions(page: Any, panel_server: EngramServer, owner_api: httpx.Client) -> None:
    # Given memories, one with an older version
    ids = seed(owner_api, panel_server)
    login(page)
    page.locator("#tabs a[data-tab=memories]").click()
    view = page.locator("[data-view=memories]")
    tea = view.locator(f"[data-id='{ids['tea']['id']}']")

    # When the tea memory is pinned, then archived
    tea.get_by_role("button", name="Pin").click()
    expect(tea.locator(".chip.pinned")).to_be_visible()
    view.locator(f"[data-id='{ids['tea']['id']}']").get_by_role("button", name="Archive").click()
    # Then it leaves the active list, and shows up under Archived where it can be restored
    expect(view.locator(f"[data-id='{ids['tea']['id']}']")).to_have_count(0)
    # and "Any status" lists every row: the archived tea and the superseded city fact with the rest
    view.get_by_label("Status").select_option("all")
    expect(view.locator(f"[data-id='{ids['tea']['id']}'] .chip.s-archived")).to_be_visible()
    expect(view.locator(".memory", has_text="Alice lives in Berlin").locator(".chip.s-superseded")).to_be_visible()
    expect(view.locator(".memory")).to_have_count(4)
    view.get_by_label("Status").select_option("archived")
    archived = view.locator(f"[data-id='{ids['tea']['id']}']")
    expect(archived.locator(".chip.s-archived")).to_be_visible()
    archived.get_by_role("button", name="Restore").click()
    expect(view.locator(f"[data-id='{ids['tea']['id']}']")).to_have_count(0)
    assert owner_api.get(f"/v1/memories/{ids['tea']['id']}").json()["status"] == "active"

    # When the version chain of the city fact is opened
    view.get_by_label("Status").select_option("active")
    view.locator(".memory", has_text="Lisbon").get_by_role("button", name="Versions").click()
    dialog = page.locator("dialog[open]")
    # Then both versions show, oldest first, and the old one can be restored
    expect(dialog.locator(".version")).to_have_count(2)
    expect(dialog.locator(".version").first).to_contain_text("Alice lives in Berlin")
    shot(page, "memories-versions")
    dialog.get_by_role("button", name="Restore this version").click()
    expect(dialog.locator(".version").first.locator(".chip")).to_have_text("active")
    assert owner_api.get("/v1/memories", params={"fact_key": "home:city"}).json()["items"][0]["content"] == (
        "Alice lives in Berlin"
    )


def test_html_in_a_memory_stays_inert_text(page: Any, panel_server: EngramServer, owner_api: httpx.Client) -> None:
    # Given memories, a candidate, a glossary term and a precious note that contain markup and script
    owner_api.post("/v1/memories", json={"content": XSS, "tags": ["<b>bold</b>"]})
    owner_api.post("/v1/glossary", json={"term": "<script>window.__pwned=2</script>", "definition": XSS})
    owner_api.post("/v1/precious", json={"content": XSS})
    owner_api.put("/v1/digest", json={"content": XSS})
    panel_server.container.candidates.propose("alice", XSS, confidence=0.4)
    # When every place that shows them is opened
    login(page)
    expect(page.locator(".digest")).to_have_text(XSS)
    for tab, section in (("memories", ""), ("review", ""), ("more", "/precious"), ("more", "/glossary")):
        page.goto(f"/admin/#{tab}{section}")
        page.wait_for_selector(".item")
        # Then the literal text is visible and no element was created from it
        expect(page.locator(".item .content", has_text="onerror").first).to_have_text(XSS)
        assert page.locator(".item img").count() == 0
        assert page.locator(".item script").count() == 0
    page.goto("/admin/#memories")
    expect(page.get_by_text("#<b>bold</b>")).to_be_visible()
    shot(page, "xss-inert")
    # And no script ran: no flag, no title change, no dialog, no page error
    assert page.evaluate("window.__pwned") is None
    assert page.title() != "pwned"
    assert page.dialogs_seen == []
    assert page.console_errors == []


# -- review ----------------------------------------------------------------------------------------
def test_approve_and_merge_candidates(page: Any, panel_server: EngramServer, owner_api: httpx.Client) -> None:
    # Given two pending candidates
    ids = seed(owner_api, panel_server)
    login(page)
    page.locator("#tabs a[data-tab=review]").click()
    view = page.locator("[data-view=review]")
    expect(view.locator(".candidate")).to_have_count(2)
    expect(view.locator(".candidate").first).to_contain_text("confident")
    shot(page, "review")

    # When the Portuguese candidate is approved
    view.locator(".candidate", has_text="Portuguese").get_by_role("button", name="Approve").click()
    # Then it becomes a memory and leaves the queue
    expect(view.locator(".candidate")).to_have_count(1)
    expect(page.locator("#review-badge")).to_have_text("1")
    found = owner_api.post("/v1/search/memories", json={"query": "Portuguese"}).json()["items"]
    assert found and found[0]["memory"]["content"] == "Alice might be learning Portuguese"

    # When the oolong candidate is merged into the tea memory chosen with the search picker
    view.locator(".candidate").get_by_role("button", name="Merge into…").click()
    dialog = page.locator("dialog[open]")
    dialog.get_by_label("Search memories").fill("green tea morning")
    dialog.locator(".pick", has_text="Alice likes green tea in the morning").click()
    dialog.locator("textarea").fill("Alice likes oolong and green tea")
    shot(page, "review-merge-picker")
    dialog.get_by_role("button", name="Merge").click()
    # Then the queue is empty and the tea memory has a new version with the merged text
    expect(view.get_by_text("Nothing to review")).to_be_visible()
    expect(page.locator("#review-badge")).to_be_hidden()
    chain = owner_api.get(f"/v1/memories/{ids['tea']['id']}/versions").json()["items"]
    assert [v["content"] for v in chain][-1] == "Alice likes oolong and green tea"
    merged = owner_api.get("/v1/candidates", params={"status": "merged"}).json()["items"]
    assert [c["id"] for c in merged] == [ids["candidate"].id]


def test_supersede_candidate_replaces_the_chosen_memory(
    page: Any, panel_server: EngramServer, owner_api: httpx.Client
) -> None:
    # Given a candidate and the memory it should replace
    seed(owner_api, panel_server)
    login(page)
    page.locator("#tabs a[data-tab=review]").click()
    card = page.locator(".candidate", has_text="oolong")
    # When it supersedes the tea memory
    card.get_by_role("button", name="Supersede…").click()
    dialog = page.locator("dialog[open]")
    dialog.locator(".pick", has_text="green tea in the morning").click()
    dialog.get_by_role("button", name="Supersede").click()
    # Then the old memory is superseded by the candidate's text
    expect(page.locator(".candidate", has_text="oolong")).to_have_count(0)
    active = owner_api.get("/v1/memories", params={"type": "preference"}).json()["items"]
    assert [m["content"] for m in active] == ["Alice prefers oolong tea over green tea"]
    old = owner_api.get("/v1/memories", params={"status": "superseded", "type": "preference"}).json()["items"]
    assert old[0]["content"] == "Alice likes green tea in the morning"


# -- more ------------------------------------------------------------------------------------------
def test_add_glossary_term_and_precious_note(page: Any, panel_server: EngramServer, owner_api: httpx.Client) -> None:
    # Given the glossary section
    seed(owner_api, panel_server)
    login(page)
    page.locator("#tabs a[data-tab=more]").click()
    shot(page, "more-precious")
    page.locator(".segmented").get_by_role("link", name="Glossary").click()
    # When a term with aliases is added
    page.get_by_role("button", name="Add term").click()
    dialog = page.locator("dialog[open]")
    dialog.get_by_label("Term").fill("Sunday reset")
    dialog.get_by_label("Aliases").fill("reset day, SR")
    dialog.get_by_label("Definition").fill("Alice's weekly planning ritual on Sunday evenings")
    dialog.get_by_role("button", name="Save").click()
    # Then it is listed and stored
    term = page.locator(".term", has_text="Sunday reset")
    expect(term.locator(".chip.alias")).to_have_text(["reset day", "SR"])
    stored = {t["term"]: t for t in owner_api.get("/v1/glossary").json()["items"]}
    assert stored["Sunday reset"]["aliases"] == ["reset day", "SR"]
    shot(page, "more-glossary")

    # When a precious note is kept
    page.locator(".segmented").get_by_role("link", name="Precious").click()
    page.locator("textarea[name=precious]").fill("Keep going, quietly.")
    page.get_by_role("button", name="Add note").click()
    # Then it is listed first... and stored verbatim
    expect(page.locator(".precious .content", has_text="Keep going, quietly.")).to_be_visible()
    assert any(p["content"] == "Keep going, quietly." for p in owner_api.get("/v1/precious").json()["items"])


def test_reindex_with_progress_and_export_download(
    page: Any, panel_server: EngramServer, owner_api: httpx.Client
) -> None:
    # Given memories
    seed(owner_api, panel_server)
    login(page)
    page.goto("/admin/#more/maintenance")
    # When the index is rebuilt from the panel
    page.get_by_role("button", name="Reindex vectors").click()
    # Then progress reaches all active memories
    expect(page.locator("#reindex-status")).to_contain_text("Done: 3 memories reindexed", timeout=20_000)
    expect(page.locator(".progress")).to_have_attribute("aria-valuenow", "100")
    shot(page, "more-maintenance")

    # When the export is downloaded
    with page.expect_download() as info:
        page.get_by_role("button", name="Download export").click()
    download = info.value
    # Then it is the namespace's export document
    assert re.fullmatch(r"engram-export-\d{4}-\d{2}-\d{2}\.json", download.suggested_filename)
    document = json.loads(Path(download.path()).read_text())
    contents = {m["content"] for m in document["memories"]}
    assert "Alice likes green tea in the morning" in contents and "Alice lives in Berlin" in contents


def test_import_upload(page: Any, panel_server: EngramServer, owner_api: httpx.Client, tmp_path: Path) -> None:
    # Given an export from another namespace, with one row the API would refuse
    with panel_server.client(OTHER_KEY) as bob:
        bob.post("/v1/memories", json={"content": "Imported fact about kites"})
        document = bob.get("/v1/export").json()
    stamp = document["memories"][0]["created_at"]
    document["memories"].append({"content": "", "created_at": stamp, "updated_at": stamp})
    path = tmp_path / "backup.json"
    path.write_text(json.dumps(document))
    login(page)
    page.goto("/admin/#more/maintenance")

    def upload() -> None:
        page.get_by_label("File to import").set_input_files(str(path))
        page.get_by_role("button", name="Import", exact=True).click()
        page.locator("dialog[open]").get_by_role("button", name="Import").click()

    # When it is uploaded through the panel
    upload()
    # Then the valid row is imported and the refused one is shown with its reason
    result = page.locator("#import-result")
    expect(result).to_contain_text("Created: 1 memories")
    expect(result).to_contain_text("Refused: 1 memories")
    expect(result.locator(".import-problem")).to_have_text("memories row 2: content must not be empty")
    active = owner_api.get("/v1/memories").json()["items"]
    assert [m["content"] for m in active] == ["Imported fact about kites"]
    # When the same file is uploaded again / Then nothing is added
    upload()
    expect(result).to_contain_text("Created: nothing. Skipped (already present): 1 memories")
    assert len(owner_api.get("/v1/memories").json()["items"]) == 1


def test_moving_in_from_mem0_dry_run_then_import(page: Any, owner_api: httpx.Client) -> None:
    # Given a mem0 export with a duplicate and a malformed row
    fixture = Path(__file__).parent.parent / "fixtures" / "moving_in" / "mem0.json"
    login(page)
    page.goto("/admin/#more/maintenance")
    page.get_by_label("Format of the file").select_option("mem0")
    page.get_by_label("File to import").set_input_files(str(fixture))
    # When a dry run is asked for / Then it reports and writes nothing
    page.get_by_role("button", name="Dry run", exact=True).click()
    result = page.locator("#import-result")
    expect(result).to_contain_text("Dry run, nothing written. Would create: 3 memories")
    expect(result).to_contain_text("results[3]: the memory text is missing or not text")
    assert owner_api.get("/v1/memories").json()["items"] == []
    # When it is imported / Then the same rows are created
    page.get_by_role("button", name="Import", exact=True).click()
    page.locator("dialog[open]").get_by_role("button", name="Import").click()
    expect(result).to_contain_text("Created: 3 memories. Skipped (already present): 1 memories. Refused: 1 memories")
    assert len(owner_api.get("/v1/memories").json()["items"]) == 3


def test_run_jobs_from_maintenance(browser: Any, make_server: Callable[..., EngramServer]) -> None:
    # Given a server whose extraction model is a scripted fake, and a fresh chat message
    from tests.fakes.chat_model import ScriptedChatModel

    model = ScriptedChatModel().script_json(
        {
            "memories": [
                {
                    "content": "Alice adopted a second cat named Yuzu",
                    "type": "fact",
                    "fact_key": "pet:second_cat",
                    "importance": 0.7,
                    "confidence": 0.95,
                    "tags": ["pets"],
                    "source_message_ids": [],
                }
            ]
        }
    )
    server = make_server(
        admin_password=PASSWORD, default_namespace="alice", scheduler_enabled=False, overrides={"extract_model": model}
    )
    with server.client() as owner:
        owner.post("/v1/ingest/messages", json={"messages": [{"role": "user", "content": "We adopted Yuzu today!"}]})
    context = browser.new_context(viewport={"width": 1280, "height": 860}, base_url=server.url)
    page = context.new_page()
    login(page)
    page.goto("/admin/#more/maintenance")
    # When extraction and cleanup are run now from the panel
    page.locator(".job-row", has_text="Extraction").get_by_role("button", name="Run now").click()
    extract_result = page.locator(".job-result[data-job=extract]")
    expect(extract_result).to_contain_text("1 created", timeout=30_000)
    page.locator(".job-row", has_text="Cleanup").get_by_role("button", name="Run now").click()
    expect(page.locator(".job-result[data-job=cleanup]")).to_contain_text("done", timeout=30_000)
    # Then both runs are listed, the model saw the message, and the memory exists
    expect(page.locator(".runs .run")).to_have_count(2)
    expect(page.locator(".runs .run").first).to_contain_text("cleanup")
    shot(page, "more-maintenance-jobs")
    assert "We adopted Yuzu today!" in model.calls[0].user
    with server.client() as owner:
        found = owner.get("/v1/memories", params={"fact_key": "pet:second_cat"}).json()["items"]
    assert [m["content"] for m in found] == ["Alice adopted a second cat named Yuzu"]
    context.close()


# -- settings --------------------------------------------------------------------------------------
def test_settings_change_applies_without_restart(
    page: Any, panel_server: EngramServer, owner_api: httpx.Client
) -> None:
    # Given memories that all match a query
    seed(owner_api, panel_server)
    assert len(owner_api.post("/v1/search/memories", json={"query": "Alice"}).json()["items"]) == 3
    login(page)
    page.locator("#tabs a[data-tab=settings]").click()
    shot(page, "settings")
    # When the injection count is set to 1 and the time zone changed
    page.locator("#set-recall_top_k").fill("1")
    page.locator("#set-timezone").fill("Asia/Tokyo")
    page.get_by_role("button", name="Save changes").click()
    # Then both are saved, marked as changed, and recall uses the new count at once
    expect(page.locator(".setting.overridden")).to_have_count(2)
    assert len(owner_api.post("/v1/search/memories", json={"query": "Alice"}).json()["items"]) == 1
    assert panel_server.container.runtime.effective().timezone == "Asia/Tokyo"

    # When an invalid value is entered
    page.locator("#set-timezone").fill("Mars/Olympus_Mons")
    page.get_by_role("button", name="Save changes").click()
    # Then the server refuses it and nothing changes
    expect(page.locator(".toast.error")).to_contain_text("unknown time zone")
    assert panel_server.container.runtime.effective().timezone == "Asia/Tokyo"

    # When the injection count is reset to its default
    page.locator(".setting[data-name=recall_top_k]").get_by_role("button", name="Reset").click()
    expect(page.locator("#set-recall_top_k")).to_have_value("5")
    assert len(owner_api.post("/v1/search/memories", json={"query": "Alice"}).json()["items"]) == 3


# -- phone layout ----------------------------------------------------------------------------------
def test_phone_layout_has_a_bottom_tab_bar(browser: Any, panel_server: EngramServer, owner_api: httpx.Client) -> None:
    # Given a phone-sized screen
    seed(owner_api, panel_server)
    context = browser.new_context(
        viewport={"width": 390, "height": 844},
        device_scale_factor=2,
        is_mobile=True,
        has_touch=True,
        base_url=panel_server.url,
    )
    page = context.new_page()
    login(page)
    expect(page.locator("[data-view=today]")).to_be_visible()
    # Then the tabs sit at the bottom of the screen
    box = page.locator("#tabs").bounding_box()
    assert box is not None and box["y"] + box["height"] >= 844 - 2 and box["width"] >= 388
    # And every tab renders without horizontal overflow
    for tab in ("today", "review", "conversations", "memories", "skills", "more", "settings"):
        page.locator(f"#tabs a[data-tab={tab}]").click()
        expect(page.locator(f"[data-view={tab}]")).to_be_visible()
        page.wait_for_load_state("networkidle")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        shot(page, f"phone-{tab}", full_page=False)
    context.close()


def test_skills_view_reads_versions_allocates_deletes_and_restores(page: Any, owner_api: httpx.Client) -> None:
    # Given a skill with two versions, whose text holds markup
    md = "---\nname: pdf-tools\ndescription: Fill PDF forms\n---\n# PDF\n<b>not bold</b> <script>x()</script>"
    owner_api.post("/v1/skills", json={"content": md}).raise_for_status()
    owner_api.post("/v1/skills", json={"content": md + "\nv2"}).raise_for_status()
    login(page)
    page.locator("#tabs a[data-tab=skills]").click()
    # When it is opened / Then the SKILL.md is shown as text, never as HTML
    page.locator("#skill-list [data-name=pdf-tools]").get_by_role("button", name="Open").click()
    text = page.locator("#skill-text")
    expect(text).to_contain_text("<b>not bold</b> <script>x()</script>")
    assert page.locator("#skill-text b, #skill-text script").count() == 0
    # And an older version can be read and restored as the newest
    page.locator("#skill-detail").get_by_role("button", name="Read").last.click()
    expect(page.locator("#skill-detail .card-title")).to_contain_text("version 1 (latest 2)")
    page.locator("#skill-detail").get_by_role("button", name="Restore as newest").first.click()
    expect(page.locator("#skill-detail .card-title")).to_contain_text("version 3")
    # And it can be allocated to an agent
    page.get_by_label("Agent id").fill("claude-code")
    page.locator("#skill-detail").get_by_role("button", name="Allocate").click()
    expect(page.locator("#skill-list [data-name=pdf-tools]")).to_contain_text("claude-code")
    assert owner_api.get("/v1/skills?agent=claude-code").json()["items"][0]["version"] == 3
    # And deleted, then restored from the deleted list
    page.locator("#skill-detail").get_by_role("button", name="Delete").click()
    page.locator("dialog[open]").get_by_role("button", name="Delete").click()
    expect(page.locator("#skill-list")).to_contain_text("No skills yet")
    page.get_by_label("Show deleted skills").check()
    page.locator("#skill-list [data-name=pdf-tools]").get_by_role("button", name="Restore").click()
    expect(page.locator("#skill-list")).to_contain_text("No deleted skills to restore")
    assert owner_api.get("/v1/skills/pdf-tools").status_code == 200


# -- conversations ---------------------------------------------------------------------------------
def _ingest_thread(owner: httpx.Client, thread: str, texts: list[str], start_minute: int) -> None:
    messages = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": text,
            "conversation_id": thread,
            "created_at": f"2026-11-30T{10 + (start_minute + i) // 60:02d}:{(start_minute + i) % 60:02d}:00Z",
        }
        for i, text in enumerate(texts)
    ]
    owner.post("/v1/ingest/messages", json={"messages": messages}).raise_for_status()


def test_conversations_view_edits_clears_and_copies_a_kept_summary(
    page: Any, panel_server: EngramServer, owner_api: httpx.Client
) -> None:
    # Given two threads, one with a kept summary (server-kept history)
    _ingest_thread(owner_api, "kyoto", ["we fly on May 3", "noted"], 0)
    _ingest_thread(owner_api, "oslo", ["new plans", "ok"], 5)
    owner_api.put("/v1/threads/kyoto/summary", json={"summary": "Trip to Kyoto, flying May 3."}).raise_for_status()
    login(page)
    page.locator("#tabs a[data-tab=conversations]").click()
    # When the kyoto thread's summary is opened, edited and saved
    page.locator("#thread-list .thread", has_text="kyoto").get_by_role("button", name="Open").click()
    page.locator("#thread-detail").get_by_role("button", name="Summary").click()
    box = page.locator("dialog[open]").get_by_role("textbox", name="Summary text")
    expect(box).to_have_value("Trip to Kyoto, flying May 3.")
    box.fill("Trip to Kyoto, flying May 4.")
    page.locator("dialog[open]").get_by_role("button", name="Save").click()
    # Then it is stored
    expect(page.locator(".toast").last).to_contain_text("Summary saved")
    assert owner_api.get("/v1/threads/kyoto/summary").json()["summary"] == "Trip to Kyoto, flying May 4."
    # When the oslo thread starts from kyoto's summary
    page.locator("#thread-list .thread", has_text="oslo").get_by_role("button", name="Open").click()
    expect(page.locator("#thread-title")).to_have_text("oslo")
    page.locator("#thread-detail").get_by_role("button", name="Summary").click()
    page.locator("dialog[open]").get_by_label("Copy from conversation").select_option("kyoto")
    page.locator("dialog[open]").get_by_role("button", name="Save").click()
    # (each save has its own toast: the edit's "Summary saved" may still be on screen, so waiting on
    # it let the read below race the copy's PUT — the "copy leaves the target empty" of session 4)
    expect(page.locator(".toast").last).to_contain_text("Summary copied from “kyoto”")
    assert owner_api.get("/v1/threads/oslo/summary").json()["summary"] == "Trip to Kyoto, flying May 4."
    # When kyoto's is emptied, Then it is cleared
    page.locator("#thread-list .thread", has_text="kyoto").get_by_role("button", name="Open").click()
    expect(page.locator("#thread-title")).to_have_text("kyoto")
    page.locator("#thread-detail").get_by_role("button", name="Summary").click()
    page.locator("dialog[open]").get_by_role("textbox", name="Summary text").fill("")
    page.locator("dialog[open]").get_by_role("button", name="Save").click()
    expect(page.locator(".toast").last).to_contain_text("Summary cleared")
    assert owner_api.get("/v1/threads/kyoto/summary").json()["summary"] == ""
    assert page.console_errors == []


def test_conversations_view_reads_renames_merges_deletes_and_restores(
    browser: Any, page: Any, panel_server: EngramServer, owner_api: httpx.Client
) -> None:
    # Given a long thread (55 messages, one holding markup and script) and a short one, stored earlier
    trip = [f"trip message {i}" for i in range(55)]
    trip[3] = XSS
    _ingest_thread(owner_api, "groceries", ["buy oat milk", "noted: oat milk"], 0)
    _ingest_thread(owner_api, "trip-2026", trip, 5)
    login(page)
    page.locator("#tabs a[data-tab=conversations]").click()
    # Then both are listed, the most recently active first, with their counts
    rows = page.locator("#thread-list .thread")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("trip-2026")
    expect(rows.first).to_contain_text("55 messages")
    expect(rows.last).to_contain_text("2 messages")

    # When the long one is opened
    rows.first.get_by_role("button", name="Open").click()
    messages = page.locator("#thread-messages .message")
    # Then its first page shows oldest first, and the rest comes with "Load more"
    expect(messages).to_have_count(50)
    expect(messages.first.locator(".content")).to_have_text("trip message 0")
    page.locator("#thread-detail").get_by_role("button", name="Load more").click()
    expect(messages).to_have_count(55)
    expect(messages.last.locator(".content")).to_have_text("trip message 54")
    # And the message with markup is its literal text: no element made from it, no script run
    expect(messages.nth(3).locator(".content")).to_have_text(XSS)
    assert page.locator("#thread-messages img, #thread-messages script").count() == 0
    shot(page, "conversations")

    # When it is renamed
    page.locator("#thread-detail").get_by_role("button", name="Rename").click()
    page.locator("dialog[open]").get_by_label("Title").fill("Kyoto trip")
    page.locator("dialog[open]").get_by_role("button", name="Save").click()
    # Then the title shows in the detail and the list, and is stored
    expect(page.locator("#thread-title")).to_have_text("Kyoto trip")
    expect(page.locator("#thread-list .thread").first).to_contain_text("Kyoto trip")
    assert owner_api.get("/v1/threads/trip-2026").json()["title"] == "Kyoto trip"

    # When the short thread is merged into it
    page.locator("#thread-list .thread", has_text="groceries").get_by_role("button", name="Open").click()
    expect(page.locator("#thread-title")).to_have_text("groceries")
    page.locator("#thread-detail").get_by_role("button", name="Merge into…").click()
    page.locator("dialog[open]").get_by_label("Conversation to merge into").select_option("trip-2026")
    page.locator("dialog[open]").get_by_role("button", name="Merge").click()
    # Then the merged thread is shown with every message, and the other is gone
    expect(page.locator("#thread-title")).to_have_text("Kyoto trip")
    expect(page.locator("#thread-list .thread")).to_have_count(1)
    assert owner_api.get("/v1/threads/trip-2026").json()["message_count"] == 57
    assert owner_api.get("/v1/threads/groceries").status_code == 404

    # When it is deleted
    page.locator("#thread-detail").get_by_role("button", name="Delete").click()
    page.locator("dialog[open]").get_by_role("button", name="Delete").click()
    # Then it leaves the list for the recycle bin
    expect(page.locator("#thread-list")).to_contain_text("No conversations yet")
    assert owner_api.get("/v1/threads/trip-2026").json()["deleted_at"] is not None
    page.get_by_label("Show the recycle bin").check()
    binned = page.locator("#thread-list .thread", has_text="Kyoto trip")
    expect(binned).to_contain_text("deleted")
    shot(page, "conversations-recycle-bin")
    # When it is restored / Then it is live again and opened
    binned.get_by_role("button", name="Restore").click()
    expect(page.locator("#thread-title")).to_have_text("Kyoto trip")
    expect(page.locator("#thread-list .thread")).to_have_count(1)
    assert owner_api.get("/v1/threads/trip-2026").json()["deleted_at"] is None
    assert page.evaluate("window.__pwned") is None and page.title() != "pwned"
    assert page.dialogs_seen == [] and page.console_errors == []

    # And on a phone the thread reads without sideways scrolling
    phone = browser.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True, base_url=panel_server.url
    )
    mobile = phone.new_page()
    login(mobile)
    expect(mobile.locator("[data-view=today]")).to_be_visible()
    mobile.goto("/admin/#conversations/trip-2026")
    expect(mobile.locator("#thread-messages .message")).to_have_count(50)
    assert mobile.evaluate("document.documentElement.scrollWidth") <= 390
    shot(mobile, "phone-conversation", full_page=False)
    phone.close()


# -- what changed (the change journal, docs/journal.md) ---------------------------------------------
def _journal_seed(owner: httpx.Client, server: EngramServer) -> dict[str, Any]:
    """A memory edited by hand over REST, and a run whose every rendered field carries markup."""
    from engram.services.library.journal import Journal
    from engram.services.library.memories import MemoryWrite

    tea: dict[str, Any] = owner.post("/v1/memories", json={"content": "Alice likes green tea in the morning"}).json()[
        "memory"
    ]
    oolong = {"content": "Alice likes oolong tea in the morning"}
    assert owner.patch(f"/v1/memories/{tea['id']}", json=oolong).is_success
    c = server.container
    with c.journal.run(XSS, source=XSS, detail={"tool": XSS}), Journal.because(XSS):
        c.memories.write("alice", MemoryWrite(content=XSS, tags=["<b>bold</b>"]))
        c.journal.record("alice", XSS, XSS, XSS, {"content": XSS, XSS: XSS}, {"content": f"{XSS} v2", XSS: "x"})
    return tea


def _open_every_run(page: Any) -> None:
    cards = page.locator(".run-card")
    for n in range(cards.count()):
        shown = cards.nth(n).get_by_role("button", name="Show changes")
        if shown.count():
            shown.click()
            expect(cards.nth(n).get_by_role("button", name="Hide changes")).to_be_visible()


def _inert(page: Any) -> None:
    assert page.locator(".page img").count() == 0
    assert page.locator(".page script").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert page.title() != "pwned"
    assert page.dialogs_seen == []
    assert page.console_errors == []


def test_what_changed_shows_diffs_undoes_after_confirming_and_redoes(
    page: Any, panel_server: EngramServer, owner_api: httpx.Client
) -> None:
    # Given a hand edit over REST and a run full of markup
    tea = _journal_seed(owner_api, panel_server)
    # When What changed is opened
    login(page)
    expect(page.locator("[data-view=today]")).to_be_visible()
    page.goto("/admin/#more/changes")
    cards = page.locator(".run-card")
    expect(cards).to_have_count(3)  # the markup run, the edit, the memory written
    edit = page.locator(".run-card", has_text="Edit (rest)").first
    expect(edit).to_contain_text("1 change")
    # Then the edit's change reads as a word diff of the memory
    edit.get_by_role("button", name="Show changes").click()
    expect(edit.locator(".diff del")).to_have_text("green")
    expect(edit.locator(".diff ins")).to_have_text("oolong")
    # And every field of the markup run is shown as text, nothing of it runs
    _open_every_run(page)
    marked = page.locator(".run-card").first
    expect(marked.locator(".run-kind")).to_have_text(XSS)
    expect(marked.locator(".change-reason").first).to_contain_text(XSS)
    expect(marked.locator(".diff-key", has_text="onerror").first).to_have_text(XSS)
    shot(page, "what-changed")
    _inert(page)
    # When the edit's undo is asked for and cancelled / Then nothing changes
    edit.get_by_role("button", name="Undo").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Undo this run?")
    dialog.get_by_role("button", name="Cancel").click()
    assert owner_api.get(f"/v1/memories/{tea['id']}").json()["content"] == "Alice likes oolong tea in the morning"
    # When it is confirmed / Then the memory is as before the edit, and the undo is listed first
    edit.get_by_role("button", name="Undo").click()
    page.get_by_role("dialog").get_by_role("button", name="Undo").click()
    expect(page.locator(".toast", has_text="Reverted 1")).to_be_visible()
    assert owner_api.get(f"/v1/memories/{tea['id']}").json()["content"] == "Alice likes green tea in the morning"
    undo = page.locator(".run-card").first
    expect(undo.locator(".run-kind")).to_have_text("Undo")
    # When the undo is redone / Then the edit is back
    undo.get_by_role("button", name="Redo").click()
    page.get_by_role("dialog").get_by_role("button", name="Redo").click()
    # (the undo's own "Reverted 1" toast may still be shown: wait for the redo's run to be listed)
    expect(page.locator(".run-card .run-kind", has_text="Undo")).to_have_count(2)
    assert owner_api.get(f"/v1/memories/{tea['id']}").json()["content"] == "Alice likes oolong tea in the morning"
    runs = owner_api.get("/v1/runs").json()["items"]
    assert [(r["kind"], r["source"]) for r in runs[:2]] == [("undo", "panel"), ("undo", "panel")]
    _inert(page)


def test_what_changed_on_a_phone(browser: Any, panel_server: EngramServer, owner_api: httpx.Client) -> None:
    # Given the same runs, on a phone-sized screen
    _journal_seed(owner_api, panel_server)
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True, base_url=panel_server.url
    )
    phone = context.new_page()
    phone.dialogs_seen = []
    phone.on("dialog", lambda d: (phone.dialogs_seen.append(d.message), d.dismiss()))
    phone.console_errors = []
    phone.on("pageerror", lambda exc: phone.console_errors.append(str(exc)))
    login(phone)
    expect(phone.locator("[data-view=today]")).to_be_visible()
    # When every run's changes are opened
    phone.goto("/admin/#more/changes")
    expect(phone.locator(".run-card")).to_have_count(3)
    _open_every_run(phone)
    expect(phone.locator(".diff ins", has_text="oolong")).to_be_visible()
    # Then it reads without sideways scrolling, and the markup stayed text
    wide = phone.evaluate(
        "[...document.querySelectorAll('.page *')].filter(e => e.getBoundingClientRect().right > 391)"
        ".map(e => e.tagName + '.' + e.className + ':' + Math.round(e.getBoundingClientRect().right)).slice(0, 8)"
    )
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390, wide
    shot(phone, "phone-what-changed", full_page=False)
    _inert(phone)
    context.close()
