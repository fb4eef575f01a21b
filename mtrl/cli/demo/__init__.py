"""`mtrl demo` (``make demo``): the real pipeline deployed into an embedded AWS emulator, training on the CPU.

- ``command``: the `mtrl demo` command (light: the rest loads when the demo runs).
- ``plan``: what the demo trains (environment, sample dataset, policy, manifest).
- ``synth``: the app's emulator variant synthesized with the CDK CLI.
- ``run``: the five steps, from the synth to the rejected dataset.
- ``deployment``: the deployment inside the emulator (stack outputs, runs, their outputs) and `mtrl` aimed at it.
- ``tables``: what the demo prints about a run.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]  # the checkout the demo synthesizes and runs `mtrl` in
