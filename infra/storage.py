"""The DynamoDB table: the source of truth (one table, see DynamoMemoryStore for the item layout)."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from constructs import Construct
from engram.domain.deployment import TABLE_INDEXES, TABLE_KEYS, TTL_ATTRIBUTE

# Generic key names, the adapter's (engram.domain.deployment); it decides what goes in them
# (functions/engram/adapters/storage/dynamodb/). GSI1: listings in created_at order (memories/candidates
# by status, events by memory, messages by id); GSI2: retention sweeps (memories by the time they last
# mattered).
_KEY = {kind: name for name, kind in TABLE_KEYS.items()}  # HASH / RANGE -> attribute name
# Transactions need the item actions of their parts (ConditionCheckItem for a condition-only part).
DATA_ACTIONS = [
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:ConditionCheckItem",
]


class Storage(Construct):
    """One on-demand table with PITR, RETAIN on delete and the TTL attribute (``ttl``)."""

    def __init__(self, scope: Construct, construct_id: str, *, removal_policy: RemovalPolicy = RemovalPolicy.RETAIN):
        super().__init__(scope, construct_id)
        self.table = dynamodb.Table(
            self,
            "Table",
            partition_key=_string(_KEY["HASH"]),
            sort_key=_string(_KEY["RANGE"]),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=TTL_ATTRIBUTE,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            removal_policy=removal_policy,
            deletion_protection=removal_policy == RemovalPolicy.RETAIN,
        )
        self._indexes = tuple(TABLE_INDEXES)
        for name, (pk, sk) in TABLE_INDEXES.items():
            self.table.add_global_secondary_index(
                index_name=name,
                partition_key=_string(pk),
                sort_key=_string(sk),
                projection_type=dynamodb.ProjectionType.ALL,
            )

    def grant_data(self, grantee: iam.IGrantable) -> None:
        """The item actions the DynamoDB adapters call (adapters/storage/dynamodb/, adapters/ratelimit/,
        adapters/search/replica_log.py), on the table and its indexes: no Scan, no stream actions (there
        is no stream), no table management."""
        table = self.table.table_arn
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=DATA_ACTIONS,
            resource_arns=[table, *(f"{table}/index/{name}" for name in self._indexes)],
        )


def _string(name: str) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=name, type=dynamodb.AttributeType.STRING)
