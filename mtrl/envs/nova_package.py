"""Package an mtrl environment the way the Nova Forge SDK installs a ``CustomEnvironment`` (``s3_uri=…``).

What the SDK expects (amzn-nova-forge 1.4.10): ``CustomEnvironment.package_and_upload()`` tars the environment
folder with ``arcname=<env_id>``, so the archive's top folder is ``<env_id>/``; ``CustomEnvironment.validate()``
wants a ``pyproject.toml`` there and a ``def load_environment`` in a root-level ``.py`` file, ``src/`` or
``<env_id with - → _>/``; ``CommonInfraCommands._build_setup_commands`` then runs
``pip install -e ./<env_id>`` and ``import <env_id with - → _>``.

Our environments live in the ``environments`` package and import ``mtrl.contracts.environment``,
``mtrl.envs.verifiers_adapter`` and ``mtrl.sandbox``, so the package carries those modules and a top-level module
``<module>`` whose ``load_environment`` is the environment's. ``verifiers`` itself is not a dependency: the SDK's
environment venv has the starter kit's fork (``amzn-agi-verifiers``). The archive is deterministic (sorted entries,
fixed mtimes and owners), so its SHA-256 names it: ``nova-envs/<env_id>/<sha256>.tar.gz`` under the data bucket.
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from mtrl.envs.registry import BUILTIN_DIR, CUSTOM_DIR

REPO_ROOT = Path(__file__).resolve().parents[2]
# The parts of mtrl an environment's code imports: the contract (and the episode deadline the driver and the sandbox
# share), the verifiers adapter, the sandbox and the building blocks (tools, episode state, execution, scoring,
# normalise; scoring reuses signal_health, which writes with emf).
# The package's mtrl/envs/__init__.py is a stub, so environments import the blocks from their modules (mtrl.envs.tools).
MTRL_MODULES = (
    "mtrl/contracts/__init__.py",
    "mtrl/contracts/deadline.py",
    "mtrl/contracts/environment.py",
    "mtrl/envs/rollout.py",
    "mtrl/envs/verifiers_adapter.py",
    "mtrl/envs/tools.py",
    "mtrl/envs/episode_state.py",
    "mtrl/envs/execution.py",
    "mtrl/envs/scoring.py",
    "mtrl/envs/normalise.py",
    "mtrl/health/__init__.py",
    "mtrl/health/signal_health.py",
    "mtrl/health/emf_document.py",
    "mtrl/sandbox",
)
S3_PREFIX = "nova-envs"
_ENV_ID = re.compile(r"^[a-zA-Z0-9_-]+$")  # validate_env_id in amzn_nova_forge.validation.rft_multiturn_validator


@dataclass(frozen=True)
class NovaPackage:
    env_id: str
    archive: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.archive).hexdigest()

    @property
    def key(self) -> str:
        return f"{S3_PREFIX}/{self.env_id}/{self.sha256}.tar.gz"

    def uri(self, bucket: str) -> str:
        return f"s3://{bucket}/{self.key}"


def _pyproject(env_id: str, module: str) -> str:
    return (
        "[build-system]\n"
        'requires = ["setuptools>=68"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        "[project]\n"
        f'name = "{env_id}"\n'
        'version = "0.0.0"\n'
        f'description = "mtrl environment {env_id}, packaged for Nova Forge (mtrl.envs.nova_package)"\n'
        'requires-python = ">=3.12"\n'
        "dependencies = []  # verifiers comes from the starter kit (amzn-agi-verifiers)\n\n"
        "[tool.setuptools]\n"
        f'py-modules = ["{module}"]\n\n'
        "[tool.setuptools.packages.find]\n"
        'include = ["environments*", "mtrl*"]\n'
    )


def _shim(env_id: str) -> str:
    return (
        f'"""Nova Forge entry module for the mtrl environment {env_id} (the SDK imports it by this name)."""\n\n'
        "from typing import Any\n\n\n"
        "def load_environment(**kwargs: Any) -> Any:\n"
        "    # A def, not a re-export: CustomEnvironment.validate() looks for the text 'def load_environment'.\n"
        f"    from environments.{env_id} import load_environment as load\n\n"
        "    return load(**kwargs)\n"
    )


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uid, info.gid = len(data), 0, 0o644, 0, 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def _files(root: Path, relative: str) -> list[tuple[str, bytes]]:
    path = root / relative
    paths = [path] if path.is_file() else sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts)
    return [(str(p.relative_to(root)), p.read_bytes()) for p in paths]


def build_package(env_id: str, *, root: Path = REPO_ROOT, custom: bool = False) -> NovaPackage:
    """The ``.tar.gz`` for ``environments/<env_id>`` (``custom``: ``custom-environments/<env_id>``, packaged as
    ``environments/<env_id>`` so the entry module imports both alike); no network, no Docker: built at synth time."""
    if not _ENV_ID.match(env_id):
        raise ValueError(f"environment id '{env_id}': only letters, digits, '-' and '_' (the SDK's rule)")
    module = env_id.replace("-", "_")
    folder = CUSTOM_DIR if custom else BUILTIN_DIR
    source = root / folder / module
    if not (source / "__init__.py").is_file():
        raise ValueError(f"environment '{env_id}' has no package {folder}/{module}/")
    if "def load_environment" not in (source / "__init__.py").read_text():
        raise ValueError(f"{folder}/{module}/__init__.py defines no load_environment()")
    files: list[tuple[str, bytes]] = [
        ("pyproject.toml", _pyproject(env_id, module).encode()),
        (f"{module}.py", _shim(module).encode()),
        ("environments/__init__.py", (root / "environments/__init__.py").read_bytes()),
        *(
            (f"environments/{module}/{name.split('/', 2)[2]}", data)
            for name, data in _files(root, f"{folder}/{module}")
        ),
        ("mtrl/__init__.py", b'"""The parts of mtrl an environment imports."""\n'),
        ("mtrl/envs/__init__.py", b'"""Environment contract and verifiers adapter."""\n'),
    ]
    for relative in MTRL_MODULES:
        files.extend(_files(root, relative))
    # Sample data an environment reads (e.g. ask_to_code/sample) travels too.
    files.extend(
        (f"environments/{module}/{p.relative_to(source)}", p.read_bytes())
        for p in sorted(source.rglob("*"))
        if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts
    )
    buffer = io.BytesIO()
    # gzip's header carries a timestamp: mtime=0 keeps the bytes (and the content address) stable.
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT, compresslevel=9) as tar:
        for name, data in sorted(set(files)):
            _add(tar, f"{env_id}/{name}", data)
    return NovaPackage(env_id, _deterministic_gzip(buffer.getvalue()))


def _deterministic_gzip(data: bytes) -> bytes:
    """Zero the gzip header's MTIME (bytes 4-8), which tarfile sets to the current time."""
    return data[:4] + b"\x00\x00\x00\x00" + data[8:]
