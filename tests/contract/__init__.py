"""Contract tests: mtrl's code and the real SDKs it drives, checked against what AWS and the synthesized IAM allow."""
