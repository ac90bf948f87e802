"""docs/aws.md and the README's deploy section say what the synthesized template holds: its outputs, its
alarms, what survives `cdk destroy`, every setting, and the idle cost."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
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
def templates(layer_dir: Path) -> dict[str, Mapping[str, Any]]:
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


# docs/aws.md names the functions as the console shows them; the template's roles carry the construct path.
ROLE_OF = {
    "ApiFunction": "ApiApiFunction",
    "McpFunction": "McpMcpFunction",
    "ExtractFunction": "JobsExtractFunction",
    "DreamFunction": "JobsDreamFunction",
    "CleanupFunction": "JobsCleanupFunction",
}


def _role_actions(template: dict[str, Any], function: str, service: str, resource: str) -> set[str]:
    """The ``service:`` actions of ``function``'s role on resources whose reference names ``resource``."""
    out: set[str] = set()
    for r in template["Resources"].values():
        if r["Type"] != "AWS::IAM::Policy":
            continue
        roles = [ref["Ref"] for ref in r["Properties"].get("Roles", [])]
        if not any(role.startswith(f"{ROLE_OF[function]}ServiceRole") for role in roles):
            continue
        for statement in r["Properties"]["PolicyDocument"]["Statement"]:
            if resource not in repr(statement["Resource"]):
                continue
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            out |= {a.split(":", 1)[1] for a in actions if a.startswith(f"{service}:")}
    return out


def _actions(cell: str) -> set[str]:
    """`GetObject` (+ `ListBucket`, why) ... -> {GetObject, ListBucket}: names outside explanations."""
    cell = re.sub(r"\(\+ (`[A-Za-z]+`)[^)]*\)", r", \1", cell)
    cell = re.sub(r"\([^)]*\)", "", cell).split(" — ", 1)[0]
    return set() if cell.strip() == "none" else set(re.findall(r"`([A-Za-z]+)`", cell))


def test_what_each_function_may_do_is_what_the_template_grants(templates: dict[str, dict[str, Any]]) -> None:
    # Given the replica stack (it has both buckets) and docs/aws.md's table of what each function may do
    template = templates["replica"]
    section = AWS_MD[AWS_MD.index("## What each function may do") :].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) == 3
    table = "Table"
    previous: dict[str, set[str]] = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        names = re.findall(r"`([A-Za-z]+)`", cells[0])
        # The action names of a cell ("the same": the row above's), explanations in brackets or after a dash left out
        said = {
            column: previous[column] if cells[i].startswith("the same") else _actions(cells[i])
            for i, column in ((1, "dynamodb"), (2, "snapshots"), (3, "skills"))
        }
        previous = said
        for name in names:
            # Then each column is exactly what the template grants that function
            assert _role_actions(template, name, "dynamodb", table) == said["dynamodb"], name
            assert _role_actions(template, name, "s3", "SnapshotsBucket") == said["snapshots"], name
            assert _role_actions(template, name, "s3", "SkillFilesBucket") == said["skills"], name


def test_the_replica_sizes_in_the_docs_are_the_templates(templates: dict[str, dict[str, Any]]) -> None:
    from infra.replica_sizing import ceiling, ephemeral_mb, memory_mb

    # Given the replica stack at the default expected size / Then docs/aws.md names its /tmp, and both docs
    # the ceiling it gives
    functions = [
        r["Properties"]
        for r in templates["replica"]["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function" and "ENGRAM_STORE" in r["Properties"]["Environment"]["Variables"]
    ]
    (disk,) = {f["EphemeralStorage"]["Size"] for f in functions}
    (limit,) = {int(f["Environment"]["Variables"]["ENGRAM_REPLICA_CEILING"]) for f in functions}
    assert disk == ephemeral_mb(50_000, 1024) and f"ephemeral storage {disk} MB at 1024 dimensions" in AWS_MD
    assert limit == ceiling(ephemeral=disk, memory=max(1024, memory_mb(50_000, 1024)), dimension=1024)
    rounded = f"{round(limit, -3):,}"
    assert f"about {rounded} memories per function" in AWS_MD and f"about {rounded} memories with the default" in README
