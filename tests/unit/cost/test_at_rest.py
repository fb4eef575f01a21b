"""``mtrl.cost.at_rest``: a template's resources priced one by one from the book's sourced at-rest prices."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from mtrl.cost import CostError, load_price_book
from mtrl.cost.at_rest import at_rest_cost

BOOK = load_price_book()


def _template(**resources: dict[str, Any]) -> dict[str, Any]:
    return {"Resources": resources}


NETWORK = _template(
    Nat={"Type": "AWS::EC2::NatGateway", "Properties": {}},
    Ip={"Type": "AWS::EC2::EIP", "Properties": {"Domain": "vpc"}},
    Logs={"Type": "AWS::EC2::VPCEndpoint", "Properties": {"VpcEndpointType": "Interface", "SubnetIds": ["a", "b"]}},
    S3={"Type": "AWS::EC2::VPCEndpoint", "Properties": {"VpcEndpointType": "Gateway"}},
    Vpc={"Type": "AWS::EC2::VPC", "Properties": {}},
)
CLUSTER = _template(
    Eks={
        "Type": "AWS::EKS::Cluster",
        "Properties": {
            "UpgradePolicy": {"SupportType": "STANDARD"},
            "Logging": {"ClusterLogging": {"EnabledTypes": [{"Type": "api"}, {"Type": "audit"}]}},
        },
    },
    HyperPod={
        "Type": "AWS::SageMaker::Cluster",
        "Properties": {
            "InstanceGroups": [
                {"InstanceGroupName": "gpu", "InstanceType": "ml.g5.8xlarge", "InstanceCount": 0},
                {"InstanceGroupName": "system", "InstanceType": "ml.g5.8xlarge", "InstanceCount": 1},
            ]
        },
    },
    Key={"Type": "AWS::KMS::Key", "Properties": {}},
    Alarm={"Type": "AWS::CloudWatch::Alarm", "Properties": {"MetricName": "Errors"}},
    MathAlarm={
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {"Metrics": [{"Id": "a", "MetricStat": {}}, {"Id": "b", "MetricStat": {}}, {"Id": "e"}]},
    },
    Board={"Type": "AWS::CloudWatch::Dashboard", "Properties": {}},
    Mlflow={"Type": "AWS::SageMaker::MlflowApp", "Properties": {}},
    Odd={"Type": "AWS::Redshift::Cluster", "Properties": {}},
)


def _amounts(region: str = "us-east-1") -> dict[str, Decimal]:
    estimate = at_rest_cost({"net": NETWORK, "cluster": CLUSTER}, region=region, book=BOOK)
    return {line.item.split(" ")[-1]: line.amount for line in estimate.lines}


def test_each_resource_that_bills_at_rest_gets_its_own_monthly_line() -> None:
    amounts = _amounts()
    assert amounts["net/Nat"] == Decimal("32.85")  # 0.045 × 730
    assert amounts["net/Ip"] == Decimal("3.65")  # 0.005 × 730
    assert amounts["net/Logs"] == Decimal("14.60")  # 0.01 × 2 AZs × 730
    assert amounts["net/S3"] == 0
    # The control plane and its two log types at the book's assumed 0.5 GB a month each, USD 0.50 per GB.
    assert [a for item, a in amounts.items() if item == "cluster/Eks"] == [Decimal("0.50")]
    assert amounts["cluster/Key"] == Decimal("1.00")
    assert amounts["cluster/Alarm"] == Decimal("0.10")
    assert amounts["cluster/MathAlarm"] == Decimal("0.20")  # two metrics, the expression is free
    assert amounts["cluster/Board"] == Decimal("3.00")
    estimate = at_rest_cost({"net": NETWORK, "cluster": CLUSTER}, region="us-east-1", book=BOOK)
    eks = [line for line in estimate.lines if line.item.startswith("EKS control plane")]
    assert [line.amount for line in eks] == [Decimal("73.00")]
    groups = {line.item.split(",")[0]: line.amount for line in estimate.lines if "HyperPod group" in line.item}
    assert groups == {
        "HyperPod group 'gpu' at its idle count": 0,
        "HyperPod group 'system' at its idle count": Decimal("2233.80"),
    }
    assert estimate.total == sum((line.amount for line in estimate.lines), Decimal(0))


def test_what_cannot_be_priced_is_named_never_counted_as_zero() -> None:
    estimate = at_rest_cost({"cluster": CLUSTER}, region="us-east-1", book=BOOK)
    assert any("cluster/Mlflow (AWS::SageMaker::MlflowApp)" in note for note in estimate.not_included)
    assert any("cluster/Odd (AWS::Redshift::Cluster): no at-rest rule" in note for note in estimate.not_included)
    assert any("eks_control_plane_log_gb_month" in note for note in estimate.assumptions)


def test_every_price_names_its_aws_pricing_page() -> None:
    assert BOOK.at_rest is not None
    for region, prices in BOOK.at_rest.regions.items():
        for key, price in prices.items():
            assert "https://aws.amazon.com/" in price.source, (region, key)
            assert "2026-12-07" in price.source, (region, key)


def test_a_region_without_prices_is_refused_by_name() -> None:
    with pytest.raises(CostError, match=r"no at-rest prices for region 'eu-west-1' \(priced: us-east-1, us-west-2\)"):
        at_rest_cost({"net": NETWORK}, region="eu-west-1", book=BOOK)


def test_an_idle_instance_without_a_price_is_refused() -> None:
    # ml.g5.8xlarge is priced in us-east-1 only: a group that idles at 1 in us-west-2 cannot be priced.
    with pytest.raises(CostError, match=r"no hourly price for 'ml.g5.8xlarge' in region 'us-west-2'"):
        at_rest_cost({"cluster": CLUSTER}, region="us-west-2", book=BOOK)
