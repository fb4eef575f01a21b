"""Settings and run contexts of verl runs as the pipeline builds them (deploy values ∪ run settings ∪ options)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from mtrl.backends.verl.offline import offline_run_settings
from mtrl.contracts.backend import CreatedResource, RunContext
from mtrl.runs.manifest import resolve_run_settings
from mtrl.settings import load_settings
from tests.unit.backends.aws_fakes import FakeError

RUN_ID = "wordle-20261201T120000Z-0a1b2c3d"
# The operator's copy of the model: its SHA256SUMS (whose own SHA-256 the deployment pins) at the prefix.
MODEL_SUMS = ("0" * 64 + "  config.json\n" + "1" * 64 + "  model.safetensors\n").encode()
MODEL = {
    "id": "Qwen/Qwen2.5-0.5B-Instruct",
    "s3_uri": "s3://models-bucket/qwen/",
    "sha256": hashlib.sha256(MODEL_SUMS).hexdigest(),
}
IMAGE_DIGEST = "sha256:" + "c" * 64
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/verl-trainer@" + IMAGE_DIGEST
BASE_CONTEXT: dict[str, Any] = {"verl_models": json.dumps([MODEL]), "verl_image_uri": IMAGE}
TRAINER_ROLE_ARN = "arn:aws:iam::123456789012:role/mtrl-verl-trainer"


def publish_model_and_image(session: Any, *, sums: bytes = MODEL_SUMS) -> None:
    """What an operator does before the first run, in moto: the model copy's SHA256SUMS and the pushed image."""
    s3 = session.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="models-bucket")
    s3.put_object(Bucket="models-bucket", Key="qwen/SHA256SUMS", Body=sums)
    ecr = session.client("ecr", region_name="us-east-1")
    ecr.create_repository(repositoryName="verl-trainer")
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "layers": []}
    ecr.put_image(
        repositoryName="verl-trainer", imageManifest=json.dumps(manifest), imageTag="0.9.1", imageDigest=IMAGE_DIGEST
    )


def run_settings(
    context: dict[str, Any] | None = None, manifest: dict[str, Any] | None = None, *, run_id: str = RUN_ID
) -> dict[str, Any]:
    deploy = load_settings({**BASE_CONTEXT, **(context or {})}, environ={"CDK_DEFAULT_REGION": "us-east-1"})
    settings = offline_run_settings(
        deploy, resolve_run_settings(deploy, {"backend": "verl", **(manifest or {})}), run_id
    )
    # What the stack side ships besides the offline values (stacks/backends/verl.py): the trainer role to scope.
    return {**settings, "verl_trainer_role_arn": TRAINER_ROLE_ARN}


class FakePodIdentity:
    """EKS Pod Identity associations at botocore (moto has none): create, list by service account, delete."""

    def __init__(self, aws: Any) -> None:
        self.associations: dict[str, dict[str, Any]] = {}
        aws.on("eks", "CreatePodIdentityAssociation", self._create)
        aws.on("eks", "ListPodIdentityAssociations", self._list)
        aws.on("eks", "DeletePodIdentityAssociation", self._delete)

    def _create(self, params: dict[str, Any]) -> dict[str, Any]:
        cluster = params["__uri__"].split("/")[2]
        for existing in self.associations.values():
            if (existing["namespace"], existing["serviceAccount"]) == (params["namespace"], params["serviceAccount"]):
                raise FakeError("ResourceInUseException", "association exists", 409)
        association_id = f"a-{len(self.associations) + 1:017d}"
        self.associations[association_id] = {
            "clusterName": cluster,
            "associationId": association_id,
            **{k: v for k, v in params.items() if not k.startswith("__")},
        }
        return {"association": {"clusterName": cluster, "associationId": association_id}}

    def _list(self, params: dict[str, Any]) -> dict[str, Any]:
        query = params["__query__"]
        found = [
            {k: a[k] for k in ("clusterName", "namespace", "serviceAccount", "associationId")}
            for a in self.associations.values()
            if (a["serviceAccount"], a["namespace"]) == (query.get("serviceAccount"), query.get("namespace"))
        ]
        return {"associations": found}

    def _delete(self, params: dict[str, Any]) -> dict[str, Any]:
        association_id = params["__uri__"].rstrip("/").split("/")[-1]
        removed = self.associations.pop(association_id)
        return {"association": {"clusterName": removed["clusterName"], "associationId": association_id}}


def run_context(settings: dict[str, Any], resources: tuple[CreatedResource, ...] = ()) -> RunContext:
    run_id = settings["run_id"]
    return RunContext(
        run_id=run_id,
        settings=settings,
        dataset_uri=f"s3://data-bucket/runs/{run_id}/data/train.jsonl",
        eval_dataset_uri=None,
        output_uri=f"s3://data-bucket/runs/{run_id}/",
        resources=resources,
    )
