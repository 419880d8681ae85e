"""Experiments: evaluations and their results store."""
