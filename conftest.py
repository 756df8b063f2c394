"""Root conftest: loads the claims plugin (``--scale``, ``--claims-save``, the ``claim`` marker and fixture)."""

pytest_plugins = ["opsft.claims.plugin"]
