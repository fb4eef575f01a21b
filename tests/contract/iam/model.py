"""The synthesized app as data: every stack's template, intrinsics resolved, physical names and ARNs, role policies.

Intrinsics resolved: ``Ref``/``Fn::GetAtt`` to resources and parameters, ``Fn::Join``, ``Fn::Sub``, ``Fn::Select``,
``Fn::Split``, ``Fn::ImportValue`` (through the exporting stack's ``Outputs``), ``Fn::If`` on template conditions,
and the pseudo-parameters. A resource's name is its explicit name property (``BucketName``, ``RoleName``…) where
the template sets one, otherwise a deterministic stand-in for the name CloudFormation would generate
(``<stack>-<LogicalId>-<hash>``); service-generated ids (KMS key ids, HyperPod cluster ids, stack ids) are
deterministic too. A test builds its fake environment from ``physical_name``/``arn_of``/``attribute``, so its
bucket names, cluster ARNs and role names are exactly those the policies name.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from tests.contract.iam.policy import Decision, IamRequest, Outcome, Statement, evaluate, statements_of

ACCOUNT = "111122223333"
REGION = "us-east-1"
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
AWS_MANAGED_POLICY = re.compile(r"^arn:[^:]+:iam::aws:policy/(.+)$")


class ModelError(ValueError):
    """The template uses something the model cannot resolve, or a lookup is ambiguous/unknown."""


# Explicit name properties by resource type; the value CloudFormation uses as the resource's name.
NAME_PROPERTIES = {
    "AWS::S3::Bucket": "BucketName",
    "AWS::IAM::Role": "RoleName",
    "AWS::IAM::ManagedPolicy": "ManagedPolicyName",
    "AWS::IAM::Policy": "PolicyName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::ECS::Cluster": "ClusterName",
    "AWS::ECS::Service": "ServiceName",
    "AWS::ECS::TaskDefinition": "Family",
    "AWS::EKS::Cluster": "Name",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::StepFunctions::StateMachine": "StateMachineName",
    "AWS::SageMaker::Cluster": "ClusterName",
    "AWS::SageMaker::MlflowApp": "Name",
    "AWS::SageMaker::ModelPackageGroup": "ModelPackageGroupName",
    "AWS::ECR::Repository": "RepositoryName",
    "AWS::Events::Rule": "Name",
}
_NAME_LIMITS = {"AWS::S3::Bucket": 63, "AWS::IAM::Role": 64, "AWS::Lambda::Function": 64, "AWS::SQS::Queue": 80}
_EC2_ID_PREFIX = {
    "AWS::EC2::VPC": "vpc-",
    "AWS::EC2::Subnet": "subnet-",
    "AWS::EC2::SecurityGroup": "sg-",
    "AWS::EC2::RouteTable": "rtb-",
    "AWS::EC2::InternetGateway": "igw-",
    "AWS::EC2::NatGateway": "nat-",
    "AWS::EC2::EIP": "eipalloc-",
}


def _digest(*parts: str, length: int = 12) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:length]


@dataclass(frozen=True)
class Resource:
    stack: str
    logical_id: str
    type: str
    properties: Mapping[str, Any]
    path: str  # aws:cdk:path metadata ("" when absent)


@dataclass(frozen=True)
class RolePolicies:
    """What an IAM role may do as synthesized: every statement attached to it, and the AWS-managed policies that
    cannot be read offline."""

    name: str
    arn: str
    path: str
    statements: tuple[Statement, ...]
    aws_managed: tuple[str, ...]  # ARNs of AWS-managed policies attached to the role
    unreadable: tuple[str, ...] = ()  # customer-managed policy ARNs the templates do not define

    def decide(
        self,
        request: IamRequest,
        *,
        context: Mapping[str, Any] | None = None,
        accept_unverified: Mapping[str, str] | None = None,
        managed_grants: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> Decision:
        """``managed_grants``: AWS-managed policy name (``service-role/AWSLambdaBasicExecutionRole``) → the
        statements the test states it grants (copied from its documentation page, named in a comment)."""
        grants = dict(managed_grants or {})
        unknown = [g for g in grants if not any(_managed_name(arn) == g for arn in self.aws_managed)]
        if unknown:
            raise ModelError(f"role {self.name} has no AWS-managed policy {unknown} (attached: {self.aws_managed})")
        statements = list(self.statements)
        for name, documents in grants.items():
            statements += statements_of({"Statement": list(documents)}, f"AWS-managed {name} (as the test states)")
        decision = evaluate(statements, request, context=context, accept_unverified=(accept_unverified or {}))
        ungranted = [arn for arn in self.aws_managed if _managed_name(arn) not in grants] + list(self.unreadable)
        if decision.outcome is Outcome.DENIED and not decision.denied_by and ungranted:
            return Decision(
                request,
                Outcome.DENIED,
                f"no readable statement of role {self.name} allows it; it would need "
                f"{', '.join(ungranted)}, which cannot be read offline: pass managed_grants="
                "{name: [statements]} quoting the policy's documentation page if that policy grants it",
            )
        return decision


def _managed_name(arn: str) -> str:
    match = AWS_MANAGED_POLICY.match(arn)
    return match.group(1) if match else arn


class AppModel:
    """Templates of one synthesized app, resolvable. Build with ``AppModel.synth()`` or ``from_templates``."""

    def __init__(
        self, templates: Mapping[str, Mapping[str, Any]], *, account: str = ACCOUNT, region: str = REGION
    ) -> None:
        self.account = account
        self.region = region
        self.partition = "aws"
        self.url_suffix = "amazonaws.com"
        self.templates = {name: dict(t) for name, t in templates.items()}
        self._resources: dict[tuple[str, str], Resource] = {}
        for stack, template in self.templates.items():
            for logical_id, body in (template.get("Resources") or {}).items():
                self._resources[(stack, logical_id)] = Resource(
                    stack,
                    logical_id,
                    str(body.get("Type")),
                    body.get("Properties") or {},
                    str((body.get("Metadata") or {}).get("aws:cdk:path", "")),
                )
        self._exports: dict[str, tuple[str, Any]] | None = None
        self._resolving: set[tuple[str, str]] = set()

    # -- construction ------------------------------------------------------------------------------------------

    @classmethod
    def synth(
        cls, *, account: str = ACCOUNT, region: str = REGION, overrides: Mapping[str, Any] | None = None
    ) -> AppModel:
        """The whole app synthesized in-process (as ``cdk synth`` with path metadata and the AZ lookup would);
        cached per process for the same arguments."""
        return _synth_cached(account, region, json.dumps(dict(overrides or {}), sort_keys=True))

    @classmethod
    def from_templates(
        cls, templates: Mapping[str, Mapping[str, Any]], *, account: str = ACCOUNT, region: str = REGION
    ) -> AppModel:
        return cls(templates, account=account, region=region)

    # -- resources ---------------------------------------------------------------------------------------------

    def resources(self, type_: str | None = None) -> Iterator[Resource]:
        return (r for r in self._resources.values() if type_ is None or r.type == type_)

    def find(self, fragment: str, *, type_: str | None = None, stack: str | None = None) -> Resource:
        """The one resource whose construct path contains ``fragment`` (or whose logical id starts with it).

        A path that is exactly ``fragment`` or ``fragment/Resource`` wins over partial matches."""
        candidates = [
            r
            for r in self.resources(type_)
            if (stack is None or r.stack == stack) and (fragment in r.path or r.logical_id.startswith(fragment))
        ]
        exact = [r for r in candidates if r.path in {fragment, f"{fragment}/Resource"}]
        if len(exact) == 1:
            return exact[0]
        if len(candidates) != 1:
            listed = ", ".join(r.path or f"{r.stack}/{r.logical_id}" for r in candidates[:12]) or "none"
            raise ModelError(
                f"{len(candidates)} resources{f' of type {type_}' if type_ else ''} match {fragment!r}: {listed}"
            )
        return candidates[0]

    def named(self, type_: str, name: str) -> Resource | None:
        """The resource of ``type_`` whose physical name is ``name`` (None when the templates define none)."""
        for resource in self.resources(type_):
            if self.name_of(resource) == name:
                return resource
        return None

    # -- names and ARNs ----------------------------------------------------------------------------------------

    def name_of(self, resource: Resource) -> str:
        prop = NAME_PROPERTIES.get(resource.type)
        if prop and prop in resource.properties:
            return str(self.resolve(resource.stack, resource.properties[prop]))
        if resource.type in _EC2_ID_PREFIX:
            return _EC2_ID_PREFIX[resource.type] + _digest(resource.stack, resource.logical_id, length=17)
        limit = _NAME_LIMITS.get(resource.type, 128)
        suffix = _digest(resource.stack, resource.logical_id).upper()
        base = f"{resource.stack}-{resource.logical_id}"[: limit - len(suffix) - 1]
        name = f"{base}-{suffix}"
        return name.lower() if resource.type == "AWS::S3::Bucket" else name

    def physical_name(self, fragment: str, *, type_: str | None = None) -> str:
        return self.name_of(self.find(fragment, type_=type_))

    def arn_of(self, fragment: str, *, type_: str | None = None) -> str:
        resource = self.find(fragment, type_=type_)
        for attribute in ("Arn", "ClusterArn", "TopicArn", "ModelPackageGroupArn"):
            try:
                return str(self.attribute_of(resource, attribute))
            except ModelError:
                continue
        raise ModelError(f"no ARN known for {resource.type} {resource.path}")

    def attribute(self, fragment: str, attribute: str, *, type_: str | None = None) -> Any:
        return self.attribute_of(self.find(fragment, type_=type_), attribute)

    def _arn(self, service: str, resource: str, *, regional: bool = True, account: bool = True) -> str:
        region = self.region if regional else ""
        owner = self.account if account else ""
        return f"arn:{self.partition}:{service}:{region}:{owner}:{resource}"

    def ref_of(self, resource: Resource) -> Any:
        name = self.name_of(resource)
        t = resource.type
        refs: dict[str, Any] = {
            "AWS::SQS::Queue": f"https://sqs.{self.region}.{self.url_suffix}/{self.account}/{name}",
            "AWS::IAM::ManagedPolicy": self._managed_policy_arn(resource),
            "AWS::ECS::TaskDefinition": self._arn("ecs", f"task-definition/{name}:1"),
            "AWS::SNS::Topic": self._arn("sns", name),
            "AWS::StepFunctions::StateMachine": self._arn("states", f"stateMachine:{name}"),
            "AWS::KMS::Key": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{resource.stack}/{resource.logical_id}")),
        }
        if t == "AWS::ECS::Service":
            cluster = self.resolve(resource.stack, resource.properties.get("Cluster", "default"))
            return self._arn("ecs", f"service/{str(cluster).rsplit('/', 1)[-1]}/{name}")
        if t in {"AWS::SageMaker::Cluster", "AWS::SageMaker::MlflowApp", "AWS::SageMaker::ModelPackageGroup"}:
            return self.arn_of_resource(resource)
        return refs.get(t, name)

    def arn_of_resource(self, resource: Resource) -> str:
        attribute = {
            "AWS::SageMaker::Cluster": "ClusterArn",
            "AWS::SNS::Topic": "TopicArn",
            "AWS::SageMaker::ModelPackageGroup": "ModelPackageGroupArn",
        }.get(resource.type, "Arn")
        return str(self.attribute_of(resource, attribute))

    def _managed_policy_arn(self, resource: Resource) -> str:
        path = str(self.resolve(resource.stack, resource.properties.get("Path", "/")))
        return self._arn("iam", f"policy{path}{self.name_of(resource)}", regional=False)

    def attribute_of(self, resource: Resource, attribute: str) -> Any:
        name = self.name_of(resource)
        t = resource.type
        generated = _digest(resource.stack, resource.logical_id)
        role_path = str(self.resolve(resource.stack, resource.properties.get("Path", "/")))
        table: dict[tuple[str, str], Any] = {
            ("AWS::S3::Bucket", "Arn"): f"arn:{self.partition}:s3:::{name}",
            ("AWS::S3::Bucket", "DomainName"): f"{name}.s3.{self.url_suffix}",
            ("AWS::S3::Bucket", "RegionalDomainName"): f"{name}.s3.{self.region}.{self.url_suffix}",
            ("AWS::IAM::Role", "Arn"): self._arn("iam", f"role{role_path}{name}", regional=False),
            ("AWS::IAM::Role", "RoleId"): "AROA" + generated.upper(),
            ("AWS::Lambda::Function", "Arn"): self._arn("lambda", f"function:{name}"),
            ("AWS::SQS::Queue", "Arn"): self._arn("sqs", name),
            ("AWS::SQS::Queue", "QueueName"): name,
            ("AWS::SQS::Queue", "QueueUrl"): self.ref_of(resource) if t == "AWS::SQS::Queue" else None,
            ("AWS::DynamoDB::Table", "Arn"): self._arn("dynamodb", f"table/{name}"),
            ("AWS::ECS::Cluster", "Arn"): self._arn("ecs", f"cluster/{name}"),
            ("AWS::ECS::Service", "Name"): name,
            ("AWS::EKS::Cluster", "Arn"): self._arn("eks", f"cluster/{name}"),
            ("AWS::ECR::Repository", "Arn"): self._arn("ecr", f"repository/{name}"),
            ("AWS::KMS::Key", "Arn"): self._arn("kms", f"key/{self.ref_of(resource)}")
            if t == "AWS::KMS::Key"
            else None,
            ("AWS::KMS::Key", "KeyId"): self.ref_of(resource) if t == "AWS::KMS::Key" else None,
            ("AWS::Logs::LogGroup", "Arn"): self._arn("logs", f"log-group:{name}:*"),
            ("AWS::SNS::Topic", "TopicArn"): self._arn("sns", name),
            ("AWS::StepFunctions::StateMachine", "Arn"): self._arn("states", f"stateMachine:{name}"),
            ("AWS::SageMaker::Cluster", "ClusterArn"): self._arn("sagemaker", f"cluster/{generated}"),
            ("AWS::SageMaker::MlflowApp", "Arn"): self._arn("sagemaker", f"mlflow-app/app-{generated.upper()}"),
            ("AWS::SageMaker::ModelPackageGroup", "ModelPackageGroupArn"): self._arn(
                "sagemaker", f"model-package-group/{name.lower()}"
            ),
            ("AWS::EC2::SecurityGroup", "GroupId"): name,
            ("AWS::EC2::VPC", "DefaultSecurityGroup"): "sg-"
            + _digest(resource.stack, resource.logical_id, "d", length=17),
            ("AWS::EC2::VPC", "CidrBlock"): "10.0.0.0/16",
            ("AWS::IAM::ManagedPolicy", "PolicyArn"): self._managed_policy_arn(resource)
            if t == "AWS::IAM::ManagedPolicy"
            else None,
        }
        value = table.get((t, attribute))
        if value is None:
            raise ModelError(f"Fn::GetAtt {resource.logical_id}.{attribute} ({t}) is not modelled")
        return value

    # -- intrinsics ---------------------------------------------------------------------------------------------

    def _pseudo(self, stack: str, name: str) -> Any:
        values = {
            "AWS::AccountId": self.account,
            "AWS::Region": self.region,
            "AWS::Partition": self.partition,
            "AWS::URLSuffix": self.url_suffix,
            "AWS::StackName": stack,
            "AWS::StackId": self._arn("cloudformation", f"stack/{stack}/{uuid.uuid5(uuid.NAMESPACE_DNS, stack)}"),
        }
        if name not in values:
            raise ModelError(f"pseudo-parameter {name} is not modelled")
        return values[name]

    def _ref(self, stack: str, name: str) -> Any:
        if name.startswith("AWS::"):
            return self._pseudo(stack, name)
        template = self.templates[stack]
        if name in (template.get("Parameters") or {}):
            parameter = template["Parameters"][name]
            if "Default" not in parameter:
                raise ModelError(f"{stack}: parameter {name} has no default")
            return parameter["Default"]
        resource = self._resources.get((stack, name))
        if resource is None:
            raise ModelError(f"{stack}: Ref to unknown {name}")
        return self.ref_of(resource)

    def _import(self, name: str) -> Any:
        if self._exports is None:
            self._exports = {}
            for stack, template in self.templates.items():
                for output in (template.get("Outputs") or {}).values():
                    export = output.get("Export")
                    if export:
                        self._exports[str(self.resolve(stack, export["Name"]))] = (stack, output["Value"])
        if name not in self._exports:
            raise ModelError(f"Fn::ImportValue {name}: no stack exports it")
        stack, value = self._exports[name]
        return self.resolve(stack, value)

    def _condition(self, stack: str, name: str) -> bool:
        conditions = self.templates[stack].get("Conditions") or {}
        if name not in conditions:
            raise ModelError(f"{stack}: unknown condition {name}")
        return bool(self._condition_value(stack, conditions[name]))

    def _condition_value(self, stack: str, value: Any) -> Any:
        if isinstance(value, Mapping) and len(value) == 1:
            ((key, args),) = value.items()
            if key == "Fn::Equals":
                a, b = (self.resolve(stack, v) for v in args)
                return a == b
            if key == "Fn::Not":
                return not self._condition_value(stack, args[0])
            if key == "Fn::And":
                return all(self._condition_value(stack, v) for v in args)
            if key == "Fn::Or":
                return any(self._condition_value(stack, v) for v in args)
            if key == "Condition":
                return self._condition(stack, args)
        return self.resolve(stack, value)

    def resolve(self, stack: str, value: Any) -> Any:
        """``value`` with every intrinsic resolved in the context of ``stack`` (AWS::NoValue entries dropped)."""
        if isinstance(value, list):
            items = [self.resolve(stack, v) for v in value]
            return [v for v in items if v is not _NO_VALUE]
        if not isinstance(value, Mapping):
            return value
        if len(value) == 1:
            ((key, args),) = value.items()
            handler = self._intrinsics.get(key)
            if handler is not None:
                return handler(stack, args)
            if key.startswith("Fn::"):
                raise ModelError(f"{stack}: intrinsic {key} is not modelled")
        resolved = {k: self.resolve(stack, v) for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not _NO_VALUE}

    @property
    def _intrinsics(self) -> dict[str, Any]:
        return {
            "Ref": lambda stack, name: _NO_VALUE if name == "AWS::NoValue" else self._ref(stack, name),
            "Fn::GetAtt": self._get_att,
            "Fn::Join": lambda stack, a: str(a[0]).join(str(v) for v in self.resolve(stack, a[1])),
            "Fn::Sub": self._sub,
            "Fn::Select": lambda stack, a: self.resolve(stack, a[1])[int(self.resolve(stack, a[0]))],
            "Fn::Split": lambda stack, a: str(self.resolve(stack, a[1])).split(a[0]),
            "Fn::ImportValue": lambda stack, a: self._import(str(self.resolve(stack, a))),
            "Fn::If": lambda stack, a: self.resolve(stack, a[1] if self._condition(stack, a[0]) else a[2]),
        }

    def _get_att(self, stack: str, args: Any) -> Any:
        logical, attribute = args if isinstance(args, list) else str(args).split(".", 1)
        resource = self._resources.get((stack, logical))
        if resource is None:
            raise ModelError(f"{stack}: Fn::GetAtt to unknown {logical}")
        return self.attribute_of(resource, attribute)

    def _sub(self, stack: str, args: Any) -> str:
        text, variables = (args, {}) if isinstance(args, str) else (args[0], args[1])
        values = {k: self.resolve(stack, v) for k, v in dict(variables).items()}

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in values:
                return str(values[name])
            if "." in name and not name.startswith("AWS::"):
                logical, attribute = name.split(".", 1)
                return str(self.resolve(stack, {"Fn::GetAtt": [logical, attribute]}))
            return str(self._ref(stack, name))

        return re.sub(r"\$\{([^}]+)\}", replace, str(text))

    # -- roles -------------------------------------------------------------------------------------------------

    def role(self, fragment: str) -> RolePolicies:
        """The role whose construct path contains ``fragment`` (or whose logical id starts with it), with every
        policy attached to it in any stack."""
        role = self.find(fragment, type_="AWS::IAM::Role")
        name = self.name_of(role)
        arn = str(self.attribute_of(role, "Arn"))
        statements: list[Statement] = []
        for index, inline in enumerate(self.resolve(role.stack, role.properties.get("Policies", []))):
            source = f"{role.path or role.logical_id} inline {inline.get('PolicyName', index)}"
            statements += statements_of(inline["PolicyDocument"], source)
        attached_arns: set[str] = set()
        for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for policy in self.resources(kind):
                roles = [str(r) for r in self.resolve(policy.stack, policy.properties.get("Roles", []))]
                if name not in roles and arn not in roles:
                    continue
                if kind == "AWS::IAM::ManagedPolicy":
                    attached_arns.add(self._managed_policy_arn(policy))
                source = policy.path.removesuffix("/Resource") or f"{policy.stack}/{policy.logical_id}"
                statements += statements_of(self.resolve(policy.stack, policy.properties["PolicyDocument"]), source)
        aws_managed: list[str] = []
        unreadable: list[str] = []
        for resolved_arn in self.resolve(role.stack, role.properties.get("ManagedPolicyArns", [])):
            policy_arn = str(resolved_arn)
            if AWS_MANAGED_POLICY.match(policy_arn):
                aws_managed.append(policy_arn)
                continue
            if policy_arn in attached_arns:
                continue
            defined = next(
                (p for p in self.resources("AWS::IAM::ManagedPolicy") if self._managed_policy_arn(p) == policy_arn),
                None,
            )
            if defined is None:
                unreadable.append(policy_arn)
                continue
            source = defined.path.removesuffix("/Resource") or defined.logical_id
            statements += statements_of(self.resolve(defined.stack, defined.properties["PolicyDocument"]), source)
        return RolePolicies(
            name=name,
            arn=arn,
            path=role.path,
            statements=tuple(statements),
            aws_managed=tuple(aws_managed),
            unreadable=tuple(unreadable),
        )

    # -- what request mapping needs to know ---------------------------------------------------------------------

    def function_environment(self, fragment: str) -> dict[str, str]:
        """A Lambda function's environment variables as deployed (intrinsics resolved)."""
        function = self.find(fragment, type_="AWS::Lambda::Function")
        variables = (function.properties.get("Environment") or {}).get("Variables") or {}
        return {k: str(v) for k, v in self.resolve(function.stack, variables).items()}

    def sagemaker_cluster_arn(self, name_or_arn: str) -> str | None:
        if name_or_arn.startswith("arn:"):
            return name_or_arn
        cluster = self.named("AWS::SageMaker::Cluster", name_or_arn)
        return None if cluster is None else str(self.attribute_of(cluster, "ClusterArn"))

    def task_definition_roles(self, family: str) -> list[str] | None:
        """Task and execution role ARNs of the task definition family (None: the templates define no such family)."""
        definition = self.named("AWS::ECS::TaskDefinition", family)
        if definition is None:
            return None
        props = self.resolve(definition.stack, dict(definition.properties))
        return [str(props[k]) for k in ("TaskRoleArn", "ExecutionRoleArn") if props.get(k)]

    def bucket_kms_key(self, bucket: str) -> tuple[str, bool] | None:
        """(KMS key ARN, S3 Bucket Key enabled) of a bucket whose default encryption is SSE-KMS, else None."""
        resource = self.named("AWS::S3::Bucket", bucket)
        if resource is None:
            return None
        encryption = self.resolve(resource.stack, resource.properties.get("BucketEncryption") or {})
        for rule in encryption.get("ServerSideEncryptionConfiguration", []):
            default = rule.get("ServerSideEncryptionByDefault") or {}
            if default.get("SSEAlgorithm") in {"aws:kms", "aws:kms:dsse"}:
                key = str(default.get("KMSMasterKeyID", ""))
                if not key.startswith("arn:"):
                    key = self._arn("kms", f"key/{key}")
                return key, bool(rule.get("BucketKeyEnabled"))
        return None


class _NoValue:
    def __repr__(self) -> str:
        return "AWS::NoValue"


_NO_VALUE: Any = _NoValue()


@dataclass
class _Outdir:
    paths: list[str] = field(default_factory=list)

    def new(self) -> str:
        path = tempfile.mkdtemp(prefix="mtrl-iam-contract-")
        self.paths.append(path)
        return path

    def remove(self) -> None:
        for path in self.paths:
            shutil.rmtree(path, ignore_errors=True)


_OUTDIRS = _Outdir()
atexit.register(_OUTDIRS.remove)


@cache
def _synth_cached(account: str, region: str, overrides_json: str) -> AppModel:
    from tests.conftest import make_app  # the suite's own in-process synth (cdk.json context, path metadata)

    overrides = {
        "account": account,
        "region": region,
        f"availability-zones:account={account}:region={region}": [z.replace(REGION, region) for z in ZONES],
        **json.loads(overrides_json),
    }
    app, _ = make_app(overrides, outdir=Path(_OUTDIRS.new()))
    assembly = app.synth()
    return AppModel({s.stack_name: s.template for s in assembly.stacks}, account=account, region=region)
