"""The agent smoke test: invoke the run's agent with a fake job ARN of this account and say what the answer means.

The check of the AWS ML Blog's Wordle hands-on guide (its smoke-test step; reference A.7): the agent parses the task,
authenticates to the job runtime and is told 400 "Could not find job" (wired); a 403 "not authorized to access this
resource" means the job ARN names another account (or the agent role lacks AmazonSageMakerJobRuntimeAccess); a 30 s
timeout means the agent's HTTP server never started (an AgentCore agent needs BedrockAgentCoreApp; the RFT decorator
alone starts none). The runtime's answer to an AgentCore agent is usually only in the runtime's logs, which are read
after the invocation.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from botocore.exceptions import ClientError, ReadTimeoutError

from mtrl.backends._aws import Arn, AwsClients, error_code, error_message
from mtrl.backends.serverless.settings import Agent

SmokeOutcome = Literal["ok", "cross_account", "timeout", "other"]

# The service's words, and the diagnosis our agent Lambda (lambda/serverless_agent) returns for each case.
NOT_FOUND = re.compile(r"could not find job|job not found|ResourceNotFoundException", re.IGNORECASE)
FORBIDDEN = re.compile(r"\b403\b|not authorized to access this resource|access ?denied|Forbidden", re.IGNORECASE)
TIMEOUT = re.compile(r"timed? ?out|timeout", re.IGNORECASE)


@dataclass(frozen=True)
class SmokeResult:
    outcome: SmokeOutcome
    message: str
    evidence: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def classify_smoke(evidence: str, *, timed_out: bool, job_arn: str, timeout_seconds: int) -> SmokeResult:
    """What an agent invocation with a fake job ARN tells us about its wiring (reference A.7)."""
    account = job_arn.split(":")[4] if job_arn.count(":") >= 5 else "?"
    if NOT_FOUND.search(evidence):
        return SmokeResult(
            "ok",
            "the agent parsed the task and reached the job runtime, which answered 400 'Could not find job' for the "
            "fake job: the agent is wired correctly",
        )
    if FORBIDDEN.search(evidence):
        return SmokeResult(
            "cross_account",
            f"the job runtime answered 403 to the agent: the job ARN's account ({account}) is not the account the "
            "agent runs in, or the agent's role lacks AmazonSageMakerJobRuntimeAccess",
            evidence,
        )
    if timed_out or TIMEOUT.search(evidence):
        return SmokeResult(
            "timeout",
            f"the agent did not answer within {timeout_seconds} s: its HTTP server never started (an AgentCore agent "
            "needs BedrockAgentCoreApp serving :8080; the RFT decorator alone starts no server)",
            evidence,
        )
    return SmokeResult("other", f"unexpected agent response: {evidence.strip() or '(empty)'}", evidence)


def smoke_payload(prompt: str, job_arn: str, region: str, rollout_id: str) -> dict[str, Any]:
    return {
        "prompt": prompt,
        "metadata": {"jobArn": job_arn, "rolloutId": rollout_id, "region": region},
        "inferenceParams": {"maxTokens": 64},
    }


@dataclass
class AgentProbe:
    """Invokes an agent once and returns ``(evidence, timed_out)``."""

    clients: AwsClients
    region: str
    sleep: Callable[[float], None] = time.sleep
    log_wait_attempts: int = 3

    def invoke(self, agent: Agent, payload: dict[str, Any], timeout: int, token: str) -> tuple[str, bool]:
        if agent.kind == "lambda":
            return self._invoke_lambda(agent, payload, timeout)
        return self._invoke_agentcore(agent, payload, timeout, token)

    def _invoke_lambda(self, agent: Agent, payload: dict[str, Any], timeout: int) -> tuple[str, bool]:
        client = self.clients.client("lambda", self.region, read_timeout=timeout)
        try:
            response = client.invoke(
                FunctionName=agent.arn,
                InvocationType="RequestResponse",
                LogType="Tail",
                Payload=json.dumps(payload).encode(),
            )
        except ReadTimeoutError as error:
            return str(error), True
        except ClientError as error:
            return f"{error_code(error)}: {error_message(error)}", False
        parts = [response["Payload"].read().decode(errors="replace")]
        if response.get("FunctionError"):
            parts.append(f"FunctionError: {response['FunctionError']}")
        if response.get("LogResult"):
            parts.append(base64.b64decode(response["LogResult"]).decode(errors="replace"))
        return "\n".join(parts), False

    def _invoke_agentcore(self, agent: Agent, payload: dict[str, Any], timeout: int, token: str) -> tuple[str, bool]:
        client = self.clients.client("bedrock-agentcore", self.region, read_timeout=timeout)
        started_ms = int(time.time() * 1000)
        try:
            response = client.invoke_agent_runtime(
                agentRuntimeArn=agent.arn,
                qualifier=agent.qualifier,
                runtimeSessionId=f"mtrl-smoke-session-{token}-{started_ms}".ljust(33, "0"),
                contentType="application/json",
                accept="application/json",
                payload=json.dumps(payload).encode(),
            )
            body = response["response"].read().decode(errors="replace")
            timed_out = False
        except ReadTimeoutError as error:
            body, timed_out = str(error), True
        except ClientError as error:
            body, timed_out = f"{error_code(error)}: {error_message(error)}", False
        if timed_out or NOT_FOUND.search(body):
            return body, timed_out
        # The runtime's answer to the agent is usually only in the agent's logs (the agent returns a low reward).
        return "\n".join([body, *self._agentcore_logs(agent, started_ms)]), False

    def _agentcore_logs(self, agent: Agent, since_ms: int) -> list[str]:
        runtime_id = Arn.parse(agent.arn).resource.split("/")[-1]
        group = f"/aws/bedrock-agentcore/runtimes/{runtime_id}-{agent.qualifier}"
        logs = self.clients.client("logs", self.region)
        messages: list[str] = []
        for attempt in range(self.log_wait_attempts):
            try:
                events = logs.filter_log_events(logGroupName=group, startTime=since_ms, limit=200).get("events", [])
            except ClientError as error:
                return [f"(agent logs unavailable in {group}: {error_message(error)})"]
            messages = [str(event.get("message", "")) for event in events]
            if any(NOT_FOUND.search(m) or FORBIDDEN.search(m) for m in messages):
                return messages
            if attempt + 1 < self.log_wait_attempts:
                self.sleep(5)  # log delivery lags the invocation by a few seconds
        return messages
