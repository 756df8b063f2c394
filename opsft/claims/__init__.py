"""Paper claims as a pytest plugin: registry, verdicts, tables and storage (see opsft.claims.plugin)."""
