"""REST for export and import (`/v1/export`, `/v1/import`, moving in from other systems with `from=`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, FastAPI, Query, Request

from engram.bootstrap import Container
from engram.domain.errors import InvalidInput
from engram.entrypoints.http.openapi import CONFLICT
from engram.entrypoints.http.rest_shared import STRICT, Export, Write, _c
from engram.services.transfer.engram_format import ExportDocument
from engram.services.transfer.other_formats import ForeignFormat

router = APIRouter()


class ImportRequest(ExportDocument):
    model_config = STRICT


@router.get("/export", tags=["export"])
def export(request: Request, who: Export) -> dict[str, Any]:
    """Every row of your namespace as one JSON document (the format `POST /v1/import` takes)."""
    return dict(_c(request).transfer.export(who.namespace))


ImportFormat = Literal["engram", ForeignFormat]
# The body's shape depends on `from` (an Engram export, another system's JSON, or text), which a schema
# cannot tie to a query parameter: the body is any JSON (or text), checked by the format's reader (400).
_IMPORT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "anyOf": [{"type": "object"}, {"type": "array"}, {"type": "string"}],
                    "description": "`from=engram`: an export (`GET /v1/export`); `aelios`: its memory export "
                    "`{data, meta}`; `pawwake`: its JSON backup; `mem0`: `{results: [...]}` or a list; "
                    "`text`: a JSON string",
                }
            },
            "text/plain": {"schema": {"type": "string", "description": "`from=text`: one memory per line"}},
        },
    }
}


@router.post("/import", tags=["export"], responses=CONFLICT, openapi_extra=_IMPORT_BODY)
def import_(
    request: Request,
    who: Write,
    body: Annotated[Any, Body(include_in_schema=False)] = None,
    source: Annotated[ImportFormat, Query(alias="from", description="the format of the body")] = "engram",
    dry_run: Annotated[bool, Query(description="report what would happen; write nothing")] = False,
    score: Annotated[bool, Query(description="`from=text`: ask the extraction model for type and importance")] = False,
) -> dict[str, Any]:
    """Import into your namespace. `from=engram` (default) takes an export (from any namespace);
    `aelios`, `pawwake`, `mem0` and `text` move in from those systems (docs: README, "Moving in").
    Each row is checked with the API's rules: an invalid row is refused and reported, a row already
    present (same id, external id or identical content) is skipped; importing the same file twice adds
    nothing. `dry_run=true` writes nothing and reports the same counts. Returns `created`, `skipped`
    and `refused` per row kind and the `problems` with their reasons (`source`: where in the file)."""
    from pydantic import ValidationError

    from engram.services.transfer.other_formats import convert
    from engram.services.transfer.other_systems import score as score_rows

    container = _c(request)
    if body is None:
        raise InvalidInput("the body is empty: send the file to import", code="empty_body")
    if score and source != "text":
        raise InvalidInput("score applies to from=text only", code="invalid_option")
    if source == "engram":
        try:
            document = ImportRequest.model_validate(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "body"
            raise InvalidInput(f"not an Engram export: {where}: {first['msg']}", code="invalid_export") from exc
        _within_limit(document.row_count(), container.settings.import_max_rows)
        return dict(container.transfer.import_(who.namespace, document, dry_run=dry_run))
    converted = convert(source, body)
    _within_limit(len(converted.rows) + len(converted.refused), container.settings.import_max_rows)
    if score:
        import anyio.from_thread

        anyio.from_thread.run(score_rows, converted, container.moving_in.model)
    return dict(container.moving_in.run(who.namespace, converted, dry_run=dry_run))


def _within_limit(rows: int, limit: int) -> None:
    """One request imports at most ``limit`` rows: it must end within a gateway's time limit (API
    Gateway: 29 s); the CLI imports any size with progress (README, "Export and import")."""
    if rows > limit:
        raise InvalidInput(
            f"this import has {rows} rows, more than the {limit} one request takes (ENGRAM_IMPORT_MAX_ROWS): "
            "import it with `engram import FILE --namespace NS` (any size, with progress) or split the file",
            code="too_many_rows",
        )


def mount(app: FastAPI, container: Container) -> None:
    """Its routes on the app (``routes.py`` mounts every module)."""
    app.include_router(router, prefix="/v1")
