"""Find and load reward environments: built-ins in ``environments/``, custom ones in ``custom-environments/``.

Both kinds have the same package shape (see ``mtrl.contracts.environment``). Built-ins import as
``environments.<env_id>``; a custom environment's directory name contains a dash, so it is loaded from
its path under the private module name ``mtrl_custom_env_<env_id>`` (relative imports inside it work).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from mtrl.contracts.environment import (
    DEFAULT_MAX_TURNS,
    DEFAULT_SYSTEM_PROMPT,
    MAX_TURNS_CEILING,
    Environment,
    EpisodeResult,
)

# The rollout driver (asyncio) and the episode state (sqlite3) load when an episode is played, not when environments
# are only looked up (`mtrl config show`, `mtrl env list`: issue 38, start-up within 0.3 CPU-s).
if TYPE_CHECKING:
    from mtrl.envs.rollout import EpisodeRules

ENV_ID_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
BUILTIN_DIR = "environments"
CUSTOM_DIR = "custom-environments"
# Directories under custom-environments/ that are examples, not deployable environments.
_NOT_LISTED = {"template"}
REQUIRED_ATTRIBUTES = ("ENV_ID", "DESCRIPTION", "make_env", "validate_task", "load_environment", "EXAMPLE_TASK")

Source = Literal["builtin", "custom"]


class EnvironmentNotFoundError(LookupError):
    """No environment with that id (the message lists the available ones)."""


class InvalidEnvironmentError(ValueError):
    """The package exists but breaks the plug-in contract (``problems`` lists each violation)."""

    def __init__(self, env_id: str, problems: list[str]) -> None:
        self.env_id = env_id
        self.problems = problems
        super().__init__(f"environment '{env_id}' is invalid: " + "; ".join(problems))


def project_root() -> Path:
    """The directory holding ``environments/``: ``MTRL_PROJECT_ROOT`` if set, else the source checkout."""
    override = os.environ.get("MTRL_PROJECT_ROOT")
    if override:
        return Path(override).resolve()
    return Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class EnvironmentSpec:
    """A loaded environment package and typed access to its contract functions."""

    env_id: str
    source: Source
    path: Path
    module: ModuleType

    @property
    def description(self) -> str:
        return str(self.module.DESCRIPTION)

    @property
    def evaluation(self) -> str | None:
        """The environment's external evaluation, one line (``None`` when it declares none)."""
        declared = getattr(self.module, "EVALUATION", None)
        return str(declared) if declared is not None else None

    @property
    def max_turns(self) -> int:
        """The most actions an episode may take (the module's ``MAX_TURNS``, else ``DEFAULT_MAX_TURNS``)."""
        return int(getattr(self.module, "MAX_TURNS", DEFAULT_MAX_TURNS))

    @property
    def system_prompt(self) -> str:
        """The system message every policy is given (the module's ``SYSTEM_PROMPT``, else the default)."""
        return str(getattr(self.module, "SYSTEM_PROMPT", DEFAULT_SYSTEM_PROMPT))

    def rules(self, *, timeout_s: float | None = None, max_turns: int | None = None) -> EpisodeRules:
        """How every driver plays this environment; ``max_turns`` may only lower the environment's limit."""
        from mtrl.envs.rollout import EpisodeRules  # noqa: PLC0415 - see the note on the imports

        return EpisodeRules(max_turns=self.max_turns, system_prompt=self.system_prompt, timeout_s=timeout_s).capped(
            max_turns
        )

    @property
    def example_task(self) -> dict[str, Any]:
        return dict(self.module.EXAMPLE_TASK)

    @property
    def example_actions(self) -> list[str]:
        return list(getattr(self.module, "EXAMPLE_ACTIONS", []))

    def make(self, **kwargs: Any) -> Environment:
        env = self.module.make_env(**kwargs)
        if not isinstance(env, Environment):
            raise InvalidEnvironmentError(self.env_id, ["make_env() did not return an Environment"])
        return env

    def validate_task(self, metadata: Mapping[str, Any]) -> list[str]:
        """Problems with one dataset row's ``metadata`` (empty list when valid)."""
        if type(metadata) is not dict and not isinstance(metadata, Mapping):  # (a dict skips the slower ABC check)
            return [f"metadata must be an object (got {type(metadata).__name__})"]
        problems = self.module.validate_task(dict(metadata))
        return [str(problem) for problem in problems] if problems else []  # (dataset validation calls this per row)

    def load_environment(self, **kwargs: Any) -> Any:
        """The verifiers-style entry point (imports ``verifiers``; only call where it is installed)."""
        return self.module.load_environment(**kwargs)

    def play(
        self, task: Mapping[str, Any], actions: list[str], **kwargs: Any
    ) -> tuple[list[dict[str, str]], EpisodeResult]:
        """Play scripted ``actions`` under the environment's rules; raises what the episode raised."""
        from mtrl.envs.rollout import play, scripted  # noqa: PLC0415 - see the note on the imports

        problems = self.validate_task(task)
        if problems:
            raise ValueError(f"task for '{self.env_id}' is invalid: " + "; ".join(problems))
        rollout = play(self.make(**kwargs), task, scripted(actions), self.rules())
        rollout.raise_error()
        assert rollout.result is not None  # no error: result() returned
        return rollout.messages, rollout.result

    def smoke_check(self, *, time_budget_s: float = 30.0) -> list[str]:
        """Play ``EXAMPLE_TASK`` with ``EXAMPLE_ACTIONS``; problems found (empty = healthy)."""
        from mtrl.envs.episode_state import open_states  # noqa: PLC0415 - see the note on the imports
        from mtrl.envs.rollout import ContractError, ResultContractError, play, scripted  # noqa: PLC0415

        started = time.monotonic()
        problems: list[str] = []
        try:
            problems = [f"EXAMPLE_TASK: {p}" for p in self.validate_task(self.example_task)]
            before = {id(state) for state in open_states()}
            env = self.make()
            rollout = play(env, self.example_task, scripted(self.example_actions), self.rules())
            # ``env`` is still referenced here, so a state it failed to close cannot have been collected yet.
            leaked = [state for state in open_states() if id(state) not in before]
        except Exception as error:  # a plug-in may raise anything; report it instead of crashing synth
            return [*problems, f"smoke episode raised {type(error).__name__}: {error}"]
        if isinstance(rollout.error, ResultContractError):
            return [*problems, *rollout.error.problems]
        if isinstance(rollout.error, ContractError):
            return [*problems, "observations must be strings"]
        if rollout.error is not None:
            return [*problems, f"smoke episode raised {rollout.error_text}"]
        result = rollout.result
        if leaked:
            problems.append(
                f"close() left {len(leaked)} episode state(s) open: the environment's close() must call "
                "EpisodeState.close() (mtrl.envs.episode_state)"
            )
        if time.monotonic() - started > time_budget_s:
            problems.append(f"smoke episode took longer than {time_budget_s:.0f} s")
        assert result is not None  # no error: result() returned and passed the contract check
        if not result.components:
            problems.append("result() reports no reward components (report at least one)")
        if self.evaluation is not None and result.evaluation is None:
            problems.append("the environment declares EVALUATION but result() sets no evaluation")
        return problems


def _check_module(env_id: str, module: ModuleType) -> None:
    problems = contract_problems(env_id, module)
    if problems:
        raise InvalidEnvironmentError(env_id, problems)


def contract_problems(env_id: str, module: ModuleType) -> list[str]:
    """Every way the module breaks the plug-in contract (its attributes), each with what to fix."""
    problems = [f"missing module attribute '{name}'" for name in REQUIRED_ATTRIBUTES if not hasattr(module, name)]
    if hasattr(module, "ENV_ID") and env_id != module.ENV_ID:
        problems.append(f"ENV_ID is '{module.ENV_ID}' but the directory is '{env_id}'")
    for name in ("make_env", "validate_task", "load_environment"):
        if hasattr(module, name) and not callable(getattr(module, name)):
            problems.append(f"'{name}' must be callable")
    max_turns = getattr(module, "MAX_TURNS", DEFAULT_MAX_TURNS)
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or not 1 <= max_turns <= MAX_TURNS_CEILING:
        problems.append(f"MAX_TURNS must be a whole number from 1 to {MAX_TURNS_CEILING} (got {max_turns!r})")
    system_prompt = getattr(module, "SYSTEM_PROMPT", DEFAULT_SYSTEM_PROMPT)
    if not isinstance(system_prompt, str) or not system_prompt.strip():
        problems.append(f"SYSTEM_PROMPT must be a non-empty string (got {system_prompt!r})")
    return problems


def _ensure_importable(root: Path) -> None:
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))


def _load_builtin(env_id: str, root: Path) -> ModuleType:
    _ensure_importable(root)
    return importlib.import_module(f"{BUILTIN_DIR}.{env_id}")


def _load_custom(env_id: str, directory: Path) -> ModuleType:
    name = f"mtrl_custom_env_{env_id}"
    cached = sys.modules.get(name)
    # Reuse only the same directory's module (tests and tools may point at other roots).
    if cached is not None and Path(str(cached.__file__)).parent == directory:
        return cached
    spec = importlib.util.spec_from_file_location(
        name, directory / "__init__.py", submodule_search_locations=[str(directory)]
    )
    if spec is None or spec.loader is None:
        raise InvalidEnvironmentError(env_id, [f"cannot import {directory}"])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        raise InvalidEnvironmentError(env_id, [f"import failed: {type(error).__name__}: {error}"]) from error
    return module


def _package_dirs(base: Path) -> list[str]:
    if not base.is_dir():
        return []
    return sorted(
        entry.name
        for entry in base.iterdir()
        if entry.is_dir() and (entry / "__init__.py").is_file() and ENV_ID_PATTERN.match(entry.name)
    )


def list_environments(*, root: Path | None = None, include_template: bool = False) -> list[tuple[str, Source]]:
    """Every environment id with where it comes from, built-ins first."""
    base = root or project_root()
    found: list[tuple[str, Source]] = [(env_id, "builtin") for env_id in _package_dirs(base / BUILTIN_DIR)]
    found += [
        (env_id, "custom")
        for env_id in _package_dirs(base / CUSTOM_DIR)
        if include_template or env_id not in _NOT_LISTED
    ]
    return found


def load_spec(env_id: str, *, custom: bool | None = None, root: Path | None = None) -> EnvironmentSpec:
    """Load environment ``env_id``.

    ``custom=None`` looks in built-ins first, then custom environments; ``True``/``False`` restricts
    the search. Raises ``EnvironmentNotFoundError`` or ``InvalidEnvironmentError``.
    """
    if not ENV_ID_PATTERN.match(env_id):
        raise EnvironmentNotFoundError(
            f"environment id '{env_id}' is not valid (lowercase letters, digits and '_', starting with a letter)"
        )
    base = root or project_root()
    builtin_dir = base / BUILTIN_DIR / env_id
    custom_dir = base / CUSTOM_DIR / env_id
    if custom is not True and (builtin_dir / "__init__.py").is_file():
        source: Source = "builtin"
        directory = builtin_dir
        module = _guarded(env_id, lambda: _load_builtin(env_id, base))
    elif custom is not False and (custom_dir / "__init__.py").is_file():
        source = "custom"
        directory = custom_dir
        module = _load_custom(env_id, custom_dir)
    else:
        names = [name for name, _ in list_environments(root=base)]
        close = difflib.get_close_matches(env_id, names, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        where = {True: f"{CUSTOM_DIR}/", False: f"{BUILTIN_DIR}/", None: f"{BUILTIN_DIR}/ or {CUSTOM_DIR}/"}[custom]
        raise EnvironmentNotFoundError(
            f"no environment '{env_id}' in {where} under {base} ({hint}available: {', '.join(names) or 'none'})"
        )
    _check_module(env_id, module)
    return EnvironmentSpec(env_id=env_id, source=source, path=directory, module=module)


def _guarded(env_id: str, load: Callable[[], ModuleType]) -> ModuleType:
    try:
        return load()
    except Exception as error:
        raise InvalidEnvironmentError(env_id, [f"import failed: {type(error).__name__}: {error}"]) from error


def custom_environment_problems(use_custom_env: bool, custom_env_id: str | None) -> list[str]:
    """The deployment's custom environment, checked as synth checks it (``mtrl config show`` runs the same check):
    one problem per line, each naming the environment; empty without ``use_custom_env``."""
    if not use_custom_env or custom_env_id is None:
        return []
    return [
        f"custom environment '{custom_env_id}' (custom-environments/): {problem}"
        for problem in check_custom_environment(custom_env_id)
    ]


def served_environment_problem(
    env_id: str, *, key: str, use_custom_env: bool, custom_env_id: str | None, root: Path | None = None
) -> str | None:
    """Why a run of environment ``env_id`` (``key`` names where it was set) cannot run on a deployment with these
    custom-environment settings, else None. A deployment serves the built-ins and, with ``use_custom_env``, its one
    custom environment: any other id would first fail on the reward workers, after the GPUs have scaled up."""
    base = root or project_root()
    builtins = _package_dirs(base / BUILTIN_DIR)
    served = builtins + ([custom_env_id] if use_custom_env and custom_env_id else [])
    if env_id in served:
        return None
    if env_id in _package_dirs(base / CUSTOM_DIR):
        return (
            f"{key}: '{env_id}' is a custom environment, which a deployment serves only with use_custom_env=true "
            f"and custom_env_id='{env_id}' (this one serves: {', '.join(served)})"
        )
    close = difflib.get_close_matches(env_id, served, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"{key}: no environment '{env_id}' ({hint}this deployment serves: {', '.join(served)})"


def deployment_environment_problems(
    *, run_environment: str, use_custom_env: bool, custom_env_id: str | None
) -> list[str]:
    """What synth and `mtrl config show` check of a deployment's environments: the custom one (when used) and the
    default environment of its runs."""
    problems = custom_environment_problems(use_custom_env, custom_env_id)
    served = served_environment_problem(
        run_environment, key="run_environment", use_custom_env=use_custom_env, custom_env_id=custom_env_id
    )
    return problems + ([served] if served and not problems else [])


def check_custom_environment(env_id: str, *, root: Path | None = None) -> list[str]:
    """Synth-time check for ``use_custom_env``: every problem at once (``check_environment``)."""
    return check_environment(env_id, custom=True, root=root).problems


@dataclass(frozen=True)
class EnvironmentCheck:
    """``problems`` (each says what to fix; empty = deployable), ``notes`` (what could not be checked here), and
    the smoke episode's reward when it scored."""

    env_id: str
    problems: list[str]
    notes: list[str]
    smoke_reward: float | None = None
    found: bool = True


def check_environment(env_id: str, *, custom: bool | None = None, root: Path | None = None) -> EnvironmentCheck:
    """What `mtrl env check` and synth run: import, the contract's attributes, ``EXAMPLE_TASK``, one smoke episode
    and ``load_environment()`` — each part that can run does, so one run reports every problem."""
    try:
        spec = load_spec(env_id, custom=custom, root=root)
        problems: list[str] = []
    except EnvironmentNotFoundError as error:
        return EnvironmentCheck(env_id, [str(error)], [], found=False)
    except InvalidEnvironmentError as error:
        module = _loaded_module(env_id, custom=custom, root=root)
        if module is None:  # the import itself failed: nothing further can run
            return EnvironmentCheck(env_id, error.problems, [])
        base = root or project_root()
        source: Source = "builtin" if (base / BUILTIN_DIR / env_id / "__init__.py").is_file() else "custom"
        spec = EnvironmentSpec(env_id=env_id, source=source, path=Path(str(module.__file__)).parent, module=module)
        problems = list(error.problems)
    attributes = set(dir(spec.module))
    if {"make_env", "validate_task", "EXAMPLE_TASK"} <= attributes and callable(spec.module.make_env):
        problems += spec.smoke_check()
    notes: list[str] = []
    if callable(getattr(spec.module, "load_environment", None)):
        problems_found, notes = _load_environment_problems(spec)
        problems += problems_found
    return EnvironmentCheck(env_id, _unique(problems), notes, _smoke_reward(spec) if not problems else None)


def _loaded_module(env_id: str, *, custom: bool | None, root: Path | None) -> ModuleType | None:
    base = root or project_root()
    if custom is not True and (base / BUILTIN_DIR / env_id / "__init__.py").is_file():
        return sys.modules.get(f"{BUILTIN_DIR}.{env_id}")
    return sys.modules.get(f"mtrl_custom_env_{env_id}")


def _load_environment_problems(spec: EnvironmentSpec) -> tuple[list[str], list[str]]:
    """Call ``load_environment()``: it must return an environment (not ``None``). Without ``verifiers`` installed
    (only the Nova Forge workers have it) that part is a note, not a problem."""
    try:
        loaded = spec.module.load_environment()
    except ImportError as error:
        if "verifiers" in str(error) or getattr(error, "name", "") == "verifiers":
            return [], [
                "load_environment() was not run to the end: it needs the Nova Forge reward workers' verifiers "
                f"(the starter kit's fork), which is not here: {error}"
            ]
        return [f"load_environment() raised {type(error).__name__}: {error}"], []
    except Exception as error:  # a plug-in may raise anything; report it
        return [f"load_environment() raised {type(error).__name__}: {error}"], []
    if loaded is None:
        return [
            "load_environment() returned None: it must return the verifiers environment "
            "(e.g. mtrl.envs.verifiers_adapter.to_verifiers_environment(make_env, validate_task=validate_task))"
        ], []
    return [], []


def _smoke_reward(spec: EnvironmentSpec) -> float | None:
    try:
        return spec.play(spec.example_task, spec.example_actions)[1].reward
    except Exception:  # already reported by smoke_check
        return None


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
