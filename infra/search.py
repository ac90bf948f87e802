"""OpenSearch Serverless VECTORSEARCH collection: the search mirror (vectors + BM25 text).

Classic collection with standby replicas off is the default (floor ~1 OCU: 0.5 indexing + 0.5 search,
about $175/month idle). ``generation="nextgen"`` puts the collection into a NextGen collection group
whose minimum is 0 OCU, so it scales to zero after 10 idle minutes (10-30 s to wake).
The index itself is created by the app at first use (OpenSearchIndex), so the deployer role needs no
data access.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_opensearchserverless as aoss
from constructs import Construct

# DeleteIndex: a changed embedding model drops and recreates the index (OpenSearchIndex.reset).
DATA_PERMISSIONS_INDEX = [
    "aoss:CreateIndex",
    "aoss:DeleteIndex",
    "aoss:DescribeIndex",
    "aoss:UpdateIndex",
    "aoss:ReadDocument",
    "aoss:WriteDocument",
]
NEXTGEN_MAX_OCU = 2
# Policies and the collection group are named <collection>-<suffix>; those names may have 32 characters.
NAME_SUFFIXES = ("-enc", "-net", "-data", "-group")
POLICY_NAME_MAX = 32
COLLECTION_NAME_MAX = POLICY_NAME_MAX - max(len(s) for s in NAME_SUFFIXES)


class Search(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        collection_name: str,
        generation: str = "classic",
        standby_replicas: bool = False,
    ):
        super().__init__(scope, construct_id)
        self.collection_name = collection_name
        standby = "ENABLED" if standby_replicas else "DISABLED"
        collection_resource = [f"collection/{collection_name}"]

        encryption = aoss.CfnSecurityPolicy(
            self,
            "EncryptionPolicy",
            name=f"{collection_name}-enc",
            type="encryption",
            policy=Stack.of(self).to_json_string(
                {"Rules": [{"ResourceType": "collection", "Resource": collection_resource}], "AWSOwnedKey": True}
            ),
        )
        # Lambda functions run outside a VPC, so the collection endpoint is public; every request is
        # still SigV4-signed and checked against the data access policy below. No dashboards.
        network = aoss.CfnSecurityPolicy(
            self,
            "NetworkPolicy",
            name=f"{collection_name}-net",
            type="network",
            policy=Stack.of(self).to_json_string(
                [{"Rules": [{"ResourceType": "collection", "Resource": collection_resource}], "AllowFromPublic": True}]
            ),
        )

        group_name = None
        if generation == "nextgen":
            group = aoss.CfnCollectionGroup(
                self,
                "CollectionGroup",
                name=f"{collection_name}-group",
                generation="NEXTGEN",
                standby_replicas=standby,
                description="Engram: scales to zero OCU after 10 idle minutes",
                capacity_limits=aoss.CfnCollectionGroup.CapacityLimitsProperty(
                    min_indexing_capacity_in_ocu=0,
                    min_search_capacity_in_ocu=0,
                    max_indexing_capacity_in_ocu=NEXTGEN_MAX_OCU,
                    max_search_capacity_in_ocu=NEXTGEN_MAX_OCU,
                ),
            )
            group_name = group.name

        self.collection = aoss.CfnCollection(
            self,
            "Collection",
            name=collection_name,
            type="VECTORSEARCH",
            description="Engram memory search mirror (rebuildable from DynamoDB)",
            standby_replicas=None if group_name else standby,
            collection_group_name=group_name,
        )
        self.collection.add_resource_dependency(encryption)
        self.collection.add_resource_dependency(network)
        if generation == "nextgen":
            self.collection.add_resource_dependency(group)
        self.endpoint = self.collection.attr_collection_endpoint
        self._principals: list[str] = []

    def grant_data_access(self, role: iam.IRole) -> None:
        """Let ``role`` call the collection (IAM side) and read/write its indexes (data access policy)."""
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["aoss:APIAccessAll"], resources=[self.collection.attr_arn])
        )
        self._principals.append(role.role_arn)

    def finalize(self, *, extra_principals: tuple[str, ...] = ()) -> None:
        """Create the data access policy once every principal is known (call after the grants)."""
        name = self.collection_name
        aoss.CfnAccessPolicy(
            self,
            "DataAccessPolicy",
            name=f"{name}-data",
            type="data",
            policy=Stack.of(self).to_json_string(
                [
                    {
                        "Rules": [
                            {
                                "ResourceType": "collection",
                                "Resource": [f"collection/{name}"],
                                "Permission": ["aoss:DescribeCollectionItems"],
                            },
                            {
                                "ResourceType": "index",
                                "Resource": [f"index/{name}/*"],
                                "Permission": DATA_PERMISSIONS_INDEX,
                            },
                        ],
                        "Principal": [*self._principals, *extra_principals],
                    }
                ]
            ),
        )
