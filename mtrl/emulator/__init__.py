"""The embedded AWS emulator (MiniStack) for the offline demo and the emulator tests.

``mtrl.emulator.process`` starts and stops MiniStack from its own environment (``.venv-emulator``) on
127.0.0.1; ``mtrl.emulator.deploy`` fakes the CDK bootstrap, publishes a synthesized app's file assets and
deploys its templates with CloudFormation, as ``cdk deploy`` would against AWS.
"""

from mtrl.emulator.deploy import DeployError, StackDeployment, deploy_app, deploy_stack, fake_bootstrap
from mtrl.emulator.process import Emulator, EmulatorError, emulator_python, find_emulator

__all__ = [
    "DeployError",
    "Emulator",
    "EmulatorError",
    "StackDeployment",
    "deploy_app",
    "deploy_stack",
    "emulator_python",
    "fake_bootstrap",
    "find_emulator",
]
