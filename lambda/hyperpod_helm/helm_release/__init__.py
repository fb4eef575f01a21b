"""Install one pinned Helm release into the EKS cluster, idempotently: the Helm installer Lambda's code
(``lambda/hyperpod_helm/handler.py`` is its CloudFormation entry point).

- ``custom_resource``: the CloudFormation protocol: exactly one response per event (``handler``).
- ``release``: what a Create, Update or Delete does (``apply``).
- ``chart_source``: where the chart comes from (a pinned commit, verified, or objects rendered at synth).
- ``commands``: helm and kubectl against the cluster's endpoint with a short-lived token, and the commands run.
- ``run_guard``: an Update refuses to run while a run holds the training cluster.
- ``rig_dependencies``: the restricted instance group's dependencies, computed from the live objects.
"""
