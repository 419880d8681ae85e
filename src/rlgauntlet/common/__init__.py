"""What every layer shares: per-episode random streams."""
