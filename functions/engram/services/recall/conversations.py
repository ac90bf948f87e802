"""Recall of past conversations: what was *said* in other threads, not only the facts extracted from it
(docs/conversations.md).

Two halves:

- ``index_new`` (the extraction job, docs/ARCHITECTURE.md "Background jobs") puts the messages stored
  since its cursor into the *conversation index* (a ``SearchIndex`` of its own, keyed by message id:
  keyword documents plus vectors embedded in batches). Embedding there, not at ingest, keeps it off the
  chat path (bench/README.md, "Message vectors"). A change of embedding model re-indexes from the start.
- ``search`` finds messages by keyword + vector, re-checks each against the store (deleted, moved and
  binned threads drop out), drops the current thread and what it was shown within ``seen_ttl_hours``,
  scores each by relevance and recency, keeps the best ``threads`` threads and in each the best
  ``fragments`` matches, each with ``neighbours`` messages either side.

The chat gateway injects fragments after the memories (``render``, within the patch's token budget) and
calls ``mark_seen`` only once the upstream answered (services/chat/gateway.py).

Over 400 lines on purpose: indexing and search share the index's document and cursor format, kept in
one module; the scoring it reuses is in ``domain/fusion.py`` and ``domain/recall_scoring.py``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from engram.domain import fusion
from engram.domain.models import IndexedDoc, Message
from engram.domain.ports import Clock, KeyValueRows, MessageRows, SearchIndex, ThreadRows
from engram.domain.recall_scoring import recency_factor
from engram.domain.text import estimate_tokens, tokenize
from engram.services.index.fair_embedder import embedding_for
from engram.services.index.gated_embedder import GatedEmbedder
from engram.services.runtime_settings import Live

log = logging.getLogger(__name__)

CURSOR = "conversations:index"
SEEN_PREFIX = "conversations:seen:"
MAX_QUERY_CHARS = 2000
MAX_INDEXED_CHARS = 8000  # keyword text per message; vectors are capped by the embedder gate
MAX_SEEN = 500  # message ids remembered per thread
MAX_KNOWN_NAMESPACES = 10_000  # namespaces remembered as holding several threads (then forgotten at once)
READABLE = ("user", "assistant")

# Words that ask *about a conversation* rather than name its topic ("what did we talk about regarding the
# trip last month?"): matched by nearly every message, they would drown the topic words in keyword scores
# and coverage, so the keyword side searches for what is left. Latin ones as ``tokenize`` stems them.
_META_WORDS = frozenset(
    [
        "talk",
        "discuss",
        "said",
        "say",
        "told",
        "tell",
        "mention",
        "rememb",
        "recal",
        "convers",
        "chat",
        "regard",
        "about",
        "last",
        "week",
        "month",
        "year",
        "yesterday",
        "ago",
        "earlier",
        "time",
        "before",
        "previous",
        "previously",
        "recent",
        "recently",
    ]
)
_META_CJK = (
    "上个月", "上個月", "上周", "上週", "上次", "去年", "之前", "以前", "前几天", "前幾天", "我们", "我們",
    "聊过", "聊過", "聊的", "聊了", "说过", "說過", "讨论", "討論", "提到", "记得", "記得", "关于", "關於",
    "什么", "什麼", "怎么样", "怎麼樣", "那个", "那個", "吗", "嗎", "了", "的",
)  # fmt: skip


def topic_query(text: str) -> str:
    """The query's topic words for keyword search: ``text`` without the words that only ask about a past
    conversation (``_META_WORDS``); ``text`` itself when nothing else is left."""
    stripped = text
    for phrase in _META_CJK:
        stripped = stripped.replace(phrase, " ")
    kept = [t for t in tokenize(stripped) if t not in _META_WORDS]
    return " ".join(kept) if kept else text


@dataclass(frozen=True)
class ConversationConfig:
    """Mapped from ``Settings.conversation_recall_*`` (README, "Settings")."""

    enabled: bool
    threads: int
    fragments: int
    neighbours: int
    seen_ttl_hours: float
    min_relevance: float
    message_chars: int
    recency_half_life_days: float
    # Not settings:
    candidates: int = 60
    recency_weight: float = 0.2
    index_batch: int = 64


@dataclass(frozen=True)
class Fragment:
    """A matched message (``anchor_id``) with its neighbours in its thread, oldest first."""

    thread_id: str
    title: str | None
    anchor_id: str
    messages: tuple[Message, ...]
    score: float
    relevance: float

    @property
    def at(self) -> datetime:
        return next(m.created_at for m in self.messages if m.id == self.anchor_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "title": self.title,
            "anchor_id": self.anchor_id,
            "at": self.at.isoformat(),
            "score": round(self.score, 6),
            "relevance": round(self.relevance, 4),
            "messages": [
                {"id": m.id, "role": m.role, "content": m.content, "created_at": m.created_at.isoformat()}
                for m in self.messages
            ],
        }


@dataclass
class ConversationResult:
    fragments: list[Fragment] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class IndexReport:
    indexed: int = 0
    vectors: int = 0
    skipped: int = 0
    restarted: bool = False
    more: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "indexed": self.indexed,
            "vectors": self.vectors,
            "skipped": self.skipped,
            "restarted": self.restarted,
            "more": self.more,
        }


@dataclass(frozen=True)
class _Cursor:
    ts: datetime
    id: str
    model: str

    def dump(self) -> str:
        return json.dumps({"ts": self.ts.isoformat(), "id": self.id, "model": self.model})

    @staticmethod
    def load(raw: str | None) -> _Cursor | None:
        if not raw:
            return None
        data = json.loads(raw)
        return _Cursor(datetime.fromisoformat(data["ts"]), str(data["id"]), str(data.get("model") or ""))


def _document(namespace: str, message: Message, vector: Sequence[float] | None) -> IndexedDoc:
    """A message's document in the conversation index (keyword text, and its vector once embedded)."""
    return IndexedDoc(
        memory_id=message.id,
        namespace=namespace,
        text=message.content[:MAX_INDEXED_CHARS],
        type=message.role,
        vector=tuple(vector) if vector is not None else None,
        created_at=message.created_at,
    )


class ConversationStore(MessageRows, ThreadRows, KeyValueRows, Protocol):
    """The messages and threads a conversation search reads, its cursors and seen marks."""


class ConversationService:
    """``index`` is the conversation index (guarded); ``embedder`` the ``GatedEmbedder`` over it (or
    ``None``: keyword only); ``query_vector(namespace, text)`` the query's embedding (the recall
    service's cached one, so a chat turn embeds its text once)."""

    def __init__(
        self,
        store: ConversationStore,
        index: SearchIndex,
        embedder: GatedEmbedder | None,
        clock: Clock,
        config: ConversationConfig | Live[ConversationConfig],
        query_vector: Callable[[str, str], Sequence[float]] | None = None,
    ) -> None:
        self._store = store
        self._index = index
        self._embedder = embedder
        self._clock = clock
        self._config = Live.of(config)
        self._query_vector = query_vector
        # Namespaces seen holding a live thread besides the one a search left out: never asked again
        # (knowing one is only ever a reason to search; ``_only_thread``).
        self._several_threads: set[str] = set()

    @property
    def config(self) -> ConversationConfig:
        return self._config()

    @property
    def index(self) -> SearchIndex:
        """The conversation index (the jobs snapshot it when it is a replica)."""
        return self._index

    # -- indexing (the extraction job) ----------------------------------------------------------
    def index_new(self, namespace: str, *, max_messages: int = 5000, until: datetime | None = None) -> IndexReport:
        """Index the messages stored since the cursor (at most ``max_messages``), batch by batch; the
        cursor moves after each batch, so a run cut short resumes where it stopped. A failed embedding
        leaves the cursor at its batch (retried next run)."""
        report = IndexReport()
        model = self._model()
        cursor = _Cursor.load(self._store.get_cursor(namespace, CURSOR))
        if cursor is not None and cursor.model != model:
            cursor = None  # another embedding model (or none before): everything again
            report.restarted = True
        batch_size = self.config.index_batch
        while report.indexed + report.skipped < max_messages:
            after = (cursor.ts, cursor.id) if cursor is not None else None
            batch = self._store.list_messages_stored(namespace, after=after, until=until, limit=batch_size)
            if not batch:
                return report
            readable = [m for m in batch if m.role in READABLE and m.content.strip()]
            vectors: Sequence[Sequence[float] | None] = [None] * len(readable)
            if model and readable and self._embedder is not None:
                with embedding_for(namespace):
                    vectors = self._embedder.embed_documents([m.content for m in readable])
            for message, vector in zip(readable, vectors, strict=True):
                self._index.upsert(_document(namespace, message, vector))
                report.vectors += vector is not None
            report.indexed += len(readable)
            report.skipped += len(batch) - len(readable)
            last = batch[-1]
            cursor = _Cursor(last.stored_at or last.created_at, last.id, model)
            self._store.set_cursor(namespace, CURSOR, cursor.dump())
        report.more = True
        return report

    def index_stored(self, namespace: str, messages: Sequence[Message]) -> int:
        """Keyword-index messages as they are stored (the chat turn, REST and MCP ingest), so a turn is
        findable from every other thread at once; ``index_new`` adds their vectors in the extraction
        job (docs/conversations.md, "At once, in every window"). Returns how many were indexed; a
        failure is logged and left to the job (its cursor reaches these messages anyway)."""
        if not self.config.enabled:
            return 0
        readable = [m for m in messages if m.role in READABLE and m.content.strip()]
        if not readable:
            return 0
        try:  # one index write for all of them (one transaction on SQLite: a turn's two sides at once)
            self._index.upsert_many([_document(namespace, message, None) for message in readable])
        except Exception as exc:
            log.warning("keyword-indexing a stored message failed (the extraction job indexes it): %s", exc)
            return 0
        return len(readable)

    def forget(self, namespace: str, message_ids: Sequence[str]) -> None:
        """Drop these messages' documents from the conversation index (cleanup deletes the messages)."""
        for message_id in message_ids:
            self._index.delete(namespace, message_id)

    def _model(self) -> str:
        """The embedding model the index holds vectors of ('' for keyword only). A conversation index
        built by another model is reset to this one: it is rebuilt from the messages (``index_new``)."""
        embedder = self._embedder
        if embedder is None:
            return ""
        if not embedder.matches_index:
            log.warning("the conversation index holds another model's vectors: re-indexing every message")
            embedder.reset_index()
        return str(embedder.model_id)

    # -- search ------------------------------------------------------------------------------------
    def search(
        self,
        namespace: str,
        query: str,
        *,
        exclude_thread: str | None = None,
        threads: int | None = None,
        fragments: int | None = None,
        neighbours: int | None = None,
        min_relevance: float | None = None,
        skip_seen: bool = False,
    ) -> ConversationResult:
        """The best fragments of other threads than ``exclude_thread`` for ``query`` (module docstring);
        with ``skip_seen``, not those shown to ``exclude_thread`` within the seen TTL."""
        cfg = self.config
        result = ConversationResult(meta={"degraded": {}, "counts": {}})
        text = (query or "").strip()[-MAX_QUERY_CHARS:]
        if not text or not cfg.enabled:
            return result
        if exclude_thread is not None and self._only_thread(namespace, exclude_thread):
            result.meta["no_other_thread"] = True
            return result
        topic = topic_query(text)
        keyword = self._try(result, "keyword", lambda: self._index.keyword_search(namespace, topic, k=cfg.candidates))
        vector = self._try(result, "vector", lambda: self._vector_hits(namespace, text, cfg.candidates))
        ids = list(dict.fromkeys([h.memory_id for h in keyword or ()] + [h.memory_id for h in vector or ()]))
        found = {m.id: m for m in self._store.get_messages(namespace, ids)} if ids else {}
        seen = set(self.seen(namespace, exclude_thread)) if skip_seen and exclude_thread is not None else set()
        live = {
            mid: m
            for mid, m in found.items()
            if m.conversation_id != exclude_thread and mid not in seen and m.role in READABLE
        }
        counts = result.meta["counts"]
        counts.update(keyword=len(keyword or ()), vector=len(vector or ()), live=len(live), seen=len(seen))
        fused, evidence = fusion.adaptive_fuse(
            tokenize(topic),
            [(h.memory_id, h.score) for h in keyword or () if h.memory_id in live],
            [(h.memory_id, h.score) for h in vector or () if h.memory_id in live],
            lambda mid: frozenset(tokenize(live[mid].content)),
            {mid: fusion.script_of(m.content) for mid, m in live.items()},
        )
        # Relevance from the words a message shares with the question's topic (vectors rank, they do not
        # vouch): with vectors the estimate let as many off-topic fragments through as on-topic ones
        # (bench/README.md, "Recall of past conversations").
        by_words = dataclasses.replace(evidence, has_vectors=False, vector_position=None)
        now = self._clock.now()
        floor = cfg.min_relevance if min_relevance is None else min_relevance
        scored: list[tuple[float, float, Message]] = []
        for mid, value in fused.items():
            relevance = fusion.relevance(by_words, mid)
            if relevance < floor:
                continue
            message = live[mid]
            boost = recency_factor(message.created_at, now, cfg.recency_weight, cfg.recency_half_life_days)
            scored.append((value * boost, relevance, message))
        scored.sort(key=lambda item: (-item[0], item[2].id))
        result.fragments = self._fragments(
            namespace,
            scored,
            threads or cfg.threads,
            fragments or cfg.fragments,
            cfg.neighbours if neighbours is None else neighbours,
        )
        counts["fragments"] = len(result.fragments)
        return result

    def _only_thread(self, namespace: str, thread_id: str) -> bool:
        """Whether ``thread_id`` is the namespace's only live thread (or it has none): then a search that
        leaves it out finds nothing, since a fragment comes only from a live thread other than it
        (``_live_title``), and the keyword and vector searches, the message reads and the scoring are
        skipped — a client that keeps every turn in one thread pays for none of them (bench/README.md,
        "Gateway overhead"). One store read of at most two threads per turn until a second thread is
        seen; a namespace known to hold several is not asked again (the answer can only send it to the
        search). A store that cannot answer: the search runs as before."""
        if namespace in self._several_threads:
            return False
        try:
            page = self._store.list_threads(namespace, limit=2)
        except Exception:
            return False
        if page.next_cursor is None and all(t.id == thread_id for t in page.items):
            return True
        if len(self._several_threads) >= MAX_KNOWN_NAMESPACES:
            self._several_threads.clear()
        self._several_threads.add(namespace)
        return False

    def _vector_hits(self, namespace: str, text: str, k: int) -> list[Any]:
        if self._embedder is None or not self._embedder.matches_index:
            return []
        if self._query_vector is not None:
            vector = self._query_vector(namespace, text)
        else:
            with embedding_for(namespace):
                vector = self._embedder.embed_query(text)
        return self._index.vector_search(namespace, vector, k=k)

    @staticmethod
    def _try(result: ConversationResult, stage: str, fn: Callable[[], list[Any]]) -> list[Any]:
        try:
            return fn()
        except Exception as exc:  # keyword or vector side alone still finds something
            log.warning("conversation search stage %s degraded: %s", stage, type(exc).__name__)
            result.meta["degraded"][stage] = f"{type(exc).__name__}: {exc}"[:200]
            return []

    def _live_title(self, namespace: str, thread_id: str) -> tuple[bool, str | None]:
        """Whether the thread exists out of the recycle bin, and its title."""
        try:
            thread = self._store.get_thread(namespace, thread_id)
        except Exception:  # gone (purged or merged away) or unreadable: not recalled
            return False, None
        return thread.deleted_at is None, thread.title

    def _fragments(
        self,
        namespace: str,
        scored: Sequence[tuple[float, float, Message]],
        max_threads: int,
        per_thread: int,
        neighbours: int,
    ) -> list[Fragment]:
        """Best threads first (by their best match; a thread in the recycle bin is passed over, read
        lazily so a turn reads about ``max_threads`` thread rows); in each, its best matches with their
        neighbours, a match already inside a chosen window not taken again, overlapping windows merged."""
        by_thread: dict[str, list[tuple[float, float, Message]]] = {}
        for item in scored:
            by_thread.setdefault(item[2].conversation_id, []).append(item)
        titles: dict[str, str | None] = {}
        for thread_id in by_thread:
            if len(titles) >= max_threads:
                break
            live, title = self._live_title(namespace, thread_id)
            if live:
                titles[thread_id] = title
        out: list[Fragment] = []
        for thread_id in titles:
            windows: list[tuple[float, float, str, list[Message]]] = []
            for score, relevance, message in by_thread[thread_id]:
                if len(windows) >= per_thread:
                    break
                if any(message.id in {m.id for m in w[3]} for w in windows):
                    continue
                window = self._store.messages_around(namespace, message, before=neighbours, after=neighbours)
                window = [m for m in window if m.role in READABLE]
                overlap = next((w for w in windows if {m.id for m in w[3]} & {m.id for m in window}), None)
                if overlap is not None:
                    merged = {m.id: m for m in [*overlap[3], *window]}
                    overlap[3][:] = sorted(merged.values(), key=lambda m: (m.created_at, m.id))
                    continue
                windows.append((score, relevance, message.id, window))
            windows.sort(key=lambda w: min(m.created_at for m in w[3]))
            out += [
                Fragment(thread_id, titles.get(thread_id), anchor, tuple(msgs), score, relevance)
                for score, relevance, anchor, msgs in windows
            ]
        return out

    # -- injection ---------------------------------------------------------------------------------
    def render(self, fragments: Sequence[Fragment], budget_tokens: int) -> tuple[str, list[str]]:
        """The patch's conversation block within ``budget_tokens`` (whole fragments, best threads first)
        and the ids of the messages in it ('' and [] when nothing fits)."""
        chars = self.config.message_chars
        head = "Earlier conversations (other threads) that may be relevant:"
        blocks: list[str] = []
        shown: list[str] = []
        used = estimate_tokens(head)
        for fragment in fragments:
            label = fragment.title or fragment.thread_id
            lines = [f"[{fragment.at.date().isoformat()} · {' '.join(label.split())[:80]}]"]
            for m in fragment.messages:
                content = " ".join(m.content.split())
                lines.append(f"{m.role}: {content[: chars - 1] + '…' if len(content) > chars else content}")
            block = "\n".join(lines)
            cost = estimate_tokens(block)
            if used + cost > budget_tokens:
                continue  # a smaller fragment further down may still fit
            used += cost
            blocks.append(block)
            shown += [m.id for m in fragment.messages]
        if not blocks:
            return "", []
        return head + "\n" + "\n\n".join(blocks), shown

    # -- seen per thread ---------------------------------------------------------------------------
    def seen(self, namespace: str, thread_id: str) -> dict[str, str]:
        """Message id -> when it was shown to ``thread_id``, within the seen TTL."""
        value = self._store.get_cache(namespace, SEEN_PREFIX + thread_id)
        if not isinstance(value, dict):
            return {}
        cutoff = self._clock.now() - timedelta(hours=self.config.seen_ttl_hours)
        out: dict[str, str] = {}
        for message_id, at in value.items():
            try:
                if datetime.fromisoformat(str(at)) >= cutoff:
                    out[str(message_id)] = str(at)
            except ValueError:  # a damaged entry only forgets that one
                continue
        return out

    def mark_seen(self, namespace: str, thread_id: str, message_ids: Sequence[str]) -> None:
        """Remember that these messages were shown to ``thread_id`` (after the upstream answered)."""
        if not message_ids:
            return
        now = self._clock.now()
        entries = self.seen(namespace, thread_id)
        entries.update(dict.fromkeys(message_ids, now.isoformat()))
        newest = dict(sorted(entries.items(), key=lambda kv: datetime.fromisoformat(kv[1]))[-MAX_SEEN:])
        ttl = timedelta(hours=self.config.seen_ttl_hours)
        self._store.put_cache(namespace, SEEN_PREFIX + thread_id, newest, expires_at=now + ttl)
