"""Implementation of the IAM contract (tests/contract/iam_contract.py is the interface)."""
