"""Moving in: import the memories (and conversations) of Aelios, Pawwake, mem0 or a plain text file.

Each format is converted into rows of Engram's own export format (``services/transfer/other_formats.py``) and
handed to the import of ``services/transfer/engram_format.py``, which validates row by row, skips what is present and
never overwrites; so a dry run reports what a real run does, and a real run twice adds nothing. A text
file's lines can be scored first (type and importance) by a chat model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from engram.domain.errors import EngramError, NotConfigured
from engram.domain.models import MEMORY_TYPES
from engram.domain.ports import ChatModel
from engram.services.models import prompts
from engram.services.models.reply import parse_json_object
from engram.services.transfer.engram_format import MAX_PROBLEMS, ExportDocument, ProgressFactory, TransferService
from engram.services.transfer.other_formats import Converted, Row

SCORE_BATCH = 20  # lines per scoring call


# -- scoring (text) --------------------------------------------------------------------------------
async def score(conv: Converted, model: ChatModel | None, progress: Callable[[int], None] | None = None) -> None:
    """Ask ``model`` for each memory's type and importance, ``SCORE_BATCH`` lines per call.

    A batch whose call fails or whose answer is unusable keeps the defaults (it is counted in
    ``conv.scoring["failed"]``): scoring never stops an import.
    """
    if model is None:
        raise NotConfigured("scoring needs a chat model: set ENGRAM_EXTRACT_MODEL or ENGRAM_CHAT_MODEL")
    rows = [r for r in conv.rows if r.kind == "memories"]
    conv.scoring = {"scored": 0, "failed": 0}
    for start in range(0, len(rows), SCORE_BATCH):
        batch = rows[start : start + SCORE_BATCH]
        messages = prompts.score_messages([r.data["content"] for r in batch])
        try:
            answer = await model.complete(messages, json_mode=True, max_tokens=60 * len(batch) + 50, temperature=0)
            items = parse_json_object(answer).get("items")
            if not isinstance(items, list):
                raise ValueError("no items")
        except (EngramError, ValueError, AttributeError):
            conv.scoring["failed"] += len(batch)
            items = []
        scored = 0
        for entry in items:
            if not isinstance(entry, dict) or not isinstance(entry.get("i"), int) or not 0 <= entry["i"] < len(batch):
                continue
            row = batch[entry["i"]].data
            if entry.get("type") in MEMORY_TYPES:
                row["type"] = entry["type"]
            value = entry.get("importance")
            if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1:
                row["importance"] = float(value)
            scored += 1
        conv.scoring["scored"] += scored
        if items:
            conv.scoring["failed"] += len(batch) - scored
        if progress:
            progress(len(batch))


# -- running the import ------------------------------------------------------------------------------
class MovingInService:
    def __init__(self, transfer: TransferService, model: ChatModel | None = None) -> None:
        self._transfer = transfer
        self.model = model

    def run(
        self,
        namespace: str,
        conv: Converted,
        *,
        dry_run: bool = False,
        by_user: bool = False,
        progress: ProgressFactory | None = None,
    ) -> dict[str, Any]:
        """Import ``conv`` into ``namespace`` (with ``by_user``, mem0 rows with a ``user_id`` go to that
        namespace instead). One report per namespace under ``namespaces``; the first is also the top level."""
        groups: dict[str, list[Row]] = {}
        for row in conv.rows:
            target = row.user if by_user and row.user else namespace
            groups.setdefault(target, []).append(row)
        groups = groups or {namespace: []}
        reports = {ns: self._one(ns, rows, dry_run, progress) for ns, rows in groups.items()}
        main = reports.get(namespace) or next(iter(reports.values()))
        # The converter's refusals belong to the file, reported once, with the first namespace.
        main["refused"]["memories"] += sum(1 for p in conv.refused if p["kind"] == "memories")
        main["refused"]["messages"] += sum(1 for p in conv.refused if p["kind"] == "messages")
        room = max(MAX_PROBLEMS - len(main["problems"]), 0)
        main["problems"] = conv.refused[:room] + main["problems"]
        for report in reports.values():
            report["problems"] = sorted(report["problems"], key=lambda p: p.pop("order", 0))
        main["problems_not_listed"] += len(conv.refused) - min(room, len(conv.refused))
        extra: dict[str, Any] = {"format": conv.format, "dropped_fields": dict(sorted(conv.dropped.items()))}
        if conv.scoring is not None:
            extra["scoring"] = conv.scoring
        out = {**main, **extra}
        if len(reports) > 1 or by_user:
            out["namespaces"] = reports
        return out

    def _one(
        self, namespace: str, rows: Sequence[Row], dry_run: bool, progress: ProgressFactory | None
    ) -> dict[str, Any]:
        memories = [r for r in rows if r.kind == "memories"]
        messages = [r for r in rows if r.kind == "messages"]
        document = ExportDocument(memories=[r.data for r in memories], messages=[r.data for r in messages])
        report = self._transfer.import_(namespace, document, progress=progress, dry_run=dry_run, foreign=True)
        sources = {"memories": memories, "messages": messages}
        for problem in report["problems"]:
            listed = sources.get(problem["kind"], [])
            if isinstance(problem.get("row"), int) and problem["row"] < len(listed):
                problem["source"] = listed[problem["row"]].source
                problem["order"] = listed[problem["row"]].order
        return dict(report)
