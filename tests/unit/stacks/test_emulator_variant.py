"""The reduced app the embedded emulator deploys (-c emulator=true): only data + pipeline, no layer."""

from __future__ import annotations

from pathlib import Path

from aws_cdk.assertions import Match, Template

from tests.conftest import make_app


def test_emulator_variant_has_only_data_and_pipeline_without_the_dependency_layer(tmp_path: Path) -> None:
    app, deployment = make_app({"emulator": "true"}, outdir=tmp_path)
    names = {stack.stack_name for stack in app.synth().stacks}
    assert names == {"mtrl-data", "mtrl-pipeline"}
    assert deployment.network is None
    assert deployment.cluster is None
    assert deployment.reward_workers is None
    pipeline = Template.from_stack(deployment.pipeline)
    pipeline.resource_count_is("AWS::Lambda::LayerVersion", 0)
    pipeline.all_resources_properties("AWS::Lambda::Function", Match.not_({"Layers": Match.any_value()}))


def test_default_variant_functions_use_the_dependency_layer(deployment: object) -> None:
    template = Template.from_stack(deployment.pipeline)  # type: ignore[attr-defined]
    template.resource_count_is("AWS::Lambda::LayerVersion", 1)
    template.has_resource_properties("AWS::Lambda::Function", {"Layers": [Match.any_value()]})
