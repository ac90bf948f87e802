"""`engram extract`, `engram dream`, `engram cleanup`: run one job now (through the container's job runner,
services/jobs/registry.py, one namespace at a time for the progress bar) and print what it did."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from engram import bootstrap
from engram.bootstrap import Container
from engram.entrypoints.console import Progress, settings_from
from engram.services.jobs.extraction import ExtractionReport
from engram.services.sync_bridge import run_sync


def _container(args: argparse.Namespace) -> Container:
    return bootstrap.build_container(settings_from(args))


def _namespaces(container: Container, args: argparse.Namespace) -> list[str]:
    return [args.namespace] if args.namespace else list(container.store.list_namespaces())


def _done(args: argparse.Namespace, summary: str, report: dict[str, Any]) -> int:
    """Print the run (the summary and each error, or ``--json`` the whole report); 1 when anything failed."""
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False, default=str))
    else:
        print(summary)
        for ns in report["namespaces"]:
            for error in ns.get("errors", []):
                print(f"  {ns.get('namespace', '?')}: {error.get('error')}: {error.get('message', '')}")
    return 1 if report.get("errors") else 0


def _merge(job: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {"job": job, "namespaces": []}
    for part in parts:
        for key, value in part.items():
            if key == "namespaces":
                merged["namespaces"].extend(value)
            elif isinstance(value, int) and not isinstance(value, bool):
                merged[key] = merged.get(key, 0) + value
            else:
                merged.setdefault(key, value)
    return merged


def cmd_backfill(args: argparse.Namespace, container: Container) -> int:
    """`engram extract --backfill`: each namespace's whole history, batch by batch, with progress."""
    parts = []
    for ns in _namespaces(container, args):
        bar = Progress(container.extraction.backfill_remaining(ns), f"backfill {ns}")
        parts.append(run_sync(container.extraction.backfill(ns, progress=bar)))
        bar.close()
    r = ExtractionReport(namespaces=parts).to_dict()
    return _done(
        args,
        f"backfill: {r['messages']} messages in {r['batches']} batches -> {r['created']} created, "
        f"{r['seen']} seen, {r['superseded']} superseded, {r['candidates']} for review; {r['errors']} errors"
        + (" (run it again to resume)" if r["errors"] else ""),
        r,
    )


def _each_namespace(
    args: argparse.Namespace, container: Container, job: str, payload: Callable[[str], dict[str, Any]]
) -> dict[str, Any]:
    """Run ``job`` once per namespace (``--namespace``: that one only) with a progress bar; the reports merged."""
    namespaces = _namespaces(container, args)
    bar = Progress(len(namespaces), job)
    parts = []
    for ns in namespaces:
        parts.append(container.jobs.run(job, payload(ns)).report)
        bar()
    bar.close()
    return _merge(job, parts)


def cmd_extract(args: argparse.Namespace) -> int:
    with closing(_container(args)) as container:
        if args.backfill:
            return cmd_backfill(args, container)
        r = _each_namespace(args, container, "extract", lambda ns: {"namespace": ns})
        more = sum(1 for ns in r["namespaces"] if ns.get("more"))
        return _done(
            args,
            f"extract: {r.get('messages', 0)} messages in {r.get('batches', 0)} batches -> "
            f"{r.get('created', 0)} created, {r.get('seen', 0)} seen, {r.get('superseded', 0)} superseded, "
            f"{r.get('candidates', 0)} for review, {r.get('rejected', 0)} rejected; {r.get('errors', 0)} errors"
            + (f"; {more} namespace(s) have more (next run continues)" if more else ""),
            r,
        )


def cmd_dream(args: argparse.Namespace) -> int:
    with closing(_container(args)) as container:
        r = _each_namespace(
            args, container, "dream", lambda ns: {"date": args.date, "force": args.force, "namespace": ns}
        )
        statuses: dict[str, int] = {}
        for ns in r["namespaces"]:
            statuses[ns["status"]] = statuses.get(ns["status"], 0) + 1
        day = r.get("date") or container.dreaming.yesterday()
        return _done(
            args,
            f"dream {day}: {', '.join(f'{n} {s}' for s, n in statuses.items()) or 'no namespaces'}; "
            f"{r.get('superseded', 0)} updated (new versions), {r.get('updated', 0)} retagged, "
            f"{r.get('archived', 0)} archived, {r.get('protected', 0)} pinned/core kept, "
            f"{r.get('proposed', 0)} proposed for review, "
            f"{r.get('excerpts', 0)} excerpts, {r.get('dropped', 0)} invalid items dropped; "
            f"{r.get('errors', 0)} errors",
            r,
        )


def cmd_cleanup(args: argparse.Namespace) -> int:
    with closing(_container(args)) as container:
        r = _each_namespace(args, container, "cleanup", lambda ns: {"namespace": ns})
        return _done(
            args,
            f"cleanup: deleted {r.get('messages', 0)} messages, {r.get('usage', 0)} usage rows, "
            f"{r.get('events', 0)} events, {r.get('idempotency', 0)} idempotency keys; "
            f"{r.get('expired', 0)} memories expired, {r.get('hard_deleted', 0)} erased, "
            f"{r.get('kept_for_retry', 0)} kept for retry; {r.get('errors', 0)} errors",
            r,
        )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the job commands to the `engram` parser's subcommands."""

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data-dir", dest="data_dir", type=Path, help="data directory (ENGRAM_DATA_DIR)")
        p.add_argument("--namespace", help="only this namespace")
        p.add_argument("--json", action="store_true", help="print the full report as JSON")

    extract = sub.add_parser("extract", help="turn new messages into memories and review candidates now")
    extract.add_argument(
        "--backfill",
        action="store_true",
        help="extract everything stored before the regular cursor (the whole history), in batches; resumable",
    )
    common(extract)
    extract.set_defaults(func=cmd_extract)

    dream = sub.add_parser("dream", help="consolidate one day (default yesterday in ENGRAM_TIMEZONE)")
    dream.add_argument("--date", help="the day to dream, YYYY-MM-DD")
    dream.add_argument("--force", action="store_true", help="dream the day again even if done")
    common(dream)
    dream.set_defaults(func=cmd_dream)

    cleanup = sub.add_parser("cleanup", help="apply the retention periods now")
    common(cleanup)
    cleanup.set_defaults(func=cmd_cleanup)
