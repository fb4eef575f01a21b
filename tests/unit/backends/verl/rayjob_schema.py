"""A structural JSON Schema of the part of a KubeRay ``ray.io/v1`` RayJob that mtrl renders (verl/rayjob.py).

Written by hand from the CRD KubeRay 1.7.0 installs (ray-project/kuberay tag v1.7.0, commit 59d663ae…,
``ray-operator/config/crd/bases/ray.io_rayjobs.yaml``, identical to the chart's ``crds/``): the same field names, types,
``required`` lists, int32 bounds and minimums. It is stricter than the CRD in two ways, both on purpose:

- every object is closed (``additionalProperties: false``) except the CRD's string maps (labels, annotations,
  nodeSelector, rayStartParams, resource quantities). The API server prunes or, with ``fieldValidation=Strict`` (what
  the adapter sends), rejects unknown fields; here a misspelled or removed field (``deletionPolicy``, gone in 1.7.0,
  replaced by ``deletionStrategy``) fails the test instead;
- it covers only the fields mtrl sets. A field mtrl starts to render must be added here from the CRD, which is the
  point: nobody adds a field without reading what KubeRay accepts.

Enums the CRD leaves to the controller come from the Go types at the same tag (``rayjob_types.go``
``JobSubmissionMode``) and the Kubernetes core API (toleration operator/effect, port protocol, emptyDir medium).
"""

from __future__ import annotations

from typing import Any

INT32 = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
# The CRD's quantity pattern (resource.Quantity), as int-or-string.
QUANTITY = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": (
        r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
        r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
    ),
}
STRING = {"type": "string"}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}


def closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


def int32(minimum: int | None = None) -> dict[str, Any]:
    return {**INT32, "minimum": minimum} if minimum is not None else dict(INT32)


TOLERATION = closed(
    {
        "key": STRING,
        "operator": {"type": "string", "enum": ["Exists", "Equal"]},
        "value": STRING,
        "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
        "tolerationSeconds": {"type": "integer"},
    }
)
CONTAINER = closed(
    {
        "name": STRING,
        "image": STRING,
        "command": {"type": "array", "items": STRING},
        "args": {"type": "array", "items": STRING},
        "env": {"type": "array", "items": closed({"name": STRING, "value": STRING}, ("name",))},
        "resources": closed(
            {
                "limits": {"type": "object", "additionalProperties": QUANTITY},
                "requests": {"type": "object", "additionalProperties": QUANTITY},
            }
        ),
        "ports": {
            "type": "array",
            "items": closed(
                {
                    "containerPort": int32(),
                    "name": STRING,
                    "protocol": {"type": "string", "enum": ["TCP", "UDP", "SCTP"]},
                },
                ("containerPort",),
            ),
        },
        "volumeMounts": {
            "type": "array",
            "items": closed(
                {"name": STRING, "mountPath": STRING, "readOnly": {"type": "boolean"}, "subPath": STRING},
                ("mountPath", "name"),
            ),
        },
    },
    ("name",),
)
VOLUME = closed(
    {
        "name": STRING,
        "configMap": closed({"name": STRING, "defaultMode": int32(), "optional": {"type": "boolean"}}),
        "emptyDir": closed({"medium": {"type": "string", "enum": ["", "Memory"]}, "sizeLimit": QUANTITY}),
    },
    ("name",),
)
POD_TEMPLATE = closed(
    {
        "metadata": closed({"labels": STRING_MAP, "annotations": STRING_MAP}),
        "spec": closed(
            {
                "nodeSelector": STRING_MAP,
                "tolerations": {"type": "array", "items": TOLERATION},
                "containers": {"type": "array", "items": CONTAINER, "minItems": 1},
                "volumes": {"type": "array", "items": VOLUME},
                "serviceAccountName": STRING,
                "restartPolicy": {"type": "string", "enum": ["Always", "OnFailure", "Never"]},
            },
            ("containers",),
        ),
    }
)
HEAD_GROUP = closed({"rayStartParams": STRING_MAP, "template": POD_TEMPLATE}, ("template",))
WORKER_GROUP = closed(
    {
        "groupName": STRING,
        "replicas": int32(0),
        "minReplicas": int32(0),
        "maxReplicas": int32(),
        "rayStartParams": STRING_MAP,
        "template": POD_TEMPLATE,
    },
    ("groupName", "maxReplicas", "minReplicas", "template"),
)
RAY_CLUSTER_SPEC = closed(
    {
        "rayVersion": STRING,
        "headGroupSpec": HEAD_GROUP,
        "workerGroupSpecs": {"type": "array", "items": WORKER_GROUP},
    },
    ("headGroupSpec",),
)
RAYJOB_SPEC = closed(
    {
        "entrypoint": STRING,
        "submissionMode": {"type": "string", "enum": ["K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"]},
        "shutdownAfterJobFinishes": {"type": "boolean"},
        "ttlSecondsAfterFinished": int32(),
        "activeDeadlineSeconds": int32(),
        "preRunningDeadlineSeconds": int32(1),
        "backoffLimit": int32(),
        "runtimeEnvYAML": STRING,
        "rayClusterSpec": RAY_CLUSTER_SPEC,
        "submitterPodTemplate": POD_TEMPLATE,
    }
)
RAYJOB_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    **closed(
        {
            "apiVersion": {"const": "ray.io/v1"},
            "kind": {"const": "RayJob"},
            "metadata": closed(
                {"name": STRING, "namespace": STRING, "labels": STRING_MAP, "annotations": STRING_MAP},
                ("name", "namespace"),
            ),
            "spec": RAYJOB_SPEC,
        },
        ("apiVersion", "kind", "metadata", "spec"),
    ),
}
