"""The bucket of skill resource files (README, "Skills"): scripts, templates and references attached to
skill versions. Files are stored once per content (``skills/<namespace hash>/<sha256>``), never
overwritten, so old versions keep their bytes, and deleted only when the skills that used them are
purged; the bucket is private, encrypted, TLS-only and kept
when the stack is deleted, like the table that lists them.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct
from engram.domain.deployment import SKILL_FILES_PREFIX  # where the functions keep skill files (blob_key)


class SkillFiles(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, removal_policy: RemovalPolicy = RemovalPolicy.RETAIN):
        super().__init__(scope, construct_id)
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[
                s3.LifecycleRule(id="abandoned-uploads", abort_incomplete_multipart_upload_after=Duration.days(1))
            ],
            removal_policy=removal_policy,
        )

    def grant(self, grantee: iam.IGrantable, *, delete: bool = False) -> None:
        """Get and put objects under ``skills/`` (adapters/storage/blobs.py calls nothing else); ``delete``:
        the cleanup function only, which purges skills deleted 30 days ago and the files no version names
        any more (services/library/skills.py). A lookup on the request path purges only the rows."""
        actions = ["s3:GetObject", "s3:PutObject", *(["s3:DeleteObject"] if delete else [])]
        iam.Grant.add_to_principal(
            grantee=grantee, actions=actions, resource_arns=[self.bucket.arn_for_objects(f"{SKILL_FILES_PREFIX}*")]
        )
        # A missing file is then a 404 (NotFound), not a 403; cleanup lists skills/ for files no version names.
        iam.Grant.add_to_principal(grantee=grantee, actions=["s3:ListBucket"], resource_arns=[self.bucket.bucket_arn])
