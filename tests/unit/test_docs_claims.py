"""Claims in the README and docs/ that code can check (issue 38 item 15): each test reads the sentence a user reads
and the code that decides it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from mtrl.backends.verl.catalog import check_catalog_prefix
from mtrl.cli.demo.synth import SYNTH_CONTEXT
from mtrl.cli.eval_cmd import SPLITS
from mtrl.contracts.hub import HUB_MODEL_ID, HUB_REVISION, HubNameError, check_model_id, check_revision
from mtrl.settings import load_settings

REPO_ROOT = Path(__file__).resolve().parents[2]


def _text(name: str) -> str:
    return " ".join((REPO_ROOT / name).read_text(encoding="utf-8").split())


def _sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.;])\s", text)


def test_every_split_file_a_readme_eval_command_names_exists_from_the_repository_root() -> None:
    commands = [line for line in (REPO_ROOT / "README.md").read_text().splitlines() if line.startswith("mtrl eval ")]
    assert commands
    for command in commands:
        words = shlex.split(command.split("#")[0])
        for index, word in enumerate(words[:-1]):
            if word == "--split":
                split = words[index + 1]
                assert split in SPLITS or (REPO_ROOT / split).is_file(), command


def test_env_try_exits_1_for_a_flat_reward_only_with_strict() -> None:
    for name in ("docs/extending.md", "README.md"):
        for sentence in _sentences(_text(name)):
            if "env try" in sentence and re.search(r"exits? 1 when the (aggregate )?reward is flat", sentence):
                assert "--strict" in sentence, f"{name}: {sentence}"


def test_what_emulator_md_says_the_demos_context_sets_it_sets() -> None:
    for sentence in _sentences(_text("docs/emulator.md")):
        if "demo's context" in sentence:
            for key, value in re.findall(r"`([a-z_]+)=([^`]+)` in the demo's context", sentence):
                assert SYNTH_CONTEXT.get(key) == value, sentence
            assert "run_backend=" not in sentence or "run_backend" in SYNTH_CONTEXT, sentence


def test_your_own_vpc_names_the_subnet_tags_cdk_warns_about() -> None:
    # aws-cdk-lib aws-eks-v2/lib/cluster.js (tagSubnets) warns for an imported subnet it cannot tag.
    section = _text("docs/extending.md").split("## Your own VPC", 1)[1].split("## ", 1)[0]
    assert "kubernetes.io/role/internal-elb" in section
    assert "kubernetes.io/role/elb" in section
    assert "clusterMustManuallyTagSubnet" in section


def test_the_set_up_time_says_it_depends_on_a_local_cpu_torch_wheel() -> None:
    setup = _text("README.md").split("## The two commands", 1)[1].split("| command |", 1)[0]
    assert "CPU build of torch" in setup
    assert "PIP_FIND_LINKS" in setup


def _longest(pattern: str) -> list[int]:
    """The longest run each ``[...]{0,n}`` part of a hub pattern allows, its first character included."""
    return [int(most) + 1 for most in re.findall(r"\{0,(\d+)\}", pattern)]


def test_the_deploy_checklist_states_the_hub_name_grammar_the_builders_enforce() -> None:
    # mtrl/contracts/hub.py decides what `mtrl model import` takes; the checklist is where an operator reads it.
    text = _text("docs/operations.md")
    (sentence,) = [s for s in _sentences(text) if "a hub id is" in s]
    assert _longest(HUB_MODEL_ID) == [96, 96]
    assert "each part 1–96 characters" in sentence
    (revision_most,) = _longest(HUB_REVISION)
    assert f"1–{revision_most} such characters" in text
    check_model_id(f"{'a' * 96}/{'b' * 96}")
    check_revision("r" * revision_most)
    refused = re.search(r"give a branch like `([^`]+)` or `([^`]+)` by its commit", text)
    assert refused, "the checklist names no example of a revision to give by its commit"
    for revision in refused.groups():
        with pytest.raises(HubNameError):
            check_revision(revision)
    for model_id in ("org/model\n", "org/../model", "org/" + "m" * 97, "-org/model"):
        with pytest.raises(HubNameError):
            check_model_id(model_id)


def test_the_reserved_prefix_examples_are_prefixes_the_builders_refuse() -> None:
    # SSM API reference, PutParameter Name: "can't be prefixed with 'aws' or 'ssm' (case-insensitive)".
    sentence = _text("docs/operations.md").split("cannot keep a catalog", 1)[0].rsplit("SSM reserves", 1)[1]
    examples = re.findall(r"`([a-z][a-z0-9-]+)`", sentence.split("so a deployment whose prefix starts so", 1)[1])
    assert len(examples) >= 2, sentence
    for prefix in examples:
        assert load_settings({"prefix": prefix}, environ={}).prefix == prefix  # a prefix a deployment may have
        with pytest.raises(ValueError, match="SSM reserves"):
            check_catalog_prefix(prefix)
    check_catalog_prefix("mtrl")


def test_every_construct_extending_md_lists_is_defined_in_the_module_it_names() -> None:
    # docs/extending.md "Composing the constructs": a row named `backend_roles.py`, a module that does not exist.
    section = (REPO_ROOT / "docs/extending.md").read_text(encoding="utf-8").split("## Composing the constructs", 1)[1]
    rows = [line for line in section.split("\n\n", 3)[2].splitlines() if line.startswith("| `")]
    assert len(rows) >= 8, rows
    for row in rows:
        names, modules = (re.findall(r"`([^`]+)`", cell) for cell in row.split("|")[1:3])
        paths = [REPO_ROOT / (m if "/" in m else f"stacks/constructs/{m}") for m in modules if m.endswith(".py")]
        assert all(path.is_file() for path in paths if "*" not in path.name), row
        files = [found for path in paths for found in sorted(path.parent.glob(path.name))]
        sources = "".join(path.read_text(encoding="utf-8") for path in files)
        for name in names:
            assert re.search(rf"^(class|def) {name}\b", sources, re.MULTILINE), (name, row)
