"""Every RayJob variant mtrl renders is valid against KubeRay 1.7.0's RayJob schema (the structural subset in
rayjob_schema.py, written from the CRD at the pinned tag), with unknown fields rejected: a removed field such as
``deletionPolicy`` (gone in 1.7.0) or a misspelling anywhere in the object is refused."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft7Validator

from mtrl.backends.verl.config import plan_for
from mtrl.backends.verl.rayjob import render
from tests.unit.backends.verl.rayjob_schema import RAYJOB_SCHEMA
from tests.unit.backends.verl.verl_support import run_context, run_settings

VALIDATOR = Draft7Validator(RAYJOB_SCHEMA)
TAINTS = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
P5 = [{"name": "gpu", "instance_type": "ml.p5.48xlarge", "run_count": 2, "purpose": "training", "taints": TAINTS}]
G5_SMALL = [{"name": "gpu", "instance_type": "ml.g5.2xlarge", "run_count": 1, "purpose": "training"}]
FULL = {"verl_allow_full_finetuning": "true"}

# (context, manifest) of each variant: LoRA / full fine-tuning, with / without Kueue, with / without EFA, 1 / 2 nodes.
VARIANTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "lora-default": ({}, {}),
    "lora-kueue": ({"verl_kueue_queue_name": "team-a"}, {}),
    "full-finetuning": (FULL, {"backend_options": {"lora_rank": 0}}),
    "full-kueue-efa-2-nodes": (
        {**FULL, "hyperpod_instance_groups": P5, "verl_kueue_queue_name": "team-a"},
        {"instance_count": 2, "backend_options": {"lora_rank": 0}},
    ),
    "lora-efa-tainted": ({"hyperpod_instance_groups": P5}, {"instance_count": 1}),
    "lora-no-efa": ({"hyperpod_instance_groups": G5_SMALL}, {"run_timeout_minutes": 30}),
}


def _rayjob(name: str) -> dict[str, Any]:
    context, manifest = VARIANTS[name]
    settings = run_settings(context, manifest)
    _config_map, rayjob = render(plan_for(settings), run_context(settings))
    return rayjob


def _errors(rayjob: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(rayjob)]


def test_the_schema_is_a_valid_draft_7_schema() -> None:
    Draft7Validator.check_schema(RAYJOB_SCHEMA)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_rendered_variant_is_valid(variant: str) -> None:
    assert _errors(_rayjob(variant)) == []


def test_the_variants_differ_where_they_should() -> None:
    # Guards the table above: the Kueue and multi-node variants really render what they are named for (an EFA
    # instance type requests no EFA device: the image runs NCCL over sockets, mtrl.backends.verl.image).
    efa = _rayjob("full-kueue-efa-2-nodes")
    (worker,) = efa["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert worker["replicas"] == 2
    assert worker["template"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert efa["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    (plain,) = _rayjob("lora-no-efa")["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert plain["template"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}


@pytest.mark.parametrize(
    ("change", "where"),
    [
        # KubeRay 1.7.0 removed spec.deletionPolicy (replaced by deletionStrategy.deletionRules).
        (lambda j: j["spec"].__setitem__("deletionPolicy", "DeleteCluster"), "deletionPolicy"),
        (lambda j: j["spec"].__setitem__("shutdownAfterJobFinish", True), "shutdownAfterJobFinish"),
        (lambda j: j["spec"]["rayClusterSpec"].pop("headGroupSpec"), "headGroupSpec"),
        (lambda j: j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].pop("minReplicas"), "minReplicas"),
        (lambda j: j["spec"].__setitem__("ttlSecondsAfterFinished", "30"), "ttlSecondsAfterFinished"),
        (lambda j: j["spec"].__setitem__("preRunningDeadlineSeconds", 0), "preRunningDeadlineSeconds"),
        (lambda j: j["spec"].__setitem__("activeDeadlineSeconds", 2**31), "activeDeadlineSeconds"),
        (lambda j: j["spec"].__setitem__("submissionMode", "K8sJob"), "submissionMode"),
        (lambda j: _container(j)["resources"]["limits"].__setitem__("nvidia.com/gpu", "one"), "nvidia.com/gpu"),
        (lambda j: _container(j).__setitem__("resource", {}), "resource"),
        (lambda j: _container(j)["env"].append({"value": "x"}), "name"),
        (lambda j: j["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"].__setitem__("num-gpus", 0), "0"),
        (lambda j: j.__setitem__("apiVersion", "ray.io/v1alpha1"), "ray.io/v1"),
    ],
)
def test_a_removed_misspelled_or_mistyped_field_is_refused(change: Any, where: str) -> None:
    rayjob = _rayjob("lora-efa-tainted")
    change(rayjob)
    errors = _errors(rayjob)
    assert errors, "the schema accepted a broken RayJob"
    assert any(where in error for error in errors), errors


def _container(rayjob: dict[str, Any]) -> dict[str, Any]:
    return rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]


def _closed_objects(instance: Any, schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object of the instance whose schema is closed (not a free string map)."""
    if isinstance(instance, dict) and schema.get("additionalProperties") is False:
        yield path, instance
        for key, value in instance.items():
            yield from _closed_objects(value, schema["properties"][key], f"{path}/{key}")
    elif isinstance(instance, list) and "items" in schema:
        for index, item in enumerate(instance):
            yield from _closed_objects(item, schema["items"], f"{path}/{index}")


def test_an_unknown_field_is_refused_at_every_level_of_the_object() -> None:
    # An attack on the schema itself: a stray key at any closed object of a real rendered job must fail it.
    rayjob = _rayjob("full-kueue-efa-2-nodes")
    targets = list(_closed_objects(rayjob, RAYJOB_SCHEMA))
    assert len(targets) > 20  # spec, cluster, head, worker, pod templates, containers, env entries, volumes, ...
    for path, _ in targets:
        mutated = copy.deepcopy(rayjob)
        node: Any = mutated
        for part in [p for p in path.split("/") if p]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node["mtrlUnknownField"] = True
        assert _errors(mutated), f"an unknown field at {path or '/'} was accepted"
