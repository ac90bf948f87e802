"""engram.deploy.json: a redeploy keeps every choice (infra/deploy_settings.py, docs/aws.md "Settings")."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

cdk = pytest.importorskip("aws_cdk")
from aws_cdk.assertions import Template  # noqa: E402

from app import build  # noqa: E402
from infra.deploy_settings import SETTINGS_FILE, resolve  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _template(root: Path, context: dict[str, Any]) -> Mapping[str, Any]:
    app = cdk.App(context=context)
    stack = build(app, root)
    return Template.from_stack(stack).to_json()


def test_a_flagged_synth_is_kept_by_two_plain_synths(tmp_path: Path, layer_dir: Path) -> None:
    # Given a deploy with choices on the command line (strings, as `cdk -c` passes them)
    root = tmp_path / "repo"
    root.mkdir()
    flags = {
        "engram:layer_dir": str(layer_dir),
        "engram:replica_layer_dir": str(layer_dir),
        "engram:search_backend": "opensearch",
        "engram:collection_generation": "nextgen",
        "engram:alarm_email": "owner@example.com",
        "engram:chat_model": "bedrock/amazon.nova-pro-v1:0",
        "engram:api_memory_mb": "1536",
        "engram:bedrock_models": "amazon.nova-micro-v1:0",
    }
    first = _template(root, flags)
    # When the next two deploys pass no flag at all
    second = _template(root, {})
    third = _template(root, {})
    # Then both build the same stack as the flagged one
    assert second == first and third == first
    saved = json.loads((root / SETTINGS_FILE).read_text())
    assert saved["search_backend"] == "opensearch" and saved["api_memory_mb"] == 1536
    assert saved["bedrock_models"] == ["amazon.nova-micro-v1:0"]
    # And a later flag changes only its own setting, and is kept too
    fourth = _template(root, {"engram:alarm_email": "other@example.com"})
    assert fourth != first
    assert _template(root, {}) == fourth
    assert json.loads((root / SETTINGS_FILE).read_text())["collection_generation"] == "nextgen"


def test_a_new_deployment_records_the_replica_backend(tmp_path: Path) -> None:
    # Given no settings file and no earlier deploy / When the first synth resolves the settings
    resolved = resolve({}, tmp_path)
    # Then the replica backend is chosen and recorded, so a later change of default cannot move it
    assert resolved.config().search_backend == "replica"
    saved = json.loads((tmp_path / SETTINGS_FILE).read_text())
    assert saved == {"search_backend": "replica", "collection_generation": "classic", "embedder": "bedrock"}
    assert "saved" in resolved.message()
    # And a plain synth after that writes nothing
    before = (tmp_path / SETTINGS_FILE).stat().st_mtime_ns
    assert resolve({}, tmp_path).written == {}
    assert (tmp_path / SETTINGS_FILE).stat().st_mtime_ns == before


@pytest.mark.parametrize(
    ("types", "expected"),
    [
        (["AWS::OpenSearchServerless::Collection"], ("opensearch", "classic")),
        (
            ["AWS::OpenSearchServerless::Collection", "AWS::OpenSearchServerless::CollectionGroup"],
            ("opensearch", "nextgen"),
        ),
        (["AWS::S3::Bucket"], ("replica", "classic")),
    ],
)
def test_a_deployment_from_before_the_file_keeps_its_backend(
    tmp_path: Path, types: list[str], expected: tuple[str, str]
) -> None:
    # Given the template an earlier `cdk deploy` left in cdk.out, and no settings file yet
    out = tmp_path / "cdk.out"
    out.mkdir()
    resources = {f"R{i}": {"Type": t} for i, t in enumerate(types)}
    (out / "Engram.template.json").write_text(json.dumps({"Resources": resources}))
    # When the upgraded app synthesizes / Then it keeps (and records) the backend that is deployed
    cfg = resolve({}, tmp_path).config()
    assert (cfg.search_backend, cfg.collection_generation) == expected


def test_an_explicit_backend_wins_over_the_recorded_one(tmp_path: Path) -> None:
    resolve({}, tmp_path)
    # Given a recorded replica deployment / When the user sets the backend explicitly
    resolved = resolve({"engram:search_backend": "opensearch"}, tmp_path)
    # Then it changes, and the change is kept
    assert resolved.written == {"search_backend": "opensearch"}
    assert resolve({}, tmp_path).config().search_backend == "opensearch"


def test_unknown_keys_and_bad_values_stop_the_synth_before_the_file_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown Engram setting.*serach_backend"):
        resolve({"engram:serach_backend": "replica"}, tmp_path)
    with pytest.raises(ValueError, match="search_backend must be one of"):
        resolve({"engram:search_backend": "elastic"}, tmp_path)
    with pytest.raises(ValueError, match="engram:api_memory_mb must be an integer"):
        resolve({"engram:api_memory_mb": "lots"}, tmp_path)
    assert not (tmp_path / SETTINGS_FILE).exists()
    (tmp_path / SETTINGS_FILE).write_text('{"alarm_mail": "x@example.com"}')
    with pytest.raises(ValueError, match="alarm_mail"):
        resolve({}, tmp_path)
    # CDK's own context keys are not Engram settings and pass through
    (tmp_path / SETTINGS_FILE).unlink()
    assert resolve({"@aws-cdk/core:checkSecretUsage": True}, tmp_path).config().search_backend == "replica"


def test_the_project_defaults_stay_apart_from_the_users_choices() -> None:
    # Given the tracked cdk.json / Then it holds CDK's flags only: every engram:* default is in infra/config.py
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    assert not [k for k in context if k.startswith("engram:")]
    # And the user's file is git-ignored, so an upgrade (git pull) never overwrites it
    assert SETTINGS_FILE in (ROOT / ".gitignore").read_text().splitlines()


def test_the_cdk_library_is_pinned_like_the_cli() -> None:
    # Given pyproject's infra extra and package-lock.json / Then both name one exact version, and the library
    # installed here (the one the tests synthesize with) is the pinned one
    import re
    import tomllib
    from importlib.metadata import version

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["infra"]
    (pin,) = [r for r in extra if r.startswith("aws-cdk-lib")]
    assert re.fullmatch(r"aws-cdk-lib==\d+\.\d+\.\d+", pin)
    assert pin.split("==")[1] == version("aws-cdk-lib")
    lock = json.loads((ROOT / "package-lock.json").read_text())
    assert re.fullmatch(r"\d+\.\d+\.\d+", lock["packages"]["node_modules/aws-cdk"]["version"])
