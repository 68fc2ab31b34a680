"""Retrieval metrics, summaries, auxiliary scorers, ablations and filtering."""
