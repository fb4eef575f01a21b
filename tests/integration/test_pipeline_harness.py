"""The pipeline harness's speed patches of moto change no answer: the same DynamoDB calls give byte-identical
responses with and without them (the patched serializer memo is the one that could)."""

from __future__ import annotations

from typing import Any

import boto3
from moto import mock_aws

from tests.integration import moto_speedups
from tests.integration.moto_speedups import patched_moto
from tests.integration.pipeline_support import REGION
from tests.run_table import create_run_table

TABLE = "harness-check"
RECORD: dict[str, Any] = {
    "pk": {"S": "run-1"},
    "sk": {"S": "RUN"},
    "status": {"S": "RUNNING"},
    "phases": {"L": [{"M": {"name": {"S": "validate"}, "at": {"N": "1.5"}}}, {"S": "train"}]},
    "settings": {
        "M": {"steps": {"N": "4"}, "tags": {"SS": ["a", "b"]}, "blob": {"B": b"\x00\x01"}, "none": {"NULL": True}}
    },
    "resources": {"L": [{"M": {"kind": {"S": "workers"}, "removed": {"BOOL": False}, "ids": {"NS": ["1", "2"]}}}]},
}


def _raw_responses() -> list[bytes]:
    ddb = boto3.client("dynamodb", region_name=REGION)
    bodies: list[bytes] = []
    ddb.meta.events.register("before-parse.dynamodb.*", lambda response_dict, **_: bodies.append(response_dict["body"]))
    ddb.get_item(TableName=TABLE, Key={"pk": RECORD["pk"], "sk": RECORD["sk"]})
    ddb.scan(TableName=TABLE)
    ddb.query(TableName=TABLE, KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": RECORD["pk"]})
    ddb.update_item(
        TableName=TABLE,
        Key={"pk": RECORD["pk"], "sk": RECORD["sk"]},
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":s": {"S": "SUCCEEDED"}},
        ReturnValues="ALL_OLD",
    )
    return bodies


def test_dynamodb_answers_byte_for_byte_as_moto_ships_them(aws_credentials: None) -> None:
    answers = []
    # Two fresh moto worlds, one answering as shipped and one through the harness's patches.
    for patched in (False, True):
        with mock_aws():
            ddb = boto3.client("dynamodb", region_name=REGION)
            create_run_table(ddb, TABLE)
            ddb.put_item(TableName=TABLE, Item=RECORD)
            if patched:
                with patched_moto():
                    answers.append(_raw_responses())
            else:
                answers.append(_raw_responses())
    shipped, patched_answers = answers
    assert len(shipped) == 4
    assert b"AAE=" in shipped[0]  # the binary member, base64 as DynamoDB sends it
    assert moto_speedups._ALIASES  # the memo answered
    assert patched_answers == shipped
