"""A Lambda-faithful harness: the deployed functions, run the way AWS Lambda runs them, on loopback.

What is real: the CloudFormation template (the CDK app synthesized offline, once per test session),
the resources it declares (created on a moto server from the template's own properties, so the test
table cannot drift from the stack's), each function's environment (the template's variables with
their references resolved to those resources), ``functions/run.sh`` started as the Lambda Web Adapter
starts it, and the job handlers imported and called by one long-lived process per function.

What Lambda does that the harness reproduces:

- **Init, then readiness.** An HTTP function is ready when its readiness path
  (``AWS_LWA_READINESS_CHECK_PATH``) answers with a status in 100-499, polled every 10 ms; the init
  time is measured (Lambda allows 10 s).
- **Freeze.** The process group is stopped (SIGSTOP) as soon as a response body has ended (and after
  init) and continued (SIGCONT) only to serve the next request: work left running after the last
  byte does not run until then.
- **One request at a time per instance**, and as many instances as a test starts, on one table.
- **Warm reuse.** A job function's process serves every invocation of the test, frozen in between.

What differs: each instance listens on its own loopback port (``AWS_LWA_PORT``; in Lambda each
sandbox has its own network), AWS is moto (``AWS_ENDPOINT_URL``), Bedrock is a loopback fake
(``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``), OpenSearch Serverless is osmem-server behind a proxy that
answers kNN queries exactly (``OpenSearchProxy``), or whatever endpoint a test passes (a closed port,
a proxy that answers only after 20 s), and there is no X-Ray daemon
(``POWERTOOLS_TRACE_DISABLED``).

The pieces are independent, so other backends reuse them: a test that needs an S3 bucket declared by
the stack gets it created and its name resolved into every function's environment.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import secrets
import signal
import string
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS_DIR = ROOT / "functions"
RUN_SH = FUNCTIONS_DIR / "run.sh"
JOB_RUNNER = Path(__file__).resolve().parent / "lambda_job_runner.py"

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}


# -- the synthesized stack -------------------------------------------------------------------------


def synth_template(**config: Any) -> dict[str, Any]:
    """The CloudFormation template ``cdk deploy`` would deploy, synthesized offline: cdk.json's context
    (CDK's feature flags), the project's defaults (``EngramConfig``) and ``config`` (its fields) on top.

    The dependency layer is a placeholder folder (its contents do not change the template's
    resources or environment), like tests/infra/test_stack.py.
    """
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "1")
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
    import aws_cdk as cdk

    from infra.config import EngramConfig
    from infra.stack import EngramStack
    from layers.build import lock_path, stamp

    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    with tempfile.TemporaryDirectory(prefix="engram-layer-") as layer, tempfile.TemporaryDirectory() as out:
        (Path(layer) / "python").mkdir()
        (Path(layer) / "python" / "placeholder.txt").write_text("built by layers/build.py\n")
        for requirements in (ROOT / "layers").glob("requirements*.txt"):
            stamp(Path(layer), lock_path(requirements))  # as built from its current lock: no rebuild
        app = cdk.App(outdir=out, context=context)
        settings = dataclasses.replace(
            EngramConfig.from_context(app.node),
            layer_dir=layer,
            replica_layer_dir=layer,
            embedder_layer_dir=layer,
            **config,
        )
        stack = EngramStack(app, "Engram", config=settings)
        template: dict[str, Any] = app.synth().get_stack_by_name(stack.stack_name).template
    return template


_TEMPLATES: dict[str, dict[str, Any]] = {}


def cached_template(**config: Any) -> dict[str, Any]:
    """``synth_template(**config)``, synthesized once per process for each distinct ``config``."""
    key = json.dumps(config, sort_keys=True, default=str)
    if key not in _TEMPLATES:
        _TEMPLATES[key] = synth_template(**config)
    return copy.deepcopy(_TEMPLATES[key])


@dataclass(frozen=True)
class Function:
    """One ``AWS::Lambda::Function`` of the template."""

    logical_id: str
    properties: dict[str, Any]

    @property
    def handler(self) -> str:
        return str(self.properties["Handler"])

    @property
    def variables(self) -> dict[str, Any]:
        return dict((self.properties.get("Environment") or {}).get("Variables") or {})

    @property
    def memory_mb(self) -> int:
        return int(self.properties.get("MemorySize") or 128)

    @property
    def timeout_s(self) -> int:
        return int(self.properties.get("Timeout") or 3)


def functions(template: Mapping[str, Any]) -> list[Function]:
    return [
        Function(logical_id, resource["Properties"])
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Function"
    ]


def http_function(template: Mapping[str, Any], construct: str) -> Function:
    """The run.sh function of construct ``construct`` (``"Api"`` or ``"Mcp"``, as in infra/stack.py);
    chosen by logical id, so it does not depend on the environment it is given."""
    found = [f for f in functions(template) if f.handler == "run.sh" and f.logical_id.startswith(construct)]
    if len(found) != 1:
        ids = sorted(f.logical_id for f in functions(template) if f.handler == "run.sh")
        raise LookupError(f"no single run.sh function in construct {construct!r} (the stack has {ids})")
    return found[0]


def job_function(template: Mapping[str, Any], handler: str) -> Function:
    found = [f for f in functions(template) if f.handler == handler]
    if len(found) != 1:
        raise LookupError(f"no single function with handler {handler!r}")
    return found[0]


# -- intrinsic functions -------------------------------------------------------------------------------


def resolve(value: Any, refs: Mapping[str, str], attrs: Mapping[tuple[str, str], str]) -> Any:
    """``value`` with ``Ref``, ``Fn::GetAtt``, ``Fn::Join``, ``Fn::Select`` and ``Fn::Split`` evaluated.

    A reference to a resource the harness did not create raises ``KeyError`` naming it, so a new
    resource in the stack that a function depends on is noticed here, not as a confusing failure.
    """
    if isinstance(value, list):
        return [resolve(v, refs, attrs) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((key, arg),) = value.items()
        if key == "Ref":
            if arg not in refs:
                raise KeyError(f"Ref {arg}: the harness does not provide this resource (tests/lambda_harness.py)")
            return refs[arg]
        if key == "Fn::GetAtt":
            logical, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
            if (logical, attribute) not in attrs:
                raise KeyError(f"Fn::GetAtt {logical}.{attribute}: not provided by tests/lambda_harness.py")
            return attrs[(logical, attribute)]
        if key == "Fn::Join":
            sep, parts = arg
            return sep.join(str(resolve(p, refs, attrs)) for p in resolve(parts, refs, attrs))
        if key == "Fn::Select":
            index, items = arg
            return resolve(items, refs, attrs)[int(resolve(index, refs, attrs))]
        if key == "Fn::Split":
            sep, text = arg
            return str(resolve(text, refs, attrs)).split(sep)
    return {k: resolve(v, refs, attrs) for k, v in value.items()}


# -- AWS on loopback -------------------------------------------------------------------------------------


class MotoServer:
    """moto's server mode in its own process (its state is apart from in-process ``mock_aws`` tests)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> MotoServer:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **FAKE_CREDENTIALS, "AWS_DEFAULT_REGION": REGION},
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"moto server exited: {_tail(self._log)}")
            with contextlib.suppress(httpx.TransportError):
                httpx.get(f"{self.url}/moto-api/", timeout=1)
                return self
            time.sleep(0.05)
        raise TimeoutError(f"moto server did not start within {timeout:.0f} s")

    def client(self, service: str) -> Any:
        import boto3

        return boto3.client(
            service,
            region_name=REGION,
            endpoint_url=self.url,
            aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=FAKE_CREDENTIALS["AWS_SESSION_TOKEN"],
        )

    def stop(self) -> None:
        if self._process is not None:
            _end(self._process)
        self._log.close()

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# CloudFormation properties of AWS::DynamoDB::Table -> how the CreateTable call takes them. A property
# missing here fails the deployment: teach the harness, so the test table keeps matching the stack.
_TABLE_AS_IS = ("AttributeDefinitions", "KeySchema", "BillingMode", "DeletionProtectionEnabled", "TableClass")
_TABLE_AFTER = ("TimeToLiveSpecification", "PointInTimeRecoverySpecification")
_TABLE_IGNORED = ("Tags", "ContributorInsightsSpecification")


def create_table_request(properties: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The ``CreateTable`` arguments for a table declared with ``properties`` (CloudFormation's names)."""
    known = {*_TABLE_AS_IS, *_TABLE_AFTER, *_TABLE_IGNORED, "GlobalSecondaryIndexes", "SSESpecification"}
    unknown = sorted(set(properties) - known)
    if unknown:
        raise ValueError(f"AWS::DynamoDB::Table properties the harness cannot create yet: {unknown}")
    request: dict[str, Any] = {"TableName": name}
    request.update({k: properties[k] for k in _TABLE_AS_IS if k in properties})
    if "GlobalSecondaryIndexes" in properties:
        request["GlobalSecondaryIndexes"] = [
            {k: v for k, v in gsi.items() if k in ("IndexName", "KeySchema", "Projection", "ProvisionedThroughput")}
            for gsi in properties["GlobalSecondaryIndexes"]
        ]
    sse = properties.get("SSESpecification")
    if sse:
        request["SSESpecification"] = {"Enabled": bool(sse.get("SSEEnabled"))}
        if sse.get("SSEType"):
            request["SSESpecification"]["SSEType"] = sse["SSEType"]
    return request


def _create_table(dynamodb: Any, properties: Mapping[str, Any], name: str) -> None:
    dynamodb.create_table(**create_table_request(properties, name))
    ttl = properties.get("TimeToLiveSpecification")
    if ttl:
        dynamodb.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": ttl["Enabled"]}
        )
    pitr = properties.get("PointInTimeRecoverySpecification")
    if pitr:
        dynamodb.update_continuous_backups(
            TableName=name,
            PointInTimeRecoverySpecification={
                "PointInTimeRecoveryEnabled": bool(pitr.get("PointInTimeRecoveryEnabled"))
            },
        )


def _generated_secret(properties: Mapping[str, Any], values: Mapping[str, str]) -> str:
    """The secret string CloudFormation would generate, with the owner's ``values`` filled in after."""
    spec = properties.get("GenerateSecretString") or {}
    data: dict[str, Any] = json.loads(spec.get("SecretStringTemplate") or "{}")
    if spec.get("GenerateStringKey"):
        alphabet = string.ascii_letters + string.digits
        data[spec["GenerateStringKey"]] = "".join(
            secrets.choice(alphabet) for _ in range(int(spec.get("PasswordLength") or 32))
        )
    data.update(values)
    return json.dumps(data)


@dataclass
class Deployment:
    """The stack's resources created on moto for one test; resolves each function's environment."""

    template: dict[str, Any]
    moto: MotoServer
    name: str
    refs: dict[str, str] = field(default_factory=dict)
    attrs: dict[tuple[str, str], str] = field(default_factory=dict)
    physical: dict[str, str] = field(default_factory=dict)  # logical id -> table/bucket/queue name, secret ARN
    secret: dict[str, Any] = field(default_factory=dict)

    def of_type(self, type_: str) -> list[str]:
        return [k for k, r in self.template["Resources"].items() if r["Type"] == type_ and k in self.physical]

    @property
    def table_name(self) -> str:
        (table,) = self.of_type("AWS::DynamoDB::Table")
        return self.physical[table]

    @property
    def owner_key(self) -> str:
        return str(self.secret["api_key"])

    def queue_url(self, logical_prefix: str) -> str:
        (logical,) = [k for k in self.of_type("AWS::SQS::Queue") if k.startswith(logical_prefix)]
        return self.refs[logical]

    def store(self) -> Any:
        """A ``DynamoMemoryStore`` on the deployment's table, for reading what the functions wrote."""
        from engram.adapters.clock import SystemClock
        from engram.adapters.storage.dynamodb import DynamoMemoryStore

        # The functions under test run on the real clock, so the reader does too.
        return DynamoMemoryStore(self.table_name, self.moto.client("dynamodb"), clock=SystemClock())

    def function_env(self, function: Function) -> dict[str, str]:
        """The function's variables from the template, resolved against this deployment."""
        return {k: str(resolve(v, self.refs, self.attrs)) for k, v in function.variables.items()}


def deploy(
    template: dict[str, Any],
    moto: MotoServer,
    *,
    opensearch_endpoint: str | None = None,
    secret_values: Mapping[str, str] | None = None,
) -> Deployment:
    """Create the template's data resources on moto under unique names (tests share one moto server).

    Creates DynamoDB tables, SQS queues, S3 buckets and Secrets Manager secrets; an OpenSearch
    Serverless collection's endpoint is ``opensearch_endpoint``. ``secret_values`` are what the owner
    puts into the secret after deploying (upstream keys, the admin password).
    """
    dep = Deployment(template=template, moto=moto, name=f"engram-{uuid.uuid4().hex[:8]}")
    dep.refs.update(
        {
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": dep.name,
            "AWS::StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{dep.name}/{uuid.uuid4()}",
        }
    )
    clients: dict[str, Any] = {}

    def client(service: str) -> Any:
        if service not in clients:
            clients[service] = moto.client(service)
        return clients[service]

    for logical, resource in template["Resources"].items():
        props = resource.get("Properties") or {}
        kind = resource["Type"]
        short = f"{dep.name}-{logical[:40]}"
        if kind == "AWS::DynamoDB::Table":
            _create_table(client("dynamodb"), props, short)
            dep.physical[logical] = dep.refs[logical] = short
            dep.attrs[(logical, "Arn")] = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{short}"
        elif kind == "AWS::SQS::Queue":
            url = client("sqs").create_queue(QueueName=short[:80])["QueueUrl"]
            dep.physical[logical] = short[:80]
            dep.refs[logical] = url
            dep.attrs[(logical, "QueueUrl")] = url
            dep.attrs[(logical, "QueueName")] = short[:80]
            dep.attrs[(logical, "Arn")] = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{short[:80]}"
        elif kind == "AWS::S3::Bucket":
            bucket = short.lower()[:63]
            client("s3").create_bucket(Bucket=bucket)
            dep.physical[logical] = dep.refs[logical] = bucket
            dep.attrs[(logical, "Arn")] = f"arn:aws:s3:::{bucket}"
        elif kind == "AWS::SecretsManager::Secret":
            text = _generated_secret(props, secret_values or {})
            arn = client("secretsmanager").create_secret(Name=short, SecretString=text)["ARN"]
            dep.physical[logical] = dep.refs[logical] = arn
            dep.secret = json.loads(text)
        elif kind == "AWS::OpenSearchServerless::Collection":
            if opensearch_endpoint is None:
                raise ValueError("the stack has an OpenSearch Serverless collection: pass opensearch_endpoint")
            dep.refs[logical] = logical.lower()
            dep.attrs[(logical, "CollectionEndpoint")] = opensearch_endpoint
            dep.attrs[(logical, "Arn")] = f"arn:aws:aoss:{REGION}:{ACCOUNT}:collection/{logical.lower()}"
    return dep


def lambda_runtime_env(
    function: Function, deployment: Deployment, *, task_root: Path = FUNCTIONS_DIR
) -> dict[str, str]:
    """What the Lambda service itself puts into every execution environment (not from the template)."""
    name = f"{deployment.name}-{function.logical_id}"[:64]
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "en_US.UTF-8",
        "TZ": ":UTC",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
        "AWS_LAMBDA_FUNCTION_NAME": name,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(function.memory_mb),
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": "2026/01/01/[$LATEST]" + uuid.uuid4().hex,
        "LAMBDA_TASK_ROOT": str(task_root),
        "LAMBDA_RUNTIME_DIR": str(task_root),
        "_HANDLER": function.handler,
        **FAKE_CREDENTIALS,
    }
    log_format = (function.properties.get("LoggingConfig") or {}).get("LogFormat")
    if log_format:
        env["AWS_LAMBDA_LOG_FORMAT"] = str(log_format)
    return env


@dataclass(frozen=True)
class Endpoints:
    """Where the functions' AWS SDK calls go on loopback."""

    moto: str
    bedrock_runtime: str

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.moto,
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": self.bedrock_runtime,
            # No X-Ray daemon here: Powertools' tracer would only log that it cannot send segments.
            "POWERTOOLS_TRACE_DISABLED": "true",
        }


# -- an HTTP function: run.sh under the (emulated) Lambda Web Adapter ---------------------------------


@dataclass
class Invocation:
    status: int
    headers: httpx.Headers
    body: bytes
    chunks: list[bytes]
    seconds: float

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class InitError(RuntimeError):
    """The function's init phase failed (the process exited or never became ready)."""


def _tail(log: Any, limit: int = 4000) -> str:
    log.flush()
    log.seek(0)
    return str(log.read()[-limit:].decode("utf-8", errors="replace"))


def _end(process: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """Stop a process group we started: continue it (it may be frozen), terminate, kill if needed."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGCONT)
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout)


class _Frozen:
    """SIGSTOP/SIGCONT of a process group started with ``start_new_session``, and the sandbox's
    directories: the process starts in an empty task directory (Lambda's read-only ``/var/task``; the
    code itself is at ``LAMBDA_TASK_ROOT``) and may write only to its own ``TMPDIR`` (``/tmp``), which
    is also its ``HOME`` (so no host configuration, such as ``~/.aws``, leaks in)."""

    process: subprocess.Popen[Any] | None
    frozen: bool
    env: dict[str, str]

    def _sandbox(self, name: str) -> None:
        self.tmp_dir = Path(tempfile.mkdtemp(prefix=f"engram-{name}-tmp-"))
        self.task_dir = Path(tempfile.mkdtemp(prefix=f"engram-{name}-task-"))
        self.env["HOME"] = self.env["TMPDIR"] = str(self.tmp_dir)

    def written_outside_tmp(self) -> list[str]:
        """Files the process created in its task directory (on Lambda: a read-only file system error)."""
        return sorted(str(p.relative_to(self.task_dir)) for p in self.task_dir.rglob("*"))

    def freeze(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGSTOP)
            self.frozen = True

    def thaw(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGCONT)
        self.frozen = False


# What reaches the app through each front door: API Gateway (REST API) and the MCP Function URL pass
# their own Host and the X-Forwarded-* headers they add; the Web Adapter forwards them unchanged
# (tests/events/apigw_rest_proxy.json, function_url_mcp.json).
FRONT_DOORS: dict[str, dict[str, str]] = {
    "Api": {
        "host": f"abc123.execute-api.{REGION}.amazonaws.com",
        "x-forwarded-for": "203.0.113.7",
        "x-forwarded-proto": "https",
        "x-forwarded-port": "443",
    },
    "Mcp": {
        "host": f"abcdefghijklmnop.lambda-url.{REGION}.on.aws",
        "x-forwarded-for": "203.0.113.7",
        "x-forwarded-proto": "https",
        "x-forwarded-port": "443",
    },
}


class LambdaInstance(_Frozen):
    """One execution environment of an HTTP function (run.sh behind the Lambda Web Adapter).

    ``front_door``: headers every invocation carries, as the function's API Gateway or Function URL
    sets them (``FRONT_DOORS``); a request's own headers win.
    """

    def __init__(
        self, env: Mapping[str, str], *, name: str = "instance", front_door: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.front_door = dict(front_door or {})
        self.env = dict(env)
        self.port = free_port()
        self.env["AWS_LWA_PORT"] = str(self.port)  # each sandbox has its own network in Lambda
        self.readiness_path = self.env.get("AWS_LWA_READINESS_CHECK_PATH", "/")
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._sandbox(name)
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        self.process: subprocess.Popen[bytes] | None = None
        self.frozen = False
        self.init_seconds: float | None = None
        self.invocations = 0
        self._lock = threading.Lock()
        self._http = httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(60, connect=5))

    def launch(self) -> None:
        """Start run.sh (as /opt/bootstrap does); ``wait_ready`` completes the init phase."""
        self._t0 = time.monotonic()
        self.process = subprocess.Popen(
            ["bash", str(RUN_SH)],
            env=self.env,
            cwd=self.task_dir,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Poll the readiness path every 10 ms until a status in 100-499; then freeze. Returns init seconds."""
        assert self.process is not None, "launch() first"
        deadline = self._t0 + timeout
        while True:
            if self.process.poll() is not None:
                raise InitError(f"{self.name}: run.sh exited with {self.process.returncode}: {self.output()}")
            with contextlib.suppress(httpx.TransportError):
                status = httpx.get(self.base_url + self.readiness_path, timeout=2).status_code
                if 100 <= status < 500:
                    break
            if time.monotonic() > deadline:
                raise InitError(f"{self.name}: not ready after {timeout:.0f} s: {self.output()}")
            time.sleep(0.01)
        self.init_seconds = time.monotonic() - self._t0
        self.freeze()
        return self.init_seconds

    def start(self, timeout: float = 60.0) -> LambdaInstance:
        self.launch()
        self.wait_ready(timeout)
        return self

    def invoke(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        headers: Mapping[str, str] | None = None,
        key: str | None = None,
        timeout: float = 60.0,
    ) -> Invocation:
        """One invocation: thaw, send the request, read the whole body, freeze the moment it ends."""
        hdrs = {**self.front_door, **(headers or {})}
        if key:
            hdrs["authorization"] = f"Bearer {key}"
        with self._lock:  # the adapter hands an environment one request at a time
            self.thaw()
            t0 = time.monotonic()
            try:
                request = self._http.build_request(method, path, json=json_body, headers=hdrs, timeout=timeout)
                response = self._http.send(request, stream=True)
                try:
                    chunks = list(response.iter_raw())
                finally:
                    self.freeze()
                    response.close()
            finally:
                self.freeze()
            self.invocations += 1
            return Invocation(
                status=response.status_code,
                headers=response.headers,
                body=b"".join(chunks),
                chunks=chunks,
                seconds=time.monotonic() - t0,
            )

    def output(self) -> str:
        return _tail(self.log)

    def stop(self) -> None:
        if self.process is not None:
            _end(self.process)
        self._http.close()
        self.log.close()


def start_instances(instances: list[LambdaInstance], timeout: float = 60.0) -> list[LambdaInstance]:
    """Cold-start several instances at once (their init phases overlap, as on Lambda)."""
    for instance in instances:
        instance.launch()
    for instance in instances:
        instance.wait_ready(timeout)
    return instances


# -- a job function: one warm process, one invocation at a time -------------------------------------


class JobFunction(_Frozen):
    """A job function's execution environment: imports the handler once, serves every invocation."""

    def __init__(self, env: Mapping[str, str], handler: str, *, timeout_s: int = 900) -> None:
        self.env = dict(env)
        self.handler = handler
        self.timeout_s = timeout_s
        self._sandbox(handler.rsplit(".", 2)[-2])
        # The Python runtime puts the task root (the function's code) on the path; nothing else.
        self.env["PYTHONPATH"] = self.env["LAMBDA_TASK_ROOT"]
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        self.process: subprocess.Popen[str] | None = None
        self.frozen = False

    def launch(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(JOB_RUNNER), self.handler, str(self.timeout_s * 1000)],
            env=self.env,
            cwd=self.task_dir,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            start_new_session=True,
        )

    def _answer(self) -> dict[str, Any]:
        assert self.process is not None and self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise InitError(f"{self.handler}: the process exited ({self.process.poll()}): {self.output()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def wait_ready(self) -> None:
        answer = self._answer()
        assert answer == {"ready": True}, answer
        self.freeze()

    def start(self) -> JobFunction:
        self.launch()
        self.wait_ready()
        return self

    def invoke(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """``{"result": ...}`` or ``{"error": {"errorType", "errorMessage", "stackTrace"}}``."""
        assert self.process is not None and self.process.stdin is not None
        self.thaw()
        try:
            self.process.stdin.write(json.dumps(event) + "\n")
            self.process.stdin.flush()
            return self._answer()
        finally:
            self.freeze()

    def output(self) -> str:
        return _tail(self.log)

    def stop(self) -> None:
        if self.process is not None:
            if self.process.stdin is not None:
                with contextlib.suppress(OSError):
                    self.process.stdin.close()
            _end(self.process)
        self.log.close()


def sqs_event(queue_url: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The event Lambda's SQS event source mapping builds from ``ReceiveMessage`` results."""
    arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{queue_url.rsplit('/', 1)[-1]}"
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": m.get("MessageAttributes", {}),
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": REGION,
            }
            for m in messages
        ]
    }


# -- OpenSearch that is not there ------------------------------------------------------------------


def closed_endpoint() -> str:
    """An endpoint nothing listens on (connection refused at once)."""
    return f"http://127.0.0.1:{free_port()}"


def _faiss_inner_product_score(ip: float) -> float:
    """OpenSearch's score for a faiss ``innerproduct`` hit (what a Serverless vector collection returns)."""
    return ip + 1.0 if ip >= 0 else 1.0 / (1.0 - ip)


def exact_knn(target: str, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
    """Answer a ``knn`` query exactly: read the filtered documents from ``target`` and rank them by
    inner product, scored like faiss. (osmem-server has no kNN; the ranking is what an exact HNSW
    search returns, the hit shape is OpenSearch's.)"""
    ((field_name, spec),) = body["query"]["knn"].items()
    query_vector = [float(x) for x in spec["vector"]]
    k = int(spec.get("k") or 10)
    size = int(body.get("size") or 10)
    scan = {"size": 10_000, "query": spec.get("filter") or {"match_all": {}}}
    response = httpx.post(target + path, json=scan, timeout=30)
    if response.status_code != 200:
        return response.status_code, response.content
    scored = []
    for hit in response.json().get("hits", {}).get("hits", []):
        vector = (hit.get("_source") or {}).get(field_name)
        if isinstance(vector, list) and len(vector) == len(query_vector):
            ip = sum(a * b for a, b in zip(vector, query_vector, strict=True))
            scored.append((_faiss_inner_product_score(ip), hit))
    scored.sort(key=lambda pair: -pair[0])
    wanted = body.get("_source")
    hits = []
    for score, hit in scored[: min(k, size)]:
        source = hit.get("_source") or {}
        if isinstance(wanted, list):
            source = {key: source[key] for key in wanted if key in source}
        hits.append({"_index": hit.get("_index"), "_id": hit.get("_id"), "_score": score, "_source": source})
    payload = {
        "took": 1,
        "timed_out": False,
        "hits": {
            "total": {"value": len(hits), "relation": "eq"},
            "max_score": hits[0]["_score"] if hits else None,
            "hits": hits,
        },
    }
    return 200, json.dumps(payload).encode()


class OpenSearchProxy:
    """A front for osmem-server (``target``) that adds what the harness needs of a vector collection:
    exact kNN for ``knn`` queries (``exact_knn``), and optionally a wake-up delay: every request is
    answered only after ``delay`` seconds, like a NextGen collection scaled to zero. ``stop()``
    releases waiting requests (they get 503)."""

    def __init__(self, target: str, *, delay: float = 0.0) -> None:
        self.target = target.rstrip("/")
        self.delay = delay
        self.requests = 0
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _answer(self, method: str, path: str, headers: Message, body: bytes) -> tuple[int, bytes, str]:
        if self.delay:
            self._release.wait(self.delay)
            if self._release.is_set():
                return 503, b'{"error": "stopped"}', "application/json"
        if method == "POST" and path.split("?")[0].endswith("/_search") and body:
            parsed = json.loads(body)
            if "knn" in (parsed.get("query") or {}):
                status, payload = exact_knn(self.target, path, parsed)
                return status, payload, "application/json"
        forwarded = {"content-type": headers.get("Content-Type") or "application/json"}
        upstream = httpx.request(method, self.target + path, content=body, headers=forwarded, timeout=30)
        return upstream.status_code, upstream.content, upstream.headers.get("content-type", "application/json")

    def start(self) -> OpenSearchProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _handle(self) -> None:
                proxy.requests += 1
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                try:
                    status, payload, ctype = proxy._answer(self.command, self.path, self.headers, body)
                except httpx.HTTPError as exc:
                    status, payload, ctype = 502, json.dumps({"error": str(exc)}).encode(), "application/json"
                with contextlib.suppress(OSError):
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> OpenSearchProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class HoldingDynamoProxy:
    """A front for the moto server's DynamoDB that one instance's SDK talks to
    (``AWS_ENDPOINT_URL_DYNAMODB``): it passes every call through, except that once ``arm()``ed it holds
    the first write to a memory row (PutItem, UpdateItem or TransactWriteItems on a ``MEM#`` item) until
    ``release()``: that instance paused between what it read and what it writes, while others write."""

    WRITES = frozenset({"PutItem", "UpdateItem", "TransactWriteItems", "DeleteItem"})

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.held = threading.Event()  # set when a write is being held
        self.operations: list[str] = []  # every call passed, by operation name
        self._armed = False
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def arm(self) -> None:
        self._armed = True

    def release(self) -> None:
        self._release.set()

    def _hold(self, operation: str, body: bytes) -> bool:
        with self._lock:
            if self._armed and operation in self.WRITES and b'"MEM#' in body:
                self._armed = False
                return True
            return False

    def _answer(self, path: str, headers: Message, body: bytes) -> tuple[int, bytes, dict[str, str]]:
        operation = (headers.get("X-Amz-Target") or "").rpartition(".")[2]
        self.operations.append(operation)
        if self._hold(operation, body):
            self.held.set()
            self._release.wait(60)
        skip = {"host", "content-length", "accept-encoding", "connection"}
        forwarded = {k: v for k, v in headers.items() if k.lower() not in skip}
        upstream = httpx.post(self.target + path, content=body, headers=forwarded, timeout=30)
        kept = {k: v for k, v in upstream.headers.items() if k.lower().startswith(("x-amz", "content-type"))}
        return upstream.status_code, upstream.content, kept

    def start(self) -> HoldingDynamoProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, payload, headers = proxy._answer(self.path, self.headers, body)
                with contextlib.suppress(OSError):
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> HoldingDynamoProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- putting it together ------------------------------------------------------------------------------------


@dataclass
class LambdaStack:
    """A deployment plus the loopback endpoints: starts API/MCP instances and job functions."""

    deployment: Deployment
    endpoints: Endpoints
    overrides: dict[str, str] = field(default_factory=dict)  # what the owner sets beyond the stack
    _started: list[Any] = field(default_factory=list)

    @property
    def template(self) -> dict[str, Any]:
        return self.deployment.template

    def env(self, function: Function, **extra: str) -> dict[str, str]:
        return {
            **lambda_runtime_env(function, self.deployment),
            **self.deployment.function_env(function),
            **self.endpoints.env(),
            **self.overrides,
            **extra,
        }

    def instance(self, construct: str = "Api", *, name: str | None = None, **extra: str) -> LambdaInstance:
        """A new (not yet started) execution environment of the HTTP function ``construct`` (Api, Mcp)."""
        function = http_function(self.template, construct)
        instance = LambdaInstance(
            self.env(function, **extra),
            name=name or f"{construct}{len(self._started)}",
            front_door=FRONT_DOORS.get(construct),
        )
        self._started.append(instance)
        return instance

    def job(self, handler: str, **extra: str) -> JobFunction:
        function = job_function(self.template, handler)
        job = JobFunction(self.env(function, **extra), handler, timeout_s=function.timeout_s)
        self._started.append(job)
        return job

    def deliver(self, queue_logical_prefix: str, job: JobFunction) -> list[dict[str, Any]]:
        """Feed the queue (by the template's logical id prefix, e.g. ``JobsCleanupQueue``) to ``job``."""
        return deliver_queue(self.deployment.moto, self.deployment.queue_url(queue_logical_prefix), job)

    def stop(self) -> None:
        """Stop every process; fails if one wrote outside its /tmp (Lambda's file system is read-only)."""
        written = {}
        for started in reversed(self._started):
            started.stop()
            if started.written_outside_tmp():
                written[getattr(started, "name", None) or started.handler] = started.written_outside_tmp()
        self._started.clear()
        assert not written, f"wrote outside /tmp (read-only on Lambda): {written}"


@contextlib.contextmanager
def lambda_stack(
    template: dict[str, Any],
    moto: MotoServer,
    *,
    opensearch_endpoint: str | None,
    bedrock_endpoint: str,
    secret_values: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> Iterator[LambdaStack]:
    """Deploy ``template`` on ``moto`` and yield a ``LambdaStack``; every process it started stops after."""
    deployment = deploy(template, moto, opensearch_endpoint=opensearch_endpoint, secret_values=secret_values)
    stack = LambdaStack(deployment, Endpoints(moto=moto.url, bedrock_runtime=bedrock_endpoint), dict(overrides or {}))
    try:
        yield stack
    finally:
        stack.stop()


def wait_until(check: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll ``check`` until it returns something truthy; its last value (or falsy) on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def _event_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """``ReceiveMessage``'s message attributes in the event's spelling (``stringValue``, ``dataType``)."""
    return {
        name: {
            "stringValue": value.get("StringValue"),
            "binaryValue": value.get("BinaryValue"),
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": value.get("DataType"),
        }
        for name, value in attributes.items()
    }


def deliver_queue(moto: MotoServer, queue_url: str, job: JobFunction, *, max_batches: int = 50) -> list[dict[str, Any]]:
    """Lambda's SQS event source mapping, until the queue is empty: receive up to 10 messages, invoke
    ``job`` with them, delete those it did not report failed (ReportBatchItemFailures). A failed record
    stays invisible for the queue's visibility timeout, as on AWS. Returns each invocation's answer."""
    sqs = moto.client("sqs")
    answers: list[dict[str, Any]] = []
    for _ in range(max_batches):
        messages = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, AttributeNames=["All"], MessageAttributeNames=["All"]
        ).get("Messages", [])
        if not messages:
            return answers
        event = sqs_event(
            queue_url,
            [{**m, "MessageAttributes": _event_attributes(m.get("MessageAttributes") or {})} for m in messages],
        )
        answer = job.invoke(event)
        answers.append(answer)
        if "error" in answer:  # the whole batch failed: every message comes back later
            continue
        failed = {item["itemIdentifier"] for item in (answer["result"] or {}).get("batchItemFailures", [])}
        for m in messages:
            if m["MessageId"] not in failed:
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
    raise RuntimeError(f"{queue_url} still had messages after {max_batches} batches")
