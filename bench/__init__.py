"""Beacon's benchmarks: each figure is a ratio against a floor or a peer measured in one run."""
