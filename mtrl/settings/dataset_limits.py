"""The default dataset limits: plain numbers, so `mtrl validate` applies them without loading the settings models.

``PipelineSettings`` takes its defaults from here, and ``mtrl.validation.dataset.Limits`` too, so a local check refuses
exactly what the pipeline's Validate step refuses on a deployment that keeps the defaults.
"""

from __future__ import annotations

DATASET_MAX_BYTES = 5 * 1024**3
DATASET_MAX_ROWS = 2_000_000
DATASET_MIN_ROWS = 1
DATASET_MAX_LINE_BYTES = 1024 * 1024
