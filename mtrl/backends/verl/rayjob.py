"""The Kubernetes objects one verl run submits: a KubeRay ``ray.io/v1`` RayJob and the ConfigMap it reads.

Shape (KubeRay 1.7.0, ``ray-operator/apis/ray/v1/rayjob_types.go``): ``K8sJobMode``, a
head with no GPU, one worker group on the run's instance group, ``preRunningDeadlineSeconds`` and
``activeDeadlineSeconds``, ``shutdownAfterJobFinishes`` with a short TTL (a failed job's Ray cluster keeps its GPUs
for that long), no ``deletionPolicy`` (removed in 1.7.0; ``deletionStrategy`` excludes ``shutdownAfterJobFinishes``).

Names: run ids are not DNS-1035 labels (uppercase ``T``/``Z``, up to 74 characters), so the RayJob is
``mtrl-<16 hex of sha256(run id)>`` and the run id travels in the ``mtrl/run-id`` annotation. The run's pods run as
a service account of the same name, which the adapter creates with the run's EKS Pod Identity association
(``service_account``; ``mtrl.backends.verl.run_identity``).

Progress: the trainer writes ``<run output>/progress.json`` (``{"step": n}``) after each step;
the RayJob's ``mtrl/planned-steps`` annotation says what a complete run reaches (a job that ends Complete below it
is not SUCCEEDED: verl can exit cleanly after 0 steps on resume).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from mtrl.backends.verl.config import VerlPlan
from mtrl.backends.verl.evaluation import EVALUATION_FILE
from mtrl.backends.verl.image import NCCL_ENVIRONMENT
from mtrl.backends.verl.instances import InstanceFacts, instance_facts
from mtrl.backends.verl.run_identity import service_account_manifest
from mtrl.contracts.backend import BackendError, RunContext

API_VERSION = "ray.io/v1"
KIND = "RayJob"
# The Ray version of the trainer image (requirements/verl-trainer.txt pins ray to it, as verl.txt does); KubeRay
# starts the cluster with it.
RAY_VERSION = "2.60.0"
# The trainer's entry point inside the image, reading the ConfigMap mounted at CONFIG_DIR.
TRAINER_MODULE = "mtrl.backends.verl.train"
CONFIG_DIR = "/etc/mtrl"
CONFIG_FILE = "run.json"
RUN_ID_ANNOTATION = "mtrl/run-id"
PLANNED_STEPS_ANNOTATION = "mtrl/planned-steps"
RUN_LABEL = "mtrl/run"
DEPLOYMENT_LABEL = "mtrl/deployment"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"  # HyperPod: "Schedulable" = passed health checks
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# HyperPod labels each node with its instance group ("Amazon SageMaker HyperPod labels", EKS orchestration): two groups
# of one instance type are told apart only by this label.
INSTANCE_GROUP_LABEL = "sagemaker.amazonaws.com/instance-group-name"
SUBMITTER_RESOURCES = {"cpu": "500m", "memory": "512Mi"}
EPISODE_TIMEOUT_S = 300.0
GPU_RESOURCE = "nvidia.com/gpu"
# KubeRay: RayCluster names ≤ 53 characters, and a RayJob's cluster is its name plus a 6-character suffix.
MAX_RAYJOB_NAME_LENGTH = 47
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
HEAD_CPU = "2"
HEAD_MEMORY = "8Gi"
# What a worker pod leaves of its node (it requests the rest): the node's own daemons (kubelet, the CNI, HyperPod's
# health and device agents; EKS reserves about 6% of a core and 255 MiB + 11 MiB per pod before allocatable) and the
# head and submitter pods, which run on the same group and may land on any of its nodes.
NODE_RESERVED_MILLICPU = 1000
NODE_RESERVED_MEMORY_FRACTION = 0.10
NODE_RESERVED_MEMORY_MIB = 2048


def worker_resources(facts: InstanceFacts) -> dict[str, str]:
    """The CPU and memory a Ray worker pod requests: its node's, less the node's reserve and the head and submitter
    pods (which share the group). Without a request the scheduler would place pods as if the worker needed none."""
    head_and_submitter_millicpu = _millicpu(HEAD_CPU) + _millicpu(SUBMITTER_RESOURCES["cpu"])
    millicpu = facts.vcpus * 1000 - NODE_RESERVED_MILLICPU - head_and_submitter_millicpu
    total_mib = facts.memory_gib * 1024
    reserved_mib = max(NODE_RESERVED_MEMORY_MIB, int(total_mib * NODE_RESERVED_MEMORY_FRACTION))
    memory_mib = total_mib - reserved_mib - _mebibytes(HEAD_MEMORY) - _mebibytes(SUBMITTER_RESOURCES["memory"])
    return {"cpu": f"{millicpu}m", "memory": f"{memory_mib}Mi"}


def _millicpu(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def _mebibytes(quantity: str) -> int:
    units = {"Mi": 1, "Gi": 1024}
    return int(quantity[:-2]) * units[quantity[-2:]]


def rayjob_name(run_id: str) -> str:
    """``mtrl-<16 hex>``: a DNS-1035 label, the same for every call with this run id."""
    return "mtrl-" + hashlib.sha256(run_id.encode()).hexdigest()[:16]


def _tolerations(plan: VerlPlan) -> list[dict[str, Any]]:
    tolerations: list[dict[str, Any]] = []
    for taint in plan.config.verl_instance_taints:  # the taints the operator put on the run's group
        toleration: dict[str, Any] = {"key": taint.key, "effect": taint.effect}
        if taint.value is None:
            toleration["operator"] = "Exists"
        else:
            toleration.update(operator="Equal", value=taint.value)
        tolerations.append(toleration)
    # The device taint GPU nodes commonly carry; tolerating an absent taint changes nothing.
    tolerations.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    return tolerations


def _node_selector(plan: VerlPlan) -> dict[str, str]:
    return {
        INSTANCE_GROUP_LABEL: plan.config.verl_instance_group,
        INSTANCE_TYPE_LABEL: plan.config.verl_instance_type,
        HEALTH_LABEL: "Schedulable",
    }


def _volumes(name: str) -> list[dict[str, Any]]:
    return [
        {"name": "run-config", "configMap": {"name": name}},
        # NCCL and vLLM use shared memory well beyond the container runtime's 64 MiB default.
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]


_MOUNTS = [
    {"name": "run-config", "mountPath": CONFIG_DIR, "readOnly": True},
    {"name": "dshm", "mountPath": "/dev/shm"},  # noqa: S108 - the pod's own memory volume, not a temp file
]


def _environment(plan: VerlPlan, run: RunContext) -> list[dict[str, str]]:
    env = {
        "MTRL_RUN_ID": run.run_id,
        "MTRL_RUN_CONFIG": f"{CONFIG_DIR}/{CONFIG_FILE}",
        "AWS_REGION": plan.config.region,
        # Hub downloads only when the deployment allows them (then at the model's pinned revision).
        "HF_HUB_OFFLINE": "0" if plan.config.verl_hub_downloads and plan.model.s3_uri is None else "1",
        # NCCL over sockets, the transport the image has (mtrl.backends.verl.image: no libfabric, no aws-ofi-nccl,
        # so no EFA even on EFA instance types).
        **NCCL_ENVIRONMENT,
    }
    return [{"name": key, "value": value} for key, value in sorted(env.items())]


def run_document(plan: VerlPlan, run: RunContext) -> dict[str, Any]:
    """What the trainer reads (the ConfigMap's ``run.json``): the run's plan, data and output locations."""
    return {
        "run_id": run.run_id,
        "environment": plan.config.environment,
        "environment_args": plan.config.environment_args,
        "model": {**plan.model.model_dump(exclude_none=True), "hub_downloads": plan.config.verl_hub_downloads},
        "lora_rank": plan.lora_rank,
        "group_size": plan.group_size,
        "steps": plan.steps,
        "max_prompt_length": plan.max_prompt_length,
        "max_response_length": plan.max_response_length,
        "hyperparameters": plan.config.hyperparameters,
        "nnodes": plan.config.instance_count,  # workers only: the head holds no GPU
        # Each worker pod requests all of its node's GPUs (render), so the trainer uses all of them.
        "gpus_per_node": _gpus_per_node(plan),
        # Each episode's wall-clock deadline in the agent loop (the reward workers' default: mtrl.worker.runtime).
        "episode_timeout_s": EPISODE_TIMEOUT_S,
        "dataset_uri": run.dataset_uri,
        "eval_dataset_uri": run.eval_dataset_uri,
        # The held-out split through the agent loop before training too (verl's val_before_train).
        "baseline_evaluation": plan.config.baseline_evaluation,
        # Trainer metrics go to the deployment's MLflow app (verl's MLflow logger; None: console only).
        "mlflow_tracking_uri": plan.config.serverless_mlflow_app_arn,
        "output_uri": run.output_uri,
        "progress_uri": progress_uri(run),
    }


def _gpus_per_node(plan: VerlPlan) -> int:
    facts = instance_facts(plan.config.verl_instance_type)
    return facts.gpus if facts is not None else 1


def service_account(plan: VerlPlan, run: RunContext) -> dict[str, Any]:
    """The run's own service account, named as its RayJob (the pods' ``serviceAccountName``)."""
    labels = {
        "app.kubernetes.io/managed-by": "mtrl",
        DEPLOYMENT_LABEL: plan.config.prefix,
        RUN_LABEL: rayjob_name(run.run_id),
    }
    return service_account_manifest(rayjob_name(run.run_id), plan.config.verl_namespace, labels, run.run_id)


def progress_uri(run: RunContext) -> str:
    return run.output_uri.rstrip("/") + "/progress.json"


def evaluation_uri(run: RunContext) -> str:
    return run.output_uri.rstrip("/") + "/" + EVALUATION_FILE


def render(plan: VerlPlan, run: RunContext) -> list[dict[str, Any]]:
    """[ConfigMap, RayJob] of the run; raises BackendError (with the run id) when the group cannot host it."""
    facts = instance_facts(plan.config.verl_instance_type)
    if facts is None:
        raise BackendError(
            f"run {run.run_id}: instance type {plan.config.verl_instance_type} of group "
            f"{plan.config.verl_instance_group} is not in mtrl.backends.verl.instances (its GPUs and EFA are unknown)"
        )
    if facts.gpus < 1:
        raise BackendError(f"run {run.run_id}: instance type {plan.config.verl_instance_type} has no GPU")
    name = rayjob_name(run.run_id)
    namespace = plan.config.verl_namespace
    labels = {"app.kubernetes.io/managed-by": "mtrl", DEPLOYMENT_LABEL: plan.config.prefix, RUN_LABEL: name}
    annotations = {RUN_ID_ANNOTATION: run.run_id, PLANNED_STEPS_ANNOTATION: str(plan.steps)}
    device_resources = {GPU_RESOURCE: str(facts.gpus)}
    worker_requests = {**worker_resources(facts), **device_resources}
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "data": {CONFIG_FILE: json.dumps(run_document(plan, run), indent=2, sort_keys=True)},
    }
    job_labels = dict(labels)
    if plan.config.verl_kueue_queue_name:
        job_labels[KUEUE_QUEUE_LABEL] = plan.config.verl_kueue_queue_name
    head_resources = {"cpu": HEAD_CPU, "memory": HEAD_MEMORY}
    head = {
        "rayStartParams": {"dashboard-host": "0.0.0.0", "num-gpus": "0"},  # noqa: S104 - pod network only
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "serviceAccountName": name,  # the run's own: its AWS role comes through the run's association
                "nodeSelector": _node_selector(plan),
                "tolerations": _tolerations(plan),
                "containers": [
                    {
                        "name": "ray-head",
                        "image": plan.image,
                        "env": _environment(plan, run),
                        "resources": {"requests": head_resources, "limits": head_resources},
                        "ports": [
                            {"containerPort": 6379, "name": "gcs-server"},
                            {"containerPort": 8265, "name": "dashboard"},
                            {"containerPort": 10001, "name": "client"},
                        ],
                        "volumeMounts": _MOUNTS,
                    }
                ],
                "volumes": _volumes(name),
            },
        },
    }
    count = plan.config.instance_count
    worker = {
        "groupName": "gpu",
        "replicas": count,
        "minReplicas": count,
        "maxReplicas": count,
        "rayStartParams": {},
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "serviceAccountName": name,  # the run's own: its AWS role comes through the run's association
                "nodeSelector": _node_selector(plan),
                "tolerations": _tolerations(plan),
                "containers": [
                    {
                        "name": "ray-worker",
                        "image": plan.image,
                        "env": _environment(plan, run),
                        # GPUs are requested whole (requests = limits); CPU and memory may burst above the request.
                        "resources": {"requests": worker_requests, "limits": device_resources},
                        "volumeMounts": _MOUNTS,
                    }
                ],
                "volumes": _volumes(name),
            },
        },
    }
    rayjob = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": job_labels, "annotations": annotations},
        "spec": {
            "entrypoint": f"python -m {TRAINER_MODULE} --run-config {CONFIG_DIR}/{CONFIG_FILE}",
            "submissionMode": "K8sJobMode",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": plan.config.verl_ttl_seconds_after_finished,
            "activeDeadlineSeconds": plan.config.run_timeout_minutes * 60,
            "preRunningDeadlineSeconds": plan.config.verl_pre_running_deadline_minutes * 60,
            "backoffLimit": 0,  # a retry would start over from step 0; the pipeline decides what to do
            # KubeRay's default submitter pod has no node selector, tolerations or service account: on a tainted group
            # it would stay Pending while the RayJob counts as Running, holding the GPUs until activeDeadlineSeconds.
            "submitterPodTemplate": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "serviceAccountName": name,
                    "nodeSelector": _node_selector(plan),
                    "tolerations": _tolerations(plan),
                    "containers": [
                        {
                            "name": "ray-job-submitter",
                            "image": plan.image,
                            "resources": {"requests": SUBMITTER_RESOURCES, "limits": SUBMITTER_RESOURCES},
                        }
                    ],
                },
            },
            "rayClusterSpec": {"rayVersion": RAY_VERSION, "headGroupSpec": head, "workerGroupSpecs": [worker]},
        },
    }
    problems = controller_problems(rayjob)
    if problems:
        raise BackendError(f"run {run.run_id}: the rendered RayJob breaks KubeRay's rules: " + "; ".join(problems))
    return [config_map, rayjob]


def _positive(spec: Mapping[str, Any], field: str, problems: list[str]) -> None:
    value = spec.get(field)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
        problems.append(f"spec.{field} must be a positive integer (got {value!r})")


def controller_problems(rayjob: Mapping[str, Any]) -> list[str]:
    """The KubeRay 1.7.0 controller's rules a CRD schema cannot express (``utils/validation.go``), plus mtrl's own
    (run-id annotation, a TTL of at most 60 s). Empty when the RayJob is acceptable."""
    return [*_metadata_problems(rayjob.get("metadata") or {}), *_spec_problems(rayjob.get("spec") or {})]


def _metadata_problems(metadata: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    name = metadata.get("name")
    if not isinstance(name, str) or not _DNS_1035.match(name):
        problems.append(f"metadata.name {name!r} is not a DNS-1035 label (lowercase letters, digits, '-')")
    elif len(name) > MAX_RAYJOB_NAME_LENGTH:
        problems.append(f"metadata.name {name!r} is longer than {MAX_RAYJOB_NAME_LENGTH} characters")
    if not (metadata.get("annotations") or {}).get(RUN_ID_ANNOTATION):
        problems.append(f"metadata.annotations has no {RUN_ID_ANNOTATION}")
    return problems


def _lifetime_problems(spec: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    if "deletionPolicy" in spec:
        problems.append("spec.deletionPolicy was removed in KubeRay 1.7.0 (use deletionStrategy)")
    shutdown = spec.get("shutdownAfterJobFinishes") is True
    ttl = spec.get("ttlSecondsAfterFinished")
    if ttl is not None:
        if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0:
            problems.append(f"spec.ttlSecondsAfterFinished must be a non-negative integer (got {ttl!r})")
        elif ttl > 0 and not shutdown:
            problems.append("spec.ttlSecondsAfterFinished needs spec.shutdownAfterJobFinishes: true")
        elif ttl > 60:
            problems.append(f"spec.ttlSecondsAfterFinished {ttl} keeps a finished run's GPUs over 60 s")
    if spec.get("deletionStrategy") is not None and shutdown:
        problems.append("spec.deletionStrategy and spec.shutdownAfterJobFinishes exclude each other")
    for field in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        _positive(spec, field, problems)
    return problems


def _spec_problems(spec: Mapping[str, Any]) -> list[str]:
    problems = _lifetime_problems(spec)
    mode = spec.get("submissionMode", "K8sJobMode")
    if mode not in {"K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"}:
        problems.append(f"spec.submissionMode {mode!r} is not a KubeRay submission mode")
    if spec.get("backoffLimit") and (spec.get("clusterSelector") or mode == "InteractiveMode"):
        problems.append("spec.backoffLimit cannot be used with clusterSelector or InteractiveMode")
    if not spec.get("clusterSelector") and not spec.get("rayClusterSpec"):
        problems.append("spec.rayClusterSpec is required (no clusterSelector names an existing cluster)")
    if mode != "InteractiveMode" and not spec.get("entrypoint"):
        problems.append("spec.entrypoint is required outside InteractiveMode")
    submitter = (spec.get("submitterPodTemplate") or {}).get("spec") or {}
    if submitter and submitter.get("restartPolicy") != "Never":
        problems.append("spec.submitterPodTemplate.spec.restartPolicy must be Never (the submitter is a Job's pod)")
    return problems
