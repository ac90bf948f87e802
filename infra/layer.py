"""The dependency layer (built without Docker by layers/build.py) and the public Lambda Web Adapter layer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from aws_cdk import Aws, Stack, Token
from aws_cdk import aws_lambda as lambda_
from aws_cdk.region_info import RegionInfo
from constructs import Construct

from infra.functions import ARCHITECTURE, ROOT, RUNTIME

# The Lambda Web Adapter's public layers live in this account in every commercial ("aws") region.
# Other partitions are not supported: China regions publish the adapter from other accounts, and
# Bedrock (embeddings, job models) is not offered there.
LWA_ACCOUNT = "753240598075"
SUPPORTED_PARTITION = "aws"


def require_supported_region(region: str | None) -> None:
    """Fail at synth time when the target region is known to be outside the commercial partition."""
    if not region or Token.is_unresolved(region):
        return
    partition = RegionInfo.get(region).partition
    if partition and partition != SUPPORTED_PARTITION:
        raise ValueError(
            f"Engram deploys to commercial AWS regions only (partition {SUPPORTED_PARTITION!r}); {region} is in "
            f"{partition!r}, where the Lambda Web Adapter layer ({LWA_ACCOUNT}) and Bedrock are not available"
        )


def ensure_layer_built(layer_dir: Path, requirements: str = "requirements.txt") -> Path:
    """Build the layer with layers/build.py unless ``<layer_dir>/python`` already exists."""
    if not (layer_dir / "python").is_dir():
        build = [sys.executable, str(ROOT / "layers" / "build.py"), "--out", str(layer_dir)]
        subprocess.run([*build, "--requirements", str(ROOT / "layers" / requirements)], check=True)
    return layer_dir


class Layers(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer_dir: Path,
        lwa_version: int,
        replica_layer_dir: Path | None = None,
    ):
        super().__init__(scope, construct_id)
        require_supported_region(Stack.of(self).region)
        self.dependencies = lambda_.LayerVersion(
            self,
            "Dependencies",
            code=lambda_.Code.from_asset(str(ensure_layer_built(layer_dir))),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="Engram runtime dependencies (pip, manylinux2014_x86_64, cp312; boto3 included)",
        )
        # numpy for the replica search backend's in-function index (layers/requirements-replica.txt).
        self.replica: lambda_.ILayerVersion | None = None
        if replica_layer_dir is not None:
            self.replica = lambda_.LayerVersion(
                self,
                "Replica",
                code=lambda_.Code.from_asset(str(ensure_layer_built(replica_layer_dir, "requirements-replica.txt"))),
                compatible_runtimes=[RUNTIME],
                compatible_architectures=[ARCHITECTURE],
                description="numpy for the replica search index (pip, manylinux2014_x86_64, cp312)",
            )
        self.web_adapter = lambda_.LayerVersion.from_layer_version_arn(
            self,
            "WebAdapter",
            f"arn:{Aws.PARTITION}:lambda:{Aws.REGION}:{LWA_ACCOUNT}:layer:LambdaAdapterLayerX86:{lwa_version}",
        )
