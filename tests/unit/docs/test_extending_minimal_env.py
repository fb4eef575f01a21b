"""docs/extending.md's minimal environment built from the blocks runs exactly as written there."""

from __future__ import annotations

import re
from pathlib import Path

from mtrl.envs.episode_state import open_states

DOC = Path(__file__).resolve().parents[3] / "docs" / "extending.md"
SECTION = "#### Worked example: a minimal environment"


def blocks(kind: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(SECTION) : text.index("#### Worked example: `environments/sop_support`")]
    return re.findall(rf"```{kind}\n(.*?)```", section, flags=re.DOTALL)


def test_the_worked_example_plays_to_an_exact_answer_and_releases_its_state(tmp_path: Path) -> None:
    (csv_text,) = blocks("csv")
    environment, episode = blocks("python")
    (tmp_path / "fixtures").mkdir()
    (tmp_path / "fixtures" / "shipments.csv").write_text(csv_text, encoding="utf-8")
    namespace: dict[str, object] = {"__file__": str(tmp_path / "env.py"), "__name__": "order_desk_env"}
    exec(compile(environment, "docs/extending.md (order_desk/env.py)", "exec"), namespace)
    exec(compile(episode, "docs/extending.md (episode)", "exec"), namespace)
    result = namespace["result"]
    assert result.evaluation == 1.0  # type: ignore[attr-defined]
    assert open_states() == []
    desk = namespace["OrderDesk"]()  # type: ignore[operator]
    desk.reset(namespace["task"])
    desk.step('{"status": "lost", "case_id": "CS-O-1002"}')  # outside the tag: no answer
    assert desk.result().evaluation == 0.0
    assert desk.result().reward == 0.0
    desk.close()
