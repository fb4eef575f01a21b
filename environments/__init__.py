"""Built-in reward environments, one package per environment id (same shape as a custom environment)."""
