"""The run table as the data stack defines it (``stacks/constructs/data_store.py``: ``pk``/``sk`` strings, on
demand, and with ``listed`` its listing index), created on moto for the tests that need one;
tests/unit/stacks/test_data_stack.py checks the deployed key schema."""

from __future__ import annotations

from typing import Any

LISTING_INDEX = "by_kind"  # stacks.constructs.data_store.RUN_TABLE_LISTING_INDEX (not imported: it pulls in CDK)


def create_run_table(dynamodb: Any, name: str, *, listed: bool = False) -> None:
    """``listed``: with the listing index (every item of one kind, newest first) the CLI and the guard query."""
    index_keys = ("kind", "created_at") if listed else ()
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"} for key in ("pk", "sk", *index_keys)],
        BillingMode="PAY_PER_REQUEST",
        **(
            {
                "GlobalSecondaryIndexes": [
                    {
                        "IndexName": LISTING_INDEX,
                        "KeySchema": [
                            {"AttributeName": "kind", "KeyType": "HASH"},
                            {"AttributeName": "created_at", "KeyType": "RANGE"},
                        ],
                        "Projection": {"ProjectionType": "ALL"},
                    }
                ]
            }
            if listed
            else {}
        ),
    )
