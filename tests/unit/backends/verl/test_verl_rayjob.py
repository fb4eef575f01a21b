"""The RayJob and ConfigMap a verl run submits, and KubeRay 1.7.0's controller rules (issue 21 item 2).

KubeRay facts: ray-project/kuberay v1.7.0 ``rayjob_types.go``, ``controllers/ray/utils/validation.go`` (research note
part B §1.4). HyperPod's ``sagemaker.amazonaws.com/node-health-status: Schedulable`` label: AWS docs "Resilience-related
Kubernetes labels by SageMaker HyperPod".
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mtrl.backends.verl.config import plan_for
from mtrl.backends.verl.instances import INSTANCE_FACTS
from mtrl.backends.verl.rayjob import controller_problems, rayjob_name, render, service_account
from mtrl.contracts.backend import BackendError
from tests.unit.backends.verl.verl_support import IMAGE, RUN_ID, run_context, run_settings


def _render(context: dict[str, Any] | None = None, manifest: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    settings = run_settings(context, manifest)
    return render(plan_for(settings), run_context(settings))


def _rayjob(**kwargs: Any) -> dict[str, Any]:
    config_map, rayjob = _render(**kwargs)
    assert config_map["kind"] == "ConfigMap"
    return rayjob


def test_the_name_is_a_hash_of_the_run_id_and_the_run_id_an_annotation() -> None:
    # Run ids carry uppercase T/Z and reach 74 characters: not DNS-1035 labels (part B fact 4).
    config_map, rayjob = _render()
    name = rayjob["metadata"]["name"]
    assert re.fullmatch(r"mtrl-[0-9a-f]{16}", name)
    assert name == rayjob_name(RUN_ID) == config_map["metadata"]["name"]
    assert rayjob["metadata"]["annotations"]["mtrl/run-id"] == RUN_ID
    assert rayjob["metadata"]["namespace"] == "mtrl-verl"
    assert rayjob_name(RUN_ID + "x") != name


@given(st.text(min_size=1, max_size=300))
def test_any_run_id_gives_a_valid_name(run_id: str) -> None:
    name = rayjob_name(run_id)
    assert len(name) <= 47
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)


def test_the_job_shape_kuberay_1_7_expects() -> None:
    spec = _rayjob(manifest={"run_timeout_minutes": 90})["spec"]
    assert spec["submissionMode"] == "K8sJobMode"
    assert spec["shutdownAfterJobFinishes"] is True
    assert 0 <= spec["ttlSecondsAfterFinished"] <= 60
    assert spec["activeDeadlineSeconds"] == 90 * 60
    assert spec["preRunningDeadlineSeconds"] == 30 * 60
    assert "deletionPolicy" not in spec
    assert "deletionStrategy" not in spec


def test_head_has_no_gpu_and_workers_sit_on_the_run_group_with_its_gpus() -> None:
    cluster = _rayjob(manifest={"instance_count": 1})["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    head_container = head["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in head_container["resources"]["limits"]
    (worker,) = cluster["workerGroupSpecs"]
    assert worker["replicas"] == worker["minReplicas"] == worker["maxReplicas"] == 1
    pod = worker["template"]["spec"]
    assert pod["nodeSelector"] == {
        "sagemaker.amazonaws.com/instance-group-name": "gpu",
        "node.kubernetes.io/instance-type": "ml.g5.8xlarge",
        "sagemaker.amazonaws.com/node-health-status": "Schedulable",
    }
    container = pod["containers"][0]
    assert container["image"] == IMAGE
    # ml.g5.8xlarge: 1 A10G GPU (and 1 EFA interface, which the image cannot use: see the NCCL test below).
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}


@pytest.mark.parametrize("instance_type", ["ml.g5.8xlarge", "ml.g5.2xlarge", "ml.p5.48xlarge"])
def test_nccl_runs_over_sockets_because_the_image_has_no_efa_plugin(instance_type: str) -> None:
    # issue 35 item 5: NCCL_NET=ofi with FI_PROVIDER=efa stops NCCL ("network ofi not found") in an image without
    # aws-ofi-nccl and libfabric (mtrl.backends.verl.image; "Get started with EFA and NCCL", Amazon EC2 User Guide).
    groups = [{"name": "gpu", "instance_type": instance_type, "run_count": 2, "purpose": "training"}]
    cluster = _rayjob(context={"hyperpod_instance_groups": groups})["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"]["spec"], cluster["workerGroupSpecs"][0]["template"]["spec"]]
    for pod in pods:
        container = pod["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["NCCL_NET"] == "Socket"
        assert env["NCCL_SOCKET_IFNAME"] == "^lo,docker,pod-id-link0"
        assert not any(name.startswith("FI_") for name in env)
        assert not any("efa" in name for name in container["resources"]["limits"])
        assert all(t["key"] != "vpc.amazonaws.com/efa" for t in pod["tolerations"])


@pytest.mark.parametrize("instance_type", sorted(INSTANCE_FACTS))
def test_workers_request_their_nodes_cpu_and_memory_less_what_the_node_and_the_head_need(instance_type: str) -> None:
    # issue 35 item 11: without CPU and memory requests the scheduler places the worker as if it needed none.
    facts = INSTANCE_FACTS[instance_type]
    groups = [{"name": "gpu", "instance_type": instance_type, "run_count": 1, "purpose": "training"}]
    job = _rayjob(context={"hyperpod_instance_groups": groups})
    cluster = job["spec"]["rayClusterSpec"]
    worker = cluster["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    submitter = job["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["resources"]["requests"]
    requests = worker["requests"]
    assert requests["nvidia.com/gpu"] == worker["limits"]["nvidia.com/gpu"] == str(facts.gpus)
    cpu = int(requests["cpu"].removesuffix("m"))
    memory = int(requests["memory"].removesuffix("Mi"))
    assert cpu > 0
    assert memory > 0
    # Worker, head and submitter fit on one node of the type with a core and 2 GiB or 10% left for its daemons.
    assert cpu + 2000 + 500 + 1000 == facts.vcpus * 1000
    assert head == {"cpu": "2", "memory": "8Gi"}
    assert submitter == {"cpu": "500m", "memory": "512Mi"}
    assert memory + 8192 + 512 + max(2048, facts.memory_gib * 1024 // 10) == facts.memory_gib * 1024
    assert "cpu" not in worker["limits"]
    assert "memory" not in worker["limits"]


def test_workers_tolerate_the_taints_the_operator_put_on_the_group() -> None:
    taints = [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}, {"key": "gpu-only"}]
    groups = [
        {"name": "gpu", "instance_type": "ml.p5.48xlarge", "run_count": 2, "purpose": "training", "taints": taints}
    ]
    rayjob = _rayjob(context={"hyperpod_instance_groups": groups}, manifest={"instance_count": 2})
    worker = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    tolerations = worker["template"]["spec"]["tolerations"]
    assert {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"} in tolerations
    assert {"key": "gpu-only", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    assert worker["replicas"] == 2
    limits = worker["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "8"}


def test_the_kueue_label_only_with_task_governance() -> None:
    assert "kueue.x-k8s.io/queue-name" not in _rayjob()["metadata"]["labels"]
    queued = _rayjob(context={"verl_kueue_queue_name": "team-a"})
    assert queued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"


def test_the_config_map_carries_the_plan_within_the_ceilings() -> None:
    config_map, rayjob = _render(manifest={"backend_options": {"lora_rank": 8, "steps": 20, "group_size": 4}})
    document = json.loads(config_map["data"]["run.json"])
    assert (document["lora_rank"], document["steps"], document["group_size"]) == (8, 20, 4)
    assert document["model"]["s3_uri"] == "s3://models-bucket/qwen/"
    assert document["progress_uri"] == f"s3://data-bucket/runs/{RUN_ID}/progress.json"
    assert rayjob["metadata"]["annotations"]["mtrl/planned-steps"] == "20"


@pytest.mark.parametrize(
    ("context", "options", "message"),
    [
        ({}, {"steps": 5000}, "steps 5000 is above the deployment's limit 1000 (verl_max_steps)"),
        ({}, {"lora_rank": 128}, "lora_rank 128 is above the deployment's limit 64"),
        ({}, {"lora_rank": 0}, "full fine-tuning) is not allowed"),
        ({}, {"model": "Qwen/Qwen3-8B"}, "model 'Qwen/Qwen3-8B' is not one of the deployment's verl_models"),
        ({"verl_max_group_size": 8}, {"group_size": 16}, "group_size 16 is above"),
        ({"verl_image_uri": None}, {}, "mtrl image build verl"),
        ({"verl_models": "[]"}, {}, "mtrl model import <hub-id>"),
    ],
)
def test_a_run_beyond_the_deployment_is_refused_naming_the_run(
    context: dict[str, Any], options: dict[str, Any], message: str
) -> None:
    settings = run_settings(context, {"backend_options": options})
    with pytest.raises(BackendError) as raised:
        plan_for(settings)
    assert message in str(raised.value)
    assert RUN_ID in str(raised.value)


def test_an_instance_type_without_known_gpus_is_refused() -> None:
    groups = [{"name": "gpu", "instance_type": "ml.c5.xlarge", "run_count": 1, "purpose": "training"}]
    settings = run_settings({"hyperpod_instance_groups": groups})
    with pytest.raises(BackendError, match=r"ml\.c5\.xlarge .* GPUs and EFA are unknown"):
        render(plan_for(settings), run_context(settings))


# -- the controller rules --------------------------------------------------------------------------------------


def test_the_rendered_job_passes_the_controller_rules() -> None:
    assert controller_problems(_rayjob()) == []


def _broken(change: Any) -> list[str]:
    rayjob = copy.deepcopy(_rayjob())
    change(rayjob)
    return controller_problems(rayjob)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda j: j["metadata"].update(name=RUN_ID), "not a DNS-1035 label"),
        (lambda j: j["metadata"].update(name="a" * 48), "longer than 47"),
        (lambda j: j["metadata"].update(name="1abc"), "not a DNS-1035 label"),
        (lambda j: j["metadata"].update(annotations={}), "no mtrl/run-id"),
        (lambda j: j["spec"].update(shutdownAfterJobFinishes=False), "needs spec.shutdownAfterJobFinishes"),
        (lambda j: j["spec"].update(ttlSecondsAfterFinished=600), "over 60 s"),
        (lambda j: j["spec"].update(ttlSecondsAfterFinished=-1), "non-negative"),
        (lambda j: j["spec"].update(deletionStrategy={"deletionRules": []}), "exclude each other"),
        (lambda j: j["spec"].update(deletionPolicy="DeleteCluster"), "removed in KubeRay 1.7.0"),
        (lambda j: j["spec"].update(activeDeadlineSeconds=0), "activeDeadlineSeconds must be a positive"),
        (lambda j: j["spec"].update(preRunningDeadlineSeconds=-5), "preRunningDeadlineSeconds must be a positive"),
        (lambda j: j["spec"].update(activeDeadlineSeconds="6h"), "activeDeadlineSeconds must be a positive"),
        (lambda j: j["spec"].update(activeDeadlineSeconds=True), "activeDeadlineSeconds must be a positive"),
        (lambda j: j["spec"].update(submissionMode="K8sJob"), "not a KubeRay submission mode"),
        (lambda j: j["spec"].update(backoffLimit=2, clusterSelector={"a": "b"}), "backoffLimit cannot"),
        (lambda j: j["spec"].pop("rayClusterSpec"), "rayClusterSpec is required"),
        (lambda j: j["spec"].pop("entrypoint"), "entrypoint is required"),
    ],
)
def test_each_controller_rule_catches_its_break(change: Any, message: str) -> None:
    problems = _broken(change)
    assert any(message in p for p in problems), problems


def test_every_pod_of_a_run_runs_as_the_runs_own_service_account() -> None:
    # Its AWS role comes through the run's own EKS Pod Identity association (mtrl.backends.verl.run_identity), the
    # trainer role scoped to this run; a shared account would give every run's pods every run's objects (issue 36
    # item 5).
    settings = run_settings()
    plan, run = plan_for(settings), run_context(settings)
    _, rayjob = render(plan, run)
    cluster = rayjob["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"], *(group["template"] for group in cluster["workerGroupSpecs"])]
    pods.append(rayjob["spec"]["submitterPodTemplate"])
    account = service_account(plan, run)
    assert account["metadata"]["name"] == rayjob_name(RUN_ID) == rayjob["metadata"]["name"]
    assert account["metadata"]["namespace"] == rayjob["metadata"]["namespace"]
    assert [pod["spec"]["serviceAccountName"] for pod in pods] == [rayjob_name(RUN_ID)] * len(pods)
    other = run_settings(run_id="wordle-20261201T120000Z-99999999")
    assert service_account(plan_for(other), run_context(other))["metadata"]["name"] != account["metadata"]["name"]


def test_the_submitter_pod_can_schedule_on_the_runs_group() -> None:
    # KubeRay's default submitter (K8sJobMode) has no node selector, tolerations or service account: on a tainted group
    # it stays Pending while the RayJob counts as Running (issue 35 item 11; KubeRay RayJob spec.submitterPodTemplate).
    taints = [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}]
    groups = [
        {"name": "gpu", "instance_type": "ml.g5.8xlarge", "run_count": 1, "purpose": "training", "taints": taints}
    ]
    rayjob = _rayjob(context={"hyperpod_instance_groups": groups})
    submitter = rayjob["spec"]["submitterPodTemplate"]["spec"]
    assert {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"} in (
        submitter["tolerations"]
    )
    assert submitter["nodeSelector"]["sagemaker.amazonaws.com/instance-group-name"] == "gpu"
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert submitter["restartPolicy"] == "Never"
    assert submitter["nodeSelector"] == head["nodeSelector"]
    assert submitter["tolerations"] == head["tolerations"]
    assert submitter["containers"][0]["resources"]["limits"] == {"cpu": "500m", "memory": "512Mi"}
    broken = {**rayjob["spec"]["submitterPodTemplate"]["spec"], "restartPolicy": "OnFailure"}
    spec = {**rayjob["spec"], "submitterPodTemplate": {"spec": broken}}
    assert "spec.submitterPodTemplate.spec.restartPolicy must be Never" in " ".join(
        controller_problems({**rayjob, "spec": spec})
    )


@pytest.mark.parametrize(
    ("instance_type", "gpus"), [("ml.g5.8xlarge", 1), ("ml.g5.12xlarge", 4), ("ml.g5.48xlarge", 8)]
)
def test_the_trainer_is_told_every_gpu_its_pods_request(instance_type: str, gpus: int) -> None:
    groups = [{"name": "training", "instance_type": instance_type, "run_count": 1, "purpose": "training"}]
    config_map, rayjob = _render(context={"hyperpod_instance_groups": groups})
    document = json.loads(config_map["data"]["run.json"])
    worker = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert document["gpus_per_node"] == gpus == int(worker["resources"]["limits"]["nvidia.com/gpu"])


def test_every_episode_gets_a_deadline() -> None:
    # The agent loop reads mtrl.episode_timeout_s (train.overrides passes the document's); without it an environment
    # that hangs holds a whole verl step (issue 35 item 11).
    config_map, _ = _render()
    assert json.loads(config_map["data"]["run.json"])["episode_timeout_s"] == 300.0
