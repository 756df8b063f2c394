"""opsft-bench: on-policy update directions, OPSFT, and the parameter-space geometry of post-training."""

__version__ = "0.1.0"
