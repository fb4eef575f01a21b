"""The verl trainer's AWS identity against every object a run reads and writes (issue 35 item 4, issue 36 item 5).

A run's pods get the deployment's trainer role (``stacks/constructs/verl_trainer_identity.py``, as synthesized)
through the run's own EKS Pod Identity association, whose session policy (``mtrl.backends.verl.run_identity``, what
the adapter passes at Provision) narrows it to the run. What the pods may do is the intersection of the two (EKS API
reference, ``CreatePodIdentityAssociation``: ``policy``; IAM User Guide, "Session policies"). The objects come from
the run document the trainer reads (``rayjob.run_document``: dataset, held-out rows, model copy, output prefix), with
the default ``run_eval_split`` of 0, so the dataset is the uploaded ``training-data/`` object and the held-out rows an
``eval-data/`` object. Another run's objects must be refused.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mtrl.backends.verl.config import plan_for
from mtrl.backends.verl.rayjob import run_document
from mtrl.backends.verl.run_identity import session_policy
from mtrl.contracts.backend import RunContext
from tests.contract.iam.policy import Outcome, evaluate, statements_of
from tests.contract.iam_contract import AppModel, AwsCall, Env, RolePolicies, requests_for
from tests.contract.recorded_runs import deployed_backend_settings, deployed_data_bucket
from tests.unit.backends.verl.verl_support import IMAGE, MODEL, MODEL_SUMS

ACCOUNT_IMAGE = IMAGE.replace("123456789012", "111122223333")
RUN_ID = "wordle-20261201T120000Z-0a1b2c3d"
OTHER_RUN_ID = "wordle-20261202T080000Z-99aa77bb"
TRAINER_ROLE = "VerlTrainer/Role"


@pytest.fixture(scope="module")
def verl_app_model() -> AppModel:
    return AppModel.synth(overrides={"verl_models": json.dumps([MODEL]), "verl_image_uri": ACCOUNT_IMAGE})


def _run(model: AppModel, run_id: str, dataset: str, held_out: str) -> tuple[RunContext, dict[str, Any], str]:
    bucket = deployed_data_bucket(model)
    settings = {
        **deployed_backend_settings(model, "verl"),
        "run_id": run_id,
        "instance_count": 1,
        "environment": "wordle",
        "run_timeout_minutes": 60,
    }
    run = RunContext(
        run_id=run_id,
        settings=settings,
        dataset_uri=f"s3://{bucket}/training-data/{dataset}",
        eval_dataset_uri=f"s3://{bucket}/eval-data/{held_out}",
        output_uri=f"s3://{bucket}/runs/{run_id}/",
    )
    plan = plan_for(settings)
    return run, session_policy(run, plan.model, region=model.region), bucket


def _object(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def _calls_of_a_run(model: AppModel, run: RunContext) -> list[AwsCall]:
    """What the trainer does with S3 in one run, from the document it reads (the ConfigMap's run.json)."""
    document = run_document(plan_for(run.settings), run)
    region = model.region
    reads = [document["dataset_uri"], document["eval_dataset_uri"], document["progress_uri"]]
    copy = document["model"]["s3_uri"]
    reads += [copy + "SHA256SUMS"] + [copy + line.split()[1] for line in MODEL_SUMS.decode().splitlines()]
    output = document["output_uri"]
    writes = [
        document["progress_uri"],
        output + "signals.jsonl",
        output + "evaluation.json",
        output + "checkpoints/global_step_2/actor/model_world_size_1_rank_0.pt",
        output + "output/huggingface/model.safetensors",
    ]
    calls = []
    for uri in reads:
        bucket, key = _object(uri)
        calls += [
            AwsCall("s3", "HeadObject", {"Bucket": bucket, "Key": key}, region),
            AwsCall("s3", "GetObject", {"Bucket": bucket, "Key": key}, region),
        ]
    for uri in writes:
        bucket, key = _object(uri)
        calls.append(AwsCall("s3", "PutObject", {"Bucket": bucket, "Key": key, "Body": b"x"}, region))
    bucket, key = _object(writes[-1])  # a large file goes up in parts (boto3's upload_file)
    calls += [
        AwsCall("s3", "CreateMultipartUpload", {"Bucket": bucket, "Key": key}, region),
        AwsCall("s3", "AbortMultipartUpload", {"Bucket": bucket, "Key": key, "UploadId": "u"}, region),
    ]
    return calls


def _effective(model: AppModel, role: RolePolicies, policy: dict[str, Any], call: AwsCall) -> list[str]:
    """Each IAM request of the call: 'allowed', or why the role or the session policy refuses it."""
    session = statements_of(policy, "session policy")
    outcomes = []
    for request in requests_for(call, Env.of(model)):
        by_role = role.decide(request)
        by_session = evaluate(session, request)
        if by_role.outcome is Outcome.ALLOWED and by_session.outcome is Outcome.ALLOWED:
            outcomes.append("allowed")
        else:
            outcomes.append(f"{request.action} {request.resource}: role {by_role.reason}; session {by_session.reason}")
    return outcomes


def test_every_object_a_run_reads_and_writes_is_allowed(verl_app_model: AppModel) -> None:
    role = verl_app_model.role(TRAINER_ROLE)
    run, policy, _ = _run(verl_app_model, RUN_ID, "wordle-demo.jsonl", "wordle-demo-eval.jsonl")
    calls = _calls_of_a_run(verl_app_model, run)
    refused = [o for call in calls for o in _effective(verl_app_model, role, policy, call) if o != "allowed"]
    assert refused == []
    # The data key is among what the S3 calls need (SSE-KMS), and it is reached through S3.
    kms = [r for call in calls for r in requests_for(call, Env.of(verl_app_model)) if r.action.startswith("kms:")]
    assert kms
    assert all(r.context["kms:ViaService"] == f"s3.{verl_app_model.region}.amazonaws.com" for r in kms)


def test_another_runs_objects_are_refused(verl_app_model: AppModel) -> None:
    role = verl_app_model.role(TRAINER_ROLE)
    _, policy, bucket = _run(verl_app_model, RUN_ID, "wordle-demo.jsonl", "wordle-demo-eval.jsonl")
    other, _, _ = _run(verl_app_model, OTHER_RUN_ID, "sop-support.jsonl", "sop-support-eval.jsonl")
    region = verl_app_model.region
    foreign = [
        AwsCall("s3", "GetObject", {"Bucket": bucket, "Key": f"runs/{OTHER_RUN_ID}/data/train.jsonl"}, region),
        AwsCall(
            "s3", "PutObject", {"Bucket": bucket, "Key": f"runs/{OTHER_RUN_ID}/progress.json", "Body": b""}, region
        ),
        AwsCall("s3", "GetObject", {"Bucket": bucket, "Key": "training-data/sop-support.jsonl"}, region),
        AwsCall("s3", "GetObject", {"Bucket": bucket, "Key": "eval-data/sop-support-eval.jsonl"}, region),
        # A sibling whose id starts with this run's id is another run too.
        AwsCall("s3", "GetObject", {"Bucket": bucket, "Key": f"runs/{RUN_ID}-x/progress.json"}, region),
    ]
    foreign += [c for c in _calls_of_a_run(verl_app_model, other) if "models-bucket" not in c.params["Bucket"]]
    for call in foreign:
        outcomes = _effective(verl_app_model, role, policy, call)
        assert outcomes[0] != "allowed", call
    # The session policy is what refuses them: the role alone is the upper bound every run shares.
    assert role.decide(requests_for(foreign[0], Env.of(verl_app_model))[0]).outcome is Outcome.ALLOWED


def test_the_role_itself_reaches_nothing_outside_the_runs_inputs_and_the_key_only_through_s3(
    verl_app_model: AppModel,
) -> None:
    role = verl_app_model.role(TRAINER_ROLE)
    _, _, bucket = _run(verl_app_model, RUN_ID, "wordle-demo.jsonl", "wordle-demo-eval.jsonl")
    region = verl_app_model.region
    env = Env.of(verl_app_model)
    for key in ("lifecycle-logs/node.log", "nova/packages/x.zip", "SHA256SUMS"):
        call = AwsCall("s3", "GetObject", {"Bucket": bucket, "Key": key}, region)
        assert role.decide(requests_for(call, env)[0]).outcome is Outcome.DENIED, key
    get = requests_for(AwsCall("s3", "GetObject", {"Bucket": bucket, "Key": f"runs/{RUN_ID}/x"}, region), env)
    (decrypt,) = [r for r in get if r.action == "kms:Decrypt"]
    direct = type(decrypt)(decrypt.action, decrypt.resource, {"kms:ViaService": "ec2.us-east-1.amazonaws.com"})
    assert role.decide(decrypt).outcome is Outcome.ALLOWED
    assert role.decide(direct).outcome is Outcome.DENIED
