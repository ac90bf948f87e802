"""Preflight before ``cdk deploy``: ``python -m infra.check`` (README, "Deploy to AWS"; docs/aws.md, "Deploy").

Checks, with the credentials and region ``cdk`` would use:

1. credentials: who you are (STS);
2. region: set, and in the commercial partition;
3. the CDK bootstrap stack (``CDKToolkit``) exists in the region;
4. Bedrock: every model the deployment names (resolved for the region: infra/bedrock_models.py) is
   offered there and your account may invoke it (model access / agreements);
5. the API Gateway CloudWatch role of the account (one per region): whether the stack should create it;
6. an existing Engram stack: its search backend matches engram.deploy.json, and its table is below the
   replica's ceiling (infra/replica_sizing.py).

Prints one line per check (``ok``, ``warn``, ``FAIL``) and exits 1 when any check failed. Reads only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.bedrock_models import PROFILE_PREFIXES
from infra.config import EngramConfig
from infra.deploy_settings import SETTINGS_FILE, load

ROOT = Path(__file__).resolve().parent.parent
BOOTSTRAP_STACK = "CDKToolkit"
Clients = Callable[[str], Any]


@dataclass(frozen=True)
class Finding:
    level: str  # "ok", "warn", "FAIL"
    check: str
    message: str

    def __str__(self) -> str:
        return f"{self.level:4}  {self.check}: {self.message}"


def _code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", exc.__class__.__name__))


def check_identity(client: Clients) -> Finding:
    try:
        who = client("sts").get_caller_identity()
    except Exception as exc:
        return Finding(
            "FAIL", "credentials", f"no usable AWS credentials ({_code(exc)}); run `aws configure` or sso login"
        )
    return Finding("ok", "credentials", f"account {who['Account']} as {who['Arn']}")


def check_region(region: str | None) -> Finding:
    from infra.layer import require_supported_region

    if not region:
        return Finding("FAIL", "region", "no region: set AWS_REGION or `aws configure set region <region>`")
    try:
        require_supported_region(region)
    except ValueError as exc:
        return Finding("FAIL", "region", str(exc))
    return Finding("ok", "region", region)


def check_bootstrap(client: Clients, region: str) -> Finding:
    try:
        stacks = client("cloudformation").describe_stacks(StackName=BOOTSTRAP_STACK)["Stacks"]
    except Exception as exc:
        if "does not exist" in str(exc):
            return Finding("FAIL", "bootstrap", f"{region} is not bootstrapped: run `npx cdk bootstrap`")
        return Finding("FAIL", "bootstrap", f"cannot read the {BOOTSTRAP_STACK} stack ({_code(exc)})")
    stack = stacks[0]
    status = stack["StackStatus"]
    if not status.endswith("_COMPLETE") or "ROLLBACK" in status:
        return Finding("FAIL", "bootstrap", f"{BOOTSTRAP_STACK} is {status}: run `npx cdk bootstrap` again")
    version = next((o["OutputValue"] for o in stack.get("Outputs", []) if o["OutputKey"] == "BootstrapVersion"), "?")
    return Finding("ok", "bootstrap", f"{BOOTSTRAP_STACK} {status}, version {version}")


def _model_ids(cfg: EngramConfig) -> list[tuple[str, str]]:
    """(model id, region it is called in) for every Bedrock model the deployment names."""
    out = []
    for model_id in cfg.bedrock_model_ids():
        rerank = cfg.reranker == "bedrock" and model_id == cfg.rerank_model and cfg.rerank_region
        out.append((model_id, cfg.rerank_region if rerank else ""))
    return out


def check_models(client: Clients, cfg: EngramConfig, region: str) -> list[Finding]:
    findings = []
    for model_id, elsewhere in _model_ids(cfg):
        where = elsewhere or region
        bedrock = client("bedrock") if not elsewhere else client(f"bedrock@{elsewhere}")
        base = model_id.split(".", 1)[1] if model_id.startswith(PROFILE_PREFIXES) else model_id
        try:
            if base != model_id:
                bedrock.get_inference_profile(inferenceProfileIdentifier=model_id)
            available = bedrock.get_foundation_model_availability(modelId=base)
        except Exception as exc:
            findings.append(Finding("FAIL", "bedrock", f"{model_id} in {where}: {_code(exc)}"))
            continue
        problems = []
        if available["regionAvailability"] != "AVAILABLE":
            problems.append(f"not offered in {where}")
        if available["authorizationStatus"] != "AUTHORIZED":
            problems.append("not authorized for this account (IAM or an SCP denies it)")
        if available["entitlementAvailability"] != "AVAILABLE":
            problems.append("no model access: enable it in the Bedrock console, Model access")
        agreement = available["agreementAvailability"]["status"]
        if agreement not in ("AVAILABLE",):
            problems.append(f"the model's agreement is {agreement}: accept it in the Bedrock console")
        if problems:
            findings.append(Finding("FAIL", "bedrock", f"{model_id}: " + "; ".join(problems)))
        else:
            findings.append(Finding("ok", "bedrock", f"{model_id} in {where}"))
    return findings


def check_cloudwatch_role(client: Clients, cfg: EngramConfig) -> Finding:
    try:
        role = client("apigateway").get_account().get("cloudwatchRoleArn")
    except Exception as exc:
        return Finding("warn", "api logs role", f"cannot read API Gateway's account settings ({_code(exc)})")
    if role and cfg.api_cloudwatch_role:
        return Finding(
            "warn",
            "api logs role",
            f"the account already has one ({role}); `-c engram:api_cloudwatch_role=false` leaves it as it is",
        )
    if not role and not cfg.api_cloudwatch_role:
        return Finding(
            "FAIL", "api logs role", "the account has none and api_cloudwatch_role=false: the stage's logs need one"
        )
    return Finding("ok", "api logs role", role or "the stack creates it")


def check_existing_stack(client: Clients, cfg: EngramConfig, stack_name: str) -> list[Finding]:
    from infra.replica_sizing import WARN_SHARE, ceiling, ephemeral_mb, memory_mb

    try:
        stack = client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"][0]
    except Exception as exc:
        if "does not exist" in str(exc):
            return [Finding("ok", "stack", f"{stack_name} is new: {cfg.search_backend} backend")]
        return [Finding("warn", "stack", f"cannot read {stack_name} ({_code(exc)})")]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    deployed = "opensearch" if "CollectionEndpoint" in outputs else "replica"
    findings = []
    if deployed != cfg.search_backend:
        findings.append(
            Finding(
                "FAIL",
                "backend",
                f"{stack_name} searches with {deployed}, {SETTINGS_FILE} says {cfg.search_backend}: a deploy would "
                f"switch backends and the new index starts empty (docs/aws.md, 'Changing the search backend'); set "
                f"search_backend to {deployed} to keep it, or deploy and reindex",
            )
        )
    else:
        findings.append(Finding("ok", "backend", f"{stack_name} and {SETTINGS_FILE} agree: {deployed}"))
    table = outputs.get("TableName")
    if deployed == cfg.search_backend == "replica" and table:
        items = int(client("dynamodb").describe_table(TableName=table)["Table"].get("ItemCount", 0))
        dimension = cfg.index_dimension
        expected = cfg.replica_expected_memories
        limit = ceiling(
            ephemeral=ephemeral_mb(expected, dimension),
            memory=max(cfg.api_memory_mb, memory_mb(expected, dimension)),
            dimension=dimension,
        )
        # Each memory has at least two items (its row and its document-log row): half the items bound it.
        memories = items // 2
        level = "warn" if memories >= WARN_SHARE * limit else "ok"
        findings.append(
            Finding(
                level,
                "replica size",
                f"at most ~{memories:,} memories (table items / 2) of a {limit:,} ceiling"
                + ("; raise replica_expected_memories or move to OpenSearch" if level == "warn" else ""),
            )
        )
    return findings


def run(client: Clients, region: str | None, cfg: EngramConfig, stack_name: str) -> list[Finding]:
    findings = [check_identity(client), check_region(region)]
    if any(f.level == "FAIL" for f in findings) or region is None:
        return findings
    try:
        resolved = cfg.for_region(region)
    except ValueError as exc:
        return [*findings, Finding("FAIL", "models", str(exc))]
    findings.append(check_bootstrap(client, region))
    findings += check_models(client, resolved, region)
    findings.append(check_cloudwatch_role(client, resolved))
    findings += check_existing_stack(client, resolved, stack_name)
    return findings


def boto_clients(region: str | None) -> Clients:
    import boto3

    session = boto3.Session(region_name=region)
    made: dict[str, Any] = {}

    def client(name: str) -> Any:
        service, _, other = name.partition("@")
        if name not in made:
            made[name] = session.client(service, region_name=other or session.region_name)
        return made[name]

    client.region = session.region_name  # type: ignore[attr-defined]
    return client


def main(argv: Iterable[str] | None = None) -> int:
    from infra.deploy_settings import DEFAULT_STACK_NAME, known_keys

    parser = argparse.ArgumentParser(prog="python -m infra.check", description=__doc__.splitlines()[0])
    parser.add_argument("--region", help="default: the AWS CLI's region (AWS_REGION, the profile)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    saved = load(ROOT / SETTINGS_FILE)
    stack_name = str(saved.pop("stack_name", DEFAULT_STACK_NAME))
    from infra.config import coerce

    defaults = known_keys()
    cfg = EngramConfig(**{k: coerce(k, v, defaults[k]) for k, v in saved.items()})
    clients = boto_clients(args.region)
    findings = run(clients, clients.region, cfg, stack_name)  # type: ignore[attr-defined]
    for finding in findings:
        print(finding)
    failed = [f for f in findings if f.level == "FAIL"]
    print(f"{len(failed)} check(s) failed" if failed else "ready for `npx cdk deploy`")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
