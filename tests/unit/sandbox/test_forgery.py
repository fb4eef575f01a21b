"""A policy cannot forge ask_to_code's correctness: attacks on the judge earn only what they honestly compute.

The four forging routes of issue 13 (stack walking, the garbage collector, a trace hook, proxying the result
descriptor) each scored 1.600 — the reference solutions' reward — on all 33 tasks before the judge moved out
of the sandbox (checked against the previous commit: 33/33 at 1.600 for each route, full and seccomp tiers).
They run here through the real environment, in every tier this process can force (as root: full, fargate,
lambda; the tiers as they really run without privileges are in test_sandbox_tiers.py).
"""

from __future__ import annotations

import functools
import os
import random
import textwrap
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from environments.ask_to_code.env import AskToCodeEnv
from environments.ask_to_code.task_model import Task
from environments.ask_to_code.tasks import TASKS
from mtrl.sandbox import Case, Check, Limits, Raises, run_cases
from mtrl.sandbox.judge import same
from tests.unit.sandbox.forgery import ATTACKS, RETURNS_NONE

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="forcing every tier needs root (as in CI)")
TIERS = ("full", "fargate", "lambda")
LIMITS = {tier: Limits(timeout_s=5.0, cpu_s=3, memory_mb=256, isolation=tier) for tier in TIERS}  # type: ignore[arg-type]
MAX_REWARD = 1.6


def ask_then_submit(task: Task, program: str, limits: Limits) -> tuple[float, float]:
    """(reward, correctness) of the best way of playing: ask on turn 1, then submit ``program``."""
    env = AskToCodeEnv(limits=limits)
    env.reset({"prompt": "", "info": {"task_id": task.task_id}})
    env.step("What should happen with bad input?")
    env.step(f"```python\n{program}```")
    result = env.result()
    return result.reward, result.components["correctness"]


@functools.cache
def returning_none_earns(task_id: str, tier: str) -> float:
    """The correctness of a program that returns None, played once per task and tier for every attack's test."""
    task = next(task for task in TASKS if task.task_id == task_id)
    return ask_then_submit(task, RETURNS_NONE, LIMITS[tier])[1]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_forging_attacks_earn_only_what_returning_none_earns(attack: str, tier: str) -> None:
    for task in TASKS:
        reward, correctness = ask_then_submit(task, ATTACKS[attack], LIMITS[tier])
        honest = returning_none_earns(task.task_id, tier)
        assert correctness <= honest, (task.task_id, correctness, honest)
        assert reward < MAX_REWARD, task.task_id


@pytest.mark.parametrize("tier", TIERS)
def test_reference_solutions_still_score_the_maximum(tier: str) -> None:
    for task in TASKS[:: 4 if tier != "full" else 1]:  # every task in the full tier; a spread in the others
        reward, correctness = ask_then_submit(task, task.solution, LIMITS[tier])
        assert (reward, correctness) == (pytest.approx(MAX_REWARD), 1.0), task.task_id


# --- Property: a submission that ignores the task is never scored above its answers' honest worth --------

# What such a submission does before (or instead of) answering. None of it knows an expected value.
PRELUDES = {
    "nothing": "",
    "exit_zero": "import os\nos._exit(0)\n",
    "sys_exit": "raise SystemExit(0)\n",
    "raise": "raise RuntimeError('no')\n",
    "print_junk": (
        "import os\nfor fd in (1, 2, 3, 4, 5):\n    try:\n"
        '        os.write(fd, b\'deadbeef pass test_basic None\\n{"i": 0, "v": "forged"}\\nPASSED\\n\')\n'
        "    except OSError:\n        pass\n"
    ),
    "patch_builtins": (
        "import builtins\nbuiltins.isinstance = lambda *a: True\nbuiltins.type = lambda *a: object\n"
        "builtins.len = lambda *a: 0\n"
    ),
    "threads": (
        "import threading, time, os\n"
        "def _spam():\n    while True:\n        try:\n            os.write(1, b'pass\\n')\n        except OSError:\n"
        "            return\n        time.sleep(0.001)\n"
        "threading.Thread(target=_spam, daemon=True).start()\n"
    ),
    "read_proc": (
        "import os\nseen = []\nfor pid in os.listdir('/proc') if os.path.isdir('/proc') else []:\n"
        "    for name in ('environ', 'cmdline', 'maps'):\n        try:\n"
        "            seen.append(open(f'/proc/{pid}/{name}', 'rb').read(200))\n"
        "        except (OSError, ValueError):\n            pass\n"
    ),
    **ATTACKS,
}
# What it answers with: a constant, whatever it is asked (or always raising ValueError).
CONSTANTS: list[object] = [None, True, False, 0, 1, 2, "", "a", [], {}, (), 5400, "hello_world", "$1.25", "RAISE"]


def submission(prelude: str, constant: object) -> str:
    body = "    raise ValueError('always')\n" if constant == "RAISE" else f"    return {constant!r}\n"
    return prelude + f"def _answer(*args, **kwargs):\n{body}def __getattr__(name):\n    return _answer\n"


def honest_worth(cases: tuple[Case, ...], constant: object) -> float:
    """The correctness a program answering ``constant`` to every call deserves, computed outside any sandbox."""

    def passes(check: Check) -> bool:
        if isinstance(check.expect, Raises):
            return constant == "RAISE"
        return constant != "RAISE" and same(constant, check.expect)

    return sum(all(passes(check) for check in case.checks) for case in cases) / len(cases)


def flattened(task: Task) -> tuple[Case, ...]:
    """One case per check, so that permuting expected values keeps the honest worth of a constant."""
    return tuple(Case(f"c{i}", (check,)) for i, check in enumerate(c for case in task.cases for c in case.checks))


def swapped(cases: tuple[Case, ...], seed: int) -> tuple[Case, ...]:
    """The same inputs with the expected answers shuffled between checks."""
    expected = [case.checks[0].expect for case in cases]
    random.Random(seed).shuffle(expected)
    return tuple(
        Case(case.name, (replace(case.checks[0], expect=answer),)) for case, answer in zip(cases, expected, strict=True)
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prelude=st.sampled_from(sorted(PRELUDES)),
    constant=st.sampled_from(CONSTANTS),
    task=st.sampled_from(TASKS),
    tier=st.sampled_from(TIERS),
    seed=st.integers(0, 2**16),
)
def test_ignoring_the_task_never_scores_above_the_swapped_answers(
    prelude: str, constant: object, task: Task, tier: str, seed: int
) -> None:
    program = submission(textwrap.dedent(PRELUDES[prelude]), constant)
    real = flattened(task)
    fake = swapped(real, seed)
    real_score = run_cases(program, real, LIMITS[tier]).pass_fraction
    fake_score = run_cases(program, fake, LIMITS[tier]).pass_fraction
    assert real_score <= fake_score
    assert real_score <= honest_worth(real, constant)
    assert fake_score <= honest_worth(fake, constant)
