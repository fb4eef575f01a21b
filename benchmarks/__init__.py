"""Benchmarks that print figures next to their targets (`make bench`)."""
