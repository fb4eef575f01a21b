"""CPU smoke check of the verl bridge: ``python -m mtrl.backends.verl.smoke --env ENV [--tasks N] [--json]``.

Runs the real ``MtrlAgentLoop`` (verl's own ``AgentLoopBase`` constructor) with a scripted server manager and a real
byte-level tokenizer, passes its outputs through verl's own postprocessing (``AgentLoopWorker._agent_loop_postprocess``
and ``_postprocess``, on a stand-in worker as verl's ``*_on_cpu`` tests do), and compares, per episode, the reward
the loop reports (the ``rm_scores`` token verl trains on) with the reward the same actions score when played through
the environment directly. Prints per episode the two rewards, the policy and observation token counts and the turns;
exits 0 only when every episode agrees. Works for every registered environment. Needs ``.venv-verl`` (verl, torch).

The scripted policy plays the environment's ``EXAMPLE_ACTIONS`` on each task, then repeats the first one, so every
episode also meets the environment's turn limit or the response length.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from mtrl.envs.registry import EnvironmentSpec, load_spec
from mtrl.envs.rollout import run_episode
from mtrl.validation.rows import iter_rows

SPECIALS = ("<pad>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def byte_tokenizer(
    *,
    specials: Sequence[str] = SPECIALS,
    eos_token: str = "<|end|>",  # noqa: S107 - a token of the vocabulary, not a password
    chat_template: str = CHAT_TEMPLATE,
) -> Any:
    """A real ``PreTrainedTokenizerFast`` that round-trips any text (byte-level, no merges), built in code.
    ``specials``: ``<pad>``, ``eos_token`` and the template's other special tokens (the first ids, in this order)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {token: index for index, token in enumerate([*specials, *sorted(alphabet)])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        eos_token=eos_token,
        additional_special_tokens=[token for token in specials if token not in {"<pad>", eos_token}],
    )
    tokenizer.chat_template = chat_template
    return tokenizer


class ScriptedServer:
    """verl's server manager interface (``generate``), answering each episode with its next scripted action."""

    def __init__(self, tokenizer: Any, actions: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.actions = list(actions)
        self.calls: dict[str, int] = {}

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        turn = self.calls.get(request_id, 0)
        self.calls[request_id] = turn + 1
        action = self.actions[min(turn, len(self.actions) - 1)]
        ids = [*self.tokenizer.encode(action, add_special_tokens=False), self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed")


def script(spec: EnvironmentSpec) -> list[str]:
    actions = list(spec.example_actions) or ["x"]
    return actions + [actions[0]] * (spec.max_turns + 1)


def tasks_of(spec: EnvironmentSpec, count: int) -> list[dict[str, Any]]:
    """The environment's sample tasks (its ``EXAMPLE_TASK`` first)."""
    found = [spec.example_task]
    sample = spec.path / "sample" / "train.jsonl"
    if sample.is_file():
        for _number, row in iter_rows(sample):
            if isinstance(row.get("metadata"), dict) and row["metadata"] != found[0]:
                found.append(row["metadata"])
    return found[:count]


def _config(response_length: int, timeout_s: float | None, prompt_length: int = 4096) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {"prompt_length": prompt_length, "response_length": response_length, "multi_turn": {}},
                "model": {"path": "scripted", "tokenizer_path": "scripted"},
            },
            "data": {"apply_chat_template_kwargs": {}},
            "mtrl": {"episode_timeout_s": timeout_s},
        }
    )


class _Worker:
    """The parts of verl's ``AgentLoopWorker`` its postprocessing reads (the stand-in verl's CPU tests use)."""

    def __init__(self, tokenizer: Any, rollout_config: Any) -> None:
        from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

        self.tokenizer = tokenizer
        self.rollout_config = rollout_config
        self.processor = None
        self.mm_processor_kwargs: dict[str, Any] = {}
        self.reward_loop_worker_handles = None
        self.distillation_enabled = False
        for name in (
            "_compute_multi_modal_inputs",
            "_compute_position_ids",
            "_get_mm_processor_kwargs",
            "_compute_score",
            "_compute_teacher_logprobs",
            "_pad_token_ids",
        ):
            setattr(self, name, getattr(AgentLoopWorker, name).__get__(self))


async def check_environment(
    env_id: str,
    *,
    tasks: int = 2,
    response_length: int = 4096,
    timeout_s: float | None = None,
    prompt_length: int = 4096,
) -> list[dict[str, Any]]:
    """Play ``tasks`` episodes through the real agent loop and verl's postprocessing; one report per episode."""
    import numpy as np
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from mtrl.backends.verl.agent_loop import MtrlAgentLoop

    spec = load_spec(env_id)
    tokenizer = byte_tokenizer()
    config = _config(response_length, timeout_s, prompt_length)
    actions = script(spec)
    reports = []
    for index, task in enumerate(tasks_of(spec, tasks)):
        server = ScriptedServer(tokenizer, actions)
        loop = MtrlAgentLoop(
            trainer_config=DictConfigWrap(config),
            server_manager=server,
            tokenizer=tokenizer,
            processor=None,
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(config.data),
        )
        raw_prompt = [{"role": "user", "content": str(task.get("prompt", ""))}]
        with contextlib.redirect_stdout(sys.stderr):  # the loop's metric lines must not mix with the report
            # as train.py writes it
            extra = {"index": index, "env_id": env_id, "task_json": json.dumps(task), "env_args_json": "{}"}
            output = await loop.run({}, extra_info=extra, raw_prompt=raw_prompt)
        worker = _Worker(tokenizer, config.actor_rollout_ref.rollout)
        internal = await AgentLoopWorker._agent_loop_postprocess(worker, output, validate=False, raw_prompt=raw_prompt)
        batch = AgentLoopWorker._postprocess(
            worker,
            inputs=[internal],
            input_non_tensor_batch={
                "index": np.array([index], dtype=object),
                "agent_name": np.array(["mtrl"], dtype=object),
            },
        )
        scores = batch.batch["rm_scores"][0]
        mask = batch.batch["response_mask"][0]
        last = int(mask.nonzero().max()) if int(mask.sum()) else -1
        played = [tokenizer.decode(ids, skip_special_tokens=True).strip() for ids in _policy_spans(output)]
        _, direct = run_episode(spec.make(), task, played, spec.rules())
        loop_reward = float(scores.sum())
        info = output.extra_fields["reward_extra_info"]
        reports.append(
            {
                "env_id": env_id,
                "task": index,
                "loop_reward": loop_reward,
                "direct_reward": float(direct.reward),
                "agree": math.isclose(loop_reward, float(direct.reward), rel_tol=1e-6, abs_tol=1e-6),
                "policy_tokens": int(sum(output.response_mask)),
                "observation_tokens": len(output.response_mask) - int(sum(output.response_mask)),
                "turns": int(info["turns"]),
                "max_turns": spec.max_turns,
                "reward_token_is_last": bool(int(scores.nonzero().max()) >= last)
                if float(scores.abs().sum())
                else True,
                "extra_fields": sorted(key for key in batch.non_tensor_batch if key in info),
                "num_turns": int(output.num_turns),
                # verl concatenates a batch's samples: every prompt must come out exactly prompt_length wide.
                "prompt_width": int(batch.batch["prompts"].shape[1]),
                "prompt_tokens": len(output.prompt_ids),
            }
        )
    return reports


def _reward_on_last_token(scores: Any, last_policy_token: int) -> bool:
    """verl puts the episode's reward on the last response token: nothing after the model's last token scores."""
    nonzero = scores.nonzero()
    return not len(nonzero) or int(nonzero.max()) >= last_policy_token


def _policy_spans(output: Any) -> list[list[int]]:
    """The model's own token runs (mask 1), one per action."""
    spans: list[list[int]] = []
    current: list[int] = []
    for token, flag in zip(output.response_ids, output.response_mask, strict=True):
        if flag:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    if current:
        spans.append(current)
    return spans


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtrl.backends.verl.smoke", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--env",
        required=True,
        action="append",
        help="environment id (any registered one); repeat it to check several in one process (verl loads once)",
    )
    parser.add_argument("--tasks", type=int, default=2, help="episodes to play (default 2)")
    parser.add_argument("--response-length", type=int, default=4096)
    parser.add_argument("--prompt-length", type=int, default=4096, help="max_prompt_length (default 4096)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    options = parser.parse_args(argv)
    reports: list[dict[str, Any]] = []
    for env_id in options.env:
        reports += asyncio.run(
            check_environment(
                env_id,
                tasks=options.tasks,
                response_length=options.response_length,
                prompt_length=options.prompt_length,
            )
        )
    ok = all(report["agree"] for report in reports)
    if options.json:
        print(json.dumps({"ok": ok, "episodes": reports}, indent=2))
    else:
        for report in reports:
            print(
                f"{report['env_id']} task {report['task']}: loop {report['loop_reward']:+.4f} "
                f"direct {report['direct_reward']:+.4f} {'agree' if report['agree'] else 'DISAGREE'}; "
                f"{report['policy_tokens']} policy / {report['observation_tokens']} observation tokens, "
                f"{report['turns']} turns (limit {report['max_turns']})"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
