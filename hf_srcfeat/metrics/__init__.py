"""Scores: sacreBLEU/chrF for training-time evaluation and the `evaluate` metric."""
