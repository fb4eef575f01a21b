"""The EKS API's IAM bearer token: a presigned STS ``GetCallerIdentity`` URL bound to the cluster name.

``k8s-aws-v1.`` + base64url(presigned URL carrying the signed ``x-k8s-aws-id`` header); EKS accepts it for 15 minutes
whatever the URL's own expiry (AWS Open Source blog "A Container-Free Way to Configure Kubernetes Using AWS Lambda").
One implementation for the deploy-time Helm installer and the verl backend. Only boto3/botocore: the Helm Lambda
carries no other dependency.
"""

from __future__ import annotations

import base64

import boto3
from botocore.signers import RequestSigner

TOKEN_PREFIX = "k8s-aws-v1."  # noqa: S105 - the scheme marker EKS expects, not a secret
# EKS honours a token for 15 minutes; callers refresh well before (and on a 401).
TOKEN_LIFETIME_SECONDS = 14 * 60


def eks_token(cluster_name: str, region: str, session: boto3.session.Session | None = None) -> str:
    """A bearer token for the EKS API of ``cluster_name`` from the session's credentials."""
    session = session or boto3.session.Session()
    sts = session.client("sts", region_name=region)
    signer = RequestSigner(
        sts.meta.service_model.service_id, region, "sts", "v4", session.get_credentials(), session.events
    )
    params = {
        "method": "GET",
        "url": f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
        "body": {},
        "headers": {"x-k8s-aws-id": cluster_name},
        "context": {},
    }
    url = signer.generate_presigned_url(params, region_name=region, expires_in=60, operation_name="")
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
