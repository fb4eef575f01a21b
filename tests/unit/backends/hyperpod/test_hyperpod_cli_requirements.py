"""The HyperPod CLI's declared requirements hold in the runner's lock (issue 10, defect 3 and item 8).

The image installs the CLI copied into docker/nova-runner/hyperpod-cli/ with --no-deps on top of
requirements/nova-runner.txt and then runs `pip check`, so every requirement the CLI declares must already be pinned
there. requirements/hyperpod-cli.in records them as read from the public release_v2 CLI (its header names the
repository, branch, file and commit); this test checks them against the lock with `packaging`, as pip does. The lock
once had omegaconf 2.4.0, pyyaml 6.0.4 and no hydra-core, and the image build stopped at `pip check`.
tests/contract/test_hyperpod_cli_env.py checks the installed .venv-nova itself.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[4]
REQUIREMENTS = ROOT / "requirements"
CLI_REQUIREMENTS = REQUIREMENTS / "hyperpod-cli.in"
LOCK = REQUIREMENTS / "nova-runner.txt"
CLI_COPY = ROOT / "docker/nova-runner/hyperpod-cli"
# The runner image: python:3.12-slim-bookworm on linux/amd64 (docker/nova-runner/Dockerfile).
IMAGE_ENVIRONMENT = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
                     "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
                     "platform_python_implementation": "CPython", "os_name": "posix"}  # fmt: skip


def read_requirements(path: Path) -> list[Requirement]:
    """The requirement lines of a requirements file (no options or includes allowed: this file holds facts)."""
    requirements = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            assert not line.startswith("-"), f"{path.name}: only requirements, not options: {line!r}"
            requirements.append(Requirement(line))
    return requirements


def locked_versions(text: str) -> dict[str, Version]:
    """{canonical name: version} of every `name==version` line of a uv-compiled lock."""
    pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", text, re.MULTILINE)
    return {canonicalize_name(name): Version(version) for name, version in pins}


def unsatisfied(requirements: list[Requirement], lock_text: str) -> list[str]:
    """Each requirement the lock does not satisfy (applicable to the image's Python), with what the lock has."""
    locked = locked_versions(lock_text)
    problems = []
    for requirement in requirements:
        if requirement.marker is not None and not requirement.marker.evaluate(IMAGE_ENVIRONMENT):
            continue
        version = locked.get(canonicalize_name(requirement.name))
        if version is None:
            problems.append(f"{requirement}: not in the lock")
        elif not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{requirement}: the lock has {version}")
    return problems


def declared_requirements(source: Path) -> list[Requirement]:
    """The install requirements of a Python source tree, read without running its build (setup.py is parsed: the CLI's
    runs `git submodule update --remote` when executed). pyproject.toml [project].dependencies, else setup.py's
    `install_requires=[...]` literal in its setup() call."""
    pyproject = source / "pyproject.toml"
    if pyproject.exists():
        dependencies = tomllib.loads(pyproject.read_text()).get("project", {}).get("dependencies")
        if dependencies is not None:
            return [Requirement(item) for item in dependencies]
    setup_py = source / "setup.py"
    assert setup_py.exists(), f"{source}: neither [project].dependencies in pyproject.toml nor a setup.py"
    for node in ast.walk(ast.parse(setup_py.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "setup":
            for keyword in node.keywords:
                if keyword.arg == "install_requires":
                    items = ast.literal_eval(keyword.value)
                    return [Requirement(item.strip()) for item in items]
            return []
    raise AssertionError(f"{setup_py}: no setup() call")


def test_the_requirements_name_where_they_were_read() -> None:
    header = "\n".join(line for line in CLI_REQUIREMENTS.read_text().splitlines() if line.startswith("#"))
    assert "aws/sagemaker-hyperpod-cli" in header
    assert "branch release_v2" in header
    assert "setup.py" in header
    assert re.search(r"commit [0-9a-f]{40}\b", header)
    names = {canonicalize_name(requirement.name) for requirement in read_requirements(CLI_REQUIREMENTS)}
    # What `hyperpod start-job`'s recipes launcher imports (hydra, omegaconf) and the CLI itself (click, kubernetes).
    assert {"hydra-core", "omegaconf", "click", "kubernetes", "pyyaml", "zstandard"} <= names


def test_the_lock_satisfies_every_requirement_of_the_hyperpod_cli() -> None:
    # Failed before: hydra-core==1.3.2 not in the lock, omegaconf==2.3 vs 2.4.0, pyyaml==6.0.2 vs 6.0.4, click==8.1.7
    # vs 8.5.1, requests, tqdm, zstandard, and the CLI's test tools missing.
    assert unsatisfied(read_requirements(CLI_REQUIREMENTS), LOCK.read_text()) == []


def test_the_lock_is_compiled_from_the_cli_requirements() -> None:
    # `make lock` keeps them: nova-runner.in includes the file, so a re-lock cannot drop a CLI pin.
    lines = [line.strip() for line in (REQUIREMENTS / "nova-runner.in").read_text().splitlines()]
    assert "-r hyperpod-cli.in" in lines
    assert "-r hyperpod-cli.in" in LOCK.read_text()  # uv's annotations name the file each CLI pin comes from


def test_an_unsatisfied_pin_is_named_with_what_the_lock_has() -> None:
    lock = "omegaconf==2.4.0          # via sagemaker-core\npyyaml==6.0.2\n"
    requirements = [Requirement("omegaconf==2.3"), Requirement("pyyaml==6.0.2"), Requirement("hydra-core==1.3.2"),
                    Requirement("pywin32==306; sys_platform == 'win32'")]  # fmt: skip
    assert unsatisfied(requirements, lock) == [
        "omegaconf==2.3: the lock has 2.4.0",
        "hydra-core==1.3.2: not in the lock",
    ]
    # PEP 440: `==2.3` matches 2.3.0 (zero padding), which is what the lock holds for omegaconf.
    assert unsatisfied([Requirement("omegaconf==2.3")], "omegaconf==2.3.0\n") == []


def test_declared_requirements_are_read_without_running_setup_py(tmp_path: Path) -> None:
    # The shape of the release_v2 setup.py: a setup() call with an install_requires list (one entry has a trailing
    # space) next to code that must not run.
    (tmp_path / "setup.py").write_text(
        "import subprocess\n"
        "from setuptools import setup\n"
        "subprocess.call(['false'])\n"
        "setup(name='x', install_requires=['click==8.1.7', 'botocore>=1.35.6 ', 'omegaconf==2.3'])\n"
    )
    (tmp_path / "pyproject.toml").write_text("[tool.black]\nline-length = 88\n")  # no [project]: setup.py decides
    assert [str(r) for r in declared_requirements(tmp_path)] == ["click==8.1.7", "botocore>=1.35.6", "omegaconf==2.3"]
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["hydra-core==1.3.2"]\n')
    assert [str(r) for r in declared_requirements(tmp_path)] == ["hydra-core==1.3.2"]


def test_a_copied_hyperpod_cli_fits_the_lock_and_the_repository_ships_none() -> None:
    # A subscriber's copy may pin differently from the public release_v2 line: this says which pins, before a
    # `docker build` stops at `pip check`. Without a copy, the folder holds only its README (the CLI is never
    # committed here: it is the subscriber's, fetched by them).
    if (CLI_COPY / "setup.py").exists() or (CLI_COPY / "pyproject.toml").exists():
        assert unsatisfied(declared_requirements(CLI_COPY), LOCK.read_text()) == []
    else:
        assert sorted(path.name for path in CLI_COPY.iterdir()) == ["README.md"]


def test_the_cli_readme_names_the_requirements_file_and_the_commit_they_were_read_at() -> None:
    readme = (CLI_COPY / "README.md").read_text()
    commit = re.search(r"commit ([0-9a-f]{40})\b", CLI_REQUIREMENTS.read_text())
    assert commit
    assert commit.group(1) in readme
    assert "requirements/hyperpod-cli.in" in readme
    assert "which the lock does not hold" not in readme  # it once said the build would stop at `pip check`
