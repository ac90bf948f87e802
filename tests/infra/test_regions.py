"""Every region: Bedrock model ids resolved at synth for the deploy region, IAM following them, and the
time zone checked (infra/bedrock_models.py, docs/aws.md "Regions and models")."""

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

from infra.bedrock_models import resolve_model  # noqa: E402
from infra.config import EngramConfig  # noqa: E402
from infra.stack import EngramStack  # noqa: E402


def _synth(layer_dir: Path, region: str, **config: Any) -> Mapping[str, Any]:
    cfg = EngramConfig(layer_dir=str(layer_dir), replica_layer_dir=str(layer_dir), **config)
    stack = EngramStack(cdk.App(), "Engram", config=cfg, env=cdk.Environment(region=region))
    return Template.from_stack(stack).to_json()


def _env(template: Mapping[str, Any]) -> dict[str, str]:
    fn = next(
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function" and "ENGRAM_STORE" in r["Properties"]["Environment"]["Variables"]
    )
    return fn["Properties"]["Environment"]["Variables"]  # type: ignore[no-any-return]


def _invoke_resources(template: Mapping[str, Any], region: str) -> str:
    statements = [
        s
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
        if "bedrock:InvokeModel" in json.dumps(s["Action"])
    ]
    return json.dumps([_text(r, region) for s in statements for r in s["Resource"]])


def _text(value: Any, region: str) -> str:
    """An ARN with its ``Fn::Join`` flattened and the region and partition pseudo parameters filled in."""
    if isinstance(value, str):
        return value
    pseudo = {"AWS::Region": region, "AWS::Partition": "aws", "AWS::AccountId": "111122223333"}
    return "".join(p if isinstance(p, str) else pseudo[p["Ref"]] for p in value["Fn::Join"][1])


@pytest.mark.parametrize(
    ("region", "job_model"),
    [
        ("us-east-1", "amazon.nova-lite-v1:0"),  # served in-region: the bare id
        ("us-west-2", "us.amazon.nova-lite-v1:0"),
        ("eu-west-1", "eu.amazon.nova-lite-v1:0"),
        ("ap-southeast-2", "apac.amazon.nova-lite-v1:0"),
    ],
)
def test_the_job_model_resolves_to_what_the_region_serves(layer_dir: Path, region: str, job_model: str) -> None:
    # Given the default job models (Nova Lite) and a deploy region of each geography
    template = _synth(layer_dir, region)
    env = _env(template)
    # Then the functions get the id Bedrock accepts there
    assert env["ENGRAM_EXTRACT_MODEL"] == env["ENGRAM_DREAM_MODEL"] == f"bedrock/{job_model}"
    # And the roles may invoke the profile and the foundation model in every region it routes to
    resources = _invoke_resources(template, region)
    if job_model.startswith(("us.", "eu.", "apac.")):
        assert f":bedrock:{region}:" in resources and f"inference-profile/{job_model}" in resources
        assert ":bedrock:*::foundation-model/amazon.nova-lite-v1:0" in resources
    else:
        assert f":bedrock:{region}::foundation-model/amazon.nova-lite-v1:0" in resources
        assert "inference-profile" not in resources
    # And the embedding model (served in-region) is kept as given
    assert env["ENGRAM_EMBEDDING_MODEL"] == "amazon.titan-embed-text-v2:0"


def test_an_explicit_profile_is_kept_and_an_unoffered_model_stops_the_synth(layer_dir: Path) -> None:
    # Given a profile id named explicitly / Then it is kept as given in any region
    cfg = EngramConfig(chat_model="bedrock/global.anthropic.claude-haiku-4-5-20251001-v1:0").for_region("eu-west-1")
    assert cfg.chat_model == "bedrock/global.anthropic.claude-haiku-4-5-20251001-v1:0"
    # Given a region where Nova Lite is served neither in-region nor through a profile
    # Then the synth stops, naming the setting to change
    with pytest.raises(
        ValueError, match=r"engram:extract_model: Bedrock does not offer amazon.nova-lite-v1:0 in sa-east-1"
    ):
        _synth(layer_dir, "sa-east-1")
    # And with upstream job models there, nothing stops it
    template = _synth(layer_dir, "sa-east-1", extract_model="gpt-x", dream_model="gpt-x")
    assert _env(template)["ENGRAM_EXTRACT_MODEL"] == "gpt-x"


def test_rerank_needs_a_region_that_offers_its_model() -> None:
    # Given the Bedrock reranker in a region without the Rerank model / Then the synth names rerank_region
    with pytest.raises(ValueError, match=r"engram:rerank_region .*amazon.rerank-v1:0 in eu-west-1.*eu-central-1"):
        EngramConfig(reranker="bedrock").for_region("eu-west-1")
    # And pointing rerank_region at one that does fixes it; Cohere Rerank 3.5 is served in us-east-1
    EngramConfig(reranker="bedrock", rerank_region="eu-central-1").for_region("eu-west-1")
    EngramConfig(reranker="bedrock", rerank_model="cohere.rerank-v3-5:0").for_region("us-east-1")
    with pytest.raises(ValueError, match="rerank"):
        EngramConfig(reranker="bedrock").for_region("us-east-1")


def test_models_named_anywhere_are_resolved() -> None:
    # Given bedrock/ models in every place a deployment names one
    cfg = EngramConfig(
        chat_model="bedrock/amazon.nova-pro-v1:0",
        vision_model="bedrock/amazon.nova-lite-v1:0",
        bedrock_models=("amazon.nova-micro-v1:0", "mistral.mistral-large-2407-v1:0"),
        extra_env={"ENGRAM_CHAT_MODEL": "bedrock/amazon.nova-micro-v1:0", "ENGRAM_LOG_LEVEL": "INFO"},
    ).for_region("eu-central-1")
    # Then each is the region's profile; a model Engram has no table for is kept as given
    assert cfg.chat_model == "bedrock/eu.amazon.nova-pro-v1:0"
    assert cfg.vision_model == "bedrock/eu.amazon.nova-lite-v1:0"
    assert cfg.bedrock_models == ("eu.amazon.nova-micro-v1:0", "mistral.mistral-large-2407-v1:0")
    assert cfg.extra_env["ENGRAM_CHAT_MODEL"] == "bedrock/eu.amazon.nova-micro-v1:0"
    # And without a region (an offline synth with no CLI region) nothing changes
    assert EngramConfig().for_region(None) == EngramConfig()
    assert resolve_model("amazon.nova-lite-v1:0", None, setting="x") == "amazon.nova-lite-v1:0"


@pytest.mark.parametrize("zone", ["Europe/Berln", "CEST", "UTC+2", ""])
def test_a_time_zone_typo_stops_the_synth(zone: str) -> None:
    with pytest.raises(ValueError, match="not an IANA time zone"):
        EngramConfig(timezone=zone)
    with pytest.raises(ValueError, match="not an IANA time zone"):
        EngramConfig(extra_env={"ENGRAM_TIMEZONE": zone or "Mars/Olympus"})
    assert EngramConfig(timezone="America/Argentina/Buenos_Aires").timezone == "America/Argentina/Buenos_Aires"
