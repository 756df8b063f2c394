"""Content digests of frozen dataclasses: the stable hash that keys every cache entry (runs, organisms,
trajectories). The bottom layer: it imports nothing of the project but ``opsft.numerics`` (which imports none of
it either): the numerics mode is part of every digest, so pinned and native results never share a cache entry."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from opsft.numerics import digest_tag

# Bump when a change to the code alters what a given config computes: old cache entries then miss.
# 2: the lean sampler prefills once per prompt and drops finished rows; right-padded batches run unmasked.
CACHE_VERSION = 2


# A field whose metadata holds OMIT_DEFAULT is left out of the canonical form while it has its default value: a
# field added later then keeps every earlier config's digest (and cache entry).
OMIT_DEFAULT = "digest_omit_default"
# A field whose metadata holds NOT_DIGESTED is stored with the config but left out of its digest: a setting of how
# a run is served (e.g. the share of a GPU an engine takes) that does not change what the run computes.
NOT_DIGESTED = "not_digested"


def _canonical(obj: Any, for_digest: bool = False) -> Any:
    if dataclasses.is_dataclass(obj):
        out = {f.name: _canonical(getattr(obj, f.name), for_digest) for f in dataclasses.fields(obj)
               if not (f.metadata.get(OMIT_DEFAULT) and getattr(obj, f.name) == f.default)
               and not (for_digest and f.metadata.get(NOT_DIGESTED))}
        out["__type__"] = type(obj).__name__
        return out
    if isinstance(obj, (list, tuple)):
        return [_canonical(x, for_digest) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _canonical(v, for_digest) for k, v in sorted(obj.items())}
    if isinstance(obj, float):
        return repr(obj)
    return obj


class Digestible:
    """Mixin: a stable SHA-256 (first 16 hex digits) of the dataclass's canonical JSON, CACHE_VERSION and the
    numerics mode (``opsft.numerics.digest_tag``; left out for native numerics, whose digests are those from before
    the numerics were pinned)."""

    def digest(self) -> str:
        """Content hash of every field (recursively), independent of process, platform and dict order."""
        tag = digest_tag()  # native numerics keep the digests from before pinning: they compute what those did
        numerics = {} if tag == "native" else {"numerics": tag}
        payload = json.dumps({"v": CACHE_VERSION, **numerics, "cfg": _canonical(self, for_digest=True),
                              **self.digest_context()}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def digest_context(self) -> dict[str, Any]:
        """What the digest covers beyond the fields: nothing by default."""
        return {}

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON-able data (with type tags), as stored beside every run."""
        return _canonical(self)
