"""opsft-bench: on-policy update directions, OPSFT, and the parameter-space geometry of post-training.

Importing the package pins the process's CPU numerics first (``opsft.numerics``), before anything of it runs a
torch kernel; a numerics setting it cannot honour ends the process with one line naming it."""

from opsft.numerics import NumericsError, pin

try:
    pin()
except NumericsError as err:
    raise SystemExit(f"opsft: {err}") from None

__version__ = "0.1.0"
