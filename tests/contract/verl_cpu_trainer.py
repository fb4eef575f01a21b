"""The stand-in's trainer: ``MTRL_VERL_TRAINER="python tests/contract/verl_cpu_trainer.py"`` (a path: a ``tests``
package in .venv-verl's site-packages shadows this checkout's).

It takes the command line the entrypoint gives verl (the run's Hydra overrides) and first runs verl 0.9.1's own
``verl.trainer.main_ppo.main`` with it, in this process, which on a machine without CUDA stops where it validates the
rollout engine (vLLM: the traceback is printed, the stand-in asserts it). Then it goes on as far as a CPU allows:
it composes verl's own ``ppo_trainer`` config with the same overrides and does what verl's RayPPOTrainer does for a
rollout,
with verl's own classes: the dataset from the staged parquet (``create_rl_dataset``, verl/trainer/ppo/utils.py), a
batch as the trainer pops it (``RayPPOTrainer._get_gen_batch``, verl/trainer/ppo/ray_trainer.py), repeated
``rollout.n`` times, and ``AgentLoopWorker.generate_sequences`` (verl/experimental/agent_loop/agent_loop.py) as a Ray
actor placed on the node that holds the GPU. The only stand-in is the LLM server (vLLM needs CUDA): a scripted client
with verl's ``generate`` interface that plays each environment's example actions (``mtrl.backends.verl.smoke``).

It prints one JSON line: the batch's shape, its rewards and the node the agent-loop worker ran on.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

ROWS = 2  # dataset rows in the batch (each played rollout.n times)


def verl_main(argv: list[str]) -> None:
    """verl's own entry point with the run's overrides (HYDRA_FULL_ERROR: the exception, not Hydra's summary)."""
    import traceback

    from hydra.core.global_hydra import GlobalHydra
    from verl.trainer import main_ppo

    os.environ["HYDRA_FULL_ERROR"] = "1"
    sys.argv = ["verl.trainer.main_ppo", *argv]
    try:
        main_ppo.main()
    except Exception:
        traceback.print_exc()
        print("verl main_ppo stopped", flush=True)
    finally:
        GlobalHydra.instance().clear()


def main(argv: list[str]) -> int:
    verl_main(argv)
    import ray
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.dataset.rl_dataset import collate_fn
    from verl.workers.config import HFModelConfig

    from mtrl.backends.verl.smoke import ScriptedServer, script
    from mtrl.backends.verl.train import composed_config
    from mtrl.envs.registry import load_spec

    config = composed_config(argv)
    model: HFModelConfig = omega_conf_to_dataclass(config.actor_rollout_ref.model)
    dataset = create_rl_dataset(config.data.train_files, config.data, model.tokenizer, None, is_train=True)
    rows = [dataset[index] for index in range(min(ROWS, len(dataset)))]
    batch = DataProto.from_single_dict(collate_fn(rows))
    keep = {"data_source", "reward_model", "extra_info", "uid"} & batch.non_tensor_batch.keys()
    gen_batch = batch.pop(batch_keys=[], non_tensor_batch_keys=list(set(batch.non_tensor_batch) - keep))
    gen_batch.non_tensor_batch.update(batch.non_tensor_batch)
    gen_batch = gen_batch.repeat(repeat_times=int(config.actor_rollout_ref.rollout.n), interleave=True)
    env_id = str(gen_batch.non_tensor_batch["extra_info"][0]["env_id"])

    class CpuAgentLoopWorker(AgentLoopWorker):  # type: ignore[misc]
        def __init__(self, config: Any, actions: list[str]) -> None:
            tokenizer = omega_conf_to_dataclass(config.actor_rollout_ref.model).tokenizer
            super().__init__(config, llm_client=ScriptedServer(tokenizer, actions))

        def node(self) -> str:
            return str(ray.get_runtime_context().get_node_id())

    ray.init(**({} if os.environ.get("RAY_ADDRESS") else {"num_gpus": 1}))  # off the stand-in: a local Ray
    worker = ray.remote(num_gpus=1)(CpuAgentLoopWorker).remote(config, script(load_spec(env_id)))
    output = ray.get(worker.generate_sequences.remote(gen_batch))
    node = ray.get(worker.node.remote())
    scores = output.batch["rm_scores"].sum(dim=-1).tolist()
    report = {
        "use_v1": bool(config.trainer.use_v1),
        "env_id": env_id,
        "node": node,
        "samples": len(output),
        "prompts_shape": list(output.batch["prompts"].shape),
        "responses_shape": list(output.batch["responses"].shape),
        "rewards": scores,
        # samples whose first prompt overflowed max_prompt_length into the response window (mask 0 first)
        "overflowed": int((output.batch["response_mask"][:, 0] == 0).sum()),
    }
    print("mtrl cpu rollout: " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
