"""Metrics computed from evaluations: impact (Daylight), and more to come."""
