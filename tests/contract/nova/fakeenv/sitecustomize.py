"""Loaded by every Python process started with this directory on PYTHONPATH: with NOVA_FAKE_AWS set, AWS is the fake
of nova_fake_aws.py (botocore level) for the whole process, the SDK included."""

import os

if os.environ.get("NOVA_FAKE_AWS"):
    import nova_fake_aws

    nova_fake_aws.install()
