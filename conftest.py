"""Root conftest: loads the claims plugin (``--scale``, ``--claims-save``, the ``claim`` marker and fixture).

An installed opsft registers the same plugin through its ``pytest11`` entry point, under the module's own
name, so pytest skips this line then; it is what loads the plugin from a source tree that is not installed."""

pytest_plugins = ["opsft.claims.plugin"]
