"""Reports rendered from the results store: reward-vs-budget curves."""
