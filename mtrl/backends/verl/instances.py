"""GPUs, EFA interfaces, vCPUs and memory per SageMaker instance type: what a Ray worker pod requests on one node.

Figures from the Amazon EC2 accelerated-computing instance specifications (GPUs, vCPUs, memory in GiB;
"Maximum EFA interfaces" in the EFA supported-instance list); HyperPod ``ml.`` types are the EC2 types of the same
name. An instance type missing here is refused with its name rather than guessed (add it here with its source).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceFacts:
    gpus: int
    efa_interfaces: int  # 0: the type has no EFA
    vcpus: int
    memory_gib: int


INSTANCE_FACTS: dict[str, InstanceFacts] = {
    "ml.g5.xlarge": InstanceFacts(1, 0, 4, 16),
    "ml.g5.2xlarge": InstanceFacts(1, 0, 8, 32),
    "ml.g5.4xlarge": InstanceFacts(1, 0, 16, 64),
    "ml.g5.8xlarge": InstanceFacts(1, 1, 32, 128),
    "ml.g5.12xlarge": InstanceFacts(4, 1, 48, 192),
    "ml.g5.16xlarge": InstanceFacts(1, 1, 64, 256),
    "ml.g5.24xlarge": InstanceFacts(4, 1, 96, 384),
    "ml.g5.48xlarge": InstanceFacts(8, 1, 192, 768),
    "ml.g6e.xlarge": InstanceFacts(1, 0, 4, 32),
    "ml.g6e.2xlarge": InstanceFacts(1, 0, 8, 64),
    "ml.g6e.4xlarge": InstanceFacts(1, 0, 16, 128),
    "ml.g6e.8xlarge": InstanceFacts(1, 1, 32, 256),
    "ml.g6e.12xlarge": InstanceFacts(4, 1, 48, 384),
    "ml.g6e.16xlarge": InstanceFacts(1, 1, 64, 512),
    "ml.g6e.24xlarge": InstanceFacts(4, 2, 96, 768),
    "ml.g6e.48xlarge": InstanceFacts(8, 4, 192, 1536),
    "ml.p4d.24xlarge": InstanceFacts(8, 4, 96, 1152),
    "ml.p4de.24xlarge": InstanceFacts(8, 4, 96, 1152),
    "ml.p5.48xlarge": InstanceFacts(8, 32, 192, 2048),
    "ml.p5e.48xlarge": InstanceFacts(8, 32, 192, 2048),
    "ml.p5en.48xlarge": InstanceFacts(8, 16, 192, 2048),
}


def instance_facts(instance_type: str) -> InstanceFacts | None:
    return INSTANCE_FACTS.get(instance_type)
