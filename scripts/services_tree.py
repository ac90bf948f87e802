"""Move the flat ``engram.services`` modules into the services tree (docs/ARCHITECTURE.md, "Layers") and
rewrite every import and path that names them.

    python scripts/services_tree.py            # git mv + rewrite (once, on the tree with the flat modules)
    python scripts/services_tree.py --rewrite  # rewrite only: a branch that merged the move, naming old modules

The rewrite is idempotent: a name already in the new tree is left alone, so a branch may run it after
every merge of main. It rewrites dotted module names (imports, ``mock.patch`` strings), ``from
engram.services import x`` lines and repository paths (``services/x.py``, ``services/x.name``) in
Python, Markdown, JSON and TOML files; then run ``ruff check --fix`` and ``ruff format`` (import order).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "functions" / "engram"

# old module (under engram/) -> new module
MOVES: dict[str, str] = {
    # the chat gateway: a request, what its turn is told, its writes, the stream
    "services.chat": "services.chat.gateway",
    "services.turn_context": "services.chat.turn_context",
    "services.exchange": "services.chat.exchange",
    "services.injection": "services.chat.injection",
    "services.routing": "services.chat.routing",
    "services.stream_relay": "services.chat.stream_relay",
    "services.usage_report": "services.chat.usage_report",
    "services.history": "services.chat.history",
    # recall: memories, past conversations, the boot package
    "services.recall": "services.recall.pipeline",
    "services.conversations": "services.recall.conversations",
    "services.boot": "services.recall.boot",
    "services.recall_background": "services.recall.background",
    # the search index as the services see it: the guard, the vector gate, rebuilding it
    "services.search_guard": "services.index.guard",
    "services.gated_embedder": "services.index.gated_embedder",
    "services.reindex": "services.index.reindex",
    # background jobs
    "services.jobs": "services.jobs.registry",
    "services.job_runs": "services.jobs.runs",
    "services.scheduler": "services.jobs.scheduler",
    "services.extraction": "services.jobs.extraction",
    "services.dreaming": "services.jobs.dreaming",
    "services.cleanup": "services.jobs.cleanup",
    "services.migrate": "services.jobs.migrate",
    # export / import, and moving in from other systems
    "services.transfer": "services.transfer.engram_format",
    "services.moving_in": "services.transfer.other_systems",
    "services.import_formats": "services.transfer.other_formats",
    # the library: what the owner keeps
    "services.memories": "services.library.memories",
    "services.candidates": "services.library.candidates",
    "services.notes": "services.library.notes",
    "services.messages": "services.library.messages",
    "services.threads": "services.library.threads",
    "services.reminders": "services.library.reminders",
    "services.skills": "services.library.skills",
    "services.stats": "services.library.stats",
    # the models Engram calls itself: prompts and reading their replies
    "services.prompts": "services.models.prompts",
    "services.model_reply": "services.models.reply",
    # renamed in place
    "services.loop": "services.sync_bridge",
    "domain.shape": "domain.json_checks",
}

PACKAGES: dict[str, str] = {
    "services/chat": "The chat gateway: one request from the door to the upstream and back, and the writes it owes.",
    "services/recall": "Recall: memories for a turn, past conversations, the boot package.",
    "services/index": "The search index as the services see it: the guard, the vector gate, rebuilding it.",
    "services/jobs": "Background jobs: the registry and runner, the schedule, run records, and each job.",
    "services/transfer": "Export and import of Engram's own format, and moving in from other systems.",
    "services/library": "The library: memories, review candidates, notes, messages, threads, reminders, skills.",
    "services/models": "The models Engram calls itself: every prompt, and reading what a model answered.",
}

TEXT_SUFFIXES = {".py", ".md", ".json", ".toml", ".cfg", ".txt", ".js", ".html"}


def _new_children(new_package: str) -> set[str]:
    """The modules a new package holds (a dotted name followed by one of these is already new): the
    moved ones and any module written in the package since (``services/jobs/consolidation.py``)."""
    prefix = new_package + "."
    moved = {new[len(prefix) :].split(".")[0] for new in MOVES.values() if new.startswith(prefix)}
    directory = PACKAGE / new_package.replace(".", "/")
    if not directory.is_dir():
        return moved
    written = {path.stem for path in directory.glob("*.py") if path.stem != "__init__"}
    return moved | written | {path.name for path in directory.iterdir() if (path / "__init__.py").exists()}


def _dotted_rules() -> list[tuple[re.Pattern[str], str]]:
    rules = []
    for old, new in sorted(MOVES.items(), key=lambda kv: -len(kv[0])):
        children = _new_children(old)  # old module name reused as a package name
        names = "|".join(sorted(children))
        guard = rf"(?!\.(?:{names})\b|\s+import\s+\(?\s*(?:{names})\b)" if children else ""
        rules.append((re.compile(rf"\bengram\.{re.escape(old)}\b{guard}"), f"engram.{new}"))
    return rules


# A path starts the text or a word, or follows ``engram/`` (``functions/engram/services/x.py``).
_START = r"(?:(?<=engram/)|(?<![\w/.]))"


def _path_rules() -> list[tuple[re.Pattern[str], str]]:
    rules = []
    for old, new in sorted(MOVES.items(), key=lambda kv: -len(kv[0])):
        old_path, new_path = old.replace(".", "/"), new.replace(".", "/")
        # `services/x.py`, `services/x.name` and `services/x` (not `services/x/...`: already a package)
        rules.append((re.compile(rf"{_START}{re.escape(old_path)}(?=\.py\b)"), new_path))
        children = _new_children(old)
        guard = f"(?!/(?:{'|'.join(sorted(children))})\\b)" if children else ""
        rules.append((re.compile(rf"{_START}{re.escape(old_path)}\b(?![/\w]){guard}"), new_path))
    return rules


_FROM_IMPORT = re.compile(r"^(\s*)from engram\.(services|domain) import (\w+)(?: as (\w+))?\s*$", re.MULTILINE)


def _from_import(match: re.Match[str]) -> str:
    indent, layer, name, alias = match.groups()
    new = MOVES.get(f"{layer}.{name}")
    if new is None:
        return match.group(0)
    package, _, leaf = new.rpartition(".")
    bound = alias or name
    tail = "" if leaf == bound else f" as {bound}"
    return f"{indent}from engram.{package} import {leaf}{tail}"


def rewrite(text: str) -> str:
    for pattern, new in _dotted_rules():
        text = pattern.sub(new, text)
    text = _FROM_IMPORT.sub(_from_import, text)
    for pattern, new in _path_rules():
        text = pattern.sub(new, text)
    return text


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    return [ROOT / line for line in lines if Path(line).suffix in TEXT_SUFFIXES and "node_modules" not in line]


def move() -> None:
    for package, doc in PACKAGES.items():
        directory = PACKAGE / package
        directory.mkdir(exist_ok=True)
        init = directory / "__init__.py"
        if not init.exists():
            init.write_text(f'"""{doc}"""\n')
    for old, new in MOVES.items():
        source = PACKAGE / (old.replace(".", "/") + ".py")
        target = PACKAGE / (new.replace(".", "/") + ".py")
        if source.exists():
            subprocess.run(["git", "mv", str(source), str(target)], cwd=ROOT, check=True)
    subprocess.run(["git", "add", *(str(PACKAGE / p / "__init__.py") for p in PACKAGES)], cwd=ROOT, check=True)


def main(argv: list[str]) -> int:
    if "--rewrite" not in argv:
        move()
    changed = 0
    for path in tracked_files():
        if path == Path(__file__).resolve() or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = rewrite(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed += 1
    print(f"rewrote {changed} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
