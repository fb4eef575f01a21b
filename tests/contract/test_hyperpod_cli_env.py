"""The runner's Python environment can carry the HyperPod v2 CLI (issue 10, defect 3 and item 8), checked in
.venv-nova, which installs exactly what docker/nova-runner/Dockerfile installs before the CLI itself.

The CLI is not on PyPI (the Forge-enabled build comes with the Nova Forge subscription; the public release_v2 line is on
GitHub only, which CI cannot reach), so its code is not installed here. What it needs from the environment is:
its declared requirements (requirements/hyperpod-cli.in, read from release_v2's setup.py), installed at versions that
satisfy them; the modules its commands and `hyperpod start-job`'s recipes launcher import
(`python3 <hyperpod_cli>/sagemaker_hyperpod_recipes/main.py`, a Hydra app, run with this same interpreter), importable
without warnings; and Hydra composing a recipe the way that launcher does. `pip check` is
tests/contract/test_pip_check.py. In CI a missing .venv-nova fails; elsewhere these tests are skipped with the reason.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.contract.tier import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
NOVA_PYTHON = ROOT / ".venv-nova" / "bin" / "python"
CLI_REQUIREMENTS = ROOT / "requirements" / "hyperpod-cli.in"

# Third-party modules imported by the CLI's own code (src/hyperpod_cli, release_v2 at abcdc77b) and, on the k8s path
# of `start-job`, by the recipes launcher (aws/sagemaker-hyperpod-recipes 0700d223: main.py, launcher/, utils/) and
# NeMo-Framework-Launcher's nemo_launcher core and utils (3d41c31c), listed from their import statements.
CLI_IMPORTS = ["boto3", "botocore", "click", "kubernetes", "pydantic", "ratelimit", "requests", "tabulate", "yaml"]
LAUNCHER_IMPORTS = ["hydra", "omegaconf", "pydantic", "yaml", "boto3", "requests", "tqdm", "zstandard"]

if not NOVA_PYTHON.exists():
    skip_or_fail(".venv-nova is missing: run `make nova` (needs Python >= 3.12)", module_level=True)


def nova(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(NOVA_PYTHON), *args], capture_output=True, text=True, check=False, cwd=cwd)


CHECK_INSTALLED = """
import json, sys
from importlib.metadata import PackageNotFoundError, version
from packaging.requirements import Requirement
problems = []
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    requirement = Requirement(line)
    try:
        installed = version(requirement.name)
    except PackageNotFoundError:
        problems.append(f"{requirement}: not installed")
        continue
    if not requirement.specifier.contains(installed, prereleases=True):
        problems.append(f"{requirement}: {installed} installed")
print(json.dumps(problems))
"""


def test_every_cli_requirement_is_installed_at_a_version_it_accepts() -> None:
    result = nova("-c", CHECK_INSTALLED, str(CLI_REQUIREMENTS))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


@pytest.mark.parametrize("modules", [CLI_IMPORTS, LAUNCHER_IMPORTS], ids=["cli", "recipes-launcher"])
def test_what_the_cli_and_its_launcher_import_imports_without_warnings(modules: list[str]) -> None:
    # -W error: a warning at import is printed by every `hyperpod` call (requests 2.32.4 with chardet 7 raised
    # RequestsDependencyWarning until nova-runner.in held chardet below 6).
    result = nova("-W", "error", "-c", "; ".join(f"import {module}" for module in modules))
    assert result.returncode == 0, result.stderr


def test_hydra_composes_a_recipe_the_way_the_launcher_does(tmp_path: Path) -> None:
    # The recipes launcher is a @hydra.main app: `recipes=<group path>` picks a recipe from a config group,
    # key=value overrides follow, and its config interpolates the chosen recipe (`${hydra:runtime.choices.recipes}`).
    conf = tmp_path / "conf"
    (conf / "recipes" / "fine-tuning" / "nova").mkdir(parents=True)
    (conf / "config.yaml").write_text(
        "defaults:\n  - recipes: null\n  - _self_\n"
        "cluster_type: slurm\nbase_results_dir: null\ntraining_config: ${hydra:runtime.choices.recipes}\n"
    )
    (conf / "recipes" / "fine-tuning" / "nova" / "rft.yaml").write_text("run:\n  name: rft\n  replicas: 2\n")
    (tmp_path / "main.py").write_text(
        "import json\nimport hydra\nfrom omegaconf import OmegaConf\n\n"
        "@hydra.main(version_base=None, config_path='conf', config_name='config')\n"
        "def main(cfg):\n    print(json.dumps(OmegaConf.to_container(cfg, resolve=True)))\n\n"
        "main()\n"
    )
    result = nova(
        str(tmp_path / "main.py"),
        "recipes=fine-tuning/nova/rft",
        "cluster_type=k8s",
        f"base_results_dir={tmp_path / 'results'}",
        f"hydra.run.dir={tmp_path / 'outputs'}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "cluster_type": "k8s",
        "base_results_dir": str(tmp_path / "results"),
        "training_config": "fine-tuning/nova/rft",
        "recipes": {"run": {"name": "rft", "replicas": 2}},
    }
