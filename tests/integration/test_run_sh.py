"""functions/run.sh, the Lambda Web Adapter bootstrap, boots the app factory and answers /health."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.servers import child_process, free_port

RUN_SH = Path(__file__).resolve().parents[2] / "functions" / "run.sh"


@pytest.mark.parametrize("surface", ["all", "mcp"])
def test_run_sh_serves_health_on_the_adapter_port(tmp_path: Path, surface: str) -> None:
    # Given the environment the stack gives the HTTP functions (in-memory adapters instead of AWS)
    port = free_port()
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "AWS_LWA_PORT": str(port),
        "LAMBDA_TASK_ROOT": str(RUN_SH.parent),
        "ENGRAM_SURFACE": surface,
        "ENGRAM_STORE": "memory",
        "ENGRAM_SEARCH": "memory",
        "ENGRAM_EMBEDDER": "none",
        "ENGRAM_SCHEDULER_ENABLED": "false",
        "ENGRAM_API_KEY": "ek_run_sh_test_key_000001",
        "ENGRAM_DATA_DIR": str(tmp_path),
        "HOME": str(tmp_path),
    }
    # When run.sh starts (as /opt/bootstrap would run it)
    # Then uvicorn serves the app on the adapter's port and the readiness path answers 200
    with child_process(["bash", str(RUN_SH)], env, f"http://127.0.0.1:{port}/health"):
        pass
    assert os.access(RUN_SH, os.X_OK)
