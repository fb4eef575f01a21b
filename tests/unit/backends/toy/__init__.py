"""A toy backend, as a platform team would write one: a package (adapter, options, cost, descriptor) plus one call to
``mtrl.contracts.registry.register_backend(DESCRIPTOR)``. Its "training job" is a JSON object in the run's S3 output
folder that advances one step per status poll, so it runs on moto through the real pipeline."""
