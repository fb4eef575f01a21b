"""The pipeline phases the state machine calls, one module per phase (or small group): ``phase(runtime, event)``.

Events come from ``statemachine/pipeline.asl.json``: ``{"action", "run_id", "execution_arn", "state"}`` where
``state`` is the execution's state (the trigger input plus what earlier phases added). Every phase is idempotent
(Step Functions may retry it), and every error message names the run.

The order: ``register`` (the manifest's settings, resolved once) → ``slot`` → ``validate`` (the dataset; the run's
resolved inputs written once, ``inputs``) → ``preflight`` → ``provision`` → ``evaluate.baseline`` → ``train``
(submit, status) → ``evaluate`` → ``teardown`` → ``report``; ``reaper`` finishes executions that never reached
``report``. ``context`` holds what every phase shares; ``run_view`` is one run as one invocation sees it (the record,
its settings, inputs and adapter, each built once). This package imports nothing of its own on import, so each
Lambda function loads only its phase.
"""
