"""The serverless MTRL agent: plays one episode per rollout request of a SageMaker AgentRFT job (one function per
environment, ``MTRL_ENV_ID``); the runtime is ``mtrl.worker.serverless_agent``."""

from mtrl.worker.serverless_agent import handler

__all__ = ["handler"]
