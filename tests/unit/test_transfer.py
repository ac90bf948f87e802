"""Import embeds in bounded batches and reports progress; memories keep their ids.

Real in-memory store and index; a bag-of-words embedder that records each call's batch size.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from engram.bootstrap import Overrides, build_container
from engram.services.transfer.engram_format import ExportDocument
from engram.settings import Settings

from tests.fakes.embedder import HashEmbedder

T = "2026-01-01T00:00:00Z"


class RecordingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.batches.append(len(texts))
        return super().embed_documents(texts)


def test_import_embeds_in_bounded_batches_with_progress(tmp_path: Path) -> None:
    # Given an export of 150 memories (100 active, 50 archived)
    embedder = RecordingEmbedder()
    settings = Settings(store="memory", search="memory", embedder="none", data_dir=tmp_path, scheduler_enabled=False)
    container = build_container(settings, Overrides(embedder=embedder))
    rows = [
        {
            "id": f"mem_{i:03d}",
            "content": f"memory number {i} about kites",
            "status": "active" if i < 100 else "archived",
            "created_at": T,
            "updated_at": T,
        }
        for i in range(150)
    ]
    calls: list[tuple[str, int]] = []
    done: dict[str, int] = {}

    def progress(stage: str, total: int):  # type: ignore[no-untyped-def]
        calls.append((stage, total))
        done[stage] = 0

        def step(n: int) -> None:
            done[stage] += n

        return step

    # When it is imported
    report = container.transfer.import_("bob", ExportDocument(memories=rows), progress=progress)
    # Then every row is created with its own id, the 100 active ones embedded in batches of at most 32
    assert report["created"]["memories"] == 150 and report["indexed"] == 100
    assert container.store.get_memory("bob", "mem_042").content == "memory number 42 about kites"
    assert sum(embedder.batches) == 100 and max(embedder.batches) <= 32
    # And progress covered every row, then every memory to embed
    assert calls == [("import", 150), ("embed", 100)] and done == {"import": 150, "embed": 100}
    container.close()
