"""Training backends. Each implements ``BackendAdapter``; the state machine only picks the adapter."""
