"""The ``verl`` adapter: one KubeRay RayJob per run on the HyperPod cluster's training group, over the EKS API.

No kubectl: HTTPS to the cluster endpoint with a presigned-STS bearer token (mtrl.kube), CA from DescribeCluster.
GPU scaling is the hyperpod backend's (mtrl.backends.hyperpod.capacity: UpdateCluster + node readiness).
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from mtrl.backends._aws import AwsClients, S3Uri, backend_error, error_code
from mtrl.backends.hyperpod.capacity import GpuCapacity, GroupTarget, find_group, hold_capacity, release_capacity
from mtrl.backends.hyperpod.common import CAPACITY_KIND, ProvisioningInProgress, now_iso
from mtrl.backends.hyperpod.cost import cost_so_far
from mtrl.backends.verl.access import access_checks
from mtrl.backends.verl.config import VerlPlan, VerlRunConfig, parse_config, plan_for
from mtrl.backends.verl.evaluation import pipeline_figures
from mtrl.backends.verl.rayjob import (
    DEPLOYMENT_LABEL,
    RUN_ID_ANNOTATION,
    evaluation_uri,
    progress_uri,
    rayjob_name,
    render,
    service_account,
)
from mtrl.backends.verl.run_identity import POD_IDENTITY_KIND, session_policy
from mtrl.backends.verl.status import job_status
from mtrl.contracts.backend import BackendError, CreatedResource, Finding, JobStatus, RunContext
from mtrl.kube.client import KubeClient, KubeError
from mtrl.kube.token import eks_token
from mtrl.settings.verl import ECR_IMAGE, model_sums_object
from mtrl.validation.prompt_length import KEPT, over_limit

RAYJOB_KIND = "kuberay-rayjob"
MAX_SUMS_BYTES = 1024 * 1024  # a SHA256SUMS of a model's files is a few KB; refuse to read a huge object
API_GROUP_PATH = "/apis/ray.io/v1"
# What the pipeline's role must be allowed in the deployment's namespace (SelfSubjectAccessReview): every verb of the
# Role the cluster stack grants (mtrl.backends.verl.access), no more and no fewer.
REQUIRED_ACCESS: tuple[tuple[str, str, str], ...] = tuple(access_checks())
KubeFactory = Callable[[VerlRunConfig], KubeClient]


def _rayjobs(namespace: str) -> str:
    return f"{API_GROUP_PATH}/namespaces/{namespace}/rayjobs"


def _configmaps(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps"


def _serviceaccounts(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/serviceaccounts"


class VerlAdapter:
    name = "verl"

    def __init__(
        self,
        clients: AwsClients | None = None,
        *,
        kube: KubeFactory | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clients = clients or AwsClients()
        self._kube_factory = kube
        self._clock = clock
        self._kube_cache: dict[str, KubeClient] = {}

    # -- clients ---------------------------------------------------------------------------------------------

    def _kube(self, config: VerlRunConfig) -> KubeClient:
        if self._kube_factory is not None:
            return self._kube_factory(config)
        cached = self._kube_cache.get(config.eks_cluster_name)
        if cached is None:
            eks = self._clients.client("eks", config.region)
            try:
                cluster = eks.describe_cluster(name=config.eks_cluster_name)["cluster"]
            except ClientError as error:
                raise backend_error(f"run {config.run_id}: DescribeCluster {config.eks_cluster_name}", error) from None
            session = self._clients.session
            cached = KubeClient(
                cluster["endpoint"],
                token=lambda: eks_token(config.eks_cluster_name, config.region, session),
                ca_pem=base64.b64decode(cluster["certificateAuthority"]["data"]).decode("utf-8", "replace"),
                clock=self._clock,
            )
            self._kube_cache[config.eks_cluster_name] = cached
        return cached

    @staticmethod
    def _get(run: RunContext, kube: KubeClient, path: str, *, text: bool = False) -> Any:
        try:
            return kube.text(path) if text else kube.request("GET", path)
        except KubeError as error:
            raise BackendError(f"run {run.run_id}: {error}", transient=error.transient) from None

    def _gpu(self, config: VerlRunConfig) -> GpuCapacity:
        target = GroupTarget(config.hyperpod_cluster_name, config.verl_instance_group)
        return GpuCapacity(self._clients.client("sagemaker", config.region), target)

    # -- preflight -------------------------------------------------------------------------------------------

    def preflight(self, run: RunContext) -> list[Finding]:
        try:
            plan = plan_for(run.settings)
            render(plan, run)
        except BackendError as error:
            return [Finding("settings", False, str(error))]
        config = plan.config
        findings = [Finding("settings", True, f"model {plan.model.id}, {plan.steps} steps, image {plan.image}")]
        findings.append(self._prompt_lengths(run, plan))
        if config.verl_trainer_role_arn is None:
            return [
                *findings,
                Finding("trainer-role", False, f"run {run.run_id}: the deployment ships no verl_trainer_role_arn"),
            ]
        kube = self._kube(config)
        try:
            served = kube.request("GET", API_GROUP_PATH)
        except KubeError as error:
            missing = error.status == 404
            message = "KubeRay is not installed (the API server serves no ray.io/v1)" if missing else str(error)
            return [*findings, Finding("kuberay", False, f"run {run.run_id}: {message}")]
        kinds = {resource.get("name") for resource in served.get("resources", [])}
        findings.append(
            Finding(
                "kuberay",
                "rayjobs" in kinds,
                "ray.io/v1 serves rayjobs" if "rayjobs" in kinds else "ray.io/v1 has no rayjobs",
            )
        )
        findings.append(self._access(run, kube, config.verl_namespace))
        findings += [self._model_copy(run, plan), self._image(run, plan)]
        findings.append(self._idle_group(config))
        return findings

    def _prompt_lengths(self, run: RunContext, plan: VerlPlan) -> Finding:
        """No dataset row has a prompt longer than the run's ``max_prompt_length``: Validate measured the longest
        (``validation.json``, a lower bound in tokens: mtrl.validation.prompt_length); one that cannot fit would stop
        a verl step, so the run fails here, naming its lines, before any GPU is scaled."""
        limit = plan.max_prompt_length
        uri = S3Uri.parse(run.output_uri).join("validation.json")
        body = self._read_output(run, plan.config, str(uri))
        try:
            document = json.loads(body) if body is not None else None
        except json.JSONDecodeError:
            document = None
        reports = [document.get(name) for name in ("train", "eval")] if isinstance(document, dict) else []
        too_long = [
            (str(report.get("source")), over_limit(report.get("longest_prompts"), limit))
            for report in reports
            if isinstance(report, dict)
        ]
        named = [
            f"{source} line {entry['line']} (≥ {entry['tokens_at_least']} tokens)"
            for source, over in too_long
            for entry in over
        ]
        if not any("longest_prompts" in report for report in reports if isinstance(report, dict)):
            return Finding("prompt-length", True, f"prompt lengths not measured ({uri} has none)")
        if named:
            return Finding(
                "prompt-length",
                False,
                f"run {run.run_id}: {len(named)}{'+' if any(len(o) >= KEPT for _, o in too_long) else ''} dataset "
                f"row(s) cannot fit max_prompt_length {limit} tokens: {'; '.join(named[:10])}"
                f"{' …' if len(named) > 10 else ''}. Shorten them, or raise backend_options.max_prompt_length "
                f"(at most verl_max_prompt_length, {plan.config.verl_max_prompt_length})",
            )
        return Finding("prompt-length", True, f"every measured prompt fits max_prompt_length {limit}")

    def _model_copy(self, run: RunContext, plan: VerlPlan) -> Finding:
        """The operator's copy exists and its SHA256SUMS is the one the deployment pinned (the trainer checks the
        files against it): a missing or changed copy fails here, before any GPU is scaled."""
        model = plan.model
        if model.s3_uri is None or model.sha256 is None:
            return Finding("model", True, f"model {model.id}: from the Hub at revision {model.revision}")
        bucket, key = model_sums_object(model.s3_uri)
        s3 = self._clients.client("s3", plan.config.region)
        try:
            sums = s3.get_object(Bucket=bucket, Key=key)["Body"].read(MAX_SUMS_BYTES + 1)
        except ClientError as error:
            return Finding(
                "model", False, f"run {run.run_id}: model {model.id}: s3://{bucket}/{key}: {error_code(error)}"
            )
        digest = hashlib.sha256(sums).hexdigest()
        if len(sums) > MAX_SUMS_BYTES or digest != model.sha256:
            return Finding(
                "model",
                False,
                f"run {run.run_id}: model {model.id}: s3://{bucket}/{key} hashes to {digest[:12]}…, the deployment "
                f"pins {model.sha256[:12]}… (verl_models): the copy changed, or the pin is stale",
            )
        return Finding("model", True, f"model {model.id}: s3://{bucket}/{key} matches its pinned SHA-256")

    def _image(self, run: RunContext, plan: VerlPlan) -> Finding:
        """An ECR image exists (by digest or tag); another registry's cannot be checked without pulling it."""
        found = ECR_IMAGE.match(plan.image)
        if found is None:
            return Finding("image", True, f"{plan.image}: not in ECR, not checked (the nodes must be able to pull it)")
        image_id = {"imageDigest": found["digest"]} if found["digest"] else {"imageTag": found["tag"]}
        ecr = self._clients.client("ecr", found["region"])
        try:
            ecr.describe_images(registryId=found["account"], repositoryName=found["repository"], imageIds=[image_id])
        except ClientError as error:
            code = error_code(error)
            missing = code.endswith("NotFoundException")
            hint = " (build and push docker/verl-trainer: docs/cluster.md)" if missing else ""
            return Finding("image", False, f"run {run.run_id}: {plan.image}: {code}{hint}")
        return Finding("image", True, f"{plan.image} is in ECR")

    def _access(self, run: RunContext, kube: KubeClient, namespace: str) -> Finding:
        denied = []
        for verb, group, resource in REQUIRED_ACCESS:
            review = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {
                    "resourceAttributes": {"namespace": namespace, "verb": verb, "group": group, "resource": resource}
                },
            }
            try:
                answer = kube.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
            except KubeError as error:
                return Finding("kubernetes-access", False, f"run {run.run_id}: SelfSubjectAccessReview: {error}")
            if not (answer.get("status") or {}).get("allowed"):
                denied.append(f"{verb} {resource}")
        if denied:
            return Finding(
                "kubernetes-access",
                False,
                f"run {run.run_id}: the pipeline's role may not {', '.join(denied)} in namespace {namespace}",
            )
        return Finding("kubernetes-access", True, f"may manage RayJobs in namespace {namespace}")

    def _idle_group(self, config: VerlRunConfig) -> Finding:
        gpu = self._gpu(config)
        try:
            _, details = find_group(gpu.describe(), gpu.group)
        except BackendError as error:
            return Finding("gpu-group", False, str(error))
        target, idle = details.get("TargetCount", 0), config.verl_idle_instance_count
        if target != idle:
            return Finding(
                "gpu-group",
                False,
                f"{gpu.group} targets {target} instances, not its idle count {idle}: another run holds it",
            )
        return Finding("gpu-group", True, f"{gpu.group} ({details.get('InstanceType')}) is at its idle count {idle}")

    # -- provision -------------------------------------------------------------------------------------------

    def provision(self, run: RunContext) -> list[CreatedResource]:
        plan = plan_for(run.settings)
        config = plan.config
        # The run's identity first: EKS Pod Identity associations take seconds to take effect (EKS API reference,
        # CreatePodIdentityAssociation), and the pods must find theirs when KubeRay creates them at Submit.
        self._identity(run, plan)
        local: list[CreatedResource] = []

        def record(resource: CreatedResource) -> CreatedResource:
            held = next(
                (r for r in run.resources if (r.kind, r.identifier) == (resource.kind, resource.identifier)), None
            )
            if held is not None:
                return held
            run.record_resource(resource)
            local.append(resource)
            return resource

        resource, awaited = hold_capacity(
            self._gpu(config),
            run,
            record=record,
            instance_count=config.instance_count,
            idle_count=config.verl_idle_instance_count,
            timeout_minutes=config.verl_pre_running_deadline_minutes,
            clock=self._clock,
        )
        if awaited:
            raise ProvisioningInProgress(f"run {run.run_id}: {awaited}")
        return [resource]

    # -- submit / status / cancel ----------------------------------------------------------------------------

    def submit(self, run: RunContext) -> str:
        """Ensure the run's service account and Pod Identity association (made at Provision), then create the
        ConfigMap and the RayJob; a 409 means an earlier attempt created them (idempotent)."""
        plan = plan_for(run.settings)
        config_map, rayjob = render(plan, run)
        namespace, name = plan.config.verl_namespace, rayjob["metadata"]["name"]
        job_id = f"{namespace}/{name}"
        if not any(r.kind == RAYJOB_KIND and r.identifier == job_id for r in run.resources):
            run.record_resource(CreatedResource(RAYJOB_KIND, job_id, {"namespace": namespace, "name": name}))
        kube = self._kube(plan.config)
        self._identity(run, plan)  # made at Provision; ensured here (idempotent)
        for path, body in ((_configmaps(namespace), config_map), (_rayjobs(namespace), rayjob)):
            self._create(run, plan.config, kube, path, body, label=job_id)
        return job_id

    def _create(
        self, run: RunContext, config: VerlRunConfig, kube: KubeClient, path: str, body: dict[str, Any], *, label: str
    ) -> None:
        try:
            # Strict: the API server refuses an unknown or duplicate field instead of dropping it with a warning.
            kube.request("POST", f"{path}?fieldValidation=Strict", body)
            return
        except KubeError as error:
            if error.status != 409:
                raise BackendError(
                    f"run {run.run_id}: create {body['kind']} {label}: {error}", transient=error.transient
                ) from None
        # 409: adopted only when an earlier attempt of this run created it (its run-id annotation and deployment
        # label), never another run's or another deployment's object of the same name.
        owner = self._foreign_owner(run, config, self._get(run, kube, f"{path}/{body['metadata']['name']}"))
        if owner is not None:
            raise BackendError(
                f"run {run.run_id}: a {body['kind']} named {label} already exists and is not this run's "
                f"({owner}); it was left alone"
            )

    def _identity(self, run: RunContext, plan: VerlPlan) -> None:
        """The run's own service account, and its association: the trainer role narrowed by the run's session policy
        (recorded first, so Cleanup deletes both whatever happens next)."""
        config = plan.config
        if config.verl_trainer_role_arn is None:
            raise BackendError(f"run {run.run_id}: the deployment ships no verl_trainer_role_arn")
        namespace, account = config.verl_namespace, rayjob_name(run.run_id)
        identifier = f"{config.eks_cluster_name}/{namespace}/{account}"
        if not any(r.kind == POD_IDENTITY_KIND and r.identifier == identifier for r in run.resources):
            run.record_resource(
                CreatedResource(
                    POD_IDENTITY_KIND,
                    identifier,
                    {"cluster": config.eks_cluster_name, "namespace": namespace, "service_account": account},
                )
            )
        kube = self._kube(config)
        self._create(
            run, config, kube, _serviceaccounts(namespace), service_account(plan, run), label=f"{namespace}/{account}"
        )
        if self._associations(run, config, namespace, account):
            return  # an earlier attempt created it
        eks = self._clients.client("eks", config.region)
        try:
            eks.create_pod_identity_association(
                clusterName=config.eks_cluster_name,
                namespace=namespace,
                serviceAccount=account,
                roleArn=config.verl_trainer_role_arn,
                disableSessionTags=True,  # required with a session policy (EKS API reference, `policy`)
                policy=json.dumps(session_policy(run, plan.model, region=config.region), separators=(",", ":")),
                clientRequestToken=hashlib.sha256(f"{run.run_id}/{account}".encode()).hexdigest()[:64],
            )
        except ClientError as error:
            raise backend_error(f"run {run.run_id}: create the pod identity association of {account}", error) from None

    def _associations(self, run: RunContext, config: VerlRunConfig, namespace: str, account: str) -> list[str]:
        eks = self._clients.client("eks", config.region)
        try:
            listed = eks.list_pod_identity_associations(
                clusterName=config.eks_cluster_name, namespace=namespace, serviceAccount=account
            )
        except ClientError as error:
            raise backend_error(f"run {run.run_id}: list the pod identity associations of {account}", error) from None
        return [str(a["associationId"]) for a in listed.get("associations", [])]

    @staticmethod
    def _foreign_owner(run: RunContext, config: VerlRunConfig, existing: Any) -> str | None:
        """None when ``existing`` was created for this run by this deployment, else whose it is (for the error)."""
        metadata = _mapping(existing.get("metadata") if isinstance(existing, dict) else None)
        owner_run = _mapping(metadata.get("annotations")).get(RUN_ID_ANNOTATION)
        owner_deployment = _mapping(metadata.get("labels")).get(DEPLOYMENT_LABEL)
        if owner_run == run.run_id and owner_deployment == config.prefix:
            return None
        return f"run {str(owner_run)[:80]!s} of deployment {str(owner_deployment)[:40]!s}"

    def status(self, run: RunContext, job_id: str) -> JobStatus:
        plan = plan_for(run.settings)
        namespace, name = _split(job_id)
        try:
            rayjob = self._kube(plan.config).request("GET", f"{_rayjobs(namespace)}/{name}")
        except KubeError as error:
            if error.status == 404:
                raise BackendError(
                    f"run {run.run_id}: RayJob {job_id} no longer exists (deleted outside the pipeline?)"
                ) from None
            raise BackendError(f"run {run.run_id}: read RayJob {job_id}: {error}", transient=error.transient) from None
        status = job_status(rayjob, planned_steps=plan.steps, last_step=self._last_step(run, plan))
        now = datetime.fromtimestamp(self._clock(), UTC)
        spent = cost_so_far(run.resources, region=plan.config.region, now=now)
        if spent is None:
            return status
        return replace(status, metrics={**status.metrics, "cost_usd": spent})  # the pipeline's budget guard reads it

    def _read_output(self, run: RunContext, config: VerlRunConfig, uri_text: str) -> bytes | None:
        """A file the trainer writes under the run's output prefix; None while it has not written it."""
        uri = S3Uri.parse(uri_text)
        s3 = self._clients.client("s3", config.region)
        try:
            body: bytes = s3.get_object(Bucket=uri.bucket, Key=uri.key)["Body"].read()
        except ClientError as error:
            if error_code(error) in {"NoSuchKey", "404"}:
                return None
            raise backend_error(f"run {run.run_id}: read {uri}", error) from None
        return body

    def _last_step(self, run: RunContext, plan: VerlPlan) -> int | None:
        body = self._read_output(run, plan.config, progress_uri(run))
        if body is None:
            return None
        try:
            step = json.loads(body).get("step")
        except (json.JSONDecodeError, AttributeError):
            return None
        return step if isinstance(step, int) and not isinstance(step, bool) else None

    # -- evaluation ------------------------------------------------------------------------------------------

    def _evaluation(self, run: RunContext) -> dict[str, Any]:
        config = parse_config(run.settings)
        uri = evaluation_uri(run)
        body = self._read_output(run, config, uri)
        if body is None:
            raise BackendError(
                f"run {run.run_id}: the trainer wrote no held-out evaluation ({uri}): the run had no held-out rows "
                "(eval_split or eval_dataset), or it ended before verl validated"
            )
        try:
            document = json.loads(body)
            pipeline_figures(document)
        except (json.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as error:
            raise BackendError(f"run {run.run_id}: {uri} is not a held-out evaluation: {error!r}") from None
        if not isinstance(document, dict) or document.get("after") is None:
            raise BackendError(f"run {run.run_id}: {uri} has no after-training evaluation (verl never validated it)")
        return document

    def evaluate(self, run: RunContext) -> dict[str, float]:
        """The held-out split played through the agent loop by verl's validation, after training and (with
        ``baseline_evaluation``) before it: the environment's evaluation, success and reward, the local backend's
        figure names (``heldout_*_before`` / ``heldout_*_after``)."""
        return pipeline_figures(self._evaluation(run))

    def evaluation_settings(self, run: RunContext) -> dict[str, str]:
        """What ``heldout_evaluation_*`` measures (the environment's EVALUATION, or success as the fallback); empty
        when there is no evaluation to describe (``evaluate`` says why)."""
        try:
            return {"evaluation_measure": str(self._evaluation(run)["measure"])}
        except BackendError:
            return {}

    def cancel(self, run: RunContext, job_id: str) -> None:
        """Delete the RayJob (its finalizer stops the Ray job); already gone is fine."""
        config = parse_config(run.settings)
        namespace, name = _own_namespace(run, config, job_id)
        self._delete(run, config, self._kube(config), f"{_rayjobs(namespace)}/{name}")

    def _delete(self, run: RunContext, config: VerlRunConfig, kube: KubeClient, path: str) -> None:
        """DELETE the object at ``path`` only if it is this run's (read first; the DELETE carries its uid as a
        precondition, so an object recreated in between by someone else is not deleted either). Already gone, or
        another run's object of the same name, is left as it is."""
        try:
            existing = kube.request("GET", path)
        except KubeError as error:
            if error.status == 404:
                return
            raise BackendError(f"run {run.run_id}: GET {path}: {error}", transient=error.transient) from None
        if self._foreign_owner(run, config, existing) is not None:
            return  # never created by this run (its create met another's object): nothing of ours to delete
        uid = _mapping(_mapping(existing).get("metadata")).get("uid")
        options = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}} if uid else None
        try:
            kube.request("DELETE", path, options)
        except KubeError as error:
            if error.status not in {404, 409}:  # 409: the uid precondition failed, the object is not ours
                raise BackendError(f"run {run.run_id}: DELETE {path}: {error}", transient=error.transient) from None

    # -- cleanup ---------------------------------------------------------------------------------------------

    def cleanup(self, run: RunContext) -> list[CreatedResource]:
        """Delete the RayJob and its ConfigMap, wait until its RayCluster is gone, then scale the group back."""
        config = parse_config(run.settings)
        removed: list[CreatedResource] = []
        for resource in [r for r in run.resources if r.kind == RAYJOB_KIND]:
            namespace, name = _own_namespace(run, config, resource.identifier)
            kube = self._kube(config)
            self._delete(run, config, kube, f"{_rayjobs(namespace)}/{name}")
            self._delete(run, config, kube, f"{_configmaps(namespace)}/{name}")
            listed = self._get(run, kube, f"{API_GROUP_PATH}/namespaces/{namespace}/rayclusters")
            alive = [
                c["metadata"]["name"] for c in listed.get("items", []) if c["metadata"]["name"].startswith(f"{name}-")
            ]
            if alive:
                # GPUs stay held until KubeRay removes the cluster: scaling the group down now would kill its pods.
                raise BackendError(
                    f"run {run.run_id}: RayCluster {', '.join(alive)} still being deleted", transient=True
                )
            removed.append(resource)
        for resource in [r for r in run.resources if r.kind == POD_IDENTITY_KIND]:
            details = resource.details
            eks = self._clients.client("eks", config.region)
            for association in self._associations(run, config, details["namespace"], details["service_account"]):
                try:
                    eks.delete_pod_identity_association(clusterName=details["cluster"], associationId=association)
                except ClientError as error:
                    if error_code(error) != "ResourceNotFoundException":
                        raise backend_error(f"run {run.run_id}: delete pod identity {association}", error) from None
            namespace, account = _own_namespace(run, config, f"{details['namespace']}/{details['service_account']}")
            self._delete(run, config, self._kube(config), f"{_serviceaccounts(namespace)}/{account}")
            removed.append(resource)
        sagemaker = self._clients.client("sagemaker", config.region)
        fallback = GroupTarget(config.hyperpod_cluster_name, config.verl_instance_group)
        for resource in [r for r in run.resources if r.kind == CAPACITY_KIND]:
            release_capacity(sagemaker, resource, fallback=fallback, idle_count=config.verl_idle_instance_count)
            removed.append(replace(resource, details={**resource.details, "released_at": now_iso(self._clock)}))
        return removed

    # -- logs ------------------------------------------------------------------------------------------------

    def logs(self, run: RunContext, job_id: str, *, tail_lines: int = 200) -> str:
        """The submitter pod's log (K8sJobMode: ``ray job submit`` streams the driver's output)."""
        config = parse_config(run.settings)
        namespace, name = _split(job_id)
        kube = self._kube(config)
        selector = urllib.parse.quote(f"job-name={name}")
        pods = self._get(run, kube, f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")
        names = sorted(p["metadata"]["name"] for p in pods.get("items", []))
        if not names:
            return ""
        path = f"/api/v1/namespaces/{namespace}/pods/{names[-1]}/log?tailLines={tail_lines}"
        return str(self._get(run, kube, path, text=True))


def _split(job_id: str) -> tuple[str, str]:
    namespace, _, name = job_id.partition("/")
    if not namespace or not name or name != rayjob_name_of(name):
        raise BackendError(f"'{job_id}' is not a verl job id (<namespace>/mtrl-<16 hex>)")
    return namespace, name


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _own_namespace(run: RunContext, config: VerlRunConfig, job_id: str) -> tuple[str, str]:
    """``_split``, refusing a job id in any namespace but the deployment's: nothing is deleted anywhere else."""
    namespace, name = _split(job_id)
    if namespace != config.verl_namespace:
        raise BackendError(
            f"run {run.run_id}: job {job_id} is not in the deployment's namespace {config.verl_namespace}; "
            "nothing was deleted"
        )
    return namespace, name


def rayjob_name_of(name: str) -> str:
    """``name`` when it has the shape rayjob_name gives (so a job id never addresses another object)."""
    valid = (
        name.startswith("mtrl-")
        and len(name) == len(rayjob_name(""))
        and all(c in "0123456789abcdef" for c in name[5:])
    )
    return name if valid else ""
