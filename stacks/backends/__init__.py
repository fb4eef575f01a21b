"""Each backend's stack side (``contract.StackSide``), one module per backend, and what they share."""
