"""The verl bridge's CPU overhead per turn, without generation (target: well under the ~100 ms a GPU turn takes).

Each environment is played through the one episode driver with the bridge's ``TokenBridge`` as the policy (the
agent loop's token bookkeeping: chat template at the first turn, each observation rendered and tokenized as a user
turn, the sampled tokens decoded into the action) and a server that answers instantly with pre-tokenized scripted
actions, so the figure is what mtrl adds to each turn on the rollout worker: tokenizing, decoding and the
environment's step. CPU time of this process per turn (a sandboxed program's own CPU, ask_to_code's hidden tests, is
in its child process and not counted), over repeated episodes; a real tokenizer (byte-level, built in code, so every
observation character is a token — a pessimistic case for a BPE model's tokenizer).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from types import SimpleNamespace
from typing import Any

from mtrl.backends.verl.bridge import TokenBridge
from mtrl.backends.verl.smoke import byte_tokenizer, script
from mtrl.envs.registry import load_spec
from mtrl.envs.rollout import play_async

ENVIRONMENTS = ("wordle", "ask_to_code", "sop_support")
EPISODES = 20


class InstantServer:
    def __init__(self, replies: list[list[int]]) -> None:
        self.replies = replies
        self.calls = 0

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any]) -> Any:
        reply = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        return SimpleNamespace(token_ids=reply, log_probs=None)


def per_turn_ms(env_id: str, tokenizer: Any) -> tuple[float, float, int]:
    spec = load_spec(env_id)
    replies = [[*tokenizer.encode(action, add_special_tokens=False), tokenizer.eos_token_id] for action in script(spec)]
    samples: list[float] = []
    turns_total = 0
    for _ in range(EPISODES):
        bridge = TokenBridge(tokenizer, InstantServer(replies), {}, response_length=1 << 20)
        started = time.process_time()
        rollout = asyncio.run(play_async(spec.make(), spec.example_task, bridge.act, spec.rules()))
        spent = time.process_time() - started
        turns_total += rollout.turns
        samples.append(1000 * spent / max(1, rollout.turns))
    return statistics.median(samples), max(samples), turns_total // EPISODES


def main() -> None:
    tokenizer = byte_tokenizer()
    for env_id in ENVIRONMENTS:
        median, worst, turns = per_turn_ms(env_id, tokenizer)
        print(
            f"   {env_id:<12} bridge + step: {median:6.2f} ms/turn median, {worst:6.2f} ms worst "
            f"({turns} turns/episode)"
        )
