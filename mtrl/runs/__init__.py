"""Run lifecycle library: run ids, the run registry, concurrency slots, manifests and pipeline phases."""
