"""The ``verl`` backend: GRPO of an open-weight Hugging Face model with verl on Ray, one KubeRay RayJob per run.

Modules: ``settings`` (the deploy-time group), ``options`` (a manifest's per-run options), ``config`` (what one
run resolves to, within the deployment's ceilings), ``rayjob`` (the Kubernetes objects a run submits, and the
KubeRay controller rules the CRD schema cannot express), ``offline`` (``mtrl render``), ``status`` (RayJob status →
run state), ``adapter`` (the pipeline's verbs over the EKS API). Nothing here imports the adapter or Kubernetes
client code at package import, so the settings layer can import ``settings`` cheaply.
"""
