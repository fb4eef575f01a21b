"""What `cdk destroy` does with what runs produced (issue 11, defect 12).

Source: Amazon SageMaker API Reference, "DeleteModelPackageGroup" (fails with ConflictException while the group is
in use) and SageMaker Developer Guide, "Delete a Model Group" (a group's model versions must be deleted first): a
model package group holding the models serverless runs registered cannot be deleted by CloudFormation, so the stack
deletion would stop there. The group is retained (documented in README "Destroying") and adopted by a redeploy.
"""

from __future__ import annotations

import json
from typing import Any

from aws_cdk.assertions import Template

from stacks.app_builder import Deployment
from tests.conftest import make_app


def _groups(deployment: Deployment) -> dict[str, Any]:
    assert deployment.backends is not None
    return dict(Template.from_stack(deployment.backends).find_resources("AWS::SageMaker::ModelPackageGroup"))


def test_the_model_package_group_is_retained_on_delete(deployment: Deployment) -> None:
    ((_, group),) = _groups(deployment).items()
    assert group["Properties"]["ModelPackageGroupName"] == "mtrl-serverless"
    assert group["DeletionPolicy"] == "Retain"
    assert group["UpdateReplacePolicy"] == "Retain"


def test_a_redeploy_adopts_the_retained_group_instead_of_colliding_with_its_name() -> None:
    _, deployment = make_app({"serverless_adopt_model_package_group": True})
    assert _groups(deployment) == {}
    assert deployment.backends is not None
    arn = deployment.backends.resolve(deployment.backends.model_package_group_arn)
    rendered = json.dumps(arn)
    assert ":model-package-group/mtrl-serverless" in rendered
    # The pipeline's serverless adapter is told the same group.
    pipeline = Template.from_stack(deployment.pipeline).to_json()["Resources"]
    variables = [
        r["Properties"].get("Environment", {}).get("Variables", {})
        for r in pipeline.values()
        if r["Type"] == "AWS::Lambda::Function"
    ]
    settings = [json.dumps(v["MTRL_BACKEND_SETTINGS"]) for v in variables if "MTRL_BACKEND_SETTINGS" in v]
    assert any("model-package-group/mtrl-serverless" in s for s in settings)
