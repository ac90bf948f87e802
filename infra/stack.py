"""EngramStack: composes the constructs, wires grants and environment, and exports the URLs.

Environment-agnostic (no account/region lookups), so ``cdk synth`` runs with no AWS account.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Aws, CfnOutput, Fn, RemovalPolicy, Stack, Token
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct
from engram.services.jobs.registry import JOBS

from infra import replica_sizing
from infra.alarms import Alarms
from infra.api import Api
from infra.bedrock_models import PROFILE_PREFIXES
from infra.config import EngramConfig
from infra.functions import ROOT
from infra.jobs import Jobs
from infra.layer import Layers, require_supported_region
from infra.mcp import Mcp
from infra.nag import add_suppressions
from infra.search import Search
from infra.secrets import Secrets
from infra.skill_files import SkillFiles
from infra.snapshots import Snapshots
from infra.storage import Storage


def bedrock_model_arns(model_id: str, *, region: str = Aws.REGION) -> list[str]:
    """ARNs that InvokeModel needs for ``model_id`` (a foundation model or an inference profile)."""
    if model_id.startswith(PROFILE_PREFIXES):
        base = model_id.split(".", 1)[1]
        return [
            f"arn:{Aws.PARTITION}:bedrock:{region}:{Aws.ACCOUNT_ID}:inference-profile/{model_id}",
            # A profile routes to the foundation model in any region of its geography.
            f"arn:{Aws.PARTITION}:bedrock:*::foundation-model/{base}",
        ]
    return [f"arn:{Aws.PARTITION}:bedrock:{region}::foundation-model/{model_id}"]


def _under_root(path: str) -> Path:
    """A context path as given if absolute, else relative to the repository (where cdk.json is)."""
    return Path(path) if Path(path).is_absolute() else ROOT / path


class EngramStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EngramConfig | None = None,
        table_removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        **kwargs: object,
    ):
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        # Model ids for the deploy region when the stack has one (app.py resolves them for the CLI's region).
        region = None if Token.is_unresolved(self.region) else self.region
        require_supported_region(region)
        cfg = (config or EngramConfig.from_context(self.node)).for_region(region)
        self.config = cfg

        storage = Storage(self, "Storage", removal_policy=table_removal_policy)
        secrets = Secrets(self, "Secrets")
        skill_files = SkillFiles(self, "SkillFiles", removal_policy=table_removal_policy)
        # One search backend: an OpenSearch collection, or (replica) only a snapshot bucket.
        search: Search | None = None
        snapshots: Snapshots | None = None
        if cfg.search_backend == "opensearch":
            search = Search(
                self,
                "Search",
                collection_name=cfg.collection_name,
                generation=cfg.collection_generation,
                standby_replicas=cfg.standby_replicas,
            )
        else:
            snapshots = Snapshots(self, "Snapshots", removal_policy=table_removal_policy)
        layers = Layers(
            self,
            "Layers",
            layer_dir=_under_root(cfg.layer_dir),
            lwa_version=cfg.lwa_layer_version,
            lwa_arn=cfg.lwa_layer_arn,
            replica_layer_dir=_under_root(cfg.replica_layer_dir) if snapshots is not None else None,
            embedder_layer_dir=_under_root(cfg.embedder_layer_dir) if cfg.embedder == "local" else None,
        )
        job_layers = [layers.dependencies, *layers.optional]
        # The replica keeps the index in /tmp and memory: sized for the expected index (infra/replica_sizing.py).
        api_memory, job_memory, ephemeral = cfg.api_memory_mb, cfg.job_memory_mb, 0
        if snapshots is not None:
            expected, dimension = cfg.replica_expected_memories, cfg.index_dimension
            ephemeral = replica_sizing.ephemeral_mb(expected, dimension)
            api_memory = max(api_memory, replica_sizing.memory_mb(expected, dimension))
            job_memory = max(job_memory, replica_sizing.memory_mb(expected, dimension))
            self.replica_ceiling = replica_sizing.ceiling(
                ephemeral=ephemeral, memory=min(api_memory, job_memory), dimension=dimension
            )

        env = {
            **cfg.function_env(),
            "ENGRAM_AWS_REGION": Aws.REGION,
            "ENGRAM_TABLE_NAME": storage.table.table_name,
            "ENGRAM_SECRET_ARN": secrets.secret.secret_arn,
            "ENGRAM_SKILLS_BUCKET": skill_files.bucket.bucket_name,
        }
        if search is not None:
            env["ENGRAM_OPENSEARCH_ENDPOINT"] = search.endpoint
        if snapshots is not None:
            env["ENGRAM_SNAPSHOT_BUCKET"] = snapshots.bucket.bucket_name
        jobs = Jobs(
            self,
            "Jobs",
            environment=env,
            layers=job_layers,
            memory_size=job_memory,
            timezone=cfg.timezone,
            times=cfg.schedule_times(),
        )
        http_env = {**env, "ENGRAM_CLEANUP_QUEUE_URL": jobs.cleanup_queue.queue_url}
        http_layers = [*job_layers, layers.web_adapter]
        api = Api(
            self,
            "Api",
            environment=http_env,
            layers=http_layers,
            memory_size=api_memory,
            throttle_rate=cfg.api_throttle_rate,
            throttle_burst=cfg.api_throttle_burst,
            reserved_concurrency=cfg.api_reserved_concurrency,
            cloudwatch_role=cfg.api_cloudwatch_role,
        )
        mcp = Mcp(
            self,
            "Mcp",
            environment=http_env,
            layers=http_layers,
            memory_size=api_memory,
            reserved_concurrency=cfg.api_reserved_concurrency,
        )

        if ephemeral:
            for fn in (api.function, mcp.function, *jobs.functions):
                fn.node.default_child.add_property_override("EphemeralStorage", {"Size": ephemeral})  # type: ignore[union-attr]
                fn.add_environment("ENGRAM_REPLICA_CEILING", str(self.replica_ceiling))

        # Least privilege per function (docs/aws.md, "What each function may do"): every function reads and
        # writes the table (an explicit action list) and reads the secret; the HTTP functions read
        # snapshots, the jobs also write them; only cleanup deletes skill files, extraction and dreaming never
        # touch them.
        functions: list[lambda_.Function] = [api.function, mcp.function, *jobs.functions]
        http = [api.function, mcp.function]
        bedrock = self._bedrock_statements(cfg)
        for fn in functions:
            storage.grant_data(fn)
            secrets.secret.grant_read(fn)
            jobs.cleanup_queue.grant_send_messages(fn)
            if search is not None:
                search.grant_data_access(fn.role)  # type: ignore[arg-type]
            if snapshots is not None:
                snapshots.grant(fn, write=fn not in http)
            for statement in bedrock:
                fn.add_to_role_policy(statement)
        # Skill files: the HTTP functions read and upload them; only cleanup deletes them (the skills purged
        # 30 days after their deletion, and files no version names any more: services/library/skills.py).
        for fn in http:
            skill_files.grant(fn)
        skill_files.grant(jobs.cleanup_function, delete=True)
        if search is not None:
            search.finalize(extra_principals=cfg.data_access_principals)
        alarms = Alarms(
            self,
            "Alarms",
            dead_letter_queues={"Schedule": jobs.schedule_dlq, "Cleanup": jobs.cleanup_dlq},
            job_functions={
                "Extract": jobs.extract_function,
                "Dream": jobs.dream_function,
                "Cleanup": jobs.cleanup_function,
            },
            job_error_metrics=_error_metrics({"Extract": "extract", "Dream": "dream"}),
            rest_api=api.rest_api,
            http_functions={"Api": api.function, "Mcp": mcp.function},
            mcp_function=mcp.function,
            replica_log_groups=[fn.log_group for fn in functions] if snapshots is not None else None,
            email=cfg.alarm_email,
        )

        self.api_url = Fn.join(
            "", ["https://", api.rest_api.rest_api_id, ".execute-api.", Aws.REGION, ".", Aws.URL_SUFFIX, "/prod"]
        )
        CfnOutput(self, "ApiUrl", value=self.api_url, description="Base URL; OpenAI clients use <ApiUrl>/v1")
        CfnOutput(self, "McpUrl", value=Fn.join("", [mcp.url, "mcp"]), description="MCP endpoint (streamable HTTP)")
        CfnOutput(self, "AdminUrl", value=Fn.join("", [self.api_url, "/admin"]), description="Admin panel")
        CfnOutput(self, "TableName", value=storage.table.table_name)
        CfnOutput(self, "SecretArn", value=secrets.secret.secret_arn, description="Fill in upstream keys here")
        if search is not None:
            CfnOutput(self, "CollectionEndpoint", value=search.endpoint)
        if snapshots is not None:
            CfnOutput(self, "SnapshotBucket", value=snapshots.bucket.bucket_name, description="Search snapshots")
        CfnOutput(self, "SkillFilesBucket", value=skill_files.bucket.bucket_name, description="Skill resource files")
        CfnOutput(self, "AlarmTopicArn", value=alarms.topic.topic_arn, description="Alarms notify this SNS topic")

        self.storage, self.secrets, self.search, self.jobs, self.api, self.mcp, self.alarms = (
            storage,
            secrets,
            search,
            jobs,
            api,
            mcp,
            alarms,
        )
        self.snapshots = snapshots
        self.layers = layers
        self.skill_files = skill_files
        add_suppressions(self)

    @staticmethod
    def _bedrock_statements(cfg: EngramConfig) -> list[iam.PolicyStatement]:
        arns: list[str] = []
        for model_id in cfg.bedrock_model_ids():
            region = cfg.rerank_region if (model_id == cfg.rerank_model and cfg.rerank_region) else Aws.REGION
            arns += bedrock_model_arns(model_id, region=region)
        # No statement without a model (e.g. embedder=local with upstream job models): an empty Resource
        # list is not a valid policy.
        statements = []
        if arns:
            statements.append(
                iam.PolicyStatement(
                    actions=["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"],
                    resources=sorted(set(arns)),
                )
            )
        if cfg.reranker == "bedrock":
            # The Rerank action has no resource type: it can only be granted on "*" (the model it may
            # use is still limited by the InvokeModel statement above).
            statements.append(iam.PolicyStatement(actions=["bedrock:Rerank"], resources=["*"]))
        return statements


def _error_metrics(jobs: dict[str, str]) -> dict[str, str]:
    """Each scheduled job's error metric, as its function writes it (the job registry names it)."""
    return {name: metric for name, job in jobs.items() if (metric := JOBS[job].error_metric) is not None}
