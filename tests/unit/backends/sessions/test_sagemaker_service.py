"""The SageMaker training-session service against a fake session: the control plane through botocore (each request
validated against the ``sagemaker`` model before it is answered), the runtime over real HTTP (each request body
validated against the ``sagemakertrainingsessionruntime`` model by the server), and the requests compared with the
ones ``sagemaker-train`` 1.27.0 sends for the same run."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_fakes import REGION, FakeAws, new_session
from session_fakes import FAST as FAKE_PACING
from session_fakes import FakeSession, RuntimeServer, package_arn, runtime_server

from mtrl.backends.sessions import sagemaker_wire as wire
from mtrl.backends.sessions.sagemaker_service import Pacing, SageMakerTrainingService, session_clients
from mtrl.backends.sessions.sagemaker_wire import SageMakerSessionConfig
from mtrl.backends.sessions.service import AdamParams, Datum, SamplingParams, ServiceError, TokenUsage

LIBRARY_REQUESTS = Path(__file__).with_name("sagemaker_train_1_27_0_requests.json")
CONFIG = SageMakerSessionConfig(
    session_name="mtrl-s1",
    region=REGION,
    base_model_arn="arn:aws:sagemaker:us-west-2:aws:hub-content/SageMakerPublicHub/Model/qwen3-4b/1.0.0",
    role_arn="arn:aws:iam::123456789012:role/mtrl-sessions",
    output_s3_uri="s3://bucket/runs/r1/sessions",
    model_package_group_arn="arn:aws:sagemaker:us-west-2:123456789012:model-package-group/mtrl-sessions",
    lora_rank=16,
    lora_alpha=32,
)
FAST = replace(FAKE_PACING, retry_attempts=4, backoff_max_s=0.004)  # the retry tests need room for four tries
DATUM = Datum(
    tokens=(11, 12, 13, 14, 15),
    mask=(0.0, 0.0, 1.0, 1.0),
    sampling_logprobs=(-3.0, -2.0, -0.5, -1.25),  # the prompt positions' values are never sent
    advantages=(0.75, 0.75, 0.75, 0.75),
)
ADAM = AdamParams(learning_rate=1e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0, grad_clip_norm=1.0)
PARAMS = SamplingParams(max_tokens=512, temperature=1.0, top_p=1.0, seed=7)


class FakeTokenizer:
    eos_token_ids = (2,)

    def render(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool) -> list[int]:
        return [1, *(len(message["content"]) for message in messages)]

    def decode(self, tokens: Sequence[int]) -> str:
        return " ".join(map(str, tokens))


@dataclass
class World:
    fake: FakeSession
    server: RuntimeServer
    control: Any
    runtime: Any

    def open(self, pacing: Pacing = FAST, config: SageMakerSessionConfig = CONFIG) -> SageMakerTrainingService:
        return SageMakerTrainingService.open(
            config, control=self.control, runtime=self.runtime, tokenizer_factory=FakeTokenizer, pacing=pacing
        )

    def asked(self) -> list[str]:
        return [name for name, _ in self.fake.requests]


@pytest.fixture
def boto(monkeypatch: pytest.MonkeyPatch) -> boto3.Session:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    return new_session()


@pytest.fixture
def world(boto: boto3.Session) -> Iterator[World]:
    fake = FakeSession()
    fake.attach(FakeAws(boto))
    with runtime_server(fake, boto) as server:
        control, runtime = session_clients(boto, REGION, runtime_endpoint_url=server.url)
        yield World(fake, server, control, runtime)


def test_a_whole_run_creates_waits_drives_reads_usage_and_deletes(world: World) -> None:
    service = world.open()
    assert world.asked()[:4] == [
        "CreateTrainingSession",
        *["DescribeTrainingSession"] * 3,
    ]  # Created, Scheduled, Running
    first = service.sample([1, 2, 3], PARAMS, 2)
    assert [sequence.tokens for sequence in first] == [(100, 7, 2), (101, 7, 2)]
    assert first[1].logprobs == (-0.5, -0.25, -0.125)
    assert first[1].stop_reason == "stop"
    result = service.forward_backward([DATUM], "importance_sampling")
    assert result.loss == 0.5
    assert result.trainer_logprobs == ((-0.25, -0.25, -0.75, -1.5),)  # the fake's trainer: the sampler's, shifted
    service.optim_step(ADAM)
    assert service.save_weights_for_sampler("step-1") == package_arn(1)
    assert service.save_state("state-1") == package_arn(2)
    service.load_state(package_arn(2))
    service.sample([1, 2, 3], PARAMS, 1)
    assert world.fake.requested("ExecuteSamplingOperation")[-1]["operationConfig"]["sample"]["modelPackageArn"] == (
        package_arn(1)
    )
    assert service.usage() == TokenUsage(prefill=9, sample=9, train=4)
    assert world.fake.sequence_numbers == [1, 2, 3, 4, 5]
    tokens = [request["clientToken"] for request in world.fake.requested("ExecuteTrainingOperation")]
    assert len(set(tokens)) == 5
    service.close()
    assert world.asked()[-3:] == ["StopTrainingSession", "DescribeTrainingSession", "DeleteTrainingSession"]
    assert world.fake.status == "Deleted"
    assert service.usage() == TokenUsage(prefill=9, sample=9, train=4)  # the last reading, kept after the delete


def test_requests_match_what_sagemaker_train_sends(world: World) -> None:
    """The same run through the library's own clients was recorded (record_sagemaker_train_requests.py): datum
    fields, loss name, sequence numbers, optimizer, save/load and sampling payloads must be the same."""
    library = json.loads(LIBRARY_REQUESTS.read_text())
    assert library["version"] == "1.27.0"
    service = world.open()
    service.forward_backward([DATUM], "importance_sampling")
    service.optim_step(ADAM)
    service.save_weights_for_sampler("step-1")
    service.save_state("state-1")
    service.load_state(package_arn(2))
    service.sample([1, 2, 3], PARAMS, 4)
    ours = [
        {"operation": name, "params": {key: value for key, value in request.items() if key != "clientToken"}}
        for name, request in world.fake.requests
        if name in ("CreateTrainingSession", "ExecuteTrainingOperation", "ExecuteSamplingOperation")
    ]
    assert ours == library["requests"]
    service.close()


def test_a_request_outside_the_model_is_mtrls_fault_and_frees_its_sequence_number(world: World) -> None:
    service = world.open()
    with pytest.raises(ServiceError, match="does not fit the service model") as raised:
        service.optim_step(replace(ADAM, eps=0.0))  # botocore refuses it: the model's minimum is 1e-16
    assert not raised.value.infrastructure
    with pytest.raises(ServiceError, match="ValidationException") as raised:
        service.optim_step(replace(ADAM, learning_rate=0.5))  # the service refuses it: at most 0.01
    assert not raised.value.infrastructure
    service.optim_step(ADAM)
    assert world.fake.sequence_numbers == [1]  # neither refused request took a number, so no gap blocks the session
    with pytest.raises(ServiceError) as raised:
        service.sample([1], replace(PARAMS, temperature=3.0), 1)
    assert not raised.value.infrastructure
    service.close()


def test_a_session_that_fails_to_start_says_why_and_is_deleted(world: World) -> None:
    world.fake.coming_up = ["Created", "Failed"]
    world.fake.error_details = "no capacity for the base model"
    with pytest.raises(ServiceError, match=r"is Failed \(no capacity for the base model\), not Running") as raised:
        world.open()
    assert raised.value.infrastructure
    assert "StopTrainingSession" not in world.asked()  # a Failed session has nothing to stop
    assert world.asked()[-1] == "DeleteTrainingSession"
    assert world.fake.status == "Deleted"


def test_a_create_refused_by_botocore_leaves_nothing_behind(world: World) -> None:
    with pytest.raises(ServiceError) as raised:
        world.open(config=replace(CONFIG, role_arn="mtrl-sessions"))
    assert not raised.value.infrastructure
    assert "CreateTrainingSession" not in world.asked()
    assert world.asked() == ["DescribeTrainingSession"]  # the teardown looked, found none, and stopped nothing


def test_a_session_that_expires_mid_run_names_the_status(world: World) -> None:
    service = world.open()
    service.forward_backward([DATUM], "importance_sampling")
    world.fake.expire_on = "optimizerStep"
    with pytest.raises(ServiceError, match=r"optimizerStep: training session 'mtrl-s1' is Expired \(the session was"):
        service.optim_step(ADAM)
    service.close()
    assert "StopTrainingSession" not in world.asked()
    assert world.fake.status == "Deleted"


def test_an_operation_that_fails_is_an_infrastructure_error_and_the_session_goes_on(world: World) -> None:
    world.fake.fail["forwardBackward"] = "CUDA out of memory"
    service = world.open()
    with pytest.raises(ServiceError, match="forwardBackward operation op-1 Failed: CUDA out of memory") as raised:
        service.forward_backward([DATUM], "ppo")
    assert raised.value.infrastructure
    service.optim_step(ADAM)
    assert world.fake.sequence_numbers == [1, 2]
    service.close()


def test_throttling_and_service_faults_are_retried_with_backoff_and_then_given_up(world: World) -> None:
    world.fake.throttle = {"ExecuteSamplingOperation": 2, "GetTrainingOperationResult": 3}
    world.fake.faults = {"GetSamplingOperationResult": 2}
    service = world.open()
    assert len(service.sample([1], PARAMS, 1)) == 1
    assert len(world.fake.requested("ExecuteSamplingOperation")) == 3
    assert len(world.fake.requested("GetSamplingOperationResult")) == 4  # two faults, one InProgress, Completed
    service.optim_step(ADAM)
    assert world.fake.sequence_numbers == [1]
    world.fake.throttle = {"ExecuteTrainingOperation": 4}
    with pytest.raises(
        ServiceError, match="ExecuteTrainingOperation failed after 4 attempts: ThrottlingException"
    ) as raised:
        service.optim_step(ADAM)
    assert raised.value.infrastructure
    service.close()


def test_close_while_an_operation_runs_cancels_it_then_stops_and_deletes(world: World) -> None:
    world.fake.hold = {"forwardBackward"}
    service = world.open(replace(FAST, operation_timeout_s=60))
    errors: list[ServiceError] = []

    def train() -> None:
        try:
            service.forward_backward([DATUM], "importance_sampling")
        except ServiceError as error:
            errors.append(error)

    worker = threading.Thread(target=train)
    worker.start()
    deadline = time.monotonic() + 5
    while not world.fake.operations and time.monotonic() < deadline:
        time.sleep(0.005)
    service.close()
    worker.join(timeout=5)
    assert not worker.is_alive()
    # Whether close() lands while the operation is being polled or between two polls is the scheduler's choice (a
    # loaded machine shows both): either way the operation ends with the session closed, as infrastructure.
    assert len(errors) == 1
    assert str(errors[0]) in {
        "forwardBackward: training session 'mtrl-s1' was closed while it ran",
        "forwardBackward: training session 'mtrl-s1' is closed",
    }
    assert errors[0].infrastructure
    assert "StopTrainingSession" in world.asked()
    assert world.fake.status == "Deleted"


def test_close_is_idempotent_and_a_closed_service_refuses_work(world: World) -> None:
    with world.open() as service:
        assert service.tokenizer is service.tokenizer  # built once, on first use
    asked = len(world.fake.requests)
    service.close()
    assert len(world.fake.requests) == asked
    with pytest.raises(ServiceError, match="is closed"):
        service.optim_step(ADAM)
    assert len(world.fake.requests) == asked


def test_a_batch_too_large_for_one_request_is_sent_as_consecutive_operations(world: World) -> None:
    service = world.open(replace(FAST, chunk_max_datums=2))
    result = service.forward_backward([DATUM, DATUM, DATUM], "importance_sampling")
    assert world.fake.sequence_numbers == [1, 2]
    assert result.loss == pytest.approx((2 * 1.0 + 1 * 0.5) / 3)  # the fake reports 0.5 per datum of its chunk
    assert len(result.trainer_logprobs) == 3
    service.close()


def test_a_datum_goes_on_the_wire_with_masked_positions_at_zero() -> None:
    datum = wire.wire_datum(DATUM)
    assert datum["modelInput"] == {"chunks": [{"tokens": [11, 12, 13, 14], "type": "encoded_text"}]}
    inputs = datum["lossFnInputs"]
    assert inputs["target_tokens"] == {"data": [12, 13, 14, 15], "dtype": "int64", "shape": [4]}
    assert inputs["weights"]["data"] == [0.0, 0.0, 1.0, 1.0]
    assert inputs["logprobs"]["data"] == [0.0, 0.0, -0.5, -1.25]
    assert inputs["advantages"] == {"data": [0.0, 0.0, 0.75, 0.75], "dtype": "float32", "shape": [4]}


@pytest.mark.parametrize(
    ("raw", "params", "tokens", "reason"),
    [
        ({"stopReason": "length", "tokens": [5, 6, 2, 9], "logprobs": [-1, -1, -1, -1]}, (2,), (5, 6, 2), "stop"),
        ({"stopReason": "length", "tokens": [5, 6, 7, 8], "logprobs": [-1, -1, -1, -1]}, (), (5, 6, 7), "length"),
        ({"stopReason": "stop", "tokens": [5, 6], "logprobs": [-1, -1]}, (), (5, 6), "stop"),
        ({"stopReason": "length", "tokens": [5, 6, 7, 2], "logprobs": [-1, -1, -1, -1]}, (2,), (5, 6, 7), "length"),
    ],
)
def test_a_completion_is_cut_at_the_first_stop_token_then_at_max_tokens(
    raw: dict[str, Any], params: tuple[int, ...], tokens: tuple[int, ...], reason: str
) -> None:
    sequence = wire.completion(raw, SamplingParams(max_tokens=3, stop_token_ids=params))
    assert (sequence.tokens, sequence.stop_reason) == (tokens, reason)
    assert len(sequence.logprobs) == len(tokens)


def test_a_small_token_budget_is_requested_at_the_service_floor() -> None:
    operation = wire.sample_operation([1], SamplingParams(max_tokens=16, stop_token_ids=(2,)), 3, None)
    assert operation["sample"]["samplingParams"]["maxTokens"] == wire.SERVICE_MIN_MAX_TOKENS
    assert "modelPackageArn" not in operation["sample"]


def test_a_completion_without_logprobs_is_an_infrastructure_error() -> None:
    with pytest.raises(ServiceError, match="2 sampled tokens with no logprobs") as raised:
        wire.completion({"stopReason": "stop", "tokens": [1, 2]}, PARAMS)
    assert raised.value.infrastructure


def test_forward_backward_without_a_reported_loss_or_logprobs_is_nan_and_empty() -> None:
    result = wire.forward_backward_result([{"metrics": {"mfu": 0.3}}], [[4, 2]])
    assert math.isnan(result.loss)
    assert result.trainer_logprobs == ((), ())


def test_create_request_carries_vpc_eula_kms_and_tags_when_set() -> None:
    config = replace(
        CONFIG,
        accept_eula=True,
        kms_key_arn="arn:aws:kms:us-east-1:123456789012:key/0a1b2c3d-aaaa-bbbb-cccc-0123456789ab",
        subnet_ids=("subnet-1",),
        security_group_ids=("sg-1",),
        tags={"mtrl:run": "r1"},
    )
    request = wire.create_session_request(config)
    model = new_session()._session.get_service_model("sagemaker").operation_model("CreateTrainingSession")
    from botocore.validate import ParamValidator

    assert not ParamValidator().validate(request, model.input_shape).has_errors()
    assert request["ModelConfig"]["AcceptEula"] is True
    assert request["VpcConfig"] == {"Subnets": ["subnet-1"], "SecurityGroupIds": ["sg-1"]}
    with pytest.raises(ValueError, match="both subnet_ids and security_group_ids"):
        replace(CONFIG, subnet_ids=("subnet-1",))


def test_session_names_fit_the_model_and_differ_per_attempt() -> None:
    first, second = wire.session_name("run/2026-12-07T20:00:00Z" + "x" * 80, 1), wire.session_name("r", 2)
    assert len(first) <= wire.SESSION_NAME_MAX_LENGTH
    assert first.startswith("mtrl-")
    assert wire.session_name("r", 1) != second
