"""The mtrl CDK app: one stack per deployable component, reusable constructs in stacks/constructs."""
