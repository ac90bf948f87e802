"""Which Bedrock model id works in which region: resolved at synth (docs/aws.md, "Regions and models").

Some models are served on demand only in a few regions and elsewhere only through a cross-region
inference profile (``us.``/``eu.``/``apac.`` + the model id); Bedrock rejects the bare id there. Engram's
defaults are such models (Nova Lite for the jobs), so every model id the stack passes to the functions
is resolved for the deploy region:

- an id that already names a profile (``eu.anthropic...``) or an ARN is kept as given;
- a bare id of a model in ``MODELS`` becomes the profile of the region's geography where the model is
  not served in-region, and stays bare where it is;
- a model in ``MODELS`` that the region serves neither way stops the synth, naming the setting;
- a model not in ``MODELS`` is kept as given (``python -m infra.check`` asks Bedrock about it).

Sources (AWS documentation, read 2026-12): Amazon Bedrock User Guide, "Supported Regions and models
for batch inference" (Nova: foundation model and inference profile regions) and "Supported Regions and
models for reranking" (Rerank 1.0, Cohere Rerank 3.5); docs/aws.md lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

# Prefixes of cross-region inference profile ids ("us.anthropic...", "global.amazon...").
PROFILE_PREFIXES = ("us.", "eu.", "apac.", "us-gov.", "jp.", "au.", "ca.", "global.")
# Nova Lite/Micro/Pro: served on demand in us-east-1; through the geography's profile from these regions.
_NOVA_PROFILE_SOURCES = frozenset(
    {
        "us-east-1", "us-east-2", "us-west-2",
        "eu-central-1", "eu-north-1", "eu-south-1", "eu-south-2", "eu-west-1", "eu-west-3",
        "ap-northeast-1", "ap-northeast-2", "ap-south-1", "ap-southeast-1", "ap-southeast-2",
    }
)  # fmt: skip


@dataclass(frozen=True)
class ModelRegions:
    """Where a model is served: on demand in-region, and as a source region of its geography's profile."""

    in_region: frozenset[str]
    profile_sources: frozenset[str] = frozenset()


MODELS: dict[str, ModelRegions] = {
    "amazon.nova-lite-v1:0": ModelRegions(frozenset({"us-east-1"}), _NOVA_PROFILE_SOURCES),
    "amazon.nova-micro-v1:0": ModelRegions(frozenset({"us-east-1"}), _NOVA_PROFILE_SOURCES),
    "amazon.nova-pro-v1:0": ModelRegions(frozenset({"us-east-1"}), _NOVA_PROFILE_SOURCES),
    "amazon.rerank-v1:0": ModelRegions(frozenset({"ap-northeast-1", "ca-central-1", "eu-central-1", "us-west-2"})),
    "cohere.rerank-v3-5:0": ModelRegions(
        frozenset({"ap-northeast-1", "ca-central-1", "eu-central-1", "us-east-1", "us-west-2"})
    ),
}


def geography(region: str) -> str | None:
    """The inference-profile prefix of ``region``'s geography (``us``, ``eu``, ``apac``), if it has one."""
    for prefix, geo in (("us-gov-", None), ("us-", "us"), ("eu-", "eu"), ("ap-", "apac")):
        if region.startswith(prefix):
            return geo
    return None


def is_profile(model_id: str) -> bool:
    return model_id.startswith(PROFILE_PREFIXES) or model_id.startswith("arn:")


def resolve_model(model_id: str, region: str | None, *, setting: str) -> str:
    """The id that works for ``model_id`` in ``region`` (unknown region: as given); ValueError if none does."""
    if not region or not model_id or is_profile(model_id) or model_id not in MODELS:
        return model_id
    served = MODELS[model_id]
    if region in served.in_region:
        return model_id
    geo = geography(region)
    if geo and region in served.profile_sources:
        return f"{geo}.{model_id}"
    where = sorted(served.in_region | served.profile_sources)
    raise ValueError(
        f"{setting}: Bedrock does not offer {model_id} in {region} (it is served from {', '.join(where)}); "
        f"set {setting} to a model this region serves, or deploy to one of those regions (docs/aws.md, "
        "'Regions and models')"
    )
