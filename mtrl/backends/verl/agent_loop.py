"""verl's agent loop for mtrl environments: every rollout is an mtrl episode, played token-exact.

``MtrlAgentLoop`` (registered as ``mtrl``; rows choose it with ``agent_name: "mtrl"``) is a subclass of verl's real
``AgentLoopBase``. For each dataset row it makes the row's environment and plays it through the one episode driver
(``mtrl.envs.rollout.play_async``), so the turn limit, the system prompt, the string contract, the deadline and
``close()`` are exactly those of ``mtrl env try``, the reward workers and the serverless agent. Each turn:

- the conversation so far is the token sequence: the chat-templated prompt (system prompt + first observation), then
  the model's own sampled tokens (mask 1), then each observation rendered as a user turn (mask 0) — token in, token
  out, never re-templated (re-templating the final messages broke convergence in verl's experiments);
- ``server_manager.generate`` samples the next tokens, which are decoded into the action the environment steps;
- the episode stops at the environment's turn limit, its end, the deadline, or when the response length is used up.

``reward_score`` is the environment's reward (verl then skips its own reward computation); ``success``,
``evaluation``, malformed actions, how the episode ended and the row's task index go to
``extra_fields["reward_extra_info"]`` (the same keys for every sample: ``mtrl.backends.verl.bridge``). Each episode's
environment-side metrics, the reward's components among them, go out through the one metrics writer
(``mtrl.health.emf``), as the reward workers' do.

Rows (written by ``mtrl.backends.verl.train``): ``extra_info`` holds ``index`` (the task), ``env_id``, ``task_json``
(the mtrl row's ``metadata`` as JSON text) and ``env_args_json`` (or ``task``/``env_args`` as objects). The trainer
config's optional ``mtrl.episode_timeout_s`` is the deadline and ``mtrl.run_id`` the metrics' ``RunId``.

Only the stable core of verl's agent-loop API is used (``run``, ``AgentLoopOutput``, ``server_manager.generate``):
observations are tokenized here, so none of verl's churning Continuous Token helpers are needed. verl is pinned
exactly (requirements/verl.txt) and this module is tested against the real classes on CPU (``.venv-verl``).
"""

from __future__ import annotations

import json
import logging
import numbers
from collections.abc import Mapping
from typing import Any

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from mtrl.backends.verl.bridge import NAN, PromptTooLong, TokenBridge, chat_ids, reward_extra_info
from mtrl.envs.registry import load_spec
from mtrl.envs.rollout import Rollout, play_async
from mtrl.health.emf import EpisodeMetrics

log = logging.getLogger("mtrl.backends.verl.agent_loop")

AGENT_NAME = "mtrl"


def _decoded(extra: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``extra_info[name + "_json"]`` (what the dataset conversion writes), or ``extra_info[name]`` as an object."""
    text = extra.get(f"{name}_json")
    value = json.loads(text) if isinstance(text, str) else extra.get(name)
    return dict(value) if isinstance(value, Mapping) else {}


def _task_index(extra: Mapping[str, Any]) -> float:
    """The row's ``extra_info["index"]`` (its task; a NumPy integer once verl has read the parquet), NaN without one."""
    index = extra.get("index")
    return float(index) if isinstance(index, numbers.Real) and not isinstance(index, bool) else NAN


def _node_id() -> str:
    """The Ray node this agent-loop worker runs on ("local" outside a Ray worker)."""
    import ray  # noqa: PLC0415 - verl's own dependency, imported with it

    return str(ray.get_runtime_context().get_node_id()) if ray.is_initialized() else "local"


@register(AGENT_NAME)
class MtrlAgentLoop(AgentLoopBase):  # type: ignore[misc]
    """One mtrl episode per dataset row (see the module docstring)."""

    error_reward: float = -1.0  # only when the environment could not even score the episode

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        mtrl_config = self.config.get("mtrl") or {}
        timeout = mtrl_config.get("episode_timeout_s")
        self.episode_timeout_s = float(timeout) if timeout else None
        run_id = mtrl_config.get("run_id")
        self.metric_dimensions = {"RunId": str(run_id)} if run_id else {}

    def _publish(self, env_id: str, rollout: Rollout) -> None:
        """The episode's environment-side metrics, as the reward workers publish theirs (EMF lines on stdout, which
        the cluster's log agent ships to CloudWatch Logs)."""
        try:
            EpisodeMetrics(env_id, dimensions=self.metric_dimensions).publish([[rollout]])
        except Exception as error:  # metrics never change the reward
            log.warning("publishing the episode metrics failed: %s: %s", type(error).__name__, error)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra = kwargs.get("extra_info") or {}
        spec = load_spec(str(extra["env_id"]))
        # Where the episode runs (verl spreads its agent-loop workers over the cluster's nodes): one line per episode
        # in the worker's log, which Ray forwards to the trainer's output.
        log.warning("mtrl agent loop: %s episode on node %s", spec.env_id, _node_id())
        task = _decoded(extra, "task")
        bridge = TokenBridge(
            tokenizer=self.tokenizer,
            server_manager=self.server_manager,
            sampling_params=dict(sampling_params),
            response_length=int(self.rollout_config.response_length),
            prompt_length=int(self.rollout_config.prompt_length),
            chat_template_kwargs=dict(self.apply_chat_template_kwargs or {}),
        )
        env = spec.make(**_decoded(extra, "env_args"))
        rollout = await play_async(env, task, bridge.act, spec.rules(timeout_s=self.episode_timeout_s))
        if bridge.too_long is not None:  # the run's lengths cannot hold this environment's prompt: stop, naming them
            raise PromptTooLong(f"run {self.metric_dimensions.get('RunId', '?')}, {spec.env_id}: {bridge.too_long}")
        self._publish(spec.env_id, rollout)
        reward = rollout.reward if rollout.reward is not None else self.error_reward
        if not bridge.prompt_ids:  # the episode ended before its first action (done at reset, or an error)
            bridge._start(chat_ids(self.tokenizer, rollout.messages[:2], generation_prompt=True))
        if not bridge.response_ids:  # verl places the reward on the last response token: there must be one
            bridge._append([int(self.tokenizer.eos_token_id)], mask=0)
        return AgentLoopOutput(
            prompt_ids=bridge.prompt_ids,
            response_ids=bridge.response_ids,
            response_mask=bridge.response_mask,
            response_logprobs=bridge.response_logprobs,
            reward_score=reward,
            # The policy's turns, not the messages: verl logs num_turns/mean, which the health row reads as mean_turns.
            num_turns=rollout.turns,
            metrics=AgentLoopMetrics(),
            extra_fields={
                "reward_extra_info": reward_extra_info(
                    rollout, truncated=bridge.truncated, task_index=_task_index(extra)
                )
            },
        )
