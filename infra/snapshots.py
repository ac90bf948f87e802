"""The snapshot bucket of the ``replica`` search backend (docs/aws.md, "Search backends").

Snapshots are derived data (each is rebuildable from the table), so the bucket only keeps the newest
version of each plus a week of older ones; it is private, encrypted, TLS-only and kept when the stack is
deleted, like the table.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct
from engram.domain.deployment import SNAPSHOT_PREFIX  # where the functions keep snapshots (S3SnapshotStore)

OLD_SNAPSHOT_DAYS = 7


class Snapshots(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, removal_policy: RemovalPolicy = RemovalPolicy.RETAIN):
        super().__init__(scope, construct_id)
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="old-snapshots",
                    noncurrent_version_expiration=Duration.days(OLD_SNAPSHOT_DAYS),
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                )
            ],
            removal_policy=removal_policy,
        )

    def grant(self, grantee: iam.IGrantable, *, write: bool) -> None:
        """Read snapshots; ``write``: the jobs also put them (adapters/storage/snapshots.py calls nothing else).

        ListBucket (on this bucket only) makes S3 answer a missing snapshot with 404, which the adapter
        reads as "no snapshot yet", instead of 403.
        """
        # A snapshot over 64 MB is uploaded in parts; a failed upload is aborted (or expires after a day).
        actions = ["s3:GetObject", *(["s3:PutObject", "s3:AbortMultipartUpload"] if write else [])]
        iam.Grant.add_to_principal(
            grantee=grantee, actions=actions, resource_arns=[self.bucket.arn_for_objects(f"{SNAPSHOT_PREFIX}*")]
        )
        iam.Grant.add_to_principal(grantee=grantee, actions=["s3:ListBucket"], resource_arns=[self.bucket.bucket_arn])
