"""Training health: per-step signal rows of a run and the rules that turn them into a verdict."""
