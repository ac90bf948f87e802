"""REST for threads (`/v1/threads...`, docs/threads.md): list, read, rename, recycle bin, merge; the summary
of a thread's server-kept history (services/chat/history.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request
from pydantic import BaseModel, Field

from engram.bootstrap import Container
from engram.domain.errors import InvalidInput
from engram.domain.models import Thread
from engram.entrypoints.http.memories import EraseRequest
from engram.entrypoints.http.openapi import CONFLICT
from engram.entrypoints.http.rest_shared import STRICT, Read, Write, _c
from engram.services.library.messages import ThreadId

router = APIRouter(prefix="/v1", tags=["threads"])


class ThreadPatchRequest(BaseModel):
    model_config = STRICT

    title: str | None = Field(max_length=200, description="The new title; null or blank clears it.")


class ThreadMergeRequest(BaseModel):
    model_config = STRICT

    into: ThreadId = Field(description="The thread that takes the messages.")


def _thread(thread: Thread) -> dict[str, Any]:
    return dict(thread.model_dump(mode="json", exclude={"namespace"}))


@router.get("/threads")
def list_threads(
    request: Request,
    who: Read,
    deleted: Annotated[bool, Query(description="List the recycle bin instead of the live threads.")] = False,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: str | None = None,
) -> dict[str, Any]:
    """Your threads, the most recently active first: id, title, last message time, message count."""
    page = _c(request).threads.list(who.namespace, deleted=deleted, limit=limit, cursor=cursor or None)
    return {"items": [_thread(t) for t in page.items], "next_cursor": page.next_cursor}


@router.get("/threads/{thread_id}")
def get_thread(request: Request, thread_id: str, who: Read) -> dict[str, Any]:
    """One thread (also one in the recycle bin): id, title, last message time, message count."""
    return _thread(_c(request).threads.get(who.namespace, thread_id))


@router.get("/threads/{thread_id}/messages")
def thread_messages(
    request: Request,
    thread_id: str,
    who: Read,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: str | None = None,
) -> dict[str, Any]:
    """The thread's messages, oldest first; pass `next_cursor` back for the next page."""
    page = _c(request).threads.messages(who.namespace, thread_id, limit=limit, cursor=cursor or None)
    items = [m.model_dump(mode="json", exclude={"namespace"}) for m in page.items]
    return {"items": items, "next_cursor": page.next_cursor}


@router.patch("/threads/{thread_id}")
def rename_thread(request: Request, thread_id: str, body: ThreadPatchRequest, who: Write) -> dict[str, Any]:
    return _thread(_c(request).threads.rename(who.namespace, thread_id, body.title))


@router.delete("/threads/{thread_id}")
def delete_thread(request: Request, thread_id: str, who: Write) -> dict[str, Any]:
    """To the recycle bin: restorable until cleanup purges it (`ENGRAM_HARD_DELETE_AFTER_DAYS`, 30 by
    default); a new message in the thread brings it back too."""
    return _thread(_c(request).threads.delete(who.namespace, thread_id))


@router.post("/threads/{thread_id}/restore")
def restore_thread(request: Request, thread_id: str, who: Write) -> dict[str, Any]:
    return _thread(_c(request).threads.restore(who.namespace, thread_id))


@router.post("/threads/{thread_id}/erase", responses=CONFLICT)
def erase_thread(request: Request, thread_id: str, body: EraseRequest, who: Write) -> dict[str, Any]:
    """Erase a thread in the recycle bin for good, with its messages (`{"confirm": true}`; 409
    `not_deleted` otherwise)."""
    return {"erased": _c(request).threads.erase(who.namespace, thread_id).id}


@router.post("/threads/{thread_id}/merge", responses=CONFLICT)
def merge_thread(request: Request, thread_id: str, body: ThreadMergeRequest, who: Write) -> dict[str, Any]:
    """Move every message of this thread into `into` (which must exist and not be in the recycle bin);
    this thread is gone afterwards. Returns the merged thread and how many messages moved."""
    thread, moved = _c(request).threads.merge(who.namespace, thread_id, body.into)
    return {"thread": _thread(thread), "moved": moved}


# -- server-kept history: the thread's summary (README, "Server-kept history") ------------------------
class SummaryRequest(BaseModel):
    model_config = STRICT

    summary: str | None = Field(default=None, max_length=50_000, description="The new summary; blank clears it.")
    from_thread: ThreadId | None = Field(default=None, description="Start from this thread's summary.")


@router.get("/threads/{thread_id}/summary")
def get_summary(request: Request, thread_id: str, who: Read) -> dict[str, Any]:
    """The thread's kept summary (older turns folded by rotations) and where it ends; a thread that has
    none (or does not exist yet) has an empty one."""
    return _c(request).history.state(who.namespace, thread_id).to_dict()


@router.put("/threads/{thread_id}/summary")
def put_summary(request: Request, thread_id: str, body: SummaryRequest, who: Write) -> dict[str, Any]:
    """Edit the summary (`{summary}`), or start this thread from another's (`{from_thread}`); the
    verbatim turns are unchanged. The thread need not exist yet."""
    history = _c(request).history
    if (body.summary is None) == (body.from_thread is None):
        raise InvalidInput("pass either summary or from_thread", code="summary_or_from_thread")
    if body.from_thread is not None:
        return history.copy_summary(who.namespace, thread_id, body.from_thread).to_dict()
    return history.set_summary(who.namespace, thread_id, body.summary or "").to_dict()


@router.delete("/threads/{thread_id}/summary")
def delete_summary(request: Request, thread_id: str, who: Write) -> dict[str, Any]:
    """Clear the summary (the turns folded into it stay out of the window)."""
    return _c(request).history.clear(who.namespace, thread_id).to_dict()


def mount(app: FastAPI, container: Container) -> None:
    """Its routes on the app (``routes.py`` mounts every module)."""
    app.include_router(router)
