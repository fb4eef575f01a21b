"""The verl trainer image (docker/verl-trainer/Dockerfile), checked as text: `docker build` cannot run here.

Every download is verified (the base by digest, every Python package by its hash from a lock), the lock agrees with
the contract environment's (requirements/verl.txt: what the agent-loop tests run) and with the RayJob (its Ray
version, its entry point), and the image holds what the RayJob runs.
"""

from __future__ import annotations

import ast
import re
import shlex
import sys
from pathlib import Path

import pytest

from mtrl.backends.verl import rayjob, train
from mtrl.backends.verl.config import plan_for
from mtrl.settings.verl import VerlSettings
from tests.unit.backends.hyperpod.test_nova_runner_image import build_args, dockerfile_instructions, shell_commands
from tests.unit.backends.verl.verl_support import run_context, run_settings

ROOT = Path(__file__).resolve().parents[4]
DOCKERFILE_PATH = ROOT / "docker" / "verl-trainer" / "Dockerfile"
DOCKERFILE = DOCKERFILE_PATH.read_text()
REQUIREMENTS = ROOT / "requirements"
# verl 0.9.1 validates vLLM 0.24.0, and its vllm/fsdp extras pin torch 2.11.0 (research note part B, versions table).
VLLM_VERSION = "0.24.0"
TORCH_VERSION = "2.11.0"
# The packages that make the agent loop and the trainer what the contract tests exercise: exactly the same versions.
SAME_AS_CONTRACT = (
    "verl",
    "ray",
    "transformers",
    "tensordict",
    "torchdata",
    "peft",
    "accelerate",
    "hydra-core",
    "omegaconf",
    "datasets",
    "pandas",
    "pyarrow",
    "tokenizers",
    "pydantic",
)
# vLLM 0.24.0's own ranges force these below verl.txt's versions (fastapi[standard]<0.137, numpy<2.4, …); any other
# difference fails, so a re-lock that drifts from the contract environment is seen and decided.
KNOWN_DIFFERENCES = {"cachetools", "fastapi", "importlib-metadata", "numpy", "setuptools"}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+?)(?:\s*\\)?$")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]+)")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def hashed_lock(path: Path) -> dict[str, tuple[str, list[str]]]:
    """{package: (version, sha256 digests)} of a ``--generate-hashes`` lock; fails on any unpinned line."""
    entries: dict[str, tuple[str, list[str]]] = {}
    current: str | None = None
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not line[0].isspace():
            match = _PIN.match(stripped)
            assert match, f"{path.name}: not an exact pin: {line!r}"
            current = _normal(match.group(1))
            entries[current] = (match.group(2), [])
            continue
        assert current is not None, f"{path.name}: a continuation line before any requirement: {line!r}"
        entries[current][1].extend(_HASH.findall(stripped))
    return entries


def plain_lock(path: Path) -> dict[str, str]:
    return {
        _normal(name): version
        for name, version in re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", path.read_text(), re.MULTILINE)
    }


LOCK = hashed_lock(REQUIREMENTS / "verl-trainer.txt")
BUILD_LOCK = hashed_lock(REQUIREMENTS / "verl-trainer-build.txt")
CONTRACT = plain_lock(REQUIREMENTS / "verl.txt")


def pip_installs() -> list[str]:
    return [command for command in shell_commands(DOCKERFILE) if re.match(r"(python\S* -m )?pip3? install\b", command)]


def test_the_base_image_is_pinned_by_digest() -> None:
    froms = [line for line in dockerfile_instructions(DOCKERFILE) if line.startswith("FROM ")]
    assert froms == ["FROM ${BASE_IMAGE}"], froms
    base = build_args(DOCKERFILE)["BASE_IMAGE"]
    assert re.fullmatch(r"public\.ecr\.aws/docker/library/python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", base), base


def test_every_python_package_is_hash_checked_from_a_lock() -> None:
    installs = pip_installs()
    assert len(installs) == 2, installs  # setuptools first, then the lock; mtrl is imported from /app
    installed: list[str] = []
    for command in installs:
        words = shlex.split(command)
        assert "--require-hashes" in words, command
        assert "--no-deps" in words, command  # nothing resolved at build time
        files = [words[i + 1] for i, word in enumerate(words) if word in {"--requirement", "-r"}]
        assert len(files) == 1, command
        # Nothing but options and the lock file: no package named on the command line.
        operands = [w for w in words[2:] if not w.startswith("-") and w not in files]
        assert operands == [], command
        installed.extend(files)
    assert installed == ["requirements/verl-trainer-build.txt", "requirements/verl-trainer.txt"]
    # The lock's one sdist builds without isolation, so its build backend is the hash-checked setuptools only.
    assert "--no-build-isolation" in installs[1]
    assert BUILD_LOCK.keys() == {"setuptools"}
    assert BUILD_LOCK["setuptools"][0] == LOCK["setuptools"][0]
    for lock in (LOCK, BUILD_LOCK):
        for name, (_, digests) in lock.items():
            assert digests, f"{name} has no hash"
            assert all(len(d) == 64 for d in digests), name


def test_nothing_else_is_downloaded() -> None:
    instructions = dockerfile_instructions(DOCKERFILE)
    assert not any(re.match(r"ADD\s", line) for line in instructions)  # ADD <url> is a download without a check
    for command in shell_commands(DOCKERFILE):
        assert not re.match(r"(curl|wget|git)\b", command), command
        assert not re.search(r"https?://", command), command
    # Debian packages come from the signed archive through apt, nothing else.
    apt = [c for c in shell_commands(DOCKERFILE) if c.startswith("apt-get install")]
    assert len(apt) == 1
    assert "--allow-unauthenticated" not in apt[0]


def test_the_lock_pins_the_validated_engine_and_agrees_with_the_contract_environment() -> None:
    assert LOCK["verl"][0] == "0.9.1"
    assert LOCK["vllm"][0] == VLLM_VERSION
    assert LOCK["torch"][0] == TORCH_VERSION
    # KubeRay starts the cluster with the RayJob's rayVersion: it must be the image's Ray.
    assert LOCK["ray"][0] == rayjob.RAY_VERSION == CONTRACT["ray"]
    for name in SAME_AS_CONTRACT:
        assert LOCK[name][0] == CONTRACT[name], f"{name}: image {LOCK[name][0]}, contract env {CONTRACT[name]}"
    differing = {name for name in CONTRACT.keys() & LOCK.keys() if CONTRACT[name] != LOCK[name][0]}
    assert differing == KNOWN_DIFFERENCES
    # MLflow with the SageMaker plugin (a SageMaker MLflow app ARN as the tracking URI) and the AWS SDK.
    assert {"mlflow-skinny", "sagemaker-mlflow", "boto3"} <= LOCK.keys()


def test_every_direct_requirement_of_the_lock_input_is_locked() -> None:
    wanted: set[str] = set()
    for source in ("verl-trainer.in", "verl.in"):
        for raw in (REQUIREMENTS / source).read_text().splitlines():
            line = raw.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                wanted.add(_normal(re.split(r"[\[<>=!~ ]", line, maxsplit=1)[0]))
    assert wanted - LOCK.keys() == set()


def _third_party_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return {name for name in found if name not in sys.stdlib_module_names and name not in {"mtrl", "environments"}}


def test_what_the_trainer_and_the_agent_loop_import_is_in_the_image() -> None:
    distribution = {"yaml": "pyyaml", "huggingface_hub": "huggingface-hub", "hydra": "hydra-core"}
    imports = set().union(
        *(_third_party_imports(ROOT / "mtrl/backends/verl" / f) for f in ("train.py", "agent_loop.py", "bridge.py"))
    )
    assert {"verl", "boto3", "pandas"} <= imports  # the scan sees the lazy imports too
    missing = {name for name in imports if _normal(distribution.get(name, name)) not in LOCK}
    assert missing == set()


def test_the_rayjobs_entry_point_exists_in_the_image_layout() -> None:
    settings = run_settings()
    config_map, job = rayjob.render(plan_for(settings), run_context(settings))
    words = shlex.split(job["spec"]["entrypoint"])
    assert words[:3] == ["python", "-m", "mtrl.backends.verl.train"]
    module_path = Path(*words[2].split(".")).with_suffix(".py")
    assert (ROOT / module_path).is_file()
    # The module's own parser accepts the arguments the RayJob passes, and the file is where the ConfigMap mounts.
    run_config = words[words.index("--run-config") + 1]
    mounts = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert any(run_config.startswith(m["mountPath"] + "/") for m in mounts)
    assert Path(run_config).name in config_map["data"]
    # The image copies mtrl/ into /app, which is on PYTHONPATH, so `python -m` finds the module from any directory.
    instructions = dockerfile_instructions(DOCKERFILE)
    workdirs = [line.split()[1] for line in instructions if line.startswith("WORKDIR ")]
    copies = [line.split()[1:] for line in instructions if line.startswith("COPY ")]
    assert workdirs[0] == "/app"
    assert ["mtrl/", "mtrl/"] in copies
    assert re.search(r"^\s*PYTHONPATH=/app\b", DOCKERFILE, re.MULTILINE)
    assert f"python -m {rayjob.TRAINER_MODULE} --help" in " ".join(instructions)  # the build imports it
    assert not any(line.startswith("ENTRYPOINT") for line in instructions)  # KubeRay gives the commands
    # The trainer's scratch directory exists and belongs to the image's user.
    assert str(train.WORK_DIR) == "/var/lib/mtrl-verl"
    assert "chown 10001:10001 /var/lib/mtrl-verl" in " ".join(instructions)
    assert "USER 10001" in instructions


def test_every_copied_path_exists_and_the_environments_come_along() -> None:
    copies = [line.split()[1:-1] for line in dockerfile_instructions(DOCKERFILE) if line.startswith("COPY ")]
    sources = [source for group in copies for source in group]
    for source in sources:
        assert (ROOT / source).exists(), source
    assert {"environments/", "custom-environments/"} <= set(sources)


def test_the_entry_points_parser_takes_the_rayjobs_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        train.main(["--help"])
    assert exit_info.value.code == 0
    assert "--run-config" in capsys.readouterr().out  # what the RayJob's entrypoint passes


def test_the_image_setting_and_the_docs_name_this_image() -> None:
    description = VerlSettings.model_fields["verl_image_uri"].description or ""
    assert "docker/verl-trainer" in description
    cluster_doc = (ROOT / "docs" / "cluster.md").read_text()
    assert "docker build -f docker/verl-trainer/Dockerfile" in cluster_doc
    assert "verl_image_uri" in cluster_doc


# -- the image says what it is (issue 35, "What to build" 3) ----------------------------------------------------

# verl 0.9.1's METADATA: `Requires-Dist: transformers==5.9.0; extra == "vllm"` (the extra the image's engine needs).
VERL_VLLM_TRANSFORMERS = "5.9.0"
# Import names whose distribution is named otherwise.
DISTRIBUTION_OF = {
    "yaml": "pyyaml",
    "huggingface_hub": "huggingface-hub",
    "hydra": "hydra-core",
    "google": "protobuf",
    "pydantic_core": "pydantic-core",
    "dateutil": "python-dateutil",
}


def _mtrl_module_file(module: str) -> Path | None:
    base = ROOT / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports_of(path: Path, package: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts)
                found.add(f"{base}.{node.module}" if node.module else base)
                found.update(f"{base}.{alias.name}" for alias in node.names)
            elif node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def entrypoint_third_party_imports(*entries: str) -> set[str]:
    """Top-level third-party modules imported (eagerly or lazily) by these mtrl modules and every mtrl or
    environments module they import in turn."""
    seen: set[str] = set()
    third_party: set[str] = set()
    queue = list(entries)
    while queue:
        module = queue.pop()
        if module in seen:
            continue
        seen.add(module)
        path = _mtrl_module_file(module)
        if path is None:
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for name in _imports_of(path, package):
            top = name.split(".")[0]
            if top in {"mtrl", "environments"}:
                queue.append(name)
            elif top not in sys.stdlib_module_names and top != "__future__":
                third_party.add(top)
    return third_party


def test_every_module_the_entrypoint_and_the_agent_loop_import_is_in_the_lock() -> None:
    # The RayJob runs `python -m mtrl.backends.verl.train`; verl's agent-loop workers import the agent loop; the
    # image check runs at build. Everything they reach through mtrl and the built-in environments, eager or lazy.
    imports = entrypoint_third_party_imports(
        rayjob.TRAINER_MODULE,
        train.AGENT_LOOP_CLASS.rpartition(".")[0],
        "mtrl.backends.verl.image",
        "mtrl.backends.verl.merge",  # the export runs it as a module
        "mtrl.envs.registry",
    )
    assert {"verl", "boto3", "pandas", "torch", "transformers"} <= imports  # the walk sees lazy imports too
    missing = {name for name in imports if _normal(DISTRIBUTION_OF.get(name, name)) not in LOCK}
    assert missing == set(), f"imported by the trainer but not in requirements/verl-trainer.txt: {sorted(missing)}"


def test_transformers_is_verls_vllm_pin_in_both_locks() -> None:
    assert LOCK["transformers"][0] == VERL_VLLM_TRANSFORMERS
    assert CONTRACT["transformers"] == VERL_VLLM_TRANSFORMERS


def test_the_attention_the_trainer_asks_for_is_in_the_image_and_checked_at_build() -> None:
    from mtrl.backends.verl import image

    # verl's HFModelConfig defaults to flash_attention_2 (verl/workers/config/model.py); the run overrides it.
    chosen = train.overrides(
        {
            "run_id": "r",
            "lora_rank": 8,
            "steps": 2,
            "max_prompt_length": 8,
            "max_response_length": 8,
            "group_size": 2,
            "nnodes": 1,
        },
        model_path="m",
        train_file=Path("t"),
        val_file=None,
        agent_config=Path("a"),
        local_dir=Path("c"),
        gpus_per_node=1,
    )
    assert f"+actor_rollout_ref.model.override_config.attn_implementation={image.ATTENTION_IMPLEMENTATION}" in chosen
    if image.ATTENTION_IMPLEMENTATION.startswith("flash_attention"):
        assert "flash-attn" in LOCK
    else:
        assert image.ATTENTION_IMPLEMENTATION == "sdpa"  # torch's own: every torch build has it
        assert "actor_rollout_ref.model.use_remove_padding=false" in chosen  # packing needs flash-attention
    assert "python -m mtrl.backends.verl.image" in " ".join(dockerfile_instructions(DOCKERFILE))


def test_the_nccl_environment_is_one_the_image_can_run() -> None:
    from mtrl.backends.verl import image

    settings = run_settings()
    _, job = rayjob.render(plan_for(settings), run_context(settings))
    for group in [job["spec"]["rayClusterSpec"]["headGroupSpec"], *job["spec"]["rayClusterSpec"]["workerGroupSpecs"]]:
        env = {e["name"]: e["value"] for e in group["template"]["spec"]["containers"][0]["env"]}
        network = env.get("NCCL_NET")
        assert network == image.NCCL_ENVIRONMENT["NCCL_NET"]
        if network is None or network.lower() == "ofi":
            # EFA needs AWS's aws-ofi-nccl plugin and libfabric, which only the EFA installer brings.
            assert "aws-ofi-nccl" in DOCKERFILE
            assert "libfabric" in DOCKERFILE
        else:
            assert network == "Socket"  # NCCL's built-in transport
            assert not any(name.startswith("FI_") for name in env)


def test_the_cuda_of_the_locks_torch_and_the_driver_it_needs_are_documented() -> None:
    from mtrl.backends.verl import image

    # PyPI's torch 2.11.0 for linux x86_64 is the CUDA 13.0 build: its CUDA runtime and NCCL come as cu13 wheels.
    assert LOCK["torch"][0] == TORCH_VERSION
    assert LOCK["nvidia-cuda-runtime"][0].startswith(image.TORCH_CUDA + ".")
    assert "nvidia-nccl-cu13" in LOCK
    assert image.TORCH_CUDA.startswith("13.")
    # The base has no CUDA of its own (the wheels bring it); the driver comes from the node, documented with source.
    assert "nvidia/cuda" not in build_args(DOCKERFILE)["BASE_IMAGE"]
    assert f">= {image.MIN_NVIDIA_DRIVER} for CUDA {image.TORCH_CUDA}" in DOCKERFILE
    assert "HyperPod AMI releases for Amazon EKS" in DOCKERFILE
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in DOCKERFILE
