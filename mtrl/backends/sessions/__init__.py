"""The ``sessions`` backend: mtrl's own multi-turn GRPO loop driving a training service (SageMaker training sessions,
or the local torch + PEFT twin) through one Tinker-shaped interface (``service``)."""
