"""Claims in the README and docs/ that code can check (issue 38 item 15): each test reads the sentence a user reads
and the code that decides it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from mtrl.cli.demo.synth import SYNTH_CONTEXT
from mtrl.cli.eval_cmd import SPLITS

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
