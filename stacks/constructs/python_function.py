"""Python Lambda functions packaged at synth time without Docker.

A function's code asset is ``lambda/<name>/`` (its handler) plus the shared ``mtrl`` package and the
reward environments, copied into ``.build/lambda-src/`` (one source for Lambdas, workers and the CLI).
Third-party dependencies (Powertools, pydantic) come from one shared layer built by ``make setup`` into
``.build/lambda-deps/`` for the Lambda platform (cp314, aarch64); boto3 comes from the runtime.

Usage::

    fn = PythonFunction(self, "Validate", handler_dir="validate", description="...", environment={...},
                        encryption_key=key, log_retention_days=365, log_group_name="/mtrl/pipeline/validate")
    fn.function.add_environment(...)   # a plain aws_lambda.Function
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Mapping
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from constructs import Construct, IConstruct

from stacks.constructs.encrypted_log_group import EncryptedLogGroup
from stacks.constructs.kubernetes_access import KubernetesClientPlacement

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = REPO_ROOT / ".build"
LAYER_DIR = BUILD_DIR / "lambda-deps"
STAGING_DIR = BUILD_DIR / "lambda-src"
RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
# Copied next to every handler: the shared library and the environment packages it loads.
SHARED_DIRS = ("mtrl", "environments", "custom-environments")
_SKIPPED_DIRS = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
_LAYER_ID = "MtrlPythonDependencies"


class MissingBuildError(RuntimeError):
    pass


def _tree_files(root: Path, *, skip_caches: bool) -> list[tuple[str, str]]:
    """(path, path relative to ``root``) of every file under ``root``, sorted; ``skip_caches`` leaves out
    interpreter and tool caches. os.walk, not Path.rglob: a synth lists thousands of files."""
    files = []
    for directory, subdirs, names in os.walk(root):
        if skip_caches:
            subdirs[:] = [d for d in subdirs if d not in _SKIPPED_DIRS and not d.endswith(".egg-info")]
        relative_dir = os.path.relpath(directory, root)
        for name in names:
            if skip_caches and name.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(directory, name)
            if os.path.isfile(path):
                files.append((path, os.path.normpath(os.path.join(relative_dir, name))))
    return sorted(files, key=lambda pair: pair[1].split(os.sep))


_FILE_DIGESTS: dict[tuple[str, int, int], bytes] = {}


def _file_digest(path: str) -> bytes:
    """A file's SHA-256, read once per process while its size and modification time stay the same (every function
    stages the same shared packages, and each synth of a process used to read them all again)."""
    stat = os.stat(path)
    key = (path, stat.st_size, stat.st_mtime_ns)
    digest = _FILE_DIGESTS.get(key)
    if digest is None:
        digest = _FILE_DIGESTS[key] = hashlib.sha256(Path(path).read_bytes()).digest()
    return digest


def _content_hash(sources: list[tuple[str, str]]) -> str:
    """The hash of a tree's content: each file's relative path and content digest."""
    digest = hashlib.sha256()
    for path, relative in sources:
        digest.update(relative.encode() + b"\0" + _file_digest(path) + b"\0")
    return digest.hexdigest()


def _staged_code(handler_dir: str, *, repo_root: Path, staging_dir: Path) -> tuple[Path, str]:
    handler_root = repo_root / "lambda" / handler_dir
    if not (handler_root / "handler.py").is_file():
        raise FileNotFoundError(f"{handler_root}/handler.py not found (one folder per function under lambda/)")
    sources = _tree_files(handler_root, skip_caches=True)
    for shared in SHARED_DIRS:
        base = repo_root / shared
        if base.is_dir():
            sources += [
                (path, os.path.join(shared, relative)) for path, relative in _tree_files(base, skip_caches=True)
            ]
    content_hash = _content_hash(sources)
    target = staging_dir / f"{handler_dir}-{content_hash[:16]}"
    if target.is_dir():
        return target, content_hash
    staging_dir.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{handler_dir}-", dir=staging_dir))
    for path, relative in sources:
        destination = temporary / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, destination)
    try:
        os.rename(temporary, target)
    except OSError:  # another process staged the same content first
        shutil.rmtree(temporary, ignore_errors=True)
    _remove_stale(staging_dir, handler_dir, keep=target)
    return target, content_hash


def stage_function_code(handler_dir: str, *, repo_root: Path = REPO_ROOT, staging_dir: Path = STAGING_DIR) -> Path:
    """Assemble ``lambda/<handler_dir>`` + shared packages into a content-addressed directory; return it.

    Content addressing keeps the asset hash stable across synths and makes concurrent synths (parallel
    test workers) safe: each writes a private temp dir and renames it into place atomically.
    """
    return _staged_code(handler_dir, repo_root=repo_root, staging_dir=staging_dir)[0]


def function_code(handler_dir: str) -> lambda_.Code:
    """The function's staged code as an asset hashed by its content hash, already known from staging: CDK then
    skips fingerprinting the directory again (it would read every file of it on every synth)."""
    code_dir, content_hash = _staged_code(handler_dir, repo_root=REPO_ROOT, staging_dir=STAGING_DIR)
    return lambda_.Code.from_asset(str(code_dir), asset_hash=content_hash)


def _remove_stale(staging_dir: Path, handler_dir: str, *, keep: Path, older_than_seconds: float = 3600) -> None:
    """Drop earlier stagings of this handler (an hour old, so a concurrent synth never loses its copy)."""
    cutoff = time.time() - older_than_seconds
    for old in staging_dir.glob(f"{handler_dir}-*"):
        if old != keep and old.is_dir() and old.stat().st_mtime < cutoff:
            shutil.rmtree(old, ignore_errors=True)


def _layer_hash() -> str:
    return _content_hash(_tree_files(LAYER_DIR, skip_caches=False))


# The layer's hash for each app (weakly held), with the folder it hashed: the pipeline and backends stacks each create
# the layer, and a hash walks and stats its thousands of files (about 0.2 CPU-s even with every digest known).
_APP_LAYER_HASHES: weakref.WeakKeyDictionary[IConstruct, tuple[Path, str]] = weakref.WeakKeyDictionary()


def _app_layer_hash(scope: Construct) -> str:
    root = scope.node.root
    known = _APP_LAYER_HASHES.get(root)
    if known is None or known[0] != LAYER_DIR:
        known = _APP_LAYER_HASHES[root] = (LAYER_DIR, _layer_hash())
    return known[1]


def dependencies_layer(scope: Construct) -> lambda_.ILayerVersion:
    """The stack's one shared dependency layer (created on first use)."""
    stack = cdk.Stack.of(scope)
    existing = stack.node.try_find_child(_LAYER_ID)
    if isinstance(existing, lambda_.LayerVersion):
        return existing
    if not (LAYER_DIR / "python").is_dir():
        raise MissingBuildError(
            f"{LAYER_DIR}/python is missing: the Lambda dependency layer is built by `make setup` "
            "(it downloads Powertools and pydantic wheels for Python 3.14 / arm64); run `make setup`, then synth again"
        )
    return lambda_.LayerVersion(
        stack,
        _LAYER_ID,
        # Hashed here (each file read once per process) rather than by CDK, which reads all of the layer's
        # thousands of files (about 170 MB) again for every stack and every synth.
        code=lambda_.Code.from_asset(str(LAYER_DIR), asset_hash=_app_layer_hash(stack)),
        compatible_runtimes=[RUNTIME],
        compatible_architectures=[ARCHITECTURE],
        description="mtrl Lambda dependencies (aws-lambda-powertools, pydantic) from requirements/lambda.txt",
    )


class PythonFunction(Construct):
    """Attributes: ``function`` (aws_lambda.Function), ``log_group``."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        handler_dir: str,
        description: str,
        encryption_key: kms.IKey,
        log_retention_days: int,
        log_group_name: str,
        environment: Mapping[str, str] | None = None,
        timeout: cdk.Duration | None = None,
        memory_size: int = 512,
        reserved_concurrent_executions: int | None = None,
        function_name: str | None = None,
        role: iam.IRole | None = None,
        with_dependency_layer: bool = True,
        placement: KubernetesClientPlacement | None = None,
    ) -> None:
        """``placement``: run in the VPC's private subnets with that placement's security group (a function that
        calls the Kubernetes API of the cluster this deployment creates: stacks/constructs/kubernetes_access.py)."""
        super().__init__(scope, id_)
        self.log_group = EncryptedLogGroup(
            self,
            "Logs",
            log_group_name=log_group_name,
            encryption_key=encryption_key,
            retention_days=log_retention_days,
        ).log_group
        self.function = lambda_.Function(
            self,
            "Function",
            function_name=function_name,
            description=description,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler="handler.handler",
            code=function_code(handler_dir),
            # The embedded emulator runs handlers on its own interpreter, which already has these packages
            # for its platform; the layer's cp314/arm64 binaries would shadow them there.
            layers=[dependencies_layer(self)] if with_dependency_layer else None,
            timeout=timeout or cdk.Duration.minutes(1),
            memory_size=memory_size,
            environment={
                "POWERTOOLS_SERVICE_NAME": "mtrl-pipeline",
                "POWERTOOLS_LOG_LEVEL": "INFO",
                **(environment or {}),
            },
            environment_encryption=encryption_key,
            tracing=lambda_.Tracing.ACTIVE,
            log_group=self.log_group,
            reserved_concurrent_executions=reserved_concurrent_executions,
            role=role,
            vpc=placement.vpc if placement else None,
            vpc_subnets=placement.subnets if placement else None,
            security_groups=[placement.security_group] if placement else None,
        )
