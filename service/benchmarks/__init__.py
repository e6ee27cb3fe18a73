"""Benchmarks that print their figures: speed (plain PyTorch vs per-trial vs fused packs; actsweep
bench) and the REST service under load (python -m service.benchmarks.load)."""
