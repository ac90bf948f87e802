"""The job runner Lambda handlers, the CLI, the scheduler and REST call: JSON-serializable reports, one
event loop per container reused across calls (a warm Lambda keeps its model HTTP client usable)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.unit.jobs.conftest import NS, Env, ago


def test_runners_return_json_and_reuse_one_loop(env: Env) -> None:
    # Given a message and a model that records the loop it runs on
    env.message("I play go on Sundays", at=ago(env, minutes=3))
    loops: list[Any] = []

    def answer(messages: list[dict[str, Any]]) -> str:
        loops.append(asyncio.get_running_loop())
        return json.dumps({"memories": [{"content": "The user plays go on Sundays", "confidence": 0.9}]})

    env.model.script(answer, answer)
    # When extraction runs twice (a new message in between), then dreaming and cleanup
    jobs = env.container.jobs
    first = jobs.run("extract", {}).report
    env.message("I also play chess")
    env.clock.advance(seconds=1)
    second = jobs.run("extract", {}).report
    dream = jobs.run("dream", {"date": "2026-03-09"}).report
    cleanup = jobs.run("cleanup", {"namespace": NS}).report
    # Then every report is plain JSON and both model calls ran on the same loop
    for report in (first, second, dream, cleanup):
        assert json.loads(json.dumps(report)) == report
    assert first["created"] == 1 and second["seen"] == 1
    assert loops[0] is loops[1] and not loops[0].is_closed()
    assert dream["namespaces"][0]["status"] == "no_messages" and cleanup["job"] == "cleanup"
