"""The run table as the data stack defines it (``stacks/constructs/data_store.py``: ``pk``/``sk`` strings, on
demand), created on moto for the tests that need a plain one; tests/unit/stacks/test_data_stack.py checks the
deployed key schema."""

from __future__ import annotations

from typing import Any


def create_run_table(dynamodb: Any, name: str) -> None:
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
