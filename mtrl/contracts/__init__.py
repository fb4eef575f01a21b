"""The contracts at the bottom of mtrl: what an environment, a backend and a run's per-run options must be.

This package imports nothing else of mtrl (the import-layer contract in ``pyproject.toml`` enforces it), so every
layer above may depend on it: the environment contract (``environment``), the backend adapter interface
(``backend``), its descriptor and the one registry of backends (``descriptor``, ``registry``), the per-run options
model (``run_options``) and the errors the pipeline raises, whose class names are the state machine's error names
(``errors``).
"""
