"""Orchestration side of actsweep: settings, the sweep driver, the aggregator, CLI and REST."""
