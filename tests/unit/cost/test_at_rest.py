"""``mtrl.cost.at_rest``: a template's resources priced one by one from the book's sourced at-rest prices."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
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


# The prices read on the AWS pricing page itself (stored copies read 2026-12-08), with the words that page states:
# https://aws.amazon.com/kms/pricing/ ("$1/month (prorated hourly)", no region qualifier) and
# https://aws.amazon.com/jp/privatelink/pricing/ (interface endpoints, first 1 PB processed in a Region: USD 0.01/GB).
# Every other at-rest price was checked against third-party copies of its page only.
CONFIRMED = {"kms_key_month": "costs $1/month (prorated hourly)", "interface_endpoint_gb": "USD 0.01 per GB"}


def test_only_the_prices_read_on_the_aws_page_itself_are_marked_confirmed_and_they_quote_it() -> None:
    assert BOOK.at_rest is not None
    for region, prices in BOOK.at_rest.regions.items():
        assert {key for key, price in prices.items() if price.confirmed} == set(CONFIRMED), region
        for key, quote in CONFIRMED.items():
            source = prices[key].source
            assert quote in source, (region, key)
            assert "confirmed on the AWS page itself, read 2026-12-08" in source, (region, key)
            assert "re-check" not in source, (region, key)


def test_a_price_checked_against_third_party_copies_only_says_re_check_it() -> None:
    assert BOOK.at_rest is not None
    for region, prices in BOOK.at_rest.regions.items():
        for key, price in prices.items():
            if not price.confirmed:
                assert "against third-party copies of the page only" in price.source, (region, key)
                assert price.source.endswith("re-check it"), (region, key)


def test_the_operations_guide_names_what_was_confirmed_where() -> None:
    guide = (Path(__file__).parents[3] / "docs" / "operations.md").read_text(encoding="utf-8")
    prices = guide.split("- **Prices.**", 1)[1].split("\n- **", 1)[0]
    assert len(CONFIRMED) == 2
    assert "Two were read on the AWS page itself" in prices
    for page in ("https://aws.amazon.com/kms/pricing/", "https://aws.amazon.com/privatelink/pricing/"):
        assert page in prices
    assert 're-check it"' in prices


def test_the_estimate_names_the_prices_still_to_re_check() -> None:
    estimate = at_rest_cost({"net": NETWORK, "cluster": CLUSTER}, region="us-east-1", book=BOOK)
    [line] = [note for note in estimate.assumptions if "third-party copies" in note]
    assert "re-check" in line
    for key in ("eks_cluster_hour", "nat_gateway_hour", "public_ipv4_hour", "interface_endpoint_az_hour"):
        assert key in line
    for key in CONFIRMED:
        assert key not in line


def test_a_region_without_prices_is_refused_by_name() -> None:
    with pytest.raises(CostError, match=r"no at-rest prices for region 'eu-west-1' \(priced: us-east-1, us-west-2\)"):
        at_rest_cost({"net": NETWORK}, region="eu-west-1", book=BOOK)


def test_an_idle_instance_without_a_price_is_refused() -> None:
    # ml.g5.8xlarge is priced in us-east-1 only: a group that idles at 1 in us-west-2 cannot be priced.
    with pytest.raises(CostError, match=r"no hourly price for 'ml.g5.8xlarge' in region 'us-west-2'"):
        at_rest_cost({"cluster": CLUSTER}, region="us-west-2", book=BOOK)
