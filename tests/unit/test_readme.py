"""The README's front door: two quick-start commands, a settings table that matches the code."""

from __future__ import annotations

import re
from pathlib import Path

from scripts.readme_settings import render

ROOT = Path(__file__).resolve().parents[2]


def test_settings_table_is_current() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert render(readme) == readme, "README settings table is stale: run `python scripts/readme_settings.py`"


def test_quick_start_has_the_two_commands_ci_uses() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme.split("## Quick start", 1)[1].split("```", 2)[1]
    commands = [line.split("#")[0].strip() for line in quick.strip().splitlines()[1:] if line.strip()]
    assert commands == ["make run", "make test"]
    assert re.search(r"^make test\b", (ROOT / ".ci" / "run").read_text(), re.M)


def test_every_http_route_is_in_the_readme(tmp_path: Path) -> None:
    from engram.bootstrap import build_container
    from engram.entrypoints.http.app import create_app
    from engram.settings import Settings

    from tests.servers import app_routes

    # Given the full app and the README
    readme = re.sub(r"\{[^}]+\}", "{id}", (ROOT / "README.md").read_text(encoding="utf-8"))
    settings = Settings(store="memory", search="memory", embedder="none", data_dir=tmp_path, scheduler_enabled=False)
    container = build_container(settings)
    try:
        paths = {path for path, _ in app_routes(create_app(container))}
    finally:
        container.close()
    undocumented = []
    for path in sorted(paths - {"/openapi.json", "/docs/oauth2-redirect", "/admin/", "/admin/assets", "/mcp/"}):
        # When a route is looked up in its README spelling (`{id}` for any parameter; a last segment may
        # stand alone after its parent, as in "`/v1/memories/{id}/archive` · `/restore`")
        path = re.sub(r"\{[^}]+\}", "{id}", path)
        parent, _, last = path.rpartition("/")
        documented = f"`{path}" in readme or (f"`{parent}" in readme and (f"`/{last}`" in readme or last == "{id}"))
        if not documented and "{id}" in path:
            documented = f"`{parent}[/{{id}}]`" in readme
        if not documented:
            undocumented.append(path)
    # Then none is missing
    assert not undocumented, f"routes missing from README.md: {undocumented}"
