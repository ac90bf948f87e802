"""The `engram` command: serve locally, rebuild the index, export and import, print settings, run jobs."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engram import bootstrap
from engram.domain.errors import EngramError, InvalidInput
from engram.entrypoints import job_commands
from engram.entrypoints.console import Progress, settings_from
from engram.services.jobs.migrate import MigrationService
from engram.services.transfer.engram_format import KINDS, ExportDocument
from engram.services.transfer.other_formats import FORMATS, convert
from engram.services.transfer.other_systems import score
from engram.settings import Settings


def cmd_serve(args: argparse.Namespace) -> int:
    # The web stack (uvicorn, FastAPI, the MCP SDK) is loaded by `serve` only: the other commands start fast.
    import uvicorn

    from engram.entrypoints.http.app import create_app, warm_first_use
    from engram.entrypoints.http.server import uvicorn_options

    settings, new_key = bootstrap.ensure_local_owner_key(settings_from(args))
    container = bootstrap.build_container(settings)
    base = f"http://{settings.host}:{settings.port}"
    print(
        f"Engram {base}  (data: {Path(settings.data_dir).resolve()}, store: {settings.store}, "
        f"search: {settings.search}, embedder: {settings.embedder})",
        file=sys.stderr,
    )
    if new_key:
        print(f"Created your owner API key (stored in {settings.keys_file}, shown once):\n  {new_key}", file=sys.stderr)
    elif settings.keys_file and not settings.api_key:
        print(f"API keys: {settings.keys_file}", file=sys.stderr)
    print(f"  REST docs {base}/docs · chat {base}/v1 · MCP {base}/mcp · admin {base}/admin", file=sys.stderr)
    app = create_app(container)
    bootstrap.warm_search(container)
    warm_first_use(app)  # the route groups and MCP tools a Lambda instance leaves to its first requests
    try:
        uvicorn.run(
            app,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level.lower(),
            **uvicorn_options(settings),
        )
    finally:
        container.close()
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    container = bootstrap.build_container(settings_from(args))
    try:
        namespace = args.namespace or container.settings.default_namespace
        total = container.reindex.rebuild(
            namespace,
            every_namespace=not args.namespace,
            progress=lambda ns, count: Progress(count, f"reindex {ns}"),
        )
        model = container.embedder.model_id if container.embedder else "none (keyword only)"
        print(f"reindexed {total} memories with {model}")
    finally:
        container.close()
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """`engram migrate`: upgrade rows written by older versions, namespace by namespace, with progress."""
    container = bootstrap.build_container(settings_from(args))
    try:
        service = MigrationService(container.store)
        if not service.needed:
            print(f"migrate: nothing to do on the {container.settings.store} store")
            return 0
        reports = []
        for ns in [args.namespace] if args.namespace else container.store.list_namespaces():
            bar = Progress(container.store.count_messages(ns), f"migrate {ns}")
            reports.append(service.backfill_message_indexes(ns, progress=bar))
            bar.close()
        if args.json:
            print(json.dumps([r.to_dict() for r in reports], indent=2, ensure_ascii=False))
        else:
            fixed = sum(r.fixed for r in reports)
            read = sum(r.read for r in reports)
            print(f"migrate: {read} messages read in {len(reports)} namespaces, {fixed} given their thread/order keys")
            if fixed:
                print("next: `engram extract --backfill` extracts and indexes the history now visible")
    finally:
        container.close()
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    container = bootstrap.build_container(settings)
    try:
        document = container.transfer.export(args.namespace or settings.default_namespace)
    finally:
        container.close()
    text = json.dumps(document, ensure_ascii=False, indent=1, default=str)
    if args.file in (None, "-"):
        print(text)
    else:
        # The whole namespace: owner-only (0600) from the first byte, like every file Engram writes.
        bootstrap.write_owner_only(Path(args.file), (text + "\n").encode("utf-8"))
        print(f"exported {len(document['memories'])} memories to {args.file}", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:  # noqa: C901 - option checks, then one import with progress
    fmt = args.source_format
    if args.score and fmt != "text":
        raise InvalidInput("--score applies to --from text only")
    try:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {args.file}: {exc}") from exc
    document = None
    if fmt is None:
        try:
            document = ExportDocument.model_validate(json.loads(data))
        except ValueError as exc:  # not JSON, not an export's shape
            detail = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            raise InvalidInput(f"{args.file} is not an Engram export: {detail}") from exc
    converted = convert(fmt, data) if fmt else None
    settings = settings_from(args)
    namespace = args.namespace or settings.default_namespace
    container = bootstrap.build_container(settings)
    bars: list[Progress] = []

    def progress(stage: str, total: int) -> Progress:
        if bars:
            bars[-1].close()
        bars.append(Progress(total, f"{stage} {namespace}"))
        return bars[-1]

    try:
        if converted is None:
            assert document is not None  # without --from the file was read as an export above
            report = container.transfer.import_(namespace, document, progress=progress, dry_run=args.dry_run)
        else:
            if args.score:
                rows = sum(1 for r in converted.rows if r.kind == "memories")
                asyncio.run(score(converted, container.moving_in.model, progress("score", rows)))
            report = container.moving_in.run(
                namespace, converted, dry_run=args.dry_run, by_user=args.user_namespaces, progress=progress
            )
    finally:
        if bars:
            bars[-1].close()
        container.close()
    for ns, one in (report.get("namespaces") or {namespace: report}).items():
        _print_import_report(ns, one, dry_run=args.dry_run)
    if dropped := report.get("dropped_fields"):
        print("fields Engram has no place for (dropped): " + ", ".join(f"{k} ({n})" for k, n in dropped.items()))
    if scoring := report.get("scoring"):
        print(f"scored {scoring['scored']} memories; {scoring['failed']} kept the default type and importance")
    refused = [one["refused"] for one in (report.get("namespaces") or {namespace: report}).values()]
    return 1 if any(any(r.values()) for r in refused) else 0


def _print_import_report(namespace: str, report: dict[str, Any], *, dry_run: bool) -> None:
    def counts(outcome: str) -> str:
        return ", ".join(f"{n} {kind}" for kind in KINDS if (n := report[outcome][kind])) or "nothing"

    outcomes = "; ".join(f"{outcome} {counts(outcome)}" for outcome in ("created", "skipped", "refused"))
    head = (
        f"dry run (nothing written), import into {namespace} would have: " if dry_run else f"import into {namespace}: "
    )
    print(head + outcomes)
    for problem in report["problems"]:
        where = problem.get("source") or f"{problem['kind']}[{problem['row']}]"
        where += f" {problem['id']}" if problem["id"] else ""
        print(f"  {problem['outcome']} {where}: {problem['code']}: {problem['reason']}")
    if report["problems_not_listed"]:
        print(f"  ... and {report['problems_not_listed']} more")


def cmd_settings(args: argparse.Namespace) -> int:
    if args.markdown:
        print("| setting | default | what it does |\n|---|---|---|")
        for name, field in Settings.model_fields.items():
            default = field.default
            shown = "" if default is None else str(default)
            print(f"| `ENGRAM_{name.upper()}` | `{shown}` | {field.description or ''} |")
        return 0
    settings = settings_from(args)
    print(json.dumps(settings.model_dump(mode="json"), indent=2, default=str))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="engram", description="Long-term memory for AI chat clients.")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data-dir", dest="data_dir", type=Path, help="data directory (ENGRAM_DATA_DIR)")

    serve = sub.add_parser("serve", help="run Engram locally (REST, chat gateway, MCP, admin)")
    serve.add_argument("--host", help="listen address (ENGRAM_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (ENGRAM_PORT, default 8787)")
    common(serve)
    serve.set_defaults(func=cmd_serve)

    reindex = sub.add_parser("reindex", help="rebuild the search index (after changing the embedding model)")
    reindex.add_argument("--namespace", help="only this namespace (after a model change: every namespace)")
    common(reindex)
    reindex.set_defaults(func=cmd_reindex)

    migrate = sub.add_parser(
        "migrate", help="after an upgrade: give rows of older versions what they lack (resumable, idempotent)"
    )
    migrate.add_argument("--namespace", help="only this namespace (default: every namespace)")
    migrate.add_argument("--json", action="store_true", help="print the report as JSON")
    common(migrate)
    migrate.set_defaults(func=cmd_migrate)

    export = sub.add_parser("export", help="write a namespace's rows as JSON (the format of GET /v1/export)")
    export.add_argument("file", nargs="?", help="output file (default: standard output)")
    export.add_argument("--namespace", help="namespace to export (default ENGRAM_DEFAULT_NAMESPACE)")
    common(export)
    export.set_defaults(func=cmd_export)

    import_ = sub.add_parser(
        "import", help="import an export: invalid rows refused, present rows skipped, progress shown"
    )
    import_.add_argument("file", help="an export file (`-` reads standard input)")
    import_.add_argument("--namespace", help="namespace to import into (default ENGRAM_DEFAULT_NAMESPACE)")
    import_.add_argument(
        "--from",
        dest="source_format",
        choices=FORMATS,
        help="move in from another system: an Aelios export, a Pawwake backup, a mem0 export, text (a memory a line)",
    )
    import_.add_argument(
        "--dry-run", action="store_true", help="report what would be created, skipped, refused; write nothing"
    )
    import_.add_argument(
        "--score", action="store_true", help="--from text: ask the extraction model for type and importance"
    )
    import_.add_argument(
        "--user-namespaces",
        action="store_true",
        help="--from mem0: each row goes to the namespace named by its user_id",
    )
    common(import_)
    import_.set_defaults(func=cmd_import)

    settings = sub.add_parser("settings", help="print the effective settings (secrets hidden)")
    settings.add_argument("--markdown", action="store_true", help="print the settings table for the README")
    common(settings)
    settings.set_defaults(func=cmd_settings)

    job_commands.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except EngramError as exc:
        print(f"engram: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
