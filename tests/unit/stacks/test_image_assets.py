"""Every container image asset a synth stages can be built from what the repository ships (issue 36, item 1).

``cdk deploy`` builds each image asset of the cloud assembly (``dockerImages`` of every ``*.assets.json``) from its
staged context (the repository root reduced by the construct's excludes) with ``docker build``. The checks read the
staged context, not the checkout: every ``COPY``/``ADD`` source must be in it, a copied folder that holds only a
README is a placeholder unless the Dockerfile treats it as optional (``if [ -f … ]``), and a guard that fails the
build (``RUN test -f A || test -f B || { …; exit 1; }``) must find one of its files in the context.

Images the stacks do not build (the verl trainer, ``verl_image_uri``, is built by the operator) are not assets.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from mtrl.backends.hyperpod.common import parse_settings
from mtrl.contracts.backend import BackendError
from stacks.app_builder import Deployment
from stacks.constructs.nova_runner_task import hyperpod_cli_problem
from tests.unit.stacks.template_tools import shipped_backend_values

PLACEHOLDER_NAMES = {"README.md", ".gitkeep"}


@dataclass(frozen=True)
class ImageAsset:
    stack: str
    context: Path
    dockerfile: str


def image_assets(assembly: cdk.cx_api.CloudAssembly) -> list[ImageAsset]:
    """Every Docker image asset of every stack's asset manifest, with its staged build context."""
    found = []
    for manifest in Path(assembly.directory).glob("*.assets.json"):
        document = json.loads(manifest.read_text())
        for entry in document.get("dockerImages", {}).values():
            source = entry["source"]
            context = (Path(assembly.directory) / source["directory"]).resolve()
            found.append(ImageAsset(manifest.name.removesuffix(".assets.json"), context, source["dockerFile"]))
    return found


def _instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(instruction, arguments) with continuation lines joined and comments dropped."""
    logical: list[str] = []
    current = ""
    for line in dockerfile.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or not stripped:
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        logical.append(current + stripped)
        current = ""
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1] if " " in text else "") for text in logical]


def build_problems(asset: ImageAsset) -> list[str]:
    """Why ``docker build`` of the staged context would fail on a missing file (empty: it would not)."""
    dockerfile = (asset.context / asset.dockerfile).read_text()
    instructions = _instructions(dockerfile)
    problems: list[str] = []
    copied: list[tuple[str, str]] = []  # (destination folder, context folder)
    optional = " ".join(args for name, args in instructions if name == "RUN" and re.search(r"\bif \[ -[fd] ", args))
    for name, args in instructions:
        if name not in {"COPY", "ADD"}:
            continue
        words = shlex.split(args)
        if any(word.startswith("--from") for word in words):
            continue  # from another stage, not the context
        *sources, destination = [word for word in words if not word.startswith("--")]
        for source in sources:
            path = asset.context / source
            if not path.exists():
                problems.append(f"{asset.dockerfile}: COPY {source}: not in the build context")
                continue
            if path.is_dir():
                copied.append((destination.rstrip("/"), source.rstrip("/")))
                files = {entry.name for entry in path.rglob("*") if entry.is_file()}
                if files and files <= PLACEHOLDER_NAMES and destination.rstrip("/") not in optional:
                    problems.append(f"{asset.dockerfile}: COPY {source}: holds only {sorted(files)} (a placeholder)")
    for name, args in instructions:
        if name != "RUN" or not args.startswith("test "):
            continue
        alternatives = re.findall(r"test -[fd] (\S+)", args.split("{", 1)[0])
        mapped = [_in_context(asset.context, copied, alternative) for alternative in alternatives]
        if mapped and all(path is not None for path in mapped) and not any(p.exists() for p in mapped if p):
            problems.append(f"{asset.dockerfile}: RUN {args.split('{', 1)[0].strip()}: none of them is in the context")
    return problems


def _in_context(context: Path, copied: list[tuple[str, str]], image_path: str) -> Path | None:
    """Where a path of the image comes from in the build context (None: not from a COPY of a folder)."""
    target = PurePosixPath(image_path.strip("\"'"))
    for destination, source in copied:
        if target.is_relative_to(destination):
            return context / source / target.relative_to(destination)
    return None


def test_the_default_synth_builds_only_images_the_repository_can_build(
    synthesized: tuple[Deployment, cdk.cx_api.CloudAssembly],
) -> None:
    assets = image_assets(synthesized[1])
    assert {asset.dockerfile for asset in assets} == {
        "docker/reward-worker/Dockerfile",
        "docker/sessions-runner/Dockerfile",
    }
    for asset in assets:
        assert build_problems(asset) == [], asset


def test_nova_forge_adds_the_runner_image_which_needs_the_subscribers_cli(
    nova_forge_synth: tuple[Deployment, cdk.cx_api.CloudAssembly],
) -> None:
    deployment, assembly = nova_forge_synth
    assets = {asset.dockerfile: asset for asset in image_assets(assembly)}
    assert set(assets) == {
        "docker/reward-worker/Dockerfile",
        "docker/sessions-runner/Dockerfile",
        "docker/nova-runner/Dockerfile",
    }
    for dockerfile in ("docker/reward-worker/Dockerfile", "docker/sessions-runner/Dockerfile"):
        assert build_problems(assets[dockerfile]) == []
    # The checkout holds only the CLI's README (subscriber-only files): the build would fail, and the synth says so.
    runner_problems = build_problems(assets["docker/nova-runner/Dockerfile"])
    assert any("hyperpod-cli" in problem for problem in runner_problems), runner_problems
    assert deployment.backends is not None
    warnings = [
        str(metadata.data)
        for construct in deployment.backends.node.find_all()
        for metadata in construct.node.metadata
        if metadata.type == "aws:cdk:warning"
    ]
    assert any("docker/nova-runner/hyperpod-cli/ holds no Forge HyperPod CLI" in text for text in warnings)


def test_a_copied_cli_satisfies_the_runner_images_guard(
    nova_forge_synth: tuple[Deployment, cdk.cx_api.CloudAssembly], tmp_path: Path
) -> None:
    """The check is not blind: with a CLI copied into the staged context the runner image has no missing file."""
    runner = next(a for a in image_assets(nova_forge_synth[1]) if a.dockerfile == "docker/nova-runner/Dockerfile")
    context = tmp_path / "context"
    context.mkdir()
    for source in runner.context.iterdir():
        if source.name != "docker":
            (context / source.name).symlink_to(source)
    _copy_tree(runner.context / "docker", context / "docker")
    cli = context / "docker" / "nova-runner" / "hyperpod-cli"
    assert build_problems(ImageAsset(runner.stack, context, runner.dockerfile)) != []
    (cli / "pyproject.toml").write_text("[project]\nname = 'hyperpod'\n")
    assert build_problems(ImageAsset(runner.stack, context, runner.dockerfile)) == []


def _copy_tree(source: Path, target: Path) -> None:
    target.mkdir(parents=True)
    for entry in source.iterdir():
        if entry.is_dir():
            _copy_tree(entry, target / entry.name)
        else:
            (target / entry.name).write_bytes(entry.read_bytes())


def test_hyperpod_cli_problem_names_the_missing_copy(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("copy the CLI here")
    assert "holds no Forge HyperPod CLI" in str(hyperpod_cli_problem(tmp_path))
    (tmp_path / "setup.py").write_text("")
    assert hyperpod_cli_problem(tmp_path) is None


def test_the_default_synth_has_no_runner_and_a_hyperpod_run_is_refused_naming_what_to_configure(
    synthesized: tuple[Deployment, Any],
) -> None:
    deployment = synthesized[0]
    assert deployment.backends is not None
    assert deployment.backends.runner is None
    template = Template.from_stack(deployment.backends)
    template.resource_count_is("AWS::ECS::TaskDefinition", 0)
    template.resource_count_is("AWS::EKS::AccessEntry", 0)
    assert "NovaRunnerTaskDefinitionArn" not in template.to_json().get("Outputs", {})
    # No values for a backend the deployment does not deploy (tests/unit/stacks/test_undeployed_backends.py).
    hyperpod = shipped_backend_values(Template.from_stack(deployment.pipeline).to_json()).get("hyperpod", {})
    assert hyperpod == {}
    with pytest.raises(
        BackendError,
        match=r"run r-1: the hyperpod backend .* is not deployed here: set hyperpod_restricted_instance_group",
    ):
        parse_settings({**hyperpod, "run_id": "r-1"})


def test_the_readme_names_the_images_cdk_deploy_builds(
    synthesized: tuple[Deployment, cdk.cx_api.CloudAssembly],
    nova_forge_synth: tuple[Deployment, cdk.cx_api.CloudAssembly],
) -> None:
    # The README's prerequisite said "the reward worker and the Nova Forge runner" after the runner became Nova Forge's
    # only (issue 36): the images a default deploy builds are the default synth's assets, the runner a third.
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    bullet = " ".join(readme.split("**Docker at deploy time.**", 1)[1].split("\n- **", 1)[0].split())
    always, _, conditional = bullet.partition("; a third")
    default = {asset.dockerfile for asset in image_assets(synthesized[1])}
    with_nova = {asset.dockerfile for asset in image_assets(nova_forge_synth[1])}
    assert set(re.findall(r"docker/[a-z-]+/Dockerfile", always)) == default, always
    assert f"builds {['no', 'one', 'two', 'three'][len(default)]} container images" in always, always
    assert set(re.findall(r"docker/[a-z-]+/Dockerfile", conditional)) == with_nova - default, conditional
    assert "hyperpod_restricted_instance_group" in conditional
