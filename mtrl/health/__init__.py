"""Training health: per-step signal rows of a run, the rules that turn them into a verdict, and its learning curve."""
