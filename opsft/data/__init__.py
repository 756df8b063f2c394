"""Datasets: real-data loaders for local files in the papers' schemas."""
