"""The ``serverless`` backend: SageMaker AI serverless multi-turn RL (``CreateJob``, ``JobCategory=AgentRFT``).

Modules: ``adapter`` (the pipeline's verbs), ``settings`` (what a run is submitted with, which agent it uses),
``options`` (the one table of per-run choices and the region/model table), ``documents`` (dataset rows and
``JobConfigDocument``), ``status`` (``DescribeJob`` → status, billable tokens), ``smoke`` (the agent smoke test).
Nothing is imported at package import, so reading the backend's descriptor stays cheap.
"""
