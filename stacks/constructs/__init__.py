"""Reusable constructs a platform team can compose into its own stacks.

Each construct takes keyword-only typed props and exposes the resources it creates as attributes.
"""

from stacks.constructs.data_store import DataStore
from stacks.constructs.encrypted_log_group import EncryptedLogGroup
from stacks.constructs.network import Network

__all__ = ["DataStore", "EncryptedLogGroup", "Network"]
