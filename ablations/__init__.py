"""Grids behind `nox -s ablations`, as plain data."""
