"""docs/aws.md and the README's deploy section say what the synthesized template holds: its outputs, its
alarms, what survives `cdk destroy`, every setting, and the idle cost."""

from __future__ import annotations

import os
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

cdk = pytest.importorskip("aws_cdk")
from aws_cdk.assertions import Template  # noqa: E402

from infra.config import EngramConfig  # noqa: E402
from infra.stack import EngramStack  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
AWS_MD = (ROOT / "docs" / "aws.md").read_text(encoding="utf-8")
DEPLOY = README[README.index("## Deploy to AWS") : README.index("## Recall and relevance")]


@pytest.fixture(scope="module")
def templates(layer_dir: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for backend in ("replica", "opensearch"):
        cfg = EngramConfig(layer_dir=str(layer_dir), replica_layer_dir=str(layer_dir), search_backend=backend)
        out[backend] = Template.from_stack(EngramStack(cdk.App(), "Engram", config=cfg)).to_json()
    return out


def _table_keys(text: str, header: str) -> set[str]:
    """The first-column `code` names of the markdown table whose header row starts with ``header``."""
    start = text.index(header)
    rows = text[start:].split("\n\n", 1)[0].splitlines()[2:]
    return {m for row in rows for m in re.findall(r"^\| `([A-Za-z]+)`", row)}


def test_every_output_is_explained_in_both_docs(templates: dict[str, dict[str, Any]]) -> None:
    outputs = {name for t in templates.values() for name in t["Outputs"]}
    assert _table_keys(DEPLOY, "| output | what it is for |") == outputs
    assert _table_keys(AWS_MD, "| output | what it is |") == outputs


def test_every_alarm_is_in_the_alarms_table(templates: dict[str, dict[str, Any]]) -> None:
    section = AWS_MD[AWS_MD.index("## Alarms") :].split("\n## ", 1)[0]
    for template in templates.values():
        alarms = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::CloudWatch::Alarm"]
        for logical_id in alarms:
            name = re.sub(r"^Alarms|[0-9A-F]{8}$", "", logical_id)
            named = re.sub(r"^(Schedule|Cleanup)NotEmpty$", r"\1NotEmpty", name)
            assert f"`{named}`" in section, f"{named} ({logical_id}) is not in docs/aws.md, Alarms"


def test_what_cdk_destroy_keeps_is_what_the_readme_says_it_keeps(templates: dict[str, dict[str, Any]]) -> None:
    retained = {
        r["Type"] for t in templates.values() for r in t["Resources"].values() if r.get("DeletionPolicy") == "Retain"
    }
    words = {
        "AWS::DynamoDB::Table": "DynamoDB table",
        "AWS::SecretsManager::Secret": "the secret",
        "AWS::S3::Bucket": "snapshot bucket",
        "AWS::Logs::LogGroup": "API access log group",
        "AWS::IAM::Role": "API Gateway CloudWatch role",
        "AWS::ApiGateway::Account": "API Gateway CloudWatch role",
    }
    assert retained <= set(words), retained - set(words)
    tear_down = DEPLOY[DEPLOY.index("**5. Tearing down.**") :]
    for type_ in retained:
        assert words[type_] in tear_down, type_


def test_every_setting_is_in_the_settings_table() -> None:
    table = AWS_MD[AWS_MD.index("| context key | default | meaning |") :].split("\n\n", 1)[0]
    documented = set(re.findall(r"`engram:([a-z_]+)`", table))
    assert documented == {f.name for f in fields(EngramConfig)} | {"stack_name"}


def test_the_readme_idle_cost_is_the_cost_model() -> None:
    from bench.cost import Usage, monthly_cost

    idle = monthly_cost(Usage("idle", 0, 0, 0, 0, 0, 0), "replica")["total"]
    assert f"${idle:.2f} (alarms" in DEPLOY


def test_the_deploy_section_is_in_the_order_a_new_user_walks_it() -> None:
    steps = ["**1. Prerequisites.**", "python -m infra.check", "**2. Your first API key**", "**3. The outputs**"]
    steps += ["**4. Updating.**", "**5. Tearing down.**", "**6. Cost.**"]
    positions = [DEPLOY.index(step) for step in steps]
    assert positions == sorted(positions)
    # And the preflight runs before the deploy, after the bootstrap
    assert DEPLOY.index("npx cdk bootstrap") < DEPLOY.index("python -m infra.check") < DEPLOY.index("npx cdk deploy  ")
