"""Client library for a deployed mtrl: find the deployment, submit datasets, read and control runs.

Used by the `mtrl submit/runs/status/logs/cancel/cost RUN` commands and by the demo; nothing here imports
CDK, so it stays light enough for a CLI start-up.
"""
