"""Benchmarks: each runs its competitor in the same process and prints the ratio last."""
