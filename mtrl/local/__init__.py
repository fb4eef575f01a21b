"""The ``local`` backend's trainer: a small log-linear policy trained with GRPO on the CPU (numpy only).

``mtrl.local.trainer`` runs training in resumable chunks, ``mtrl.local.agents`` turns an environment's
observations into scored candidate actions, ``mtrl.local.report`` writes the plot and the summary.
"""
