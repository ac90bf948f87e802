"""The app factory of a process that serves the app and nothing else: ``run.sh`` on Lambda
(``uvicorn --factory engram.entrypoints.http.factory:create_app``).

Importing this module pauses Python's cyclic garbage collector; ``create_app`` builds the app
(``entrypoints/http/app.py``), then freezes what exists (``gc.freeze``) and resumes collection. What
init makes — modules, classes, functions, the container's services, routes — lives as long as the
process, so the collections that would run meanwhile (one per 700 new objects, two full ones on the API
function) walk a growing heap and free almost nothing: ~0.1 s of an init's CPU, measured by
bench/init.py's GC column (docs/aws.md, "Cold starts"). Frozen, those objects are also left out of every
later collection, which would otherwise walk them all on each full one (~0.1-0.2 s at a time).

Only for a process of its own: tests and ``engram serve`` call ``app.create_app`` directly, with the
collector as it is.
"""

from __future__ import annotations

import gc

_COLLECTING = gc.isenabled()  # as the host left it: resumed only if it was on
gc.disable()  # first, before any import; resumed by create_app, whatever happens there

from typing import TYPE_CHECKING  # noqa: E402  (everything from here on is imported with the collector paused)

from engram.entrypoints.http import app as _app  # noqa: E402

if TYPE_CHECKING:
    from fastapi import FastAPI


def create_app() -> FastAPI:
    """``app.create_app()`` from the environment, its objects frozen once it is built."""
    try:
        return _app.create_app()
    finally:
        if _COLLECTING:
            gc.freeze()
            gc.enable()
