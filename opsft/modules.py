"""Which module type a parameter belongs to, for per-module summaries (OPSFT Table 6, GEO C.3)."""

from __future__ import annotations

import re

# (type, pattern on the parameter name); the first match wins.
MODULE_TYPES: tuple[tuple[str, str], ...] = (
    ("q", r"q_proj"),
    ("k", r"k_proj"),
    ("v", r"v_proj"),
    ("o", r"o_proj"),
    ("gate", r"gate_proj"),
    ("up", r"up_proj"),
    ("down", r"down_proj"),
    ("embed", r"embed|lm_head|wte|wpe"),
    ("norm", r"norm|ln_"),
)


def module_type(name: str) -> str:
    """The module type of a parameter name: q/k/v/o/gate/up/down/embed/norm, else "other"."""
    for kind, pattern in MODULE_TYPES:
        if re.search(pattern, name):
            return kind
    return "other"
