"""The environment blocks' overhead per rollout: tool calls, the episode sandbox, cached execution.

Targets (issue 15, so the blocks never dominate an episode next to a model's generation): a parsed and
dispatched replay call under 50 µs; an episode state (schema, 50 seed rows, a temporary directory, close)
under 2 ms; a cached execution hit under 1 ms (a sandbox run costs tens of milliseconds).
"""

from __future__ import annotations

import time

from mtrl.envs.episode_state import EpisodeState
from mtrl.envs.execution import Execution
from mtrl.envs.tools import ReplayTool, ToolBox, format_tool_call
from mtrl.sandbox import Case, Check, Limits

TARGET_CALL_US = 50.0
TARGET_STATE_MS = 2.0
TARGET_HIT_MS = 1.0
SCHEMA = "CREATE TABLE orders (order_id TEXT PRIMARY KEY, customer_id TEXT, price_cents INTEGER);"


def _verdict(value: float, target: float) -> str:
    return "OK" if value <= target else "ABOVE TARGET"


def bench_tool_calls(count: int = 20000) -> None:
    records = [({"email": f"user{i}@example.com"}, {"customer_id": f"C-{i:05d}", "tier": "gold"}) for i in range(1000)]
    box = ToolBox([ReplayTool.from_records(records, name="lookup_customer", description="", parameters={"email": ""})])
    actions = [format_tool_call("lookup_customer", {"email": f" USER{i % 1200}@example.com"}) for i in range(count)]
    started = time.perf_counter()
    for action in actions:
        box.handle(action)
    per_call_us = (time.perf_counter() - started) / count * 1e6
    print(
        f"   tool call (parse + dispatch + normalised replay lookup): {per_call_us:.1f} µs "
        f"(target ≤ {TARGET_CALL_US:.0f}) {_verdict(per_call_us, TARGET_CALL_US)}"
    )


def bench_episode_state(count: int = 500) -> None:
    seed = {"orders": [{"order_id": f"O-{i}", "customer_id": f"C-{i % 7}", "price_cents": 100 * i} for i in range(50)]}
    started = time.perf_counter()
    for _ in range(count):
        state = EpisodeState(schema=SCHEMA, seed=seed)
        state.temp_dir()
        state.insert("orders", [{"order_id": "O-new", "customer_id": "C-1", "price_cents": 5}])
        state.close()
    per_state_ms = (time.perf_counter() - started) / count * 1e3
    print(
        f"   episode state (schema, 50 rows, a directory, one write, close): {per_state_ms:.2f} ms "
        f"(target ≤ {TARGET_STATE_MS:.0f}) {_verdict(per_state_ms, TARGET_STATE_MS)}"
    )


def bench_execution_cache(hits: int = 200) -> None:
    execution = Execution(Limits(timeout_s=20))
    cases = (Case("test_add", (Check("add", (2, 3), 5),)),)
    program = "def add(a, b):\n    return a + b\n"
    started = time.perf_counter()
    execution.run_cases(program, cases)
    miss_ms = (time.perf_counter() - started) * 1e3
    started = time.perf_counter()
    for _ in range(hits):
        execution.run_cases(program, cases)
    hit_ms = (time.perf_counter() - started) / hits * 1e3
    print(
        f"   cached execution: first run (sandbox) {miss_ms:.0f} ms, repeat {hit_ms:.3f} ms "
        f"(target ≤ {TARGET_HIT_MS:.0f}) {_verdict(hit_ms, TARGET_HIT_MS)}"
    )


def main() -> None:
    bench_tool_calls()
    bench_episode_state()
    bench_execution_cache()


if __name__ == "__main__":
    main()
