"""botocore's data in the dependency layer: only the services the functions call (layers/build.py
``BOTOCORE_SERVICES``), and every client the functions build still built as the whole botocore builds it."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import botocore
import pytest

from layers.build import BOTOCORE_SERVICES, bytecode_tag, is_built_from, lock_path, stamp, stamp_text, trim_botocore

ENGRAM = Path(__file__).resolve().parents[2] / "functions" / "engram"
# What builds a boto3 client in Engram: aws_clients.new_client, and a container's AwsClients.client / .lazy.
BUILDERS = {"new_client", "client", "lazy"}
# Run in a fresh interpreter: each service's client in regions of three partitions, as (endpoint, signing
# region, signature version), or the error botocore raises; the services the loader lists; a service left
# out. The credentials are dummies: building a client calls nothing.
PROBE = """
import json, sys
import boto3, botocore, botocore.exceptions
services, out = json.loads(sys.argv[1]), {}
for service in services:
    for region in ("us-east-1", "eu-central-1", "us-gov-west-1"):
        try:
            meta = boto3.client(service, region_name=region).meta
            out[f"{service} {region}"] = [meta.endpoint_url, meta.region_name, meta.config.signature_version]
        except botocore.exceptions.BotoCoreError as e:
            out[f"{service} {region}"] = type(e).__name__
try:
    boto3.client("ec2", region_name="us-east-1")
    left_out = "built"
except botocore.exceptions.UnknownServiceError:
    left_out = "unknown"
listed = boto3.session.Session()._loader.list_available_services("service-2")
print(json.dumps({"botocore": botocore.__file__, "clients": out, "listed": listed, "ec2": left_out}))
"""


def _clients_in_the_code() -> dict[str, list[str]]:
    """Every service Engram builds a client of: the literal first argument of each builder call, with where."""
    found: dict[str, list[str]] = {}
    for path in sorted(ENGRAM.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            receiver = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
            is_builder = name == "new_client" or (name in BUILDERS and receiver.endswith("clients"))
            if receiver == "boto3" and name in ("client", "resource"):
                is_builder = True
            if not is_builder:
                continue
            where = f"{path.relative_to(ENGRAM)}:{node.lineno}"
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.setdefault(first.value, []).append(where)
            else:
                found.setdefault("(not a literal)", []).append(where)
    return found


def test_the_layer_keeps_every_service_the_functions_build_a_client_of() -> None:
    # Given every boto3 client built in functions/engram
    found = _clients_in_the_code()
    # Then each names its service literally (only aws_clients' own builders pass one through)
    assert sorted(found.pop("(not a literal)", [])) == [
        "adapters/aws_clients.py:68",
        "adapters/aws_clients.py:69",
        "adapters/aws_clients.py:86",
    ], "a client whose service is not a literal: name it, so this test can check the layer keeps it"
    # And the layer's botocore keeps each of them (STS beside them, for the credential chain)
    assert set(found) == set(BOTOCORE_SERVICES) - {"sts"}, found


def _probe(pythonpath: str | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYTHON"))}
    env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_CONFIG_FILE=os.devnull)
    env["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    args = [sys.executable, "-c", PROBE, json.dumps(BOTOCORE_SERVICES)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_trimmed_botocore_builds_every_kept_client_as_the_whole_one_does(tmp_path: Path) -> None:
    # Given this environment's botocore, copied and trimmed as layers/build.py trims the layer's
    target = tmp_path / "python"
    shutil.copytree(Path(botocore.__file__).parent, target / "botocore", ignore=shutil.ignore_patterns("__pycache__"))
    data = target / "botocore" / "data"
    before = sorted(p.name for p in data.iterdir() if p.is_dir())
    endpoints_before = (data / "endpoints.json").stat().st_size
    removed = trim_botocore(target)
    # Then only the kept services' folders are left, and endpoints.json lists only theirs
    assert sorted(p.name for p in data.iterdir() if p.is_dir()) == sorted(BOTOCORE_SERVICES)
    assert sorted([*removed, *BOTOCORE_SERVICES]) == before and len(before) > 400
    endpoints = json.loads((data / "endpoints.json").read_text())
    services = {name for partition in endpoints["partitions"] for name in partition["services"]}
    assert {"dynamodb", "s3", "sqs", "secretsmanager", "sts"} <= services <= {*BOTOCORE_SERVICES, "bedrock"}
    assert (data / "endpoints.json").stat().st_size < endpoints_before / 10
    # When each kept service's client is built in three partitions' regions, with and without the trim
    trimmed, whole = _probe(str(target)), _probe(None)
    # Then the trimmed botocore is the one imported, lists only the kept services, refuses one left out,
    # and builds every kept client exactly as the whole botocore does
    assert str(trimmed["botocore"]).startswith(str(target)) and not str(whole["botocore"]).startswith(str(target))
    assert trimmed["listed"] == sorted(BOTOCORE_SERVICES)
    assert (trimmed["ec2"], whole["ec2"]) == ("unknown", "built")
    assert trimmed["clients"] == whole["clients"]
    clients = trimmed["clients"]
    assert isinstance(clients, dict)
    assert clients["dynamodb us-east-1"][0] == "https://dynamodb.us-east-1.amazonaws.com"
    assert clients["bedrock-runtime eu-central-1"][0] == "https://bedrock-runtime.eu-central-1.amazonaws.com"


def test_without_botocore_nothing_is_trimmed_and_a_missing_kept_service_stops_the_build(tmp_path: Path) -> None:
    # Given a layer without botocore (the replica's, the embedder's) / Then the trim leaves it as it is
    (tmp_path / "python" / "numpy").mkdir(parents=True)
    assert trim_botocore(tmp_path / "python") == []
    # Given a botocore without one of the kept services / Then the build stops and names it
    data = tmp_path / "broken" / "botocore" / "data"
    (data / "dynamodb" / "2012-08-10").mkdir(parents=True)
    with pytest.raises(SystemExit, match="no model of"):
        trim_botocore(tmp_path / "broken", ("dynamodb", "sqs"))


def test_a_layer_built_before_the_trim_is_rebuilt(tmp_path: Path) -> None:
    # Given a lock that pins botocore and a layer stamped as built from it before botocore's data was trimmed
    requirements = tmp_path / "requirements-test.txt"
    requirements.write_text("botocore\n")
    lock = lock_path(requirements)
    lock.write_text(f"botocore==1.44.8 \\\n    --hash=sha256:{'0' * 64}\n")
    layer = tmp_path / "build"
    (layer / "python").mkdir(parents=True)
    current = stamp_text(lock, bytecode_tag())
    assert f"botocore data: {' '.join(BOTOCORE_SERVICES)}" in current
    (layer / ".built-from-requirements-test.lock").write_text(current.split("botocore data")[0])
    # Then synth sees a stale layer (and rebuilds it); stamped as a build now stamps it, it is current
    assert not is_built_from(layer, lock)
    stamp(layer, lock)
    assert is_built_from(layer, lock)
    # And a lock without botocore (the replica's numpy) is stamped as before
    lock.write_text(f"numpy==2.5.5 \\\n    --hash=sha256:{'0' * 64}\n")
    assert "botocore" not in stamp_text(lock, bytecode_tag())
