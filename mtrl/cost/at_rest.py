"""The monthly at-rest cost of a deployment, read from its synthesized CloudFormation templates.

Each resource that bills while nothing runs gets one line (quantity, unit price, monthly amount), priced from the
``at_rest`` section of ``prices.json``: every price names its AWS pricing page, every usage figure (log volumes of an
idle deployment) is marked an assumption. A region without prices is refused (``CostError``), never priced at zero,
and a resource type the book does not know how to price is listed under ``not_included`` by name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from mtrl.cost.calculator import CostError, CostEstimate, CostLine, PriceBook, cents, unique

# Resource types that cost nothing while idle (pay per request, per GB stored or per use) or nothing at all.
FREE_AT_REST: frozenset[str] = frozenset(
    {
        "AWS::ApplicationAutoScaling::ScalableTarget",
        "AWS::CDK::Metadata",
        "AWS::DynamoDB::Table",
        "AWS::EC2::InternetGateway",
        "AWS::EC2::Route",
        "AWS::EC2::RouteTable",
        "AWS::EC2::SecurityGroup",
        "AWS::EC2::SecurityGroupEgress",
        "AWS::EC2::SecurityGroupIngress",
        "AWS::EC2::Subnet",
        "AWS::EC2::SubnetRouteTableAssociation",
        "AWS::EC2::VPC",
        "AWS::EC2::VPCGatewayAttachment",
        "AWS::ECS::Cluster",
        "AWS::ECS::TaskDefinition",
        "AWS::EKS::AccessEntry",
        "AWS::EKS::Addon",
        "AWS::EKS::PodIdentityAssociation",
        "AWS::Events::Rule",
        "AWS::IAM::ManagedPolicy",
        "AWS::IAM::Policy",
        "AWS::IAM::Role",
        "AWS::KMS::Alias",
        "AWS::Lambda::EventInvokeConfig",
        "AWS::Lambda::Function",
        "AWS::Lambda::LayerVersion",
        "AWS::Lambda::Permission",
        "AWS::Logs::LogGroup",  # storage of what is ingested; the ingestion is priced where it comes from
        "AWS::S3::Bucket",
        "AWS::S3::BucketPolicy",
        "AWS::SNS::Topic",
        "AWS::SNS::TopicPolicy",
        "AWS::SQS::Queue",
        "AWS::SQS::QueuePolicy",
        "AWS::SSM::Parameter",  # standard tier
        "AWS::SageMaker::ModelPackageGroup",
        "AWS::StepFunctions::StateMachine",
    }
)
_FREE_CUSTOM_PREFIX = "Custom::"  # CDK's provider-backed resources: Lambda invocations at deploy time only


class _Pricer:
    """Lines and notes of one region's at-rest estimate."""

    def __init__(self, book: PriceBook, region: str) -> None:
        at_rest = book.at_rest
        if at_rest is None:
            raise CostError("the price book has no 'at_rest' section")
        if region not in at_rest.regions:
            priced = ", ".join(sorted(at_rest.regions))
            raise CostError(
                f"no at-rest prices for region '{region}' (priced: {priced}); add the region's prices, each with its "
                "AWS pricing page, to the 'at_rest' section of mtrl/cost/prices.json"
            )
        self.book = book
        self.at_rest = at_rest
        self.region = region
        self.prices = at_rest.regions[region]
        self.hours = Decimal(at_rest.hours_per_month)
        self.lines: list[CostLine] = []
        self.assumptions: list[str] = []
        self.unconfirmed: list[str] = []
        self.not_included: list[str] = []

    def price(self, key: str) -> Decimal:
        entry = self.prices.get(key)
        if entry is None:
            raise CostError(f"no at-rest price '{key}' for region '{self.region}' in mtrl/cost/prices.json")
        if entry.assumption:
            self.assumptions.append(f"{key} in {self.region}: {entry.source}")
        elif not entry.confirmed:
            self.unconfirmed.append(key)
        return Decimal(str(entry.price))

    def usage(self, key: str) -> Decimal:
        figure = self.at_rest.usage.get(key)
        if figure is None:
            raise CostError(f"no usage figure '{key}' in the 'at_rest' section of mtrl/cost/prices.json")
        if figure.assumption:
            self.assumptions.append(f"{key} = {figure.value} {figure.unit}: {figure.source}")
        return Decimal(str(figure.value))

    def add(self, item: str, quantity: Decimal, unit: str, unit_price: Decimal) -> None:
        self.lines.append(CostLine(item, quantity, unit, unit_price, cents(quantity * unit_price)))

    def hourly(self, item: str, count: Decimal, key: str, unit: str) -> None:
        self.add(item, count * self.hours, unit, self.price(key))

    def estimate(self) -> CostEstimate:
        notes = (*self.not_included, *((self.at_rest.not_included,) if self.at_rest.not_included else ()))
        assumptions = list(self.assumptions)
        if self.unconfirmed:
            keys = ", ".join(sorted(set(self.unconfirmed)))
            assumptions.append(
                f"{keys} in {self.region}: list prices checked against third-party copies of their AWS pricing page "
                "only, not the page itself (re-check them; each names its page in mtrl/cost/prices.json)"
            )
        return CostEstimate(self.book.currency, tuple(self.lines), unique(tuple(assumptions)), unique(notes))


def at_rest_cost(templates: Mapping[str, Mapping[str, Any]], *, region: str, book: PriceBook) -> CostEstimate:
    """The monthly cost of ``templates`` (stack name → CloudFormation template) while no run is active."""
    pricer = _Pricer(book, region)
    for stack in sorted(templates):
        resources: Mapping[str, Any] = templates[stack].get("Resources") or {}
        for logical_id in sorted(resources):
            resource = resources[logical_id]
            _price_resource(pricer, stack, logical_id, resource, resources)
    return pricer.estimate()


def _price_resource(
    pricer: _Pricer, stack: str, logical_id: str, resource: Mapping[str, Any], resources: Mapping[str, Any]
) -> None:
    kind = str(resource.get("Type"))
    props: Mapping[str, Any] = resource.get("Properties") or {}
    where = f"{stack}/{logical_id}"
    rule = _RULES.get(kind)
    if rule is not None:
        rule(pricer, where, props, resources)
    elif kind in pricer.at_rest.unpriced_types:
        pricer.not_included.append(f"{where} ({kind}): {pricer.at_rest.unpriced_types[kind]}")
    elif kind not in FREE_AT_REST and not kind.startswith(_FREE_CUSTOM_PREFIX):
        pricer.not_included.append(f"{where} ({kind}): no at-rest rule for this resource type")


def _eks_cluster(pricer: _Pricer, where: str, props: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    support = (props.get("UpgradePolicy") or {}).get("SupportType", "EXTENDED")  # EKS's default is EXTENDED
    # An EXTENDED policy bills the extended rate only once the version leaves standard support (settings warn).
    pricer.hourly(f"EKS control plane ({support} upgrade policy) {where}", Decimal(1), "eks_cluster_hour", "h")
    logging = (props.get("Logging") or {}).get("ClusterLogging") or {}
    log_types = [str(item.get("Type")) for item in logging.get("EnabledTypes") or []]
    if log_types:
        gigabytes = pricer.usage("eks_control_plane_log_gb_month") * len(log_types)
        item = f"EKS control-plane logs ({', '.join(log_types)}) {where}"
        pricer.add(item, gigabytes, "GB", pricer.price("log_ingestion_gb"))


def _nat_gateway(pricer: _Pricer, where: str, _props: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    pricer.hourly(f"NAT gateway {where}", Decimal(1), "nat_gateway_hour", "h")


def _elastic_ip(pricer: _Pricer, where: str, _props: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    pricer.hourly(f"public IPv4 address {where}", Decimal(1), "public_ipv4_hour", "IP-h")


def _vpc_endpoint(pricer: _Pricer, where: str, props: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    if props.get("VpcEndpointType") != "Interface":
        pricer.add(f"gateway endpoint (free) {where}", Decimal(1), "endpoint", Decimal(0))
        return
    zones = Decimal(len(props.get("SubnetIds") or []))
    if zones == 0:
        raise CostError(f"interface endpoint {where} names no subnets, so its AZ count is unknown")
    pricer.hourly(f"interface endpoint ({zones} AZ) {where}", zones, "interface_endpoint_az_hour", "endpoint-AZ-h")


def _kms_key(pricer: _Pricer, where: str, _props: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    pricer.add(f"KMS key {where}", Decimal(1), "key-month", pricer.price("kms_key_month"))


def _alarm(pricer: _Pricer, where: str, props: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    # CloudWatch bills an alarm per metric it evaluates: a metric-math alarm counts each metric it reads.
    metrics = [m for m in props.get("Metrics") or [] if "MetricStat" in m] or [None]
    pricer.add(f"alarm {where}", Decimal(len(metrics)), "alarm metric", pricer.price("alarm_metric_month"))


def _dashboard(pricer: _Pricer, where: str, _props: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    pricer.add(f"dashboard {where}", Decimal(1), "dashboard-month", pricer.price("dashboard_month"))


def _flow_log(pricer: _Pricer, where: str, props: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    destination = props.get("LogDestinationType", "cloud-watch-logs")
    if destination != "cloud-watch-logs":
        pricer.not_included.append(f"{where}: flow logs to {destination} are not priced")
        return
    pricer.add(f"VPC flow logs {where}", pricer.usage("flow_log_gb_month"), "GB", pricer.price("log_ingestion_gb"))


def _hyperpod_cluster(pricer: _Pricer, where: str, props: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    for group in [*(props.get("InstanceGroups") or []), *(props.get("RestrictedInstanceGroups") or [])]:
        _price_instance_group(pricer, where, group)


def _price_instance_group(pricer: _Pricer, where: str, group: Mapping[str, Any]) -> None:
    count = int(group.get("InstanceCount") or 0)
    name = group.get("InstanceGroupName")
    instance_type = str(group.get("InstanceType"))
    item = f"HyperPod group '{name}' at its idle count, {count} × {instance_type} {where}"
    if count == 0:
        pricer.add(item, Decimal(0), "instance-h", Decimal(0))
        return
    price = pricer.book.instance_price(instance_type, pricer.region)
    if price.assumption:
        pricer.assumptions.append(f"{instance_type} in {pricer.region}: {price.source}")
    pricer.add(item, Decimal(count) * pricer.hours, "instance-h", Decimal(str(price.hourly)))
    if "EnvironmentConfig" in group:
        pricer.not_included.append(f"{where}: the FSx for Lustre file system of group '{name}' is not priced")


def _ecs_service(pricer: _Pricer, where: str, props: Mapping[str, Any], resources: Mapping[str, Any]) -> None:
    desired = int(props.get("DesiredCount") or 0)
    if desired == 0:
        pricer.add(f"ECS service at desired count 0 {where}", Decimal(0), "task-h", Decimal(0))
        return
    if props.get("LaunchType") != "FARGATE":
        pricer.not_included.append(f"{where}: an ECS service not on Fargate is not priced")
        return
    reference = props.get("TaskDefinition")
    definition = resources.get(reference["Ref"]) if isinstance(reference, Mapping) and "Ref" in reference else None
    if definition is None:
        raise CostError(f"ECS service {where}: its task definition is not in the same template, so it cannot be priced")
    task = definition.get("Properties") or {}
    vcpus = Decimal(str(task.get("Cpu"))) / Decimal(1024)
    gigabytes = Decimal(str(task.get("Memory"))) / Decimal(1024)
    per_task_hour = vcpus * pricer.price("fargate_vcpu_hour") + gigabytes * pricer.price("fargate_gb_hour")
    pricer.add(
        f"ECS service, {desired} Fargate task(s) always on {where}", desired * pricer.hours, "task-h", per_task_hour
    )


_Rule = Callable[[_Pricer, str, Mapping[str, Any], Mapping[str, Any]], None]
# How each resource type that bills at rest is priced: (pricer, "stack/logical id", properties, the stack's resources).
_RULES: dict[str, _Rule] = {
    "AWS::EKS::Cluster": _eks_cluster,
    "AWS::EC2::NatGateway": _nat_gateway,
    "AWS::EC2::EIP": _elastic_ip,
    "AWS::EC2::VPCEndpoint": _vpc_endpoint,
    "AWS::KMS::Key": _kms_key,
    "AWS::CloudWatch::Alarm": _alarm,
    "AWS::CloudWatch::Dashboard": _dashboard,
    "AWS::EC2::FlowLog": _flow_log,
    "AWS::SageMaker::Cluster": _hyperpod_cluster,
    "AWS::ECS::Service": _ecs_service,
}
