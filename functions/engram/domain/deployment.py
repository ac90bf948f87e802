"""Names and numbers the functions and the AWS stack (``infra/``) must agree on, written once: the stack
imports them from here (it already reads ``engram.settings``), so a prefix the code writes under is the
prefix the stack grants, and a table the adapter queries is the table the stack creates.

Settings the functions read are shared by name instead (``infra/config.py``: a context key takes its
default from ``engram.settings``).
"""

from __future__ import annotations

# S3 keys. Skill resource files (services/library/skills.py ``blob_key``) and the replica's snapshots
# (adapters/storage/snapshots.py); the functions' grants cover these prefixes only (infra/skill_files.py,
# infra/snapshots.py).
SKILL_FILES_PREFIX = "skills/"
SNAPSHOT_PREFIX = "search/"
CONVERSATION_SNAPSHOT_PREFIX = f"{SNAPSHOT_PREFIX}conversations/"  # the conversation index's replica

# The DynamoDB table: its keys, its global secondary indexes (name -> partition and sort key) and the
# attribute DynamoDB's time to live reads (epoch seconds). adapters/storage/dynamodb/ lays items out in
# it; infra/storage.py creates it.
TABLE_KEYS = {"PK": "HASH", "SK": "RANGE"}
TABLE_INDEXES = {"GSI1": ("GSI1PK", "GSI1SK"), "GSI2": ("GSI2PK", "GSI2SK")}
TTL_ATTRIBUTE = "ttl"

# The replica index warns from this share of its ceiling, in a log line that starts with the message
# (adapters/search/replica.py); the stack's metric filter counts those lines (infra/alarms.py) and
# ``engram check`` warns from the same share (infra/check.py).
REPLICA_WARN_SHARE = 0.8
REPLICA_CEILING_MESSAGE = "replica index near its ceiling"

# Where the Lambda functions' Powertools metrics go (entrypoints/lambdas/runtime.py; the stack sets
# POWERTOOLS_METRICS_NAMESPACE / POWERTOOLS_SERVICE_NAME to these and alarms on them, infra/alarms.py).
METRICS_NAMESPACE = "Engram"
METRICS_SERVICE = "engram"

# Bedrock's Titan Text Embeddings v2: the default embedding model on AWS and the vector sizes it makes
# (adapters/embed/bedrock.py; infra/config.py's embedding_model and vector_dimension).
TITAN_V2 = "amazon.titan-embed-text-v2:0"
TITAN_DIMENSIONS = (256, 512, 1024)
